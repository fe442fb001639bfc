"""The diffusion exporter: every family of :data:`diffbench.metrics.names.METRICS` a service exports.

One :class:`Exporter` per service, with its own ``prometheus_client`` registry. At construction it creates
every known label combination (model × outcome × status × traffic, shapes incl. ``other`` × stages, caches,
ranks, gpus), so a scrape before the first request already shows each series at 0 and ``increase()``
sees the first event
(https://prometheus.io/docs/practices/instrumentation/#avoid-missing-metrics). ``_created`` series are dropped from this registry's output
(a filtering collector; ``prometheus_client.disable_created_metrics`` would change every registry of the
process).

Traffic classes (``traffic`` label, :data:`~diffbench.metrics.names.TRAFFIC`):

- ``user``: counted everywhere;
- ``probe`` (a quality probe's replay, HTTP header ``X-Diffbench-Traffic: probe``): counted in
  ``diffusion_requests_total`` and ``diffusion_request_duration_seconds`` under ``traffic="probe"`` only,
  and kept out of every other traffic series (stage, step, queue-wait, rank histograms, cache counters);
  the device work it causes still counts where it is physical (peak memory, FLOPs, recompiles);
- ``warmup`` (startup warmups): not exported at all.

Memory peaks (``diffusion_gpu_memory_peak_bytes`` = reserved, ``..._peak_allocated_bytes``, and
``diffusion_stage_memory_peak_bytes{stage}`` by the stage that held the peak) are the maximum over the
requests finished in the last ``peak_window_s`` seconds (default 60; a fixed exporter-side
period, not a reset on read): reading does not reset them, so several scrapers of one exporter all see the same peak, and
a window with no request reads 0.
``diffusion_gpu_memory_total_bytes`` and the SLO and baseline gauges are created only once known (a
total or SLO of 0 would make the ratio alerts fire).

``prometheus_client`` is imported when an Exporter is made, not when this module is imported.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from diffbench.metrics.names import BY_NAME, CANCEL_REASONS, OUTCOMES, TRAFFIC, MetricSpec
from diffbench.metrics.shapes import ShapeAllowlist

if TYPE_CHECKING:
    from diffbench.engines.base import EngineInfo, MemoryStats, StageTimes
    from diffbench.engines.instrument.signals import RequestSignals
    from diffbench.monitor.calibration import Calibration

STATUS_OF = {
    "ok": 200,
    "rejected": 429,
    "oom": 507,
    "timeout": 504,
    "error": 500,
    "cancelled": 499,
    "invalid": 400,
    "not_found": 404,
    "unavailable": 503,
}
"""The HTTP status each outcome is zero-initialised with (``cancelled``: 499, nginx's "client closed
request": the client went away before an answer). Other statuses (405, 413 …) appear when they happen."""

EXPORTED_TRAFFIC = ("user", "probe")
MEASURED_STAGES = ("text_encode", "denoise", "vae_decode")
"""Stages an engine's :class:`~diffbench.engines.base.StageTimes` measures; ``postprocess`` (the service's
image encoding) is observed by :meth:`Exporter.observe_stage`."""
ENGINE_STAGES = MEASURED_STAGES + ("other",)
"""Stage durations exported from ``StageTimes``: ``other`` = total − the three, so the stage means add up to the
engine's service time (without it ~11 % of tiny-flux's service time was missing from /metrics)."""
SERVICE_STAGES = ENGINE_STAGES + ("postprocess",)


def _pkg(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "none"


class _Peaks:
    """Per key, the maximum over the values recorded in the last ``window_s`` seconds. Thread-safe.

    Reading does not reset anything, so every scraper (two Prometheus servers, ``doctor --metrics``,
    ``load --scrape``) sees the same value: an exporter-side fixed period (a reset on read would split the
    peaks between them). A peak
    stays visible for ``window_s`` after the request that made it, longer than any sane scrape interval;
    alerts still take ``max_over_time`` over their own window.
    """

    def __init__(self, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._window = window_s
        self._clock = clock
        self._values: dict[tuple[str, ...], deque[tuple[float, float]]] = {}

    def update(self, key: tuple[str, ...], value: float) -> None:
        with self._lock:
            q = self._values.setdefault(key, deque())
            now = self._clock()
            self._prune(q, now)  # bounded without any reader: a service nobody scrapes keeps one window
            q.append((now, float(value)))

    def read(self, key: tuple[str, ...]) -> float:
        with self._lock:
            q = self._values.get(key)
            if not q:
                return 0.0
            self._prune(q, self._clock())
            return max((v for _, v in q), default=0.0)

    def _prune(self, q: deque[tuple[float, float]], now: float) -> None:
        oldest = now - self._window
        while q and q[0][0] < oldest:
            q.popleft()


class NoCreatedCollector:
    """A collector that re-exports an inner registry without ``_created`` samples."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def collect(self) -> Iterator[Any]:
        for family in self.inner.collect():
            family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield family


class Exporter:
    """Counters, histograms and gauges of one diffusion service (see module docstring).

    Args:
        model: the ``model`` label (the served model id).
        shapes: the shape allowlist (labels as :func:`diffbench.metrics.shapes.shape_label` writes them);
            ``other`` is added.
        gpus: ``gpu`` label values (``"0"`` for cuda:0, ``"cpu"``); a device reported by a request that
            is not listed is added when it first reports.
        caches: ``cache`` label values (``fbcache``, ``teacache`` …) of the step caches the service runs.
        ranks: ranks of a distributed run (``rank`` label); empty on one device.
        probes: quality probe names; when given, the ``diffusion_quality_*`` families are registered here
            too (normally the probe exports them itself, see ``diffbench probe``).
        registry: a ``CollectorRegistry`` to register into (default: a new one). The exporter adds one
            collector to it.
        peak_window_s: memory peaks are the maximum over requests finished in the last this many seconds
            (default 60).
        clock: monotonic clock in seconds for the peak window (tests inject one).
    """

    def __init__(
        self,
        model: str,
        shapes: Sequence[str],
        *,
        gpus: Sequence[str] = ("cpu",),
        caches: Sequence[str] = (),
        ranks: Sequence[int] = (),
        probes: Sequence[str] = (),
        registry: Any = None,
        peak_window_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from prometheus_client import CollectorRegistry

        self.model = model
        self.allowlist = ShapeAllowlist([s for s in shapes if s != "other"])
        self.gpus = list(dict.fromkeys(gpus))
        self.caches = tuple(dict.fromkeys(caches))
        self.ranks = tuple(dict.fromkeys(ranks))
        self.probes = tuple(dict.fromkeys(probes))
        self._inner = CollectorRegistry(auto_describe=True)
        self.registry = registry if registry is not None else CollectorRegistry()
        self.registry.register(NoCreatedCollector(self._inner))
        self._peaks = _Peaks(peak_window_s, clock)
        self._lock = threading.Lock()
        self._queue_source: Callable[[], tuple[int, int, float | None]] | None = None
        self._slo_override: float | None = None
        self.calibration: Calibration | None = None
        self.m: dict[str, Any] = {}
        for spec in BY_NAME.values():
            if spec.name.startswith("diffusion_quality_") and not self.probes:
                continue
            self.m[spec.name] = self._make(spec)
        self._zero_init()
        self._build_info(gpu_model="none")

    # -- construction --------------------------------------------------------------------------------
    def _make(self, spec: MetricSpec) -> Any:
        from prometheus_client import Counter, Gauge, Histogram

        if spec.kind == "counter":
            return Counter(spec.name, spec.help, spec.labels, registry=self._inner)
        if spec.kind == "histogram":
            return Histogram(spec.name, spec.help, spec.labels, buckets=spec.buckets, registry=self._inner)
        return Gauge(spec.name, spec.help, spec.labels, registry=self._inner)

    def _zero_init(self) -> None:
        m, model = self.m, self.model
        for traffic in EXPORTED_TRAFFIC:
            for outcome in OUTCOMES:
                m["diffusion_requests"].labels(model, outcome, str(STATUS_OF[outcome]), traffic)
            for shape in self.allowlist.all:
                m["diffusion_request_duration_seconds"].labels(model, shape, traffic)
        for shape in self.allowlist.all:
            for outcome in OUTCOMES:
                m["diffusion_shape_requests"].labels(model, shape, outcome)
        for shape in self.allowlist.all:
            for stage in SERVICE_STAGES:
                m["diffusion_stage_duration_seconds"].labels(model, shape, stage)
            m["diffusion_denoise_step_duration_seconds"].labels(model, shape)
            for cache in self.caches:
                m["diffusion_cache_lookups"].labels(model, shape, cache)
                m["diffusion_cache_hits"].labels(model, shape, cache)
        m["diffusion_queue_wait_seconds"].labels(model)
        for reason in CANCEL_REASONS:
            m["diffusion_cancelled_seconds"].labels(model, reason)
        m["diffusion_cancel_release_seconds"].labels(model)
        for name in ("diffusion_queue_depth", "diffusion_requests_running", "diffusion_queue_estimated_wait_seconds"):
            m[name].labels(model).set_function(self._queue_reader(name))
        m["diffusion_compile_recompiles"].labels(model)
        for rank in self.ranks:
            m["diffusion_rank_step_compute_seconds"].labels(model, str(rank))
        for gpu in self.gpus:
            self._add_gpu(gpu)
        for stage in MEASURED_STAGES:
            m["diffusion_stage_memory_peak_bytes"].labels(model, stage).set_function(
                lambda stage=stage: self._peaks.read(("stage", stage))
            )
        if self.probes:
            for probe in self.probes:
                for outcome in ("ok", "error"):
                    m["diffusion_quality_probe_runs"].labels(model, probe, outcome)

    def _add_gpu(self, gpu: str) -> None:
        m = self.m
        m["diffusion_gpu_memory_peak_bytes"].labels(gpu).set_function(lambda: self._peaks.read(("reserved", gpu)))
        m["diffusion_gpu_memory_peak_allocated_bytes"].labels(gpu).set_function(
            lambda: self._peaks.read(("allocated", gpu))
        )
        m["diffusion_model_flops"].labels(self.model, gpu)
        if gpu not in self.gpus:
            self.gpus.append(gpu)

    def _queue_reader(self, name: str) -> Callable[[], float]:
        index = {"diffusion_queue_depth": 0, "diffusion_requests_running": 1}.get(name, 2)

        def read() -> float:
            source = self._queue_source
            if source is None:
                return 0.0
            depth, running, est = source()
            if index < 2:
                return float((depth, running)[index])
            if est is None:  # no prediction yet: 0 when idle (the true wait), else unknown
                return 0.0 if depth == 0 and running == 0 else math.nan
            return float(est)

        return read

    def _build_info(self, gpu_model: str) -> None:
        torch = sys.modules.get("torch")
        cuda = getattr(getattr(torch, "version", None), "cuda", None) if torch is not None else None
        g = self.m["diffusion_build_info"]
        g.clear()
        from diffbench import __version__

        g.labels(__version__, _pkg("torch"), cuda or "none", gpu_model).set(1)

    # -- labels --------------------------------------------------------------------------------------
    def shape_label(self, width: int, height: int, frames: int | None = None, batch: int = 1) -> str:
        """The exported ``shape`` of a request: its label when allowlisted, else ``other``."""
        return self.allowlist.classify(width, height, frames, batch)

    def _shape(self, shape: str) -> str:
        return shape if shape in self.allowlist.all else "other"

    @staticmethod
    def _check_traffic(traffic: str) -> None:
        if traffic not in TRAFFIC:
            raise ValueError(f"traffic {traffic!r}: one of {', '.join(TRAFFIC)}")

    # -- observations --------------------------------------------------------------------------------
    def observe_request(
        self, *, shape: str, outcome: str, status: int, duration_s: float | None, traffic: str = "user"
    ) -> None:
        """One finished request: +1 on ``diffusion_requests_total{outcome, status, traffic}`` (and, for user
        traffic, on ``diffusion_shape_requests_total{shape, outcome}``) and, when
        ``duration_s`` (arrival → response ready, seconds) is given, one observation of the request
        duration histogram. ``warmup`` traffic is not exported.

        Raises:
            ValueError: an outcome not in :data:`~diffbench.metrics.names.OUTCOMES` or an unknown traffic.
        """
        self._check_traffic(traffic)
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome {outcome!r}: one of {', '.join(OUTCOMES)}")
        if traffic == "warmup":
            return
        self.m["diffusion_requests"].labels(self.model, outcome, str(int(status)), traffic).inc()
        if traffic == "user":
            self.m["diffusion_shape_requests"].labels(self.model, self._shape(shape), outcome).inc()
        if duration_s is not None:
            self.m["diffusion_request_duration_seconds"].labels(self.model, self._shape(shape), traffic).observe(
                duration_s
            )

    def observe_cancelled(self, *, reason: str, spent_s: float, release_s: float | None) -> None:
        """One generation whose answer nobody took: ``spent_s`` device seconds (start on the device to the
        worker released; 0 for one dropped while queued) on ``diffusion_cancelled_seconds_total{reason}``
        and, when it was running at the cancel, ``release_s`` (cancel to release, seconds) in
        ``diffusion_cancel_release_seconds``. Device time is physical: every traffic class counts.

        Raises:
            ValueError: a reason not in :data:`~diffbench.metrics.names.CANCEL_REASONS`.
        """
        if reason not in CANCEL_REASONS:
            raise ValueError(f"cancel reason {reason!r}: one of {', '.join(CANCEL_REASONS)}")
        self.m["diffusion_cancelled_seconds"].labels(self.model, reason).inc(max(0.0, spent_s))
        if release_s is not None:
            self.m["diffusion_cancel_release_seconds"].labels(self.model).observe(max(0.0, release_s))

    def observe_queue_wait(self, seconds: float, *, traffic: str = "user") -> None:
        """One observed wait (seconds) from admission to start on the device (user traffic only)."""
        self._check_traffic(traffic)
        if traffic == "user":
            self.m["diffusion_queue_wait_seconds"].labels(self.model).observe(max(0.0, seconds))

    def observe_stage(self, *, shape: str, stage: str, seconds: float, traffic: str = "user") -> None:
        """One stage duration measured by the service itself (e.g. ``postprocess``: image encoding)."""
        self._check_traffic(traffic)
        if traffic == "user":
            self.m["diffusion_stage_duration_seconds"].labels(self.model, self._shape(shape), stage).observe(seconds)

    def observe_generation(
        self,
        *,
        shape: str,
        stages: StageTimes | None,
        memory: MemoryStats | None,
        signals: RequestSignals | None,
        traffic: str = "user",
    ) -> None:
        """What one finished generation measured (see the module docstring for what each traffic class
        feeds). ``shape`` is the exported label (:meth:`shape_label`; anything else counts as ``other``)."""
        self._check_traffic(traffic)
        if traffic == "warmup":
            return
        m, model, label = self.m, self.model, self._shape(shape)
        user = traffic == "user"
        if user and stages is not None:
            for stage, value in zip(
                ENGINE_STAGES, (stages.text_encode_s, stages.denoise_s, stages.vae_decode_s, stages.other_s),
                strict=True,
            ):
                m["diffusion_stage_duration_seconds"].labels(model, label, stage).observe(value)
            step = m["diffusion_denoise_step_duration_seconds"].labels(model, label)
            for s in stages.step_s:
                step.observe(s)
        gpu = signals.device if signals is not None else (self.gpus[0] if self.gpus else "cpu")
        if gpu not in self.gpus:
            with self._lock:
                if gpu not in self.gpus:
                    self._add_gpu(gpu)
        if memory is not None:
            reserved = memory.peak_reserved_bytes if memory.peak_reserved_bytes is not None else memory.peak_allocated_bytes
            allocated = memory.peak_allocated_bytes
            if reserved is not None:
                self._peaks.update(("reserved", gpu), reserved)
            if allocated is not None:
                self._peaks.update(("allocated", gpu), allocated)
            peak = allocated if allocated is not None else reserved
            if memory.peak_stage in MEASURED_STAGES and peak is not None:
                self._peaks.update(("stage", memory.peak_stage), peak)
        if signals is None:
            return
        if signals.device_total_bytes:
            self.set_device_total(gpu, signals.device_total_bytes)
        if signals.recompiles:
            m["diffusion_compile_recompiles"].labels(model).inc(signals.recompiles)
        if signals.flops:
            m["diffusion_model_flops"].labels(model, gpu).inc(signals.flops)
        if user and signals.cache is not None:
            c = signals.cache
            m["diffusion_cache_lookups"].labels(model, label, c.cache).inc(c.lookups)
            m["diffusion_cache_hits"].labels(model, label, c.cache).inc(c.hits)
        if user:
            for rank, times in signals.rank_compute_s.items():
                h = m["diffusion_rank_step_compute_seconds"].labels(model, str(rank))
                for t in times:
                    h.observe(t)

    def enable_adapters(self, names: list[str] | tuple[str, ...]) -> None:
        """Create ``diffusion_adapter_swaps_total{adapter}`` at 0 for each loaded LoRA adapter and ``none``,
        and the swap-time histogram (a service without adapters exports no sample of either)."""
        for name in (*names, "none"):
            self.m["diffusion_adapter_swaps"].labels(self.model, name)
        self.m["diffusion_adapter_swap_duration_seconds"].labels(self.model)

    def observe_adapter(self, adapter: str | None, swap_s: float) -> None:
        """One request on a service with adapters: a swap (``swap_s`` > 0) to ``adapter`` (None: the base
        model) is counted and its duration observed; a request whose adapter was already active adds nothing."""
        if swap_s > 0:
            self.m["diffusion_adapter_swaps"].labels(self.model, adapter or "none").inc()
            self.m["diffusion_adapter_swap_duration_seconds"].labels(self.model).observe(swap_s)

    def enable_energy(self, gpu: str) -> None:
        """Create ``diffusion_energy_joules_total{gpu}`` at 0: the service reads an energy counter on ``gpu``
        (without this call the family has no sample: no counter is readable, and no 0 pretends otherwise)."""
        self.m["diffusion_energy_joules"].labels(self.model, gpu)

    def observe_energy(self, gpu: str, joules: float) -> None:
        """Add one generation's energy (joules, read from the device's counter) to
        ``diffusion_energy_joules_total{gpu}``; a negative reading (a counter reset) adds nothing."""
        self.m["diffusion_energy_joules"].labels(self.model, gpu).inc(max(0.0, float(joules)))

    def observe_probe(
        self, *, probe: str, psnr_db: float | None, ssim: float | None, timestamp_s: float, interval_s: float,
        ok: bool = True,
    ) -> None:
        """One finished quality probe (only when the exporter was made with ``probes``)."""
        if not self.probes:
            raise ValueError("this exporter was made without probes; pass probes=(...) to export quality series")
        m, model = self.m, self.model
        m["diffusion_quality_probe_runs"].labels(model, probe, "ok" if ok else "error").inc()
        if psnr_db is not None:
            m["diffusion_quality_psnr_decibels"].labels(model, probe).set(psnr_db)
        if ssim is not None:
            m["diffusion_quality_ssim_ratio"].labels(model, probe).set(ssim)
        m["diffusion_quality_probe_timestamp_seconds"].labels(model, probe).set(timestamp_s)
        m["diffusion_quality_probe_interval_seconds"].labels(model, probe).set(interval_s)

    # -- state ---------------------------------------------------------------------------------------
    def set_queue_source(self, fn: Callable[[], tuple[int, int, float | None]]) -> None:
        """``fn() -> (queue depth, running, estimated wait in seconds or None)``, read at every scrape."""
        self._queue_source = fn

    def set_device_total(self, gpu: str, total_bytes: int) -> None:
        """``diffusion_gpu_memory_total_bytes{gpu}``: the device capacity (or an injected budget), bytes."""
        self.m["diffusion_gpu_memory_total_bytes"].labels(gpu).set(total_bytes)

    def set_slo(self, seconds: float) -> None:
        """``diffusion_latency_slo_seconds``; wins over a calibration file's ``slo_s``."""
        if not (seconds > 0 and math.isfinite(seconds)):
            raise ValueError(f"SLO {seconds!r}: must be a finite number of seconds > 0")
        self._slo_override = seconds
        self.m["diffusion_latency_slo_seconds"].labels(self.model).set(seconds)

    def set_deployment(self, info: EngineInfo, fingerprint: str, *, vae_tiling: bool | None = None) -> None:
        """``diffusion_deployment_info`` (value 1) from the engine's conditions and the fingerprint id;
        ``diffusion_build_info``'s ``gpu_model`` from the device."""
        g = self.m["diffusion_deployment_info"]
        g.clear()
        tiling = "unknown" if vae_tiling is None else str(vae_tiling).lower()
        g.labels(self.model, fingerprint, info.dtype, info.cache, str(info.compile).lower(), tiling,
                 info.attention_backend).set(1)
        gpu_model = info.details.get("gpu_model") or ("none" if not info.device.startswith("cuda") else "unknown")
        torch = sys.modules.get("torch")
        if info.device.startswith("cuda") and torch is not None:
            with contextlib.suppress(Exception):  # a label, never a failure
                gpu_model = torch.cuda.get_device_name(info.device)
        self._build_info(gpu_model)

    def set_startup(self, seconds: dict[str, float]) -> None:
        """``diffusion_startup_duration_seconds{phase}`` for each phase measured (keys from
        :data:`~diffbench.metrics.names.STARTUP_PHASES`; a phase that was not measured is not exported).

        Raises:
            ValueError: an unknown phase or a negative/non-finite duration.
        """
        from diffbench.metrics.names import STARTUP_PHASES

        g = self.m["diffusion_startup_duration_seconds"]
        for phase, value in seconds.items():
            if phase not in STARTUP_PHASES or not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"start-up phase {phase!r} = {value!r}: phases are {STARTUP_PHASES}, seconds >= 0")
            g.labels(self.model, phase).set(value)

    def load_calibration(self, cal: Calibration) -> None:
        """Publish a calibration as gauges: SLO (unless :meth:`set_slo` set one), per-shape step and stage
        baselines, cache hit-ratio baselines (never 0: the file cannot hold one), ``diffusion_baseline_info``.
        Shapes not on the allowlist are skipped (their live series are ``other``)."""
        m, model = self.m, self.model
        self.calibration = cal
        if cal.slo_s is not None and self._slo_override is None:
            m["diffusion_latency_slo_seconds"].labels(model).set(cal.slo_s)
        for name in ("diffusion_denoise_step_baseline_seconds", "diffusion_stage_baseline_seconds",
                     "diffusion_cache_hit_ratio_baseline", "diffusion_baseline_info"):
            m[name].clear()
        for shape, b in cal.shapes.items():
            if shape not in self.allowlist.labels:
                continue
            m["diffusion_denoise_step_baseline_seconds"].labels(model, shape).set(b.step_s)
            if b.stages is not None:
                for stage in MEASURED_STAGES:
                    m["diffusion_stage_baseline_seconds"].labels(model, shape, stage).set(getattr(b.stages, stage))
            if b.cache_hit_ratio:
                m["diffusion_cache_hit_ratio_baseline"].labels(model, shape).set(b.cache_hit_ratio)
        m["diffusion_baseline_info"].labels(model, cal.fingerprint_id).set(1)
        if self.probes:
            for probe, t in cal.probes.items():
                if probe in self.probes:
                    m["diffusion_quality_psnr_threshold_decibels"].labels(model, probe).set(t.psnr_threshold_db)

    # -- output --------------------------------------------------------------------------------------
    def render(self) -> tuple[bytes, str]:
        """(body, content type) of this exporter's registry in the Prometheus text format (0.0.4).

        Reading resets the memory peaks (see module docstring)."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def registered(self) -> frozenset[str]:
        """Family names this exporter registers (counters without ``_total``)."""
        return frozenset(self.m)
