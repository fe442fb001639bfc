"""Warnings for timings that cannot be trusted: a cold start in the timed runs, a busy machine, a wide spread.

Checked deterministically on the simulated device (virtual clock) with injected slow calls, and on sample
lists whose trend / spread is known by construction.
"""

from __future__ import annotations

import numpy as np
import pytest

from diffbench.bench.protocol import BenchConfig, run_bench
from diffbench.bench.stability import SPREAD_RATIO, timing_notes
from diffbench.core.warmth import downward_trend_pvalue
from diffbench.engines.base import GenerationRequest
from diffbench.engines.config import EngineConfig, SimParams
from diffbench.engines.sim import SimEngine

REQ = GenerationRequest(prompt="a", height=64, width=64, steps=4)


class _ColdSim(SimEngine):
    """The sim device, plus ``extra[i]`` seconds of host time on call ``i`` (a cold start that outlasts warmup)."""

    def __init__(self, extra: list[float], **sim) -> None:
        super().__init__(EngineConfig(engine="sim", sim=SimParams(compile_s=0.0, tail_prob=0.0, **sim)))
        self.extra = extra
        self.calls = 0

    def generate(self, request):
        if self.calls < len(self.extra):
            self._host_advance(self.extra[self.calls])
        self.calls += 1
        return super().generate(request)


def _codes(r) -> set[str]:
    return {w.code for w in r.warnings}


def _bench(engine: SimEngine, warmup: int = 2, runs: int = 30):
    engine.start()
    (r,), = [run_bench(engine, [REQ], BenchConfig(warmup=warmup, runs=runs, repro=False))]
    return r


def test_cold_start_leaking_into_timed_runs_warns() -> None:
    # the 64x64 report: warmup 2, then the first 5 timed samples ~20x the rest
    eng = _ColdSim([0.9] * 7)
    r = _bench(eng)
    assert r.samples_s[0] > 10 * np.median(r.samples_s[7:])  # the leak is really in the samples
    assert "warmup_insufficient" in _codes(r)
    msg = next(w.message for w in r.warnings if w.code == "warmup_insufficient")
    assert "first 5 timed runs" in msg and "--warmup" in msg


def test_gradual_decline_at_the_start_warns() -> None:
    # each of the first 10 calls 8 % faster than the one before: a trend the warm-until-stable test calls
    extra = [0.05 * 0.92**i for i in range(12)]
    r = _bench(_ColdSim(extra, jitter=0.0))
    first = r.samples_s[:10]
    assert downward_trend_pvalue(first) < 0.05  # the independent check: Mann-Kendall sees the fall
    assert "warmup_insufficient" in _codes(r)


def test_steady_runs_do_not_warn() -> None:
    r = _bench(_ColdSim([], jitter=0.02, seed=3))
    assert not {"warmup_insufficient", "unstable_timing", "slower_than_warmup"} & _codes(r), r.warnings


def test_wide_spread_warns_with_the_ratio() -> None:
    # alternate fast/slow calls: p90/p10 = 3 by construction, far above the threshold
    extra = [0.0, 0.0] + [0.0 if i % 2 else 0.2 for i in range(30)]
    r = _bench(_ColdSim(extra, jitter=0.0))
    ratio = np.percentile(r.samples_s, 90) / np.percentile(r.samples_s, 10)
    assert ratio > SPREAD_RATIO
    msg = next(w.message for w in r.warnings if w.code == "unstable_timing")
    assert f"{ratio:.2f}" in msg


def test_timed_runs_much_slower_than_warmup_warns() -> None:
    # the busy-machine report: p50 2826 ms vs 428 ms for the second warmup
    notes = timing_notes("s", [2.8, 2.9, 2.7, 2.85, 2.8], warmup_s=[5.0, 0.428])
    msg = next(n.message for n in notes if n.code == "slower_than_warmup")
    assert f"{2.8 / 0.428:.1f}x" in msg  # median of the timed samples over the fastest warmup


@pytest.mark.parametrize("n", [1, 2, 4])
def test_few_samples_are_not_judged_for_spread(n: int) -> None:
    assert "unstable_timing" not in {x.code for x in timing_notes("s", [1.0, 3.0] * n, [])}
    assert "unstable_timing" in {x.code for x in timing_notes("s", [1.0, 3.0] * 5, [])}


def test_busy_machine_warns_with_the_load_average(monkeypatch, tmp_path) -> None:
    import json
    import os

    from diffbench.bench.session import BenchOptions, run_session

    cpus = os.cpu_count() or 1
    monkeypatch.setattr(os, "getloadavg", lambda: (2.0 * cpus, 1.0, 1.0))
    out = tmp_path / "b.json"
    opts = BenchOptions(engine=EngineConfig(engine="sim"), protocol=BenchConfig(warmup=1, runs=3, repro=False),
                        json_path=out)
    run_session(opts)
    notes = {w["code"]: w["message"] for w in json.loads(out.read_text())["warnings"]}
    assert f"load average {2.0 * cpus:.1f} on {cpus} CPUs" in notes["machine_busy"]


def test_auto_warmup_runs_until_the_sweep_test_calls_it_warm() -> None:
    from diffbench.core.warmth import DEFAULT_WINDOW, is_warm

    eng = _ColdSim([0.9 * 0.7**i for i in range(12)], jitter=0.02, seed=1)  # a cold start fading over 12 calls
    eng.start()
    (r,) = run_bench(eng, [REQ], BenchConfig(warmup_auto=True, runs=20, repro=False))
    w = r.warmup_s
    assert is_warm(w) and not any(is_warm(w[:k]) for k in range(DEFAULT_WINDOW, len(w)))  # stopped at once
    assert len(w) > 2 + DEFAULT_WINDOW  # more than the fixed default: the falling calls stayed in warmup ...
    assert "warmup_insufficient" not in _codes(r)  # ... so none leaked into the statistics
    assert max(r.samples_s) < 3 * float(np.median(r.samples_s))


def test_auto_warmup_that_never_settles_says_so() -> None:
    eng = _ColdSim([1.0 * 0.9**i for i in range(40)], jitter=0.0)
    eng.start()
    (r,) = run_bench(eng, [REQ], BenchConfig(warmup_auto=True, max_warmup=8, runs=5, repro=False))
    assert len(r.warmup_s) == 8
    msg = next(w.message for w in r.warnings if w.code == "warmup_not_stable")
    assert "8 warmup runs" in msg and "--max-warmup" in msg


def test_cli_warmup_auto_and_bad_values(tmp_path, capsys) -> None:
    import json

    from diffbench.cli.main import main

    out = tmp_path / "a.json"
    assert main(["bench", "--engine", "sim", "--warmup", "auto", "--runs", "3", "--no-repro", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["protocol"]["warmup_auto"] is True and len(r["warmup_s"]) >= 5
    assert r["protocol"]["warmup_per_shape"] is None and r["protocol"]["max_warmup"] == 20
    assert main(["bench", "--engine", "sim", "--warmup", "soon"]) == 2
    assert "--warmup 'soon'" in capsys.readouterr().err


def test_auto_warmup_capped_below_the_warm_window_says_so_instead_of_crashing() -> None:
    from diffbench.core.warmth import DEFAULT_WINDOW

    eng = _ColdSim([1.0 * 0.9**i for i in range(40)], jitter=0.0)
    eng.start()
    cap = DEFAULT_WINDOW - 2  # the warm test can never pass: fewer runs than its window
    (r,) = run_bench(eng, [REQ], BenchConfig(warmup_auto=True, max_warmup=cap, runs=3, repro=False))
    assert len(r.warmup_s) == cap
    msg = next(w.message for w in r.warnings if w.code == "warmup_not_stable")
    assert f"{cap} warmup runs" in msg and f"at least {DEFAULT_WINDOW} runs" in msg
