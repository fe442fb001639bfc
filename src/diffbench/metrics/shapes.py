"""The ``shape`` label: ``WxH``, ``WxHfF`` for video, suffix ``bB`` when batch > 1, from an allowlist.

``256x256`` (one 256×256 image), ``128x128f9`` (a 9-frame video), ``256x256b2`` (two images per request).
A request whose label is not on the service's allowlist is exported as :data:`~diffbench.metrics.names.OTHER_SHAPE`
(``other``), so a burst of odd sizes adds no label values (bounded labels:
https://prometheus.io/docs/practices/instrumentation/#do-not-overuse-labels).
Steps are not part of the label: the per-step histogram is per step, and the stage baselines of a
calibration are for the steps it was measured at.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from diffbench.core import shapes as core_shapes
from diffbench.errors import UsageError
from diffbench.metrics.names import OTHER_SHAPE


def shape_label(width: int, height: int, frames: int | None = None, batch: int = 1) -> str:
    """The raw label of a request (no allowlist): ``f"{width}x{height}"`` + ``f{frames}`` + ``b{batch}``.

    ``frames`` is None for an image; ``batch`` is images per request (the suffix appears only above 1).
    """
    return core_shapes.shape_label(width, height, frames, batch)


def parse_label(label: str) -> tuple[int, int, int | None, int]:
    """``"256x256b2"`` → (width, height, frames or None, batch). Raises ValueError when malformed."""
    if label == OTHER_SHAPE:
        raise ValueError(f"{label!r} is not a shape label (WxH, WxHfF, optional bB suffix)")
    return core_shapes.parse_label(label)


def parse_shapes(text: str | Iterable[str], flag: str = "--shapes") -> tuple[str, ...]:
    """Parse an allowlist (``"256x256,128x128f9"`` or a list of labels) into canonical labels, in order.

    Raises:
        UsageError: an empty list, a malformed label, ``other`` given explicitly, or a duplicate; the
            message names ``flag`` and the form.
    """
    items = [text] if isinstance(text, str) else list(text)
    parts = [part.strip() for item in items for part in item.split(",") if part.strip()]
    if not parts:
        raise UsageError(f"{flag} is empty; give labels such as 256x256,512x512 (WxH, WxHfF for video, bB suffix)")
    out: list[str] = []
    for p in parts:
        try:
            w, h, f, b = parse_label(p.lower().replace("×", "x"))
        except ValueError as exc:
            raise UsageError(f"{flag} {p!r}: {exc}; e.g. 256x256, 128x128f9, 256x256b2") from None
        label = shape_label(w, h, f, b)
        if label in out:
            raise UsageError(f"{flag}: {label} is listed twice")
        out.append(label)
    return tuple(out)


class ShapeAllowlist:
    """Maps a request to its ``shape`` label: its raw label when allowlisted, else ``other``."""

    def __init__(self, labels: Sequence[str]) -> None:
        self.labels: tuple[str, ...] = tuple(dict.fromkeys(labels))
        self._set = frozenset(self.labels)

    def classify(self, width: int, height: int, frames: int | None = None, batch: int = 1) -> str:
        """The exported label of a request (see module docstring)."""
        label = shape_label(width, height, frames, batch)
        return label if label in self._set else OTHER_SHAPE

    @property
    def all(self) -> tuple[str, ...]:
        """Every exported value: the allowlist, then ``other``."""
        return self.labels + (OTHER_SHAPE,)
