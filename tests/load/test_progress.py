"""The live progress line: counters from the runner hooks, its text on a forced terminal, and when it is
off (``--quiet``, stderr not a terminal)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from rich.console import Console

from diffbench.core.records import RequestRecord
from diffbench.load.progress import LAG_WINDOW_S, LoadProgress, progress_enabled


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


def test_enabled_only_on_a_terminal_without_quiet() -> None:
    assert progress_enabled(False, _Stream(True))
    assert not progress_enabled(True, _Stream(True))
    assert not progress_enabled(False, _Stream(False))
    assert not progress_enabled(False, object())  # type: ignore[arg-type]  # no isatty at all


def test_counters_and_line() -> None:
    clock = _Clock()
    p = LoadProgress(Console(force_terminal=True, file=io.StringIO(), width=300), live=False, clock=clock)
    p.begin("open loop, 20 req/s", 100, 2.0)
    rng = np.random.default_rng(0)
    old = rng.uniform(0.5, 0.9, 50)  # sent long before the lag window: left out of the p99
    for lag in old:
        p.on_sent(float(lag))
    clock.t += LAG_WINDOW_S + 1.0
    recent = rng.uniform(0.0, 0.004, 30)
    for lag in recent:
        p.on_sent(float(lag))
    outcomes = ["ok"] * 60 + ["http_error"] * 5 + ["timeout"] * 2 + ["cancelled"] * 3
    for i, kind in enumerate(outcomes):
        p.on_record(RequestRecord(id=i, intended_s=0.0, sent_s=0.0, done_s=None if kind == "cancelled" else 1.0,
                                  outcome=kind))  # type: ignore[arg-type]
    assert (p.sent, p.ok, p.failed, p.cancelled) == (80, 60, 7, 3)
    assert p.lag_p99() == pytest.approx(float(np.percentile(recent, 99)))
    line = p.render().plain
    elapsed = LAG_WINDOW_S + 1.0
    for part in ("open loop, 20 req/s", "sent 80/100", "done 67 (ok 60, failed 7, cancelled 3)",
                 "in flight 10", f"{60 / elapsed:.3g} ok/s", f"lag p99 {np.percentile(recent, 99) * 1e3:.3g}ms",
                 f"{elapsed:.1f} s (draining)"):
        assert part in line, (part, line)


def test_without_on_sent_in_flight_is_unknown() -> None:
    p = LoadProgress(Console(file=io.StringIO()), live=False, clock=_Clock())
    p.begin("closed loop, 2 users", None, 5.0)
    p.on_record(RequestRecord(id=0, intended_s=0.0, sent_s=0.0, done_s=0.5))
    line = p.render().plain
    assert "sent —" in line and "in flight —" in line and "lag p99 —" in line and "0.0 s (5.0 s left)" in line


def test_live_draws_on_a_terminal_and_clears() -> None:
    out = io.StringIO()
    p = LoadProgress(Console(force_terminal=True, file=out, width=200))
    p.begin("open loop, 5 req/s", 10, 1.0)
    for _ in range(3):
        p.on_sent(0.001)
    p.end()
    text = out.getvalue()
    assert "open loop, 5 req/s" in text and "sent 3/10" in text
    assert p._live is None
