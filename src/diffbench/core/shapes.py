"""The one shape grammar: sizes ``WxH`` / ``WxHxF`` and shape labels, with a neutral error.

Sizes are width first, as in ``--size``, ``--shapes`` and the OpenAI ``size`` field: ``832x480`` is a
landscape 832×480 image, ``832x480x33`` a 33-frame video of that size. Grammar: ASCII digits, ``x``
(also ``X`` or ``×``) between the numbers, surrounding blanks ignored. A malformed size raises
:class:`SizeSyntaxError` (a ValueError carrying the text and what was wrong); each boundary translates it
into its own answer (the HTTP server's 400 body, a CLI usage error naming the flag).

Labels come in two styles (:func:`shape_label`):

- metric (the Prometheus ``shape`` label): ``256x256``, ``128x128f9``, ``256x256b2`` (``b`` only above 1);
- human (bench and load breakdown keys): ``256x256 s8 b1``, ``832x480 f33 s30 b1``; ``512x384 s8`` without
  a batch.
"""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*([0-9]+)\s*[xX×]\s*([0-9]+)\s*$")
_LABEL = re.compile(r"^(\d+)x(\d+)(?:f(\d+))?(?:b(\d+))?$")
_SIZE_FRAMES = re.compile(r"^\s*([0-9]+)\s*[xX×]\s*([0-9]+)(?:\s*[xX×]\s*([0-9]+))?\s*$")


class SizeSyntaxError(ValueError):
    """A size that is not ``WxH`` (or ``WxHxF``) with large enough integers.

    Attributes:
        text: the text as given.
        reason: what was wrong, e.g. ``"not WIDTHxHEIGHT"`` or ``"values must be >= 1"``.
    """

    def __init__(self, text: str, reason: str, message: str | None = None) -> None:
        super().__init__(message if message is not None else f"{text!r}: {reason}")
        self.text = text
        self.reason = reason


def parse_size(text: str, minimum: int = 0) -> tuple[int, int]:
    """``"WIDTHxHEIGHT"`` → (width, height) in pixels.

    Args:
        text: e.g. ``"1024x768"`` (``X`` or ``×`` also separate; blanks around are ignored).
        minimum: smallest accepted side (0 leaves range checks to the caller).

    Raises:
        SizeSyntaxError: not two integers joined by ``x``, or a side below ``minimum``.
    """
    m = _SIZE.match(text or "")
    if not m:
        raise SizeSyntaxError(text, "not WIDTHxHEIGHT")
    w, h = int(m.group(1)), int(m.group(2))
    if w < minimum or h < minimum:
        raise SizeSyntaxError(text, f"values must be >= {minimum}")
    return w, h


def parse_size_frames(text: str, minimum: int = 1) -> tuple[int, int, int | None]:
    """``"WxH"`` or ``"WxHxF"`` → (width, height, frames or None), every value >= ``minimum``.

    Raises:
        SizeSyntaxError: malformed, or a value below ``minimum``.
    """
    m = _SIZE_FRAMES.match(text or "")
    if not m:
        raise SizeSyntaxError(text, "not WIDTHxHEIGHT or WIDTHxHEIGHTxFRAMES")
    w, h, f = int(m.group(1)), int(m.group(2)), (int(m.group(3)) if m.group(3) is not None else None)
    if min(w, h, f if f is not None else minimum) < minimum:
        raise SizeSyntaxError(text, f"values must be >= {minimum}")
    return w, h, f


def shape_label(width: int, height: int, frames: int | None = None, batch: int | None = 1, *,
                steps: int | None = None, human: bool = False) -> str:
    """The label of a shape, in one of two styles (see the module docstring).

    Args:
        width, height: pixels. frames: video frames, None (or 0 in the human style) for an image.
        batch: images per request; metric style writes ``bB`` only above 1, human style always
            (None leaves it out, as load's breakdown keys do).
        steps: denoising steps, human style only (``sS``).
        human: False for the metric label ``WxH[fF][bB]``, True for ``WxH[ fF][ sS][ bB]``.
    """
    if not human:
        f = f"f{frames}" if frames is not None else ""
        b = f"b{batch}" if batch is not None and batch > 1 else ""
        return f"{width}x{height}{f}{b}"
    f = f" f{frames}" if frames else ""
    s = f" s{steps}" if steps is not None else ""
    b = f" b{batch}" if batch is not None else ""
    return f"{width}x{height}{f}{s}{b}"


def parse_label(label: str) -> tuple[int, int, int | None, int]:
    """A metric-style label back to its shape: ``"256x256b2"`` → (width, height, frames or None, batch).

    Raises:
        SizeSyntaxError: not ``WxH[fF][bB]``, a value below 1, or a ``b1`` suffix (batch 1 has none).
    """
    m = _LABEL.match(label)
    if not m:
        raise SizeSyntaxError(label, "not a shape label",
                              f"{label!r} is not a shape label (WxH, WxHfF, optional bB suffix)")
    w, h, f, b = m.groups()
    batch = int(b) if b is not None else 1
    if int(w) < 1 or int(h) < 1 or (f is not None and int(f) < 1) or batch < 1 or (b is not None and batch == 1):
        raise SizeSyntaxError(label, "values below 1 or a b1 suffix",
                              f"{label!r}: sides, frames and batch must be >= 1 (and a bB suffix only for B > 1)")
    return int(w), int(h), int(f) if f is not None else None, batch
