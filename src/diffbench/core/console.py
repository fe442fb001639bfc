"""The one place the command line's rich :class:`~rich.console.Console` for tables and summaries is made.

Rich sizes a console from the terminal and falls back to 80 columns when there is none, so a summary piped
to a file, a pager or a CI log was squeezed to 80 columns and its table rows wrapped over several lines.
Here the width is, in order: ``COLUMNS`` when set (a number of columns, as rich and the shell read it); the
terminal's width when the output is a terminal; otherwise :data:`NON_TTY_WIDTH` columns, wide enough that
no table row of any command wraps (tables take their natural width; no renderable here expands to the full
width). ``min_width`` raises a terminal's width for tables known to need it, as before.
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any

from rich.console import Console

NON_TTY_WIDTH = 400
"""Columns for an output that is not a terminal and has no ``COLUMNS``: wider than any table row."""


def _columns() -> int | None:
    raw = os.environ.get("COLUMNS", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def _is_terminal(stream: IO[str] | None) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):  # a closed or odd stream
        return False


def make_console(*, stderr: bool = False, file: IO[str] | None = None, min_width: int | None = None,
                 **kwargs: Any) -> Console:
    """A Console for ``file`` (default stdout, or stderr with ``stderr=True``) sized as the module says.

    ``kwargs`` go to :class:`rich.console.Console` (``highlight``, ``force_terminal``, …); an explicit
    ``width`` there wins over everything.
    """
    if "width" not in kwargs:
        stream = file if file is not None else (sys.stderr if stderr else sys.stdout)
        columns = _columns()
        if columns is not None:
            width: int | None = columns
        elif _is_terminal(stream) or kwargs.get("force_terminal"):
            width = None  # rich asks the terminal
        else:
            width = NON_TTY_WIDTH
        if min_width is not None and width != NON_TTY_WIDTH:
            probe = Console(stderr=stderr, file=file, width=width)
            width = max(probe.width, min_width)
        kwargs["width"] = width
    return Console(stderr=stderr, file=file, **kwargs)
