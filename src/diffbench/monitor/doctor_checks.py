"""The first checks of the triage runbook, one function each (``diffbench doctor``).

Each check reads a :class:`~diffbench.monitor.doctor_views.MetricsView`, and returns a :class:`Finding`:
the value it found, a verdict (``ok`` / ``suspect`` / ``no data``), one sentence, per-group details, the
metrics it read (all from :data:`diffbench.metrics.names.METRICS`) and the ``diffbench`` command that
confirms it. Thresholds are the alert rules' (``monitoring/alerts.yaml``, docs/guides/after-launch.md):
step mean > 1.2 × baseline, cache hit
ratio off its baseline by more than 30 %, peak memory > 90 % of the device, PSNR < threshold − 3 dB,
recompiles > 0, per-rank spread > 10 % and > 2 ms, estimated wait > ½ SLO.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from diffbench.monitor.doctor_views import MetricsView

Verdict = Literal["ok", "suspect", "no data"]

STEP_RATIO = 1.2
CACHE_DRIFT = 0.3
MEMORY_RATIO = 0.9
PSNR_MARGIN_DB = 3.0
RANK_SKEW = 0.1
RANK_SKEW_FLOOR_S = 0.002
"""Rank skew also needs the slowest rank's mean step compute to exceed the fastest's by this many seconds
(the ``DiffusionRankStepSkew`` rule's floor). Below it the ratio is noise: a rank's compute is its step time
minus its waits in collectives, each timed on the rank (CUDA events: 0.5 µs resolution, two per collective,
a few hundred collectives per sequence-parallel step, so up to ~0.2 ms per step), and ranks that do equal
work differed by 0.03-0.2 ms in their 20-step means (2 gloo processes on a shared 2-core host; single steps
by up to 6 ms) and by 0.05 ms (15 %) in their 4-step means with CUDA events (2 processes on one H100). On a step of a few milliseconds that noise alone is over 10 % and names a random rank; 2 ms
is ten times the noise of a mean, and it only mutes steps under 20 ms, where a 10 % straggler costs under
2 ms a step."""
QUEUE_SHARE = 0.5
"""Queue wait is the suspect when its mean is at least this share of the mean service time."""
WAIT_SLO_SHARE = 0.5
QUANTIZED = ("int8", "int4", "uint8", "fp8", "float8", "nf4", "fp4", "float8_e4m3fn", "float8_e5m2", "qint8")
TILING_OFF = ("false", "off", "0", "no", "none", "")


class Finding(BaseModel):
    """One check's answer. ``value`` is in ``unit`` (None without data)."""

    key: str
    title: str
    verdict: Verdict
    value: float | None = None
    unit: str = ""
    sentence: str
    details: list[str] = []
    metrics: list[str]
    command: str


@dataclass
class Context:
    """What the commands are filled with: the service URL when known, the model and shapes seen, and what
    the service reports of itself in ``GET /v1/models`` (``engine``, ``steps``: its default steps), read by
    :func:`diffbench.monitor.doctor.context_from`."""

    url: str = "URL"
    model: str = "MODEL"
    probe_reference: str = "REFERENCE_DIR"
    engine: str | None = None
    steps: int | None = None

    @property
    def known_url(self) -> bool:
        return self.url != "URL"

    def bench(self, shape: str, rest: str, model: str | None = None) -> str:
        """A ``bench`` command that measures ``shape`` as it is served: against the service itself
        (``--engine http --url``, its model name and default steps) when its URL is known, else a local
        run of the same model (``--engine sim`` for a sim service)."""
        model = model or self.model
        steps = f" --steps {self.steps}" if self.steps else ""
        if self.known_url:
            return f"diffbench bench --engine http --url {self.url} --model {model} --shapes {shape}{steps} {rest}"
        return self.local(f"--shapes {shape}{steps} {rest}", model)

    def local(self, rest: str, model: str | None = None) -> str:
        """A local ``bench`` of the served model, for what only a local pipeline can change (compile, device,
        VAE tiling): ``--engine sim`` when the service reports the sim engine."""
        engine = " --engine sim" if self.engine == "sim" else ""
        steps = f" --steps {self.steps}" if self.steps and "--steps" not in rest else ""
        return f"diffbench bench{engine} --model {model or self.model}{steps} {rest}"

    def sweep(self, rest: str, model: str | None = None) -> str:
        """A ``sweep`` of the served model (in-process diffusers, at the service's default steps). A sim
        service stands for no pipeline and ``sweep`` has no sim engine: the model is then the placeholder
        ``PIPELINE_DIR`` with a shell comment saying what to put there."""
        steps = f" --steps {self.steps}" if self.steps else ""
        if self.engine == "sim":
            return (f"diffbench sweep --model PIPELINE_DIR{steps} {rest}  # PIPELINE_DIR: the diffusers pipeline "
                    "this service stands for (it runs the sim engine; sweep runs the pipeline in-process)")
        return f"diffbench sweep --model {model or self.model}{steps} {rest}"


def _ms(v: float | None) -> str:
    if v is None or v != v:  # None or NaN (an estimate the exporter could not make)
        return "—"
    return f"{v * 1e3:.3g} ms" if abs(v) < 1 else f"{v:.3g} s"


def _gib(v: float) -> str:
    return f"{v / 2**30:.3g} GiB"


def bench_shape(label: str) -> str:
    """A ``shape`` label (``WxH``, ``WxHfF``, suffix ``bB``) as ``bench --shapes`` spells it (``WxH[xF]``)."""
    import re

    m = re.fullmatch(r"(\d+)x(\d+)(?:f(\d+))?(?:b\d+)?", label)
    if not m:
        return "WxH"
    return f"{m.group(1)}x{m.group(2)}" + (f"x{m.group(3)}" if m.group(3) else "")


def _user() -> dict[str, str]:
    return {"traffic": "user"}


# -- p99 ------------------------------------------------------------------------------------------------


def queue_vs_service(view: MetricsView, ctx: Context) -> Finding:
    """Queue wait vs service time: is the p99 queueing or serving?"""
    q = view.hist_mean("diffusion_queue_wait_seconds", ())
    stages = view.hist_mean("diffusion_stage_duration_seconds", ("stage",))
    req = view.hist_mean("diffusion_request_duration_seconds", (), **_user())
    p99 = view.hist_quantile("diffusion_request_duration_seconds", 0.99, **_user())
    est = view.gauge("diffusion_queue_estimated_wait_seconds", ())
    slo = view.gauge("diffusion_latency_slo_seconds", ())
    metrics = ["diffusion_queue_wait_seconds", "diffusion_stage_duration_seconds",
               "diffusion_request_duration_seconds", "diffusion_queue_estimated_wait_seconds",
               "diffusion_latency_slo_seconds"]
    cmd = f"diffbench load --url {ctx.url} --scrape {ctx.url}/metrics --rates auto"
    title = "queue wait vs service time"
    if () not in q:
        return Finding(key="queue_vs_service", title=title, verdict="no data", metrics=metrics, command=cmd,
                       sentence="no queue-wait observations: the service finished no request in this window")
    wait, n = q[()]
    service = sum(m for m, _ in stages.values()) if stages else None
    how = "sum of the mean stage times"
    if service is None and () in req:
        service, how = max(req[()][0] - wait, 0.0), "mean request time minus mean queue wait"
    details = [f"queue wait mean {_ms(wait)} over {n:.0f} requests"]
    if service is not None:
        details.append(f"service time mean {_ms(service)} ({how})")
    if p99 is not None:
        details.append(f"request p99 {_ms(p99)} (histogram, user traffic)")
    est_v, slo_v = est.get(()), slo.get(())
    if est_v is not None and slo_v:
        details.append(f"estimated wait now {_ms(est_v)} vs SLO {_ms(slo_v)}")
    over_slo = est_v is not None and bool(slo_v) and est_v > WAIT_SLO_SHARE * slo_v  # type: ignore[operator]
    if service is None or service <= 0:
        return Finding(key="queue_vs_service", title=title, verdict="no data", value=wait, unit="seconds",
                       details=details, metrics=metrics, command=cmd,
                       sentence=f"queue wait mean {_ms(wait)}, but no stage or request times to compare it with")
    share = wait / service
    if share >= QUEUE_SHARE or over_slo:
        sentence = (f"queueing: requests wait {_ms(wait)} on average, {share:.0%} of their {_ms(service)} "
                    "service time" + ("; the estimated wait is over half the SLO" if over_slo else "")
                    + " — the service is short of capacity for this load (scale out or shed load)")
        verdict: Verdict = "suspect"
    else:
        sentence = (f"serving: the queue wait ({_ms(wait)}) is {share:.0%} of the service time "
                    f"({_ms(service)}); the time is spent on the device — check the step time next")
        verdict = "ok"
    return Finding(key="queue_vs_service", title=title, verdict=verdict, value=share, unit="ratio",
                   sentence=sentence, details=details, metrics=metrics, command=cmd)


def step_vs_baseline(view: MetricsView, ctx: Context) -> Finding:
    """Per-step time vs the calibrated baseline of the same shape (``DiffusionDenoiseStepRegression``)."""
    by = ("model", "shape")
    means = view.hist_mean("diffusion_denoise_step_duration_seconds", by)
    base = view.gauge("diffusion_denoise_step_baseline_seconds", by)
    metrics = ["diffusion_denoise_step_duration_seconds", "diffusion_denoise_step_baseline_seconds"]
    title = "per-step time vs baseline (same shape)"
    worst: tuple[float, tuple[str, ...]] | None = None
    details, missing = [], []
    for key, (mean, n) in sorted(means.items()):
        b = base.get(key)
        if not b:
            missing.append(key[1])
            details.append(f"{key[1]}: step mean {_ms(mean)} over {n:.0f} steps, no baseline")
            continue
        ratio = mean / b
        details.append(f"{key[1]}: step mean {_ms(mean)} vs baseline {_ms(b)} (×{ratio:.2f}, {n:.0f} steps)")
        if worst is None or ratio > worst[0]:
            worst = (ratio, key)
    shape = worst[1][1] if worst else (next(iter(means))[1] if means else "WxH")
    model = worst[1][0] if worst else ctx.model
    cmd = ctx.bench(bench_shape(shape), "--runs 100 --json step.json", model=model)
    if worst is None:
        why = (f"step times for {', '.join(missing)} but no baseline for them (load a calibration: diffbench "
               "monitor calibrate, then serve --calibration)") if missing else "no denoise steps observed"
        return Finding(key="step_vs_baseline", title=title, verdict="no data", sentence=why, details=details,
                       metrics=metrics, command=cmd)
    ratio = worst[0]
    if ratio > STEP_RATIO:
        sentence = (f"the step is slower than calibrated: {shape} runs ×{ratio:.2f} its baseline (alert above "
                    f"×{STEP_RATIO:g}) — same shape, so the device or the deployment changed (clocks, another "
                    "process, a different kernel or dtype)")
        verdict: Verdict = "suspect"
    else:
        sentence = f"step times are within ×{STEP_RATIO:g} of their baselines (worst {shape} ×{ratio:.2f})"
        verdict = "ok"
    return Finding(key="step_vs_baseline", title=title, verdict=verdict, value=ratio, unit="ratio",
                   sentence=sentence, details=details, metrics=metrics, command=cmd)


def recompiles(view: MetricsView, ctx: Context) -> Finding:
    """torch.compile compilations after warmup (``DiffusionRecompileDetected``)."""
    d = view.delta("diffusion_compile_recompiles", ("model",))
    metrics = ["diffusion_compile_recompiles"]
    model = next(iter(d))[0] if d else ctx.model
    cmd = "TORCH_LOGS=recompiles " + ctx.local("--compile --shapes SHAPES_SERVED", model)
    title = "recompiles after warmup"
    if not d:
        return Finding(key="recompiles", title=title, verdict="no data", metrics=metrics, command=cmd,
                       sentence="no recompile counter exported (compile off, or an exporter without it)")
    total = sum(d.values())
    if total > 0:
        return Finding(key="recompiles", title=title, verdict="suspect", value=total, unit="recompiles",
                       metrics=metrics, command=cmd,
                       details=[f"{k[0]}: {v:.0f}" for k, v in sorted(d.items()) if v],
                       sentence=f"{total:.0f} recompile(s) after warmup: a request shape (or batch) outside the "
                                "warmed set compiled while serving, each one a latency spike")
    return Finding(key="recompiles", title=title, verdict="ok", value=0.0, unit="recompiles", metrics=metrics,
                   command=cmd, sentence="no recompile after warmup")


def rank_skew(view: MetricsView, ctx: Context) -> Finding:
    """Spread of the per-rank compute time of a step (step time minus collective waits) between the slowest
    and the fastest rank (``DiffusionRankStepSkew``): suspect when it is over :data:`RANK_SKEW` of the fastest
    *and* over :data:`RANK_SKEW_FLOOR_S`; the sentence and the command name the slowest rank."""
    means = view.hist_mean("diffusion_rank_step_compute_seconds", ("model", "rank"))
    metrics = ["diffusion_rank_step_compute_seconds"]
    cmd = ctx.local("--device cuda:N --runs 100  # once per rank's GPU")
    title = "rank skew"
    if len(means) < 2:
        return Finding(key="rank_skew", title=title, verdict="no data", metrics=metrics, command=cmd,
                       sentence="fewer than two ranks reported compute time (a single-device service)")
    vals = {k[1]: m for k, (m, _) in means.items()}
    lo, hi = min(vals.values()), max(vals.values())
    spread = (hi - lo) / lo if lo > 0 else float("inf")
    slow = max(vals, key=vals.__getitem__)
    details = [f"rank {r}: {_ms(m)}" for r, m in sorted(vals.items())]
    if spread > RANK_SKEW and hi - lo > RANK_SKEW_FLOOR_S:
        return Finding(key="rank_skew", title=title, verdict="suspect", value=spread, unit="ratio",
                       details=details, metrics=metrics, command=cmd.replace("N", slow),
                       sentence=f"rank {slow} computes {spread:.0%} ({_ms(hi - lo)}) longer per step than the "
                                f"fastest (alert above {RANK_SKEW:.0%} and {_ms(RANK_SKEW_FLOOR_S)}): a straggler "
                                "GPU holds every step at the collectives")
    if spread > RANK_SKEW:
        return Finding(key="rank_skew", title=title, verdict="ok", value=spread, unit="ratio", details=details,
                       metrics=metrics, command=cmd,
                       sentence=f"ranks within {_ms(hi - lo)} of each other per step ({spread:.0%}, under the "
                                f"{_ms(RANK_SKEW_FLOOR_S)} floor: timing noise)")
    return Finding(key="rank_skew", title=title, verdict="ok", value=spread, unit="ratio", details=details,
                   metrics=metrics, command=cmd, sentence=f"ranks within {spread:.0%} of each other")


def _cache(view: MetricsView, ctx: Context, key: str, title: str, artifacts: bool) -> Finding:
    by = ("model", "shape")
    hits = view.delta("diffusion_cache_hits", by)
    lookups = view.delta("diffusion_cache_lookups", by)
    base = view.gauge("diffusion_cache_hit_ratio_baseline", by)
    metrics = ["diffusion_cache_hits", "diffusion_cache_lookups", "diffusion_cache_hit_ratio_baseline"]
    worst: tuple[float, float, float, tuple[str, ...]] | None = None  # (drift, ratio, baseline, key)
    details = []
    for k, n in sorted(lookups.items()):
        if n <= 0:
            continue
        r = hits.get(k, 0.0) / n
        b = base.get(k)
        if not b:
            details.append(f"{k[1]}: hit ratio {r:.2f} over {n:.0f} decisions, no baseline")
            continue
        drift = (r - b) / b
        details.append(f"{k[1]}: hit ratio {r:.2f} vs baseline {b:.2f} ({drift:+.0%}, {n:.0f} decisions)")
        if worst is None or abs(drift) > abs(worst[0]):
            worst = (drift, r, b, k)
    model = worst[3][0] if worst else ctx.model
    cmd = ctx.sweep("--cache first-block --values 0.05,0.1,0.2 --json cache.json", model)
    if worst is None:
        why = "cache decisions but no baseline for their shapes" if details else \
              "no step-cache decisions (no cache enabled, or it exposes no decisions)"
        return Finding(key=key, title=title, verdict="no data", sentence=why, details=details, metrics=metrics,
                       command=cmd)
    drift, r, b, k = worst
    if abs(drift) > CACHE_DRIFT:
        if drift > 0:
            effect = ("more steps skipped than calibrated: quality risk (artifacts)" if artifacts else
                      "more steps skipped than calibrated: faster, but check quality")
        else:
            effect = ("fewer hits than calibrated: slower steps, not an artifact cause" if artifacts else
                      "fewer hits than calibrated: more compute per request, a p99 cause")
        return Finding(key=key, title=title, verdict="suspect", value=drift, unit="ratio", details=details,
                       metrics=metrics, command=cmd,
                       sentence=f"{k[1]}: hit ratio {r:.2f} vs baseline {b:.2f} ({drift:+.0%}, alert beyond "
                                f"±{CACHE_DRIFT:.0%}): {effect}")
    return Finding(key=key, title=title, verdict="ok", value=drift, unit="ratio", details=details, metrics=metrics,
                   command=cmd, sentence=f"hit ratio within ±{CACHE_DRIFT:.0%} of its baseline "
                                         f"(worst {k[1]} {drift:+.0%})")


def cache_p99(view: MetricsView, ctx: Context) -> Finding:
    """Cache hit ratio vs baseline, read as a latency cause."""
    return _cache(view, ctx, "cache_hit_ratio", "cache hit ratio vs baseline", artifacts=False)


def cache_artifacts(view: MetricsView, ctx: Context) -> Finding:
    """Cache hit ratio drift, read as a quality cause (more skipped compute than calibrated)."""
    return _cache(view, ctx, "cache_hit_ratio_drift", "cache hit ratio drift", artifacts=True)


# -- artifacts ------------------------------------------------------------------------------------------


def probe_psnr(view: MetricsView, ctx: Context) -> Finding:
    """Probe PSNR by instance vs its threshold (``DiffusionQualityPSNRDrop``) and the probe's age."""
    by = ("instance", "model", "probe")
    psnr = view.gauge("diffusion_quality_psnr_decibels", by)
    thr = view.gauge("diffusion_quality_psnr_threshold_decibels", by)
    metrics = ["diffusion_quality_psnr_decibels", "diffusion_quality_psnr_threshold_decibels"]
    cmd = f"diffbench probe --url {ctx.url} --reference {ctx.probe_reference} --once --json probe.json"
    title = "probe PSNR by instance vs threshold"
    if not psnr:
        return Finding(key="probe_psnr", title=title, verdict="no data", metrics=metrics, command=cmd,
                       sentence="no probe PSNR series (the probe exports on its own /metrics: run diffbench "
                                "probe, and scrape it too)")
    worst: tuple[float, tuple[str, ...], float, float] | None = None
    details = []
    for k, p in sorted(psnr.items()):
        t = thr.get(k)
        where = (f"{k[0]} " if k[0] else "") + f"probe {k[2]}"
        if t is None:
            details.append(f"{where}: PSNR {p:.1f} dB, no threshold")
            continue
        margin = p - t
        details.append(f"{where}: PSNR {p:.1f} dB vs threshold {t:.1f} dB ({margin:+.1f} dB)")
        if worst is None or margin < worst[0]:
            worst = (margin, k, p, t)
    if worst is None:
        return Finding(key="probe_psnr", title=title, verdict="no data", details=details, metrics=metrics,
                       command=cmd, sentence="probe PSNR without a threshold series: cannot judge it")
    margin, k, p, t = worst
    where = (f"instance {k[0]}, " if k[0] else "") + f"probe {k[2]}"
    if margin < -PSNR_MARGIN_DB:
        return Finding(key="probe_psnr", title=title, verdict="suspect", value=margin, unit="decibels",
                       details=details, metrics=metrics, command=cmd,
                       sentence=f"{where}: PSNR {p:.1f} dB is {-margin:.1f} dB under its {t:.1f} dB threshold "
                                f"(alert at {PSNR_MARGIN_DB:g} dB under): the served images differ from the "
                                "reference beyond the quality budget")
    note = "" if margin >= 0 else f" (below the threshold, within the {PSNR_MARGIN_DB:g} dB margin)"
    return Finding(key="probe_psnr", title=title, verdict="ok", value=margin, unit="decibels", details=details,
                   metrics=metrics, command=cmd,
                   sentence=f"probe PSNR at or near its threshold on every instance (worst {where} "
                            f"{margin:+.1f} dB){note}")


def fingerprint(view: MetricsView, ctx: Context) -> Finding:
    """Deployment fingerprint vs the fingerprint the loaded calibration was measured on."""
    dep = view.info("diffusion_deployment_info")
    base = view.info("diffusion_baseline_info")
    metrics = ["diffusion_deployment_info", "diffusion_baseline_info"]
    cmd = f"diffbench probe --url {ctx.url} --reference {ctx.probe_reference} --once  (refused on a fingerprint change)"
    title = "deployment fingerprint vs baseline"
    if not dep or not base:
        return Finding(key="fingerprint", title=title, verdict="no data", metrics=metrics, command=cmd,
                       sentence="no " + ("deployment_info" if not dep else "baseline_info (no calibration loaded)")
                                + " series: cannot compare the deployment with its calibration")
    bmap = {b.get("model", ""): b.get("fingerprint", "") for b in base}
    details, changed = [], []
    for d in dep:
        m, fp = d.get("model", ""), d.get("fingerprint", "")
        b = bmap.get(m)
        details.append(f"{m}: deployment {fp or '—'}, baseline {b or '—'}")
        if b is not None and b != fp:
            changed.append(m)
    if changed:
        return Finding(key="fingerprint", title=title, verdict="suspect", value=float(len(changed)), unit="models",
                       details=details, metrics=metrics, command=cmd,
                       sentence=f"{', '.join(changed)}: the deployment's fingerprint differs from the one its "
                                "calibration was measured on — the configuration changed (dtype, cache, compile, "
                                "attention, tiling or weights), and the baselines do not apply to it")
    return Finding(key="fingerprint", title=title, verdict="ok", value=0.0, unit="models", details=details,
                   metrics=metrics, command=cmd, sentence="the deployment matches the calibration's fingerprint")


def precision(view: MetricsView, ctx: Context) -> Finding:
    """dtype and step cache of the deployment (``diffusion_deployment_info`` labels)."""
    dep = view.info("diffusion_deployment_info")
    metrics = ["diffusion_deployment_info"]
    model = dep[0].get("model", ctx.model) if dep else ctx.model
    cmd = ctx.sweep("--option precision --values float32,bfloat16 --json precision.json", model)
    title = "precision / quantization"
    if not dep:
        return Finding(key="precision", title=title, verdict="no data", metrics=metrics, command=cmd,
                       sentence="no deployment_info series: dtype and cache unknown")
    details, low = [], []
    for d in dep:
        dtype, cache = d.get("dtype", ""), d.get("cache", "")
        details.append(f"{d.get('model', '')}: dtype {dtype or '—'}, cache {cache or 'none'}, "
                       f"attention {d.get('attention', '') or '—'}")
        if any(q in dtype.lower() for q in QUANTIZED):
            low.append(f"{d.get('model', '')} {dtype}")
    if low:
        return Finding(key="precision", title=title, verdict="suspect", details=details, metrics=metrics,
                       command=cmd, sentence=f"quantized weights or activations ({', '.join(low)}): a known "
                                             "artifact source; compare with a float baseline")
    caches = [d.get("cache", "") for d in dep if d.get("cache", "") not in ("", "none", "off")]
    tail = f"; step cache on ({', '.join(caches)}): see the cache check" if caches else ""
    return Finding(key="precision", title=title, verdict="ok", details=details, metrics=metrics, command=cmd,
                   sentence=f"float precision ({', '.join(sorted({d.get('dtype', '') for d in dep}))}){tail}")


# -- oom ------------------------------------------------------------------------------------------------


def peak_memory(view: MetricsView, ctx: Context) -> Finding:
    """Peak memory by stage, and each device's peak against its capacity (``DiffusionGPUPeakMemoryHigh``)."""
    stage = view.gauge("diffusion_stage_memory_peak_bytes", ("stage",), peak=True)
    peak = view.gauge("diffusion_gpu_memory_peak_bytes", ("gpu",), peak=True)
    total = view.gauge("diffusion_gpu_memory_total_bytes", ("gpu",))
    ooms = view.delta("diffusion_requests", (), outcome="oom", **_user())
    metrics = ["diffusion_stage_memory_peak_bytes", "diffusion_gpu_memory_peak_bytes",
               "diffusion_gpu_memory_total_bytes", "diffusion_requests"]
    title = "peak memory by stage"
    top = max(stage, key=stage.__getitem__)[0] if any(stage.values()) else None
    details = [f"stage {k[0]}: {_gib(v)}" for k, v in sorted(stage.items()) if v]
    worst: tuple[float, str] | None = None
    for (gpu,), p in sorted(peak.items()):
        t = total.get((gpu,))
        if t:
            details.append(f"gpu {gpu}: peak {_gib(p)} of {_gib(t)} ({p / t:.0%})")
            if worst is None or p / t > worst[0]:
                worst = (p / t, gpu)
    n_oom = ooms.get((), 0.0)
    if n_oom:
        details.append(f"{n_oom:.0f} request(s) ended out of memory")
    shape = "2048x2048" if top == "vae_decode" else "SHAPE"
    cmd = ctx.bench(shape, "--runs 3 --json memory.json  # peak by stage")
    if worst is None and top is None:
        return Finding(key="peak_memory", title=title, verdict="no data", details=details, metrics=metrics,
                       command=cmd, sentence="no memory series (peak or total) in the metrics")
    held = f"; the {top} stage holds the largest peak" if top else ""
    if worst is not None and (worst[0] > MEMORY_RATIO or n_oom):
        return Finding(key="peak_memory", title=title, verdict="suspect", value=worst[0], unit="ratio",
                       details=details, metrics=metrics, command=cmd,
                       sentence=f"gpu {worst[1]} peaked at {worst[0]:.0%} of its memory (alert above "
                                f"{MEMORY_RATIO:.0%}){held}" + (f"; {n_oom:.0f} OOM outcome(s)" if n_oom else ""))
    if worst is None:
        return Finding(key="peak_memory", title=title, verdict="suspect" if n_oom else "no data", details=details,
                       metrics=metrics, command=cmd,
                       sentence=f"no device capacity to compare with{held}"
                                + (f"; {n_oom:.0f} OOM outcome(s)" if n_oom else ""))
    return Finding(key="peak_memory", title=title, verdict="ok", value=worst[0], unit="ratio", details=details,
                   metrics=metrics, command=cmd,
                   sentence=f"peak memory at most {worst[0]:.0%} of the device (gpu {worst[1]}){held}")


def other_shapes(view: MetricsView, ctx: Context) -> Finding:
    """Requests served at shapes outside the warmup/allowlist (``shape="other"``)."""
    from diffbench.metrics.names import OTHER_SHAPE

    counts = view.delta("diffusion_shape_requests", ("shape", "outcome"))
    metrics = ["diffusion_shape_requests_total"]
    cmd = ctx.bench("WxH", "--runs 3  # WxH: a shape outside the warmup list (or: diffbench drill shapes)")
    title = "shapes outside the warmup list"
    by_shape: dict[str, dict[str, float]] = {}
    for (shape, outcome), n in counts.items():
        if n > 0:
            by_shape.setdefault(shape, {})[outcome] = n
    if not by_shape:
        return Finding(key="other_shapes", title=title, verdict="no data", metrics=metrics, command=cmd,
                       sentence="no requests observed by shape")
    n_all = sum(sum(o.values()) for o in by_shape.values())
    other = by_shape.get(OTHER_SHAPE, {})
    n_other = sum(other.values())
    details = [f"{shape}: " + ", ".join(f"{n:.0f} {o}" for o, n in sorted(o_n.items()))
               for shape, o_n in sorted(by_shape.items())]
    if n_other > 0:
        failed = sum(n for o, n in other.items() if o != "ok")
        return Finding(key="other_shapes", title=title, verdict="suspect", value=n_other, unit="requests",
                       details=details, metrics=metrics, command=cmd,
                       sentence=f"{n_other:.0f} of {n_all:.0f} requests ({n_other / n_all:.0%}) were at shapes "
                                f"outside the allowlist (shape=\"other\"), {failed:.0f} of them failed: never "
                                "warmed, never measured, their memory unpredicted")
    return Finding(key="other_shapes", title=title, verdict="ok", value=0.0, unit="requests", details=details,
                   metrics=metrics, command=cmd, sentence=f"all {n_all:.0f} requests were at allowlisted shapes")


def vae_tiling(view: MetricsView, ctx: Context) -> Finding:
    """VAE tiling on or off (``diffusion_deployment_info{vae_tiling}``)."""
    dep = view.info("diffusion_deployment_info")
    stage = view.gauge("diffusion_stage_memory_peak_bytes", ("stage",), peak=True)
    metrics = ["diffusion_deployment_info", "diffusion_stage_memory_peak_bytes"]
    cmd = ctx.local("--shapes 2048x2048 --vae-tiling --runs 3  # and without --vae-tiling: compare the "
                    "vae_decode peak")
    title = "VAE tiling"
    if not dep:
        return Finding(key="vae_tiling", title=title, verdict="no data", metrics=metrics, command=cmd,
                       sentence="no deployment_info series: VAE tiling unknown")
    off = [d.get("model", "") for d in dep if d.get("vae_tiling", "").lower() in TILING_OFF]
    top = max(stage, key=stage.__getitem__)[0] if any(stage.values()) else None
    details = [f"{d.get('model', '')}: vae_tiling {d.get('vae_tiling', '') or '—'}" for d in dep]
    if off:
        why = "; the vae_decode stage holds the peak" if top == "vae_decode" else ""
        return Finding(key="vae_tiling", title=title, verdict="suspect", details=details, metrics=metrics,
                       command=cmd, sentence=f"VAE tiling is off ({', '.join(off)}): the decode of a large image "
                                             f"needs memory growing with its pixels{why}")
    return Finding(key="vae_tiling", title=title, verdict="ok", details=details, metrics=metrics, command=cmd,
                   sentence="VAE tiling is on: the decode peak is bounded by the tile size")


def concurrency(view: MetricsView, ctx: Context) -> Finding:
    """Concurrent requests on the device (running) and waiting (queue depth), at their largest."""
    running = view.gauge("diffusion_requests_running", (), peak=True)
    depth = view.gauge("diffusion_queue_depth", (), peak=True)
    metrics = ["diffusion_requests_running", "diffusion_queue_depth"]
    cmd = f"diffbench load --url {ctx.url} --scrape {ctx.url}/metrics --mode closed --users 1,2,4"
    title = "concurrent requests"
    if () not in running:
        return Finding(key="concurrency", title=title, verdict="no data", metrics=metrics, command=cmd,
                       sentence="no requests_running series")
    r, d = running[()], depth.get((), 0.0)
    details = [f"running at most {r:.0f}", f"queue depth at most {d:.0f}"]
    if r > 1:
        return Finding(key="concurrency", title=title, verdict="suspect", value=r, unit="requests",
                       details=details, metrics=metrics, command=cmd,
                       sentence=f"up to {r:.0f} requests ran at once: their activations share the device "
                                "memory (a batch or concurrency limit above 1)")
    return Finding(key="concurrency", title=title, verdict="ok", value=r, unit="requests", details=details,
                   metrics=metrics, command=cmd,
                   sentence=f"one request at a time on the device (at most {r:.0f} running, {d:.0f} waiting)")


Check = Callable[[MetricsView, Context], Finding]

RUNBOOK: dict[str, tuple[Check, ...]] = {
    "p99": (queue_vs_service, step_vs_baseline, recompiles, rank_skew, cache_p99),
    "artifacts": (probe_psnr, fingerprint, cache_artifacts, precision),
    "oom": (peak_memory, other_shapes, vae_tiling, concurrency),
}
"""The checks of each symptom, in the order the runbook walks them."""

__all__ = ["RUNBOOK", "Context", "Finding", "Verdict"]
