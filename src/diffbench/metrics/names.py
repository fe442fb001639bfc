"""The one table of diffbench's Prometheus metrics (reference: docs/reference/metrics.md; names follow
Prometheus's naming practice, https://prometheus.io/docs/practices/naming/).

Every exported family, every alert rule, every dashboard panel and every metric ``plan`` or ``doctor``
names comes from :data:`METRICS`. Tests check that the rule file, the dashboard and ``plan`` name only
metrics listed here (or recording rules defined in ``monitoring/alerts.yaml``).

Conventions: prefix ``diffusion_``, base units (seconds, bytes, ratios 0–1, decibels), counters end in
``_total`` (``prometheus_client`` adds it: :attr:`MetricSpec.name` is the family name without it), labels
from bounded sets only (``shape`` is an allowlisted class or ``other``; no prompt, seed or raw size).

Buckets: the request histogram uses a fine series (at most 5 % between neighbouring edges from 10 ms to
1800 s, every round SLO value such as 1, 2, 2.5, 3, 4.5, 5, 10, 30, 60, 90 s an edge), so that
``histogram_quantile(0.99, …)`` is within 5 % of the raw p99
(https://prometheus.io/docs/practices/histograms/#errors-of-quantile-estimation: the error of a
histogram quantile is bounded by the width of the bucket holding it; both the interpolated value and the
sample quantile lie in that bucket). A 12.5 % series left 9 % error on a steady run with 2 % jitter. Stage, step and queue histograms use a coarser series (at most 33 %): their
alerts compare means (``_sum``/``_count``), and they carry more label combinations.

This module imports nothing heavy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["counter", "gauge", "histogram"]

# Mantissas of one decade: the largest ratio between neighbours is 9/8 = 1.125.
_MANTISSAS = (1, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 2, 2.2, 2.4, 2.5, 2.8, 3, 3.3, 3.6, 4, 4.5, 5, 5.5,
              6, 6.5, 7, 7.5, 8, 9)


# Request mantissas: the largest ratio between neighbours is 1.05 (greedy on a 0.01 grid, round SLO values
# forced in), so a histogram quantile is within 5 % of the sample quantile it estimates.
_FINE_5PCT = (1, 1.05, 1.1, 1.15, 1.2, 1.26, 1.32, 1.38, 1.44, 1.5, 1.57, 1.64, 1.72, 1.8, 1.89, 1.98, 2, 2.1,
              2.2, 2.31, 2.42, 2.5, 2.62, 2.75, 2.88, 3, 3.15, 3.3, 3.46, 3.63, 3.81, 4, 4.2, 4.41, 4.5, 4.72,
              4.95, 5, 5.25, 5.51, 5.78, 6, 6.3, 6.61, 6.94, 7.28, 7.5, 7.87, 8.26, 8.67, 9, 9.45, 9.92)


# Coarser decade for stage and step histograms (their alerts use _sum/_count means): ratio at most 1.33.
_COARSE = (1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 7.5)


def fine_buckets(
    lo_exp: int, hi_exp: int, top: float | None = None, mantissas: tuple[float, ...] = _MANTISSAS
) -> tuple[float, ...]:
    """Edges ``m × 10**e`` for e in [lo_exp, hi_exp] and every mantissa in ``mantissas``, plus ``top``.

    Values are rounded to 12 significant digits so edges render as ``le="0.0011"``, not ``0.0011000000000000001``.
    """
    edges = [float(f"{m * 10.0**e:.12g}") for e in range(lo_exp, hi_exp + 1) for m in mantissas]
    if top is not None:
        edges.append(float(top))
    return tuple(edges)


REQUEST_BUCKETS = tuple(e for e in fine_buckets(-2, 3, mantissas=_FINE_5PCT) if e <= 1800.0)  # 10 ms … 30 min
STAGE_BUCKETS = fine_buckets(-4, 2, top=1000.0, mantissas=_COARSE)  # 0.1 ms … 1000 s
STEP_BUCKETS = fine_buckets(-4, 1, top=100.0, mantissas=_COARSE)  # 0.1 ms … 100 s (tiny models: ms on a CPU)
QUEUE_BUCKETS = (0.0,) + fine_buckets(-3, 2, top=1000.0, mantissas=_COARSE)  # an empty queue observes 0

OUTCOMES = ("ok", "rejected", "oom", "timeout", "error", "cancelled", "invalid", "not_found", "unavailable")
"""``outcome`` label values. ``rejected`` is deliberate load shedding (429), not charged to the error budget;
``oom``, ``timeout`` and ``error`` are (docs/concepts/goodput-slo-knee.md); ``cancelled`` = the client went away or the
service stopped before the generation ran; ``invalid`` = 4xx for bad input; ``not_found`` = 404;
``unavailable`` = 503 before the engine is ready."""
ERROR_OUTCOMES = ("oom", "timeout", "error")
CANCEL_REASONS = ("disconnect", "deleted", "drain")
"""``reason`` label values of the cancel series: the client disconnected (images API), its video job was
deleted, or the server drained (stop signal, drain time over) while the generation ran."""
TRAFFIC = ("user", "probe", "warmup")
"""``traffic`` label values: SLO series and alerts select ``traffic="user"``; a quality probe's requests are
``probe`` and never count as traffic; startup warmups are ``warmup``."""
STAGES = ("text_encode", "denoise", "vae_decode", "other", "preprocess", "postprocess")
"""``stage`` label values. ``other`` = the engine's time outside the three model stages (scheduler setup, latent
preparation, output conversion), so the stages add up to the service time; ``postprocess`` = image encoding."""
STARTUP_PHASES = ("load", "warmup", "ready")
"""``phase`` label values of ``diffusion_startup_duration_seconds``."""
OTHER_SHAPE = "other"


@dataclass(frozen=True)
class MetricSpec:
    """One metric family. ``name`` is the family name (counters without ``_total``); ``unit`` is the base
    unit the value is in (``seconds``, ``bytes``, ``ratio``, ``decibels``, ``flop``, ``requests`` …)."""

    name: str
    kind: Kind
    unit: str
    labels: tuple[str, ...]
    help: str
    buckets: tuple[float, ...] | None = None

    @property
    def samples(self) -> tuple[str, ...]:
        """Sample names this family writes in the text format (``_created`` series not included)."""
        if self.kind == "counter":
            return (self.name + "_total",)
        if self.kind == "histogram":
            return (self.name + "_bucket", self.name + "_sum", self.name + "_count")
        return (self.name,)


METRICS: tuple[MetricSpec, ...] = (
    # -- requests and latency -----------------------------------------------------------------------------
    MetricSpec("diffusion_requests", "counter", "requests", ("model", "outcome", "status", "traffic"),
               "Finished requests by outcome, HTTP status and traffic class"),
    MetricSpec("diffusion_request_duration_seconds", "histogram", "seconds", ("model", "shape", "traffic"),
               "Arrival to response ready", REQUEST_BUCKETS),
    MetricSpec("diffusion_shape_requests", "counter", "requests", ("model", "shape", "outcome"),
               "Finished user requests by shape class and outcome (failed ones too: the shapes that ran out of "
               "memory)"),
    MetricSpec("diffusion_latency_slo_seconds", "gauge", "seconds", ("model",),
               "Latency SLO of the service (from the calibration file or --slo)"),
    MetricSpec("diffusion_cancelled_seconds", "counter", "seconds", ("model", "reason"),
               "Device seconds spent on generations whose answer nobody took (client gone, job deleted, "
               "drain), from their start on the device to the worker released: the wasted work"),
    MetricSpec("diffusion_cancel_release_seconds", "histogram", "seconds", ("model",),
               "From the cancel of a running generation to its worker released (at most one denoise step when "
               "the cancel lands in the denoising loop)", STEP_BUCKETS),
    # -- queue ----------------------------------------------------------------------------------------------
    MetricSpec("diffusion_queue_depth", "gauge", "requests", ("model",), "Requests waiting for the device"),
    MetricSpec("diffusion_requests_running", "gauge", "requests", ("model",), "Requests running on the device"),
    MetricSpec("diffusion_queue_wait_seconds", "histogram", "seconds", ("model",),
               "Observed wait from admission to start on the device", QUEUE_BUCKETS),
    MetricSpec("diffusion_queue_estimated_wait_seconds", "gauge", "seconds", ("model",),
               "Work-weighted estimate of the wait of a request arriving now"),
    # -- stages and steps -----------------------------------------------------------------------------------
    MetricSpec("diffusion_stage_duration_seconds", "histogram", "seconds", ("model", "shape", "stage"),
               "Device time of one pipeline stage", STAGE_BUCKETS),
    MetricSpec("diffusion_denoise_step_duration_seconds", "histogram", "seconds", ("model", "shape"),
               "Device time of one denoise step", STEP_BUCKETS),
    MetricSpec("diffusion_denoise_step_baseline_seconds", "gauge", "seconds", ("model", "shape"),
               "Calibrated mean denoise step time for the shape"),
    MetricSpec("diffusion_stage_baseline_seconds", "gauge", "seconds", ("model", "shape", "stage"),
               "Calibrated mean stage time for the shape (the wait predictor's input)"),
    # -- step cache -----------------------------------------------------------------------------------------
    MetricSpec("diffusion_cache_lookups", "counter", "decisions", ("model", "shape", "cache"),
               "Step-cache decisions taken"),
    MetricSpec("diffusion_cache_hits", "counter", "decisions", ("model", "shape", "cache"),
               "Step-cache decisions that skipped compute"),
    MetricSpec("diffusion_cache_hit_ratio_baseline", "gauge", "ratio", ("model", "shape"),
               "Calibrated cache hit ratio for the shape (never 0)"),
    # -- memory ---------------------------------------------------------------------------------------------
    MetricSpec("diffusion_gpu_memory_peak_bytes", "gauge", "bytes", ("gpu",),
               "Allocator high-water mark (reserved), max over requests of the last 60 s"),
    MetricSpec("diffusion_gpu_memory_peak_allocated_bytes", "gauge", "bytes", ("gpu",),
               "Peak allocated tensor memory, max over requests of the last 60 s"),
    MetricSpec("diffusion_gpu_memory_total_bytes", "gauge", "bytes", ("gpu",),
               "Device memory capacity (or the injected budget on a CPU)"),
    MetricSpec("diffusion_stage_memory_peak_bytes", "gauge", "bytes", ("model", "stage"),
               "Peak memory of the last request, by the stage that held it"),
    # -- compile, ranks, FLOPs ------------------------------------------------------------------------------
    MetricSpec("diffusion_compile_recompiles", "counter", "recompiles", ("model",),
               "torch.compile compilations after warmup"),
    MetricSpec("diffusion_rank_step_compute_seconds", "histogram", "seconds", ("model", "rank"),
               "Per-rank compute time of one denoise step: step time minus the rank's waits in collectives",
               STEP_BUCKETS),
    MetricSpec("diffusion_model_flops", "counter", "flop", ("model", "gpu"),
               "Model FLOPs executed (ledger count per request), for MFU"),
    # -- energy ---------------------------------------------------------------------------------------------
    MetricSpec("diffusion_adapter_swaps", "counter", "swaps", ("model", "adapter"),
               "Switches of the active LoRA adapter, by the adapter switched to (none: the base model)"),
    MetricSpec("diffusion_adapter_swap_duration_seconds", "histogram", "seconds", ("model",),
               "Time to switch the active LoRA adapter before a request", STAGE_BUCKETS),
    MetricSpec("diffusion_energy_joules", "counter", "joules", ("model", "gpu"),
               "Energy the device used during generations, read from its counter around each one (NVML on a "
               "GPU, RAPL packages on a CPU); no sample where no counter is readable"),
    # -- quality probe --------------------------------------------------------------------------------------
    MetricSpec("diffusion_quality_psnr_decibels", "gauge", "decibels", ("model", "probe"),
               "PSNR of the last probe answer against its reference (worst frame for video)"),
    MetricSpec("diffusion_quality_ssim_ratio", "gauge", "ratio", ("model", "probe"),
               "SSIM of the last probe answer against its reference (worst frame for video)"),
    MetricSpec("diffusion_quality_psnr_threshold_decibels", "gauge", "decibels", ("model", "probe"),
               "PSNR threshold of the probe (from the calibration file)"),
    MetricSpec("diffusion_quality_probe_timestamp_seconds", "gauge", "seconds", ("model", "probe"),
               "Unix time of the last finished probe"),
    MetricSpec("diffusion_quality_probe_interval_seconds", "gauge", "seconds", ("model", "probe"),
               "Configured probe interval (staleness = age over 2 intervals)"),
    MetricSpec("diffusion_quality_probe_runs", "counter", "probes", ("model", "probe", "outcome"),
               "Probe replays by outcome (ok, error)"),
    # -- deployment -----------------------------------------------------------------------------------------
    MetricSpec("diffusion_build_info", "gauge", "info", ("version", "torch", "cuda", "gpu_model"),
               "Build information; value 1"),
    MetricSpec("diffusion_deployment_info", "gauge", "info",
               ("model", "fingerprint", "dtype", "cache", "compile", "vae_tiling", "attention"),
               "Deployment configuration; value 1"),
    MetricSpec("diffusion_baseline_info", "gauge", "info", ("model", "fingerprint"),
               "Deployment fingerprint the loaded calibration was measured on; value 1"),
    MetricSpec("diffusion_startup_duration_seconds", "gauge", "seconds", ("model", "phase"),
               "Service start-up by phase: load (the engine's start: weights from disk to the device), warmup "
               "(the --warmup requests: compile, autotuning), ready (process start to serving)"),
)

BY_NAME: dict[str, MetricSpec] = {m.name: m for m in METRICS}


def spec(name: str) -> MetricSpec:
    """The spec of family ``name`` (with or without a counter's ``_total``). Raises KeyError."""
    base = name[: -len("_total")] if name.endswith("_total") and name[: -len("_total")] in BY_NAME else name
    return BY_NAME[base]


def sample_names() -> frozenset[str]:
    """Every sample name the exporter can write (``_bucket``/``_sum``/``_count``/``_total`` forms)."""
    return frozenset(s for m in METRICS for s in m.samples)


def le_label(edge: float) -> str:
    """How ``prometheus_client`` spells a bucket edge in ``le`` (always a float: ``30.0``, ``0.0011``)."""
    from prometheus_client.utils import floatToGoString

    return floatToGoString(edge)
