"""Reading the text input files of ``load`` and ``simulate`` with one-line errors.

Every file option (``--workload``, ``--prompts``, ``--trace``, ``--service-from``) reads through
:func:`read_text_input`, so a missing file, a directory, a binary file (an image passed by mistake) or an
empty file is an :class:`~diffbench.errors.InputError` (exit 2) naming the option, the file and what was
expected, never a ``UnicodeDecodeError`` traceback.
"""

from __future__ import annotations

from pathlib import Path

from diffbench.errors import InputError

_SNIFF_BYTES = 8192


def read_text_input(path: str | Path, option: str, expected: str) -> str:
    """The UTF-8 text of ``path``, read for command-line option ``option``.

    Args:
        path: the file.
        option: the option that named it (e.g. ``"--trace"``), used in messages.
        expected: what the file should hold, in words (e.g. ``"one timestamp per line"``).

    Returns:
        The decoded text (not empty, not only whitespace).

    Raises:
        InputError: the file is missing, a directory, unreadable, binary (a NUL byte in its first 8 KiB or
            not valid UTF-8) or empty.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"{option} {p}: file not found; expected a text file with {expected}")
    if p.is_dir():
        raise InputError(f"{option} {p} is a directory; expected a text file with {expected}")
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise InputError(f"{option} {p}: cannot read ({exc.strerror or exc}); expected a readable text file "
                         f"with {expected}") from exc
    try:
        if b"\x00" in raw[:_SNIFF_BYTES]:
            raise UnicodeError("NUL byte")
        text = raw.decode("utf-8")
    except UnicodeError:
        raise InputError(f"{option} {p} is a binary file, not UTF-8 text; expected a text file with "
                         f"{expected}") from None
    if not text.strip():
        raise InputError(f"{option} {p} is empty; expected a text file with {expected}")
    return text


__all__ = ["read_text_input"]
