"""⑧ Dashboard signals and alerts a plan implies (names and conditions from monitoring/alerts.yaml)."""

from __future__ import annotations

from diffbench.ledger.account import LedgerResult
from diffbench.plan.models import Alert, PlanConfig, Signal


def mean_step_s(r: LedgerResult, latency_s: float) -> float:
    """Mean denoise step time of the plan: (latency − text encode − VAE decode − transfers) ÷ steps."""
    serial = sum(s.time_s for s in r.stages if s.name != "denoise") + r.offload_time_s
    return max(latency_s - serial, 0.0) / r.steps


def signals_for(cfg: PlanConfig, r: LedgerResult, latency_s: float, multi_gpu: bool) -> list[Signal]:
    """Series to set (baselines, SLO) or watch, with the values this plan predicts."""
    step_s = mean_step_s(r, latency_s)
    out = [
        Signal(name="diffusion_request_duration_seconds", unit="s", value=latency_s,
               note="histogram; make the SLO a bucket edge"),
        Signal(name="diffusion_stage_duration_seconds", unit="s",
               note="per stage: " + ", ".join(
                   f"{s.name} {(step_s * r.steps if s.name == 'denoise' else s.time_s):.3f} s" for s in r.stages)
               + (" (denoise across the instance's GPUs; text encode and VAE decode run on one)" if multi_gpu else "")),
        Signal(name="diffusion_denoise_step_duration_seconds", unit="s", value=step_s, note="per-step histogram"),
        Signal(name="diffusion_denoise_step_baseline_seconds", unit="s", value=step_s,
               note="gauge; replace with the measured step time from diffbench bench"),
        Signal(name="diffusion_latency_slo_seconds", unit="s", value=cfg.slo_p99_s, note="gauge"),
        Signal(name="diffusion_queue_estimated_wait_seconds", unit="s", note="work-weighted queue estimate"),
        Signal(name="diffusion_gpu_memory_peak_bytes", unit="B", value=float(r.peak_memory_bytes),
               note="predicted peak per GPU"),
        Signal(name="diffusion_model_flops_total", unit="FLOP", value=r.total_flops,
               note="FLOPs per request, for MFU = rate(flops) / (GPUs × peak)"),
    ]
    if r.config.cache_speedup > 1:
        out.append(Signal(name="diffusion_cache_hit_ratio_baseline", value=1 - 1 / r.config.cache_speedup,
                          note="gauge: expected share of skipped steps; never publish 0"))
    if cfg.quality_budget_db is not None:
        out.append(Signal(name="diffusion_quality_psnr_threshold_decibels", unit="dB", value=cfg.quality_budget_db,
                          note="gauge for the golden-probe PSNR"))
    if multi_gpu:
        out.append(Signal(name="diffusion_rank_step_compute_seconds", unit="s", note="per-rank step compute minus collective waits"))
    return out


def alerts_for(cfg: PlanConfig, r: LedgerResult, latency_s: float, multi_gpu: bool, compiled: bool,
               psnr: float | None) -> list[Alert]:
    """The alerts of monitoring/alerts.yaml that apply to this plan, with their thresholds."""
    out = [
        Alert(name="DiffusionDenoiseStepRegression", condition="mean step time > 1.2 × baseline, same shape, 10m",
              threshold=f"{1.2 * mean_step_s(r, latency_s):.4f} s"),
        Alert(name="DiffusionQueueWaitOverHalfSLO", condition="estimated wait > 0.5 × SLO, 2m",
              threshold=f"{0.5 * cfg.slo_p99_s:g} s"),
        Alert(name="DiffusionLatencyP99OverSLO", condition="p99 of user request latency (5m) > SLO gauge, 10m",
              threshold=f"{cfg.slo_p99_s:g} s"),
        Alert(name="DiffusionGPUPeakMemoryHigh", condition="max_over_time(peak[5m]) / total > 0.9",
              threshold=f"{0.9 * r.capacity_bytes / 2**30:.1f} GiB"),
    ]
    if r.config.cache_speedup > 1:
        out.append(Alert(name="DiffusionCacheHitRatioDrift", condition="|hit ratio − baseline| / baseline > 0.3, 15m",
                         threshold=f"baseline {1 - 1 / r.config.cache_speedup:.2f}"))
    if psnr is not None and cfg.quality_budget_db is not None:
        out.append(Alert(name="DiffusionQualityPSNRDrop", condition="probe PSNR < threshold − 3 dB",
                         threshold=f"{cfg.quality_budget_db - 3:g} dB"))
    if compiled:
        out.append(Alert(name="DiffusionRecompileDetected", condition="increase(recompiles[15m]) > 0",
                         threshold="0"))
    if multi_gpu:
        out.append(Alert(name="DiffusionRankStepSkew", condition="(max − min) / min of per-rank step compute > 0.1 and max − min > 2 ms, 10m",
                         threshold="10 % and 2 ms"))
    return out
