"""``runs compare`` timing: paired with a floor inside one interleaved session, a drift warning across times."""

from __future__ import annotations

import numpy as np
import pytest

from diffbench.core.stats import summarize
from diffbench.store.models import RunRecord, RunTiming
from diffbench.sweep.bootstrap import paired_speedup_ci, speedup_ci
from diffbench.sweep.compare import compare_timing
from diffbench.sweep.interleave import noise_floor_ci


def _run(rid: str, kind: str, samples: list[float], session: str | None, base: list[float] | None = None,
         sweep: str = "sw", t: float = 1000.0) -> RunRecord:
    return RunRecord(
        id=rid, created_unix=t, kind=kind, sweep_id=sweep, model="m", fingerprint={}, fingerprint_hash="h",  # type: ignore[arg-type]
        timing=RunTiming(samples_s=samples, latency_s=summarize(samples, check=()), runs=len(samples), warmup=5,
                         session_id=session, baseline_samples_s=base, measured_unix=(t, t + 10)),
    )


RNG = np.random.default_rng(5)
DRIFT = np.linspace(0.1, 0.2, 16)
BASE = list(DRIFT * RNG.lognormal(0, 0.02, 16))
FAST = list(DRIFT / 1.5 * RNG.lognormal(0, 0.02, 16))


def test_same_session_is_paired_with_a_floor():
    a = _run("b", "baseline", BASE, "s1")
    b = _run("p", "point", FAST, "s1", base=BASE)
    sp, floor, paired, warnings = compare_timing(a, b)
    assert paired and not warnings
    ref = paired_speedup_ci(BASE, FAST)
    assert sp is not None and (sp.low, sp.high) == (ref.low, ref.high)
    assert floor is not None and floor.speedup == noise_floor_ci(BASE).speedup  # type: ignore[union-attr]
    # paired: the drift (0.1 -> 0.2 s) cancels; the independent bootstrap's interval is far wider
    indep = speedup_ci(BASE, FAST)
    assert (sp.high - sp.low) < (indep.high - indep.low) / 2
    assert sp.low > 1.4


def test_point_of_an_older_session_uses_its_own_baseline_samples():
    a = _run("b", "baseline", [x * 3 for x in BASE], "s2")  # the baseline run carries a newer session
    b = _run("p", "point", FAST, "s1", base=BASE)
    sp, floor, paired, _ = compare_timing(a, b)
    assert paired and sp is not None and sp.speedup == pytest.approx(float(np.median(BASE) / np.median(FAST)))
    assert floor is not None


def test_runs_measured_at_different_times_get_a_drift_warning():
    a = _run("b", "baseline", BASE, "s1", sweep="sw1", t=1000.0)
    b = _run("p", "point", FAST, "s9", base=None, sweep="sw2", t=4600.0)
    sp, floor, paired, warnings = compare_timing(a, b)
    assert not paired and floor is None and sp is not None
    assert len(warnings) == 1 and "measured at different times" in warnings[0] and "3600 s apart" in warnings[0]
    assert "drift" in warnings[0]
