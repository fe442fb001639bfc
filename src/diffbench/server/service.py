"""The state one reference service holds: engine, worker, seed generator, exporter, video jobs."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from diffbench.core.clock import process_start_unix
from diffbench.engines.base import Engine, EngineInfo, GenerationRequest
from diffbench.engines.cancel import Cancelled, CancelToken
from diffbench.engines.instrument.energy import EnergyMeter, Unavailable, meter_for
from diffbench.monitor.exporter import Exporter
from diffbench.server.capabilities import ParameterUse
from diffbench.server.config import ServerConfig
from diffbench.server.http_errors import CANCELLED_STATUS, TIMEOUT_STATUS, APIError, from_generation_error
from diffbench.server.schemas import GenerationStats, StageDurations
from diffbench.server.worker import DeviceWorker, Done, Overloaded, ShuttingDown

# EngineConfig.cache axis -> the exporter's ``cache`` label (RequestSignals.CacheCounts.cache)
CACHE_LABELS = {"first-block": "fbcache", "taylorseer": "taylorseer", "magcache": "magcache",
                "fastercache": "fastercache", "pab": "pab", "teacache": "teacache"}


def gpu_label(device: str) -> str:
    """The ``gpu`` label of a device string: ``"0"`` for cuda / cuda:0, else the device (cpu, mps, sim)."""
    if device.startswith("cuda"):
        return device.partition(":")[2] or "0"
    return device

_MIB = 2**20
CANCEL_GRACE_S = 5.0
"""Seconds :meth:`Service.stop` waits, after the drain time, for the generation it cancelled to reach its next
denoising step (a long VAE decode may hold it longer: it is then abandoned to process exit)."""


@dataclass
class Service:
    """Created by the app factory; started by the app's lifespan (engine load happens there)."""

    config: ServerConfig
    engine: Engine
    info: EngineInfo | None = None
    worker: DeviceWorker | None = None
    exporter: Exporter | None = None
    use: ParameterUse | None = None
    fingerprint: dict[str, object] = field(default_factory=dict)
    fingerprint_id: str = ""
    calibration_differences: list[str] = field(default_factory=list)
    engine_started: bool = False
    energy: EnergyMeter | None = None
    """The device's energy counter (made by :meth:`prepare`; its reads may be ``Unavailable``)."""
    started_unix: int = field(default_factory=lambda: int(time.time()))
    _rng: np.random.Generator = field(init=False)
    _rng_lock: threading.Lock = field(default_factory=threading.Lock)
    _drain_deadline: float | None = None
    _warmed: bool = False
    startup_s: dict[str, float] = field(default_factory=dict)
    """Start-up durations by phase (``load``, ``warmup``, ``ready``; seconds), exported at start."""

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.config.seed)

    # -- lifecycle ----------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Load the engine (blocking), inspect its pipeline and check the configured sizes against it.

        Idempotent. Raises UsageError for a ``--default-size``/``--warmup``/``--default-steps`` the
        service would refuse (see :func:`diffbench.server.validation.check_startup`).
        """
        from diffbench.server.capabilities import parameter_use
        from diffbench.server.validation import check_startup

        if self.use is not None:
            return
        t0 = time.perf_counter()
        self.info = self.engine.info() if self.engine_started else self.engine.start()
        if not self.engine_started:
            self.startup_s["load"] = time.perf_counter() - t0
        self.use = parameter_use(self.engine)
        check_startup(self.config, self.engine, self.default_steps, self.default_frames())
        self._fingerprint()
        if self.energy is None:
            self.energy = meter_for(self.info.engine, self.info.device)

    @property
    def energy_note(self) -> str:
        """``energy: <source> (<scope>)`` or ``energy: not available: <reason>`` (the serve startup line)."""
        got = self.energy.read() if self.energy is not None else Unavailable("the engine is not started")
        if isinstance(got, Unavailable):
            return f"energy: {got}"
        assert self.energy is not None
        return f"energy: {self.energy.source} ({self.energy.scope}) -> diffusion_energy_joules_total"

    def _fingerprint(self) -> None:
        """The running deployment's fingerprint, and how a loaded calibration's differs from it."""
        from diffbench.core.env import capture_env
        from diffbench.engines.fingerprint import deployment_fingerprint, fingerprint_diff
        from diffbench.monitor.calibration import fingerprint_id

        assert self.info is not None
        self.fingerprint = deployment_fingerprint(self.info, capture_env())
        self.fingerprint_id = fingerprint_id(self.fingerprint)
        cal = self.config.calibration
        if cal is not None:
            self.calibration_differences = fingerprint_diff(cal.fingerprint, self.fingerprint)

    def start(self) -> None:
        """:meth:`prepare`, run the warmups (not exported), mark the instrumentation warm (recompiles after
        this are exported), make the exporter and start the device worker."""
        from diffbench.server.admission import ServiceTimeModel, calibrated_baseline

        self.prepare()
        self.warm_up()
        for obj in (self.engine, getattr(self.engine, "timer", None)):
            mark = getattr(obj, "mark_warm", None)
            if callable(mark):
                mark()
        cal = self.config.calibration
        model = ServiceTimeModel(baseline=calibrated_baseline(cal) if cal is not None else None)
        self.exporter = self._make_exporter()
        measured = self.energy is not None and not isinstance(self.energy.read(), Unavailable)
        gpu = gpu_label(self.info.device) if self.info is not None else "cpu"
        if measured:
            self.exporter.enable_energy(gpu)
        exporter = self.exporter
        self.worker = DeviceWorker(self.engine, model=model, energy=self.energy if measured else None,
                                   on_energy=lambda joules: exporter.observe_energy(gpu, joules))
        self.exporter.set_queue_source(self.worker.snapshot)
        self.worker.start()
        started = process_start_unix()
        if started is not None:
            self.startup_s["ready"] = max(0.0, time.time() - started)
        self.exporter.set_startup(self.startup_s)
        if self.config.engine.adapters:
            self.exporter.enable_adapters(tuple(self.config.engine.adapters))

    def _make_exporter(self) -> Exporter:
        from diffbench.server.validation import shape_allowlist

        assert self.info is not None
        cfg = self.config
        gpu = gpu_label(self.info.device)
        cache = cfg.engine.cache
        caches = [CACHE_LABELS.get(cache.partition("=")[0].strip(), cache.partition("=")[0].strip())] if cache else []
        exp = Exporter(self.info.model, shape_allowlist(cfg, self.default_frames()), gpus=[gpu], caches=caches)
        exp.set_deployment(self.info, self.fingerprint_id, vae_tiling=cfg.engine.vae_tiling)
        if cfg.calibration is not None:
            exp.load_calibration(cfg.calibration)
        if cfg.slo_s is not None:
            exp.set_slo(cfg.slo_s)
        total = cfg.engine.memory_budget_bytes or self._device_total()
        if total:
            exp.set_device_total(gpu, total)
        return exp

    def _device_total(self) -> int | None:
        """Device memory capacity (bytes) of a CUDA engine when torch is already loaded; else None."""
        torch = sys.modules.get("torch")
        if self.info is None or torch is None or not self.info.device.startswith("cuda"):
            return None
        with contextlib.suppress(Exception):
            return int(torch.cuda.mem_get_info(self.info.device)[1])
        return None

    def refresh_deployment(self, *, vae_tiling: bool | None = None) -> None:
        """Re-read the engine's conditions after something changed them at run time (a fault route switching
        the cache or VAE tiling): the fingerprint, ``/v1/models`` and ``diffusion_deployment_info`` follow.
        ``vae_tiling``: the tiling now in effect (default: the configured one)."""
        self.info = self.engine.info()
        self._fingerprint()
        if self.exporter is not None:
            tiling = self.config.engine.vae_tiling if vae_tiling is None else vae_tiling
            self.exporter.set_deployment(self.info, self.fingerprint_id, vae_tiling=tiling)

    @property
    def metrics(self) -> Exporter | None:
        """The exporter (old name)."""
        return self.exporter

    def default_frames(self) -> int | None:
        """Frames of a video job that names neither seconds nor num_frames (None for an image model).

        The pipeline's own default when it declares one, else OpenAI's default of 4 s × ``default_fps``
        moved to the nearest count the engine accepts.
        """
        from diffbench.server.validation import nearest_valid_frames

        if self.info is None or not self.info.is_video:
            return None
        if self.use is not None and self.use.default_frames is not None:
            return self.use.default_frames
        wanted = 4 * self.config.default_fps
        probe = GenerationRequest(prompt="probe", width=64, height=64, steps=1)
        return nearest_valid_frames(self.engine, probe, wanted, self.config.limits.max_frames) or wanted

    def warm_up(self) -> None:
        """Run each warm-up request once (:func:`diffbench.server.warmup.warmup_requests`: the ``--warmup``
        sizes and, with them, every ``--shapes`` label at its batch and frames; sizes checked by
        :meth:`prepare`); not counted anywhere. Idempotent: the CLI calls it before serving, so a failing
        warmup is a one-line error, and :meth:`start` then skips it.

        Raises:
            UsageError: a warmup ran out of memory (e.g. under ``--memory-budget``): the service would
                fail that shape on every request, so it refuses to start, naming the shape and the flags.
        """
        from diffbench.errors import DeviceOutOfMemory, UsageError
        from diffbench.server.warmup import warmup_requests

        if self._warmed:
            return

        t0 = time.perf_counter()
        requests = warmup_requests(self.config, self.engine, self.default_steps, self.default_frames())
        for req in requests:
            try:
                self.engine.generate(req)
                self.engine.sync()
            except DeviceOutOfMemory as exc:
                raise UsageError(
                    f"--warmup {req.width}x{req.height}{f' (batch {req.batch})' if req.batch > 1 else ''}: the "
                    f"warmup ran out of memory ({exc}); raise --memory-budget, enable --vae-tiling, or leave that "
                    "size out of --warmup / --shapes"
                ) from None
        if requests:
            self.startup_s["warmup"] = time.perf_counter() - t0
        self._warmed = True

    def begin_drain(self) -> None:
        """The server stops accepting work: from now, in-flight work has ``config.drain_s`` seconds."""
        if self._drain_deadline is None:
            self._drain_deadline = time.perf_counter() + self.config.drain_s

    def stop(self) -> None:
        """Stop the worker (queued requests fail with 503) and release the engine.

        Waits for the running generation at most until the drain deadline (``config.drain_s`` after
        :meth:`begin_drain`, or from now); a generation still running then is cancelled at its next
        denoising step (reason ``drain``: its wasted seconds are exported, the step log says where it
        stopped). One that reaches no step boundary within :data:`CANCEL_GRACE_S` is abandoned on its
        daemon thread and the engine is left to process exit.
        """
        if self._drain_deadline is None:
            self.begin_drain()
        assert self._drain_deadline is not None
        if self.worker is not None:
            self.worker.stop(timeout_s=max(0.0, self._drain_deadline - time.perf_counter()))
            if self.worker.running:
                self.worker.cancel_running("drain")
                self.worker.join(CANCEL_GRACE_S)
            if self.worker.running:
                return
        self.engine.stop()

    @property
    def ready(self) -> bool:
        return self.info is not None and self.worker is not None and self.worker.alive

    # -- per request helpers ------------------------------------------------------------------------
    def require_ready(self) -> tuple[EngineInfo, DeviceWorker]:
        if self.info is None or self.worker is None or not self.worker.alive:
            raise APIError(
                503,
                "the diffusion engine is not initialized; wait for GET /health to answer 200",
                code="unavailable",
            )
        return self.info, self.worker

    def check_model(self, name: str | None) -> str:
        """The served model id; raises 404 when ``name`` names another model."""
        info, _ = self.require_ready()
        if name is not None and name not in (info.model, self.config.engine.model):
            raise APIError(
                404,
                f"model: {name!r} is not served here; this service serves {info.model!r} "
                "(see GET /v1/models); send that id or omit model",
                param="model",
                code="model_not_found",
            )
        return info.model

    @property
    def default_steps(self) -> int:
        info = self.info
        return self.config.default_steps or (info.default_steps if info and info.default_steps else 8)

    def ignored(self, guidance: float | None, negative_prompt: str | None) -> list[str]:
        """Generation parameters given that the served pipeline will not use (see capabilities)."""
        return self.use.ignored(guidance, negative_prompt) if self.use is not None else []

    def pick_seed(self, seed: int | None) -> int:
        """The request's seed, or one drawn from the service's seeded generator (reported back)."""
        if seed is not None:
            return seed
        with self._rng_lock:
            return int(self._rng.integers(0, 2**31 - 1))

    def shape_of(self, request: GenerationRequest) -> str:
        """The exported ``shape`` label of a request (allowlisted, else ``other``)."""
        if self.exporter is None:
            return "other"
        return self.exporter.shape_label(request.width, request.height, request.frames, request.batch)

    def count(
        self,
        outcome: str,
        status: int,
        *,
        shape: str | None = None,
        duration_s: float | None = None,
        traffic: str = "user",
    ) -> None:
        """One ``diffusion_requests_total`` count (HTTP answers are counted by the CountOutcomes middleware)
        and, with ``duration_s``, one request-duration observation for ``shape``."""
        if self.exporter is not None:
            self.exporter.observe_request(
                shape=shape or "other", outcome=outcome, status=status, duration_s=duration_s, traffic=traffic
            )

    async def run(
        self,
        request: GenerationRequest,
        *,
        traffic: str = "user",
        arrival: float | None = None,
        disconnected: Callable[[], Awaitable[bool]] | None = None,
        until_disconnect: Callable[[], Awaitable[None]] | None = None,
    ) -> Done:
        """Admit, queue and wait for one generation. Raises APIError (429, 499, 503, 504, 507, 500).

        ``arrival`` (``perf_counter`` seconds) starts the ``request_timeout_s`` clock (default: now).
        A client that went away gets its queued request dropped, or its running generation cancelled at
        the next denoising step (outcome ``cancelled``, 499; the device seconds it spent are exported as
        wasted, reason ``disconnect``). ``until_disconnect`` returns when the client disconnects (awaited
        beside the generation, so the cancel follows at once); ``disconnected`` is polled every 0.1 s
        instead when it is not given. On timeout a queued request is dropped; a running one is not
        interrupted: it finishes on the device (its stage times are still exported) and its result is
        discarded. When the server cancels the waiting handler (shutdown after the drain time), the
        queued request is dropped, a running one cancelled at its next step (reason ``drain``), and the
        client gets a 503 instead of a reset connection.
        """
        _, worker = self.require_ready()
        start = time.perf_counter() if arrival is None else arrival
        token = CancelToken()
        try:
            fut = worker.submit(
                request, max_wait_s=self.config.max_wait_s, max_queue=self.config.max_queue, token=token
            )
        except Overloaded as exc:
            retry = exc.decision.retry_after_s or 1
            raise APIError(429, str(exc), code="overloaded", headers={"Retry-After": str(retry)}) from exc
        except ShuttingDown as exc:
            raise from_generation_error(exc) from exc
        wrapped = asyncio.wrap_future(fut)
        watcher = asyncio.ensure_future(until_disconnect()) if until_disconnect is not None else None
        timeout = self.config.request_timeout_s
        try:
            while True:
                left = None if timeout is None else start + timeout - time.perf_counter()
                step = 0.1 if disconnected is not None and watcher is None else None
                wait = left if step is None else (step if left is None else min(step, left))
                if wait is not None and wait <= 0:
                    self._abandon(fut, request, traffic)
                    worker.count_timeout()
                    raise APIError(
                        TIMEOUT_STATUS,
                        f"the generation ({self.shape_of(request)}) did not finish within the service's request "
                        f"timeout of {timeout:g} s from arrival; it was dropped if still queued (a running one "
                        "finishes on the device and is discarded)",
                        code="timeout",
                    )
                waiting = {wrapped} if watcher is None else {wrapped, watcher}
                done_set, _ = await asyncio.wait(waiting, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                if wrapped in done_set:
                    break
                gone = watcher is not None and watcher in done_set
                if gone or (watcher is None and disconnected is not None and await disconnected()):
                    self._cancel(fut, token, request, traffic, "disconnect")
                    wrapped.cancel()  # nobody reads its outcome here (the done callback exports it)
                    raise APIError(CANCELLED_STATUS, "the client disconnected before the answer", code="cancelled")
            done = wrapped.result()
        except asyncio.CancelledError:
            # a queued request never reaches the device; a running one stops at its next step
            self._cancel(fut, token, request, traffic, "drain")
            wrapped.cancel()
            raise APIError(
                503,
                "the service stopped (drain time over) before this generation finished; retry on another "
                "instance",
                code="unavailable",
            ) from None
        except APIError:
            raise
        except Exception as exc:
            self._observe_failed(exc, request, traffic)
            raise from_generation_error(exc) from exc
        finally:
            if watcher is not None:
                watcher.cancel()
        self.observe(done, request, traffic)
        return done

    def _cancel(
        self, fut: Future[Done], token: CancelToken, request: GenerationRequest, traffic: str, reason: str
    ) -> None:
        """Nobody takes this generation's answer: drop it while queued, else cancel it at its next step
        and export the device seconds it spent when the worker releases it (:meth:`observe_cancelled`)."""
        token.cancel(reason)
        if fut.cancel():
            return
        fut.add_done_callback(lambda f: self.observe_cancelled(f, token, request, traffic))

    def observe_cancelled(
        self, fut: Future[Done], token: CancelToken, request: GenerationRequest, traffic: str
    ) -> float | None:
        """Export a finished generation whose answer nobody took (``token`` cancelled): the device seconds it
        spent (stopped at a step, or run to the end when the cancel came after its last step: then its
        stage times are exported too) and the time from the cancel to the release. Returns those seconds
        (None when it failed otherwise, or was dropped while queued)."""
        if fut.cancelled() or token.reason is None:
            return None
        exc = fut.exception()
        if isinstance(exc, Cancelled):
            spent = exc.service_s or 0.0
        elif exc is None:
            done = fut.result()
            self.observe(done, request, traffic)
            spent = done.service_s
        else:
            return None
        if self.exporter is not None:
            self.exporter.observe_cancelled(reason=token.reason, spent_s=spent, release_s=token.release_s())
        return spent

    def _abandon(self, fut: Future[Done], request: GenerationRequest, traffic: str) -> None:
        """Drop a queued request; a running one finishes on the device and is observed then."""
        if fut.cancel():
            return

        def finished(f: Future[Done]) -> None:
            if not f.cancelled() and f.exception() is None:
                self.observe(f.result(), request, traffic)

        fut.add_done_callback(finished)

    def _observe_failed(self, exc: BaseException, request: GenerationRequest, traffic: str) -> None:
        """Export the memory and signals an engine measured for a failed generation (an OOM's peak is what
        ``DiffusionGPUPeakMemoryHigh`` must see); nothing when the error carries none."""
        memory, signals = getattr(exc, "memory", None), getattr(exc, "signals", None)
        if self.exporter is None or (memory is None and signals is None):
            return
        self.exporter.observe_generation(
            shape=self.shape_of(request), stages=None, memory=memory, signals=signals, traffic=traffic
        )

    def observe(self, done: Done, request: GenerationRequest | None = None, traffic: str = "user") -> None:
        """Export a finished generation: queue wait, stage and step times, memory, signals."""
        exp = self.exporter
        if exp is None:
            return
        exp.observe_queue_wait(done.queue_wait_s, traffic=traffic)
        res = done.result
        shape = self.shape_of(request) if request is not None else "other"
        exp.observe_generation(shape=shape, stages=res.stages, memory=res.memory, signals=res.signals, traffic=traffic)


def generation_stats(done: Done, edit: bool = False) -> GenerationStats:
    """Stage durations (seconds), service time and peak memory of a finished generation.

    ``edit``: an image-to-image request, whose ``image_encode`` stage (VAE encode of the input) is reported
    (0.0 when the engine measured none); a text-to-image answer leaves that key out."""
    st = done.result.stages
    mem = done.result.memory
    peak = mem.peak_allocated_bytes if mem is not None else None
    if mem is not None and peak is None:
        peak = mem.peak_reserved_bytes
    return GenerationStats(
        stage_durations=StageDurations(
            text_encode=st.text_encode_s if st else 0.0,
            image_encode=(st.image_encode_s if st else 0.0) if edit else None,
            denoise=st.denoise_s if st else 0.0,
            vae_decode=st.vae_decode_s if st else 0.0,
            other=st.other_s if st else 0.0,
            queue_wait=done.queue_wait_s,
            adapter_swap=done.result.extra.get("adapter_swap_s"),
        ),
        service_time_s=done.service_s,
        inference_time_s=done.service_s,
        peak_memory_mb=None if peak is None else peak / _MIB,
        peak_memory_bytes=peak,
        memory_kind=mem.kind if mem is not None else "none",
    )


def timing_headers(stats: GenerationStats) -> dict[str, str]:
    """``Server-Timing`` (W3C; ``dur`` in milliseconds) and ``X-Peak-Memory-Bytes`` headers."""
    sd = stats.stage_durations
    parts = [f"{name};dur={value * 1e3:.3f}" for name, value in sd.model_dump().items()]
    parts.append(f"service;dur={stats.service_time_s * 1e3:.3f}")
    headers = {"Server-Timing": ", ".join(parts)}
    if stats.peak_memory_bytes is not None:
        headers["X-Peak-Memory-Bytes"] = str(stats.peak_memory_bytes)
    return headers
