"""Live progress of long commands (bench, sweep, quality, simulate, report): one rich line on stderr.

Work code never prints (docs/developers/architecture.md): it takes an optional callback, and the CLI passes the
methods of a :class:`LiveLine` (or nothing). The line goes to **stderr only**, so ``--json -`` or a
piped table on stdout stays clean, and it is drawn only when :func:`progress_enabled` says so: not
``--quiet``, and stderr is a terminal. ``DIFFBENCH_PROGRESS=always`` forces it on a pipe (tests use it
to prove stdout stays clean with the line drawn) and ``DIFFBENCH_PROGRESS=never`` turns it off everywhere.

Typical use in a CLI command::

    with LiveLine.for_cli(quiet) as line:
        line.update("shape 256x256 s4: timed run 3/20  p50 41.2ms")
        ...

:meth:`LiveLine.update` only stores the text; rich's refresh thread redraws it ``REFRESH_PER_SECOND``
times a second, so a caller may update it per run without slowing the measured loop.
"""

from __future__ import annotations

import os
import time
from types import TracebackType
from typing import IO

from rich.console import Console
from rich.live import Live
from rich.text import Text

REFRESH_PER_SECOND = 4.0
ENV = "DIFFBENCH_PROGRESS"


def progress_enabled(quiet: bool, stream: IO[str]) -> bool:
    """True when a live line should be drawn on ``stream`` (stderr).

    ``DIFFBENCH_PROGRESS=always`` → True, ``=never`` → False (both win over ``quiet`` and the TTY check);
    unset, empty or ``auto``: not ``quiet`` and ``stream`` is a terminal.

    Raises:
        UsageError: any other value of ``DIFFBENCH_PROGRESS`` (exit 2).
    """
    forced = os.environ.get(ENV, "").strip().lower()
    if forced == "always":
        return True
    if forced == "never":
        return False
    if forced not in ("", "auto"):
        from diffbench.errors import UsageError

        raise UsageError(f"{ENV}={os.environ[ENV]!r}: use always, never or auto (the default: a line when "
                         "stderr is a terminal)")
    if quiet:
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def eta_s(done: float, total: float, elapsed_s: float) -> float | None:
    """Seconds left by linear extrapolation (``elapsed × (total − done) / done``); None before any work."""
    if done <= 0 or total <= 0 or elapsed_s < 0:
        return None
    return max(0.0, elapsed_s * (total - done) / done)


def fmt_duration(seconds: float | None) -> str:
    """``"1m05s"`` / ``"42s"`` / ``"0.8s"``; ``"?"`` for None."""
    if seconds is None:
        return "?"
    if seconds >= 60:
        m, s = divmod(int(round(seconds)), 60)
        return f"{m}m{s:02d}s"
    return f"{seconds:.0f}s" if seconds >= 10 else f"{seconds:.1f}s"


class LiveLine:
    """One redrawn status line on a rich console (stderr in the CLI), or nothing when disabled.

    Args:
        console: where to draw; None makes every method a no-op (progress disabled).
        live: False renders nothing on a refresh thread (tests read :attr:`text`).
    """

    def __init__(self, console: Console | None, *, live: bool = True) -> None:
        self.console = console
        self.text = ""
        self.started = time.monotonic()
        self._live: Live | None = None
        if console is not None and live:
            self._live = Live(self, console=console, refresh_per_second=REFRESH_PER_SECOND, transient=True)

    @classmethod
    def for_cli(cls, quiet: bool) -> LiveLine:
        """A line on stderr when :func:`progress_enabled` (``quiet``, stderr a TTY, ``DIFFBENCH_PROGRESS``)."""
        import sys

        if not progress_enabled(quiet, sys.stderr):
            return cls(None)
        forced = os.environ.get(ENV, "").strip().lower() == "always"
        return cls(Console(stderr=True, force_terminal=True if forced else None))

    @property
    def enabled(self) -> bool:
        return self.console is not None

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def update(self, text: str) -> None:
        """Replace the line's text (cheap: the refresh thread draws it)."""
        self.text = text

    def __rich__(self) -> Text:
        return Text(self.text, no_wrap=True, overflow="ellipsis")

    def __enter__(self) -> LiveLine:
        self.started = time.monotonic()
        if self._live is not None:
            self._live.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.stop()
