"""The live progress line of ``diffbench load`` (rich, on stderr).

One line per run (a rate or a user count), redrawn by rich's refresh thread a few times per second
(``REFRESH_PER_SECOND``), never per request::

    20 req/s  20.1 s (9.9 s left)  sent 412/600  done 398 (ok 395, failed 3)  in flight 14  19.8 ok/s  lag p99 1.2ms

(the lag p99 is over the sends of the last ``LAG_WINDOW_S`` seconds; the line is cut at the terminal's
width from the right, so the time and the counts come first).

The measuring loop only updates counters: :meth:`LoadProgress.on_sent` (one increment and one append
to a bounded deque) and :meth:`LoadProgress.on_record` (a few increments); the percentile is computed
by the refresh thread over the sends of the last ``LAG_WINDOW_S`` seconds (at most ``LAG_KEEP``). ``in flight`` is sent minus
finished sent requests, so it needs the ``on_sent`` hook; a runner without it shows ``sent —``.

Shown only when stderr is a terminal and ``--quiet`` is not given (:func:`progress_enabled`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import numpy as np
from rich.console import Console
from rich.live import Live
from rich.text import Text

from diffbench.core.progress import progress_enabled
from diffbench.core.records import RequestRecord

REFRESH_PER_SECOND = 4.0
__all__ = ["LoadProgress", "progress_enabled"]
LAG_WINDOW_S = 5.0
LAG_KEEP = 4096
"""At most this many recent sends are kept for the lag percentile: it bounds memory and, above all, the
refresh thread's work (it holds the GIL while it computes, which would delay the measuring loop); at
2,000 req/s the window is then the last ~2 s. Measured on the development machine with a full deque:
the line ~0.2 ms, a whole rich refresh ~0.4 ms, 4 times a second; the hooks ~0.14 µs per event. Runs
meant to measure the client itself (``benchmarks/``) run without a terminal or with ``--quiet``."""


def _fmt_s(v: float) -> str:
    return f"{v * 1e3:.3g}ms" if abs(v) < 1.0 else f"{v:.3g}s"


class LoadProgress:
    """Counters of the current run and their one-line rendering (a :class:`RowMonitor` of the sweep).

    Args:
        console: where the line is drawn (``Console(stderr=True)`` in the CLI; a
            ``Console(force_terminal=True, file=StringIO())`` in tests).
        live: draw with :class:`rich.live.Live` between :meth:`begin` and :meth:`end` (False: counters
            and :meth:`render` only).
        clock: seconds, monotonic (injectable for tests).
    """

    def __init__(self, console: Console, *, live: bool = True,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.console = console
        self._use_live = live
        self._clock = clock
        self._live: Live | None = None
        self.label = ""
        self.planned: int | None = None
        self.window_s = 0.0
        self._reset()

    def _reset(self) -> None:
        self.sent = 0
        self.finished = 0
        self.finished_sent = 0
        self.ok = 0
        self.failed = 0
        self.cancelled = 0
        self._lags: deque[tuple[float, float]] = deque(maxlen=LAG_KEEP)
        self.t_begin = self._clock()

    # -- the sweep's RowMonitor interface -------------------------------------------------------------
    def begin(self, label: str, planned: int | None, window_s: float) -> None:
        """Start a run: reset the counters and (with ``live``) start drawing."""
        self.label, self.planned, self.window_s = label, planned, window_s
        self._reset()
        if self._use_live:
            self._live = Live(self, console=self.console, refresh_per_second=REFRESH_PER_SECOND, transient=True,
                              redirect_stdout=False, redirect_stderr=False)
            self._live.start()

    def on_sent(self, lag_s: float) -> None:
        """Runner hook: one request handed to the transport, ``lag_s`` seconds after its intended time."""
        self.sent += 1
        self._lags.append((self._clock(), lag_s))

    def on_record(self, rec: RequestRecord) -> None:
        """Runner hook: one request finished (any outcome)."""
        self.finished += 1
        if rec.sent_s is not None:
            self.finished_sent += 1
        if rec.outcome == "ok":
            self.ok += 1
        elif rec.outcome == "cancelled":
            self.cancelled += 1
        else:
            self.failed += 1

    def end(self) -> None:
        """End a run: stop drawing (the transient line is removed)."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    # -- rendering (refresh thread) -------------------------------------------------------------------
    def lag_p99(self, now: float | None = None) -> float | None:
        """p99 of the lags (seconds) of the sends in the last ``LAG_WINDOW_S`` seconds, at most the last
        ``LAG_KEEP`` of them (None: none). Older entries are dropped here, in the refresh thread."""
        now = self._clock() if now is None else now
        lags = self._lags
        cutoff = now - LAG_WINDOW_S
        while lags and lags[0][0] < cutoff:  # appends happen at the right, in the loop thread
            lags.popleft()
        recent = [lag for _, lag in list(lags)]
        return float(np.percentile(recent, 99)) if recent else None

    def render(self) -> Text:
        """The progress line (see the module docstring): label, time, counts, ok rate, lag p99."""
        now = self._clock()
        elapsed = max(now - self.t_begin, 0.0)
        have_sent = self.sent > 0 or not self.finished
        when = f"{elapsed:.1f} s"
        if self.window_s > 0:
            left = self.window_s - elapsed
            when += f" ({left:.1f} s left)" if left > 0 else " (draining)"
        parts = [self.label, when]
        parts.append(f"sent {self.sent}" + (f"/{self.planned}" if self.planned is not None else "")
                     if have_sent else "sent —")
        done = f"done {self.ok + self.failed} (ok {self.ok}, failed {self.failed}"
        parts.append(done + (f", cancelled {self.cancelled})" if self.cancelled else ")"))
        parts.append(f"in flight {self.sent - self.finished_sent}" if have_sent else "in flight —")
        parts.append(f"{self.ok / elapsed:.3g} ok/s" if elapsed > 0 else "— ok/s")
        p99 = self.lag_p99(now)
        parts.append(f"lag p99 {_fmt_s(p99)}" if p99 is not None else "lag p99 —")
        return Text("  ".join(parts), no_wrap=True, overflow="ellipsis")

    def __rich__(self) -> Text:
        return self.render()


__all__ = ["LAG_WINDOW_S", "LoadProgress", "REFRESH_PER_SECOND", "progress_enabled"]
