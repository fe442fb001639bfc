"""Regression (issue 9 §1): a cold or drifting process must not turn into a speed-up.

Two identical configurations (an option axis whose value changes nothing) run on fake engines that share one
virtual clock and one "process": its first calls are slow and decay geometrically (a cold process, as
measured on tiny-flux: 2.9 s falling to 0.17 s), or every call is a little slower than the one before (a
machine getting busier). Deterministic: the latencies come from a seeded generator, not from the machine.
Before the fix the baseline was measured first while cold, and the identical candidate came out several
times "faster" with a CI excluding 1, and was chosen as the working point.
"""

from __future__ import annotations

import numpy as np

from diffbench.engines.base import EngineInfo, GenerationRequest, GenerationResult
from diffbench.engines.config import EngineConfig
from diffbench.engines.sim import SimEngine
from diffbench.store.runs import RunStore
from diffbench.sweep.models import SweepOptions
from diffbench.sweep.runner import run_sweep

WARM_S = 0.1


class Process:
    """The shared process: latency of the k-th call in it (seconds) and a virtual clock (ns)."""

    def __init__(self, cold_s: float = 0.0, decay: float = 0.8, drift: float = 0.0, jitter: float = 0.02,
                 seed: int = 0) -> None:
        self.calls, self.ns = 0, 0
        self.cold_s, self.decay, self.drift, self.jitter = cold_s, decay, drift, jitter
        self.rng = np.random.default_rng(seed)

    def run(self) -> None:
        k = self.calls
        self.calls += 1
        lat = WARM_S * (1 + self.drift * k) * float(np.exp(self.rng.normal(0, self.jitter)))
        lat += self.cold_s * self.decay ** k
        self.ns += int(lat * 1e9)


class FakeEngine(SimEngine):
    """A sim engine whose time is the shared process's; the dtype is reported (it changes nothing)."""

    def __init__(self, config: EngineConfig, proc: Process) -> None:
        super().__init__(config)
        self.proc = proc

    def start(self) -> EngineInfo:
        self._info = super().start().model_copy(update={"dtype": self.config.dtype})
        return self._info

    def generate(self, request: GenerationRequest) -> GenerationResult:
        self.info()
        self.proc.run()
        return GenerationResult(images=self._images(request))

    def clock(self) -> int:
        return self.proc.ns

    def sync(self) -> None:
        return None


def _sweep(tmp_path, proc: Process, **kw) -> object:
    opts = SweepOptions(engine=EngineConfig(engine="sim", model="fake", dtype="float32"), axis="precision",
                        values=["bfloat16"], height=32, width=32, steps=2, num_prompts=2, runs=16,
                        bootstrap_resamples=1000, ssim=False, **kw)
    with RunStore.open(tmp_path / "s.sqlite") as st:
        return run_sweep(opts, st, engine_factory=lambda cfg: FakeEngine(cfg, proc))


def _not_faster(p) -> bool:
    lo, hi = p.speedup_ci
    return lo <= 1.0 <= hi or (p.noise_floor is not None and lo <= p.noise_floor.high)


def test_cold_process_is_not_a_speedup(tmp_path):
    proc = Process(cold_s=3.0, decay=0.8)
    res = _sweep(tmp_path, proc)
    p = res.points[0]
    assert p.quality.psnr.n_inf == p.quality.psnr.n  # identical outputs: nothing changed
    assert _not_faster(p), (p.speedup, p.speedup_ci)
    assert not p.measurably_faster
    assert res.working_point.value is None and "no value is measurably faster" in res.working_point.message
    # the cold calls went into the warmup, reported apart: the baseline's warmup starts slow and ends warm
    w = res.warmup_s["baseline"]
    assert w[0] > 5 * WARM_S and w[-1] < 1.1 * WARM_S
    assert max(p.latency_s.max, res.baseline.latency_s.max) < 1.2 * WARM_S  # no cold call was timed


def test_slow_drift_hits_both_sides_alike(tmp_path):
    # every call 0.5 % slower than the previous: 100 calls later the machine is 1.5x slower
    proc = Process(drift=0.005)
    res = _sweep(tmp_path, proc)
    p = res.points[0]
    assert _not_faster(p) and not p.measurably_faster, (p.speedup, p.speedup_ci)
    assert res.working_point.value is None
