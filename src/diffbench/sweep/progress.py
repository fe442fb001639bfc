"""The live progress line of ``diffbench sweep``: value i of k, run j of n and the ETA of the timed runs.

The sweep's work code reports two things (it never prints): free-form events (``baseline: outputs``,
``0.1: preparing``) and a :class:`~diffbench.sweep.interleave.Tick` after every warmup and timed
generation. :class:`SweepProgress` turns both into one line and hands it to a sink (the CLI passes
:meth:`diffbench.core.progress.LiveLine.update`, which draws on stderr only).

ETA: the timed runs are ``blocks × configurations`` generations of similar cost, so the time left is the
linear extrapolation :func:`diffbench.core.progress.eta_s` of the timed runs done so far, from the end of
the last warmup generation. Warmup has no ETA (it runs until every configuration is stable, at most the
cap); the line shows the round and the cap instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from diffbench.core.progress import eta_s, fmt_duration
from diffbench.sweep.interleave import Tick

SUPERSEDED = ("warmup round ", "timed block ")  # run_interleaved's on_event messages that the ticks replace


class SweepProgress:
    """Formats sweep events and ticks into one progress line.

    Args:
        axis: the swept axis (``first-block``), shown first.
        sink: receives each new line of text.
        clock: seconds, monotonic (tests pass a fake one).
    """

    def __init__(self, axis: str, sink: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.axis, self.sink, self.clock = axis, sink, clock
        self.text = ""
        self._last = clock()
        self._timed_start: float | None = None

    def _emit(self, text: str) -> None:
        self.text = text
        self.sink(text)

    def event(self, msg: str) -> None:
        """A free-form step of the sweep (baseline outputs, noise floor, preparing a value, ...).

        The interleaved session's own per-round and per-block messages are not drawn: the ticks say the
        same per run (a block message would hide the run counter until the next tick).
        """
        self._last = self.clock()
        if msg.startswith(SUPERSEDED):
            return
        self._emit(f"sweep {self.axis}: {msg}")

    def tick(self, t: Tick) -> None:
        """One generation of the interleaved session finished."""
        now = self.clock()
        where = f"value {t.arm_index}/{t.arms} ({t.arm})"
        if t.phase == "timed":
            if self._timed_start is None:
                self._timed_start = self._last  # the end of the last warmup generation
            done = (t.run - 1) * t.arms + t.arm_index
            left = eta_s(done, t.runs * t.arms, now - self._timed_start)
            text = f"sweep {self.axis}: timed run {t.run}/{t.runs} · {where} · ETA {fmt_duration(left)}"
        else:
            text = f"sweep {self.axis}: warmup round {t.run} (cap {t.runs}) · {where} · until stable"
        self._last = now
        self._emit(text)
