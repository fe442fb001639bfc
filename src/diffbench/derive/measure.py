"""One measured comparison: candidates against the current deployment, with the sweep's protocol.

Every comparison is a :func:`diffbench.sweep.runner.run_sweep` whose baseline is the current deployment:
its fixed-seed outputs (taken from the store while the fingerprint is the same, regenerated when it
changed), the quality noise floor (the baseline run twice), then every candidate warm until stable and
timed in interleaved blocks with the baseline; the speed-up is the paired ratio of medians with its 95 %
bootstrap interval beside the timing noise floor (the baseline against itself in the same blocks). Option
candidates are whole configurations (the sweep's ``deployment`` axis, one engine each); step-cache
thresholds switch a cache on one engine (the sweep's cache axes).

A rerun with the same deployment, workload and protocol finds every finished point in the store and does
not measure it again (``Measured.resumed``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from diffbench.derive.models import DeriveConfig, Measured
from diffbench.engines.base import Engine
from diffbench.engines.config import EngineConfig
from diffbench.store.runs import RunStore
from diffbench.sweep.axes import DEPLOYMENT_AXIS
from diffbench.sweep.models import PointResult, SweepOptions, SweepResult

EngineFactory = Callable[[EngineConfig], Engine]
Event = Callable[[str], None]


def sweep_options(cfg: DeriveConfig, base: EngineConfig, axis: str, values: list[str],
                  configs: dict[str, EngineConfig] | None = None, steps: int | None = None) -> SweepOptions:
    """The sweep of ``values`` against ``base`` at the derivation's shape, workload and protocol."""
    return SweepOptions(
        engine=base, axis=axis, values=values, value_configs=configs or {}, height=cfg.height, width=cfg.width,
        frames=cfg.frames, steps=steps or cfg.steps, guidance=cfg.guidance, prompts_file=cfg.prompts_file,
        num_prompts=cfg.num_prompts, seeds=cfg.seeds, warmup=cfg.warmup, max_warmup=cfg.max_warmup,
        runs=cfg.runs, budget_db=cfg.budget_db, ssim=False, outputs_dir=cfg.out / "outputs",
    )


def measured_point(p: PointResult, result: SweepResult, store: RunStore) -> Measured:
    """A sweep point as derive records it (the candidate's and the baseline's medians of the same blocks)."""
    run = store.get_run(p.run_id)
    base = list(run.timing.baseline_samples_s or []) if run.timing else []
    q = p.quality.psnr
    floor = (p.noise_floor.low, p.noise_floor.high) if p.noise_floor else None
    return Measured(
        sweep_id=result.sweep_id, run_id=p.run_id, baseline_run_id=result.baseline.run_id, speedup=p.speedup,
        ci=p.speedup_ci, noise_floor=floor, measurably_faster=p.measurably_faster, verdict=p.verdict,
        latency_s=p.latency_s.p50, baseline_latency_s=float(np.median(base)) if base else float("nan"),
        samples_s=list(run.timing.samples_s) if run.timing else [],
        psnr_p50=q.p50, psnr_p10=q.p10, psnr_worst=q.min, identical=q.n > 0 and q.n_inf == q.n,
        ssim_p10=p.quality.ssim.p10 if p.quality.ssim else None, resumed=p.resumed,
    )


def compare_configs(cfg: DeriveConfig, store: RunStore, base: EngineConfig, candidates: dict[str, EngineConfig],
                    factory: EngineFactory, event: Event, steps: int | None = None,
                    ) -> tuple[dict[str, Measured], SweepResult]:
    """Measure whole configurations (label → config) against ``base`` in one interleaved session."""
    from diffbench.sweep.runner import run_sweep

    opts = sweep_options(cfg, base, DEPLOYMENT_AXIS, list(candidates), candidates, steps)
    result = run_sweep(opts, store, engine_factory=factory, on_event=event)
    return {p.value: measured_point(p, result, store) for p in result.points}, result


def compare_cache(cfg: DeriveConfig, store: RunStore, base: EngineConfig, factory: EngineFactory, event: Event,
                  ) -> tuple[dict[str, Measured], SweepResult]:
    """Measure the step-cache thresholds (``cfg.cache_axis`` = each of ``cfg.cache_values``) on ``base``."""
    from diffbench.sweep.runner import run_sweep

    opts = sweep_options(cfg, base, cfg.cache_axis, list(cfg.cache_values))
    result = run_sweep(opts, store, engine_factory=factory, on_event=event)
    return {p.value: measured_point(p, result, store) for p in result.points}, result
