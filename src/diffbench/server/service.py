"""The state one reference service holds: engine, worker, seed generator, metrics, video jobs."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from diffbench.engines.base import Engine, EngineInfo, GenerationRequest
from diffbench.server.capabilities import ParameterUse
from diffbench.server.config import ServerConfig
from diffbench.server.http_errors import APIError, from_generation_error
from diffbench.server.metrics import Metrics
from diffbench.server.schemas import GenerationStats, StageDurations
from diffbench.server.worker import DeviceWorker, Done, Overloaded, ShuttingDown

_MIB = 2**20


@dataclass
class Service:
    """Created by the app factory; started by the app's lifespan (engine load happens there)."""

    config: ServerConfig
    engine: Engine
    info: EngineInfo | None = None
    worker: DeviceWorker | None = None
    metrics: Metrics | None = None
    use: ParameterUse | None = None
    engine_started: bool = False
    started_unix: int = field(default_factory=lambda: int(time.time()))
    _rng: np.random.Generator = field(init=False)
    _rng_lock: threading.Lock = field(default_factory=threading.Lock)
    _drain_deadline: float | None = None

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
        self.info = self.engine.info() if self.engine_started else self.engine.start()
        self.use = parameter_use(self.engine)
        check_startup(self.config, self.engine, self.default_steps, self.default_frames())

    def start(self) -> None:
        """:meth:`prepare`, run the warmups and start the device worker."""
        self.prepare()
        self._warm_up()
        self.worker = DeviceWorker(self.engine)
        self.worker.start()
        self.metrics = Metrics(self.info.model, self.worker.snapshot)

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

    def _warm_up(self) -> None:
        """Run each warmup size once (checked by :meth:`prepare`); not counted anywhere."""
        from diffbench.server.validation import parse_size

        frames = self.default_frames()
        for size in self.config.warmup_sizes:
            width, height = parse_size(size, "--warmup")
            req = GenerationRequest(
                prompt="warmup", width=width, height=height, frames=frames, steps=self.default_steps
            )
            self.engine.generate(req)
            self.engine.sync()

    def begin_drain(self) -> None:
        """The server stops accepting work: from now, in-flight work has ``config.drain_s`` seconds."""
        if self._drain_deadline is None:
            self._drain_deadline = time.perf_counter() + self.config.drain_s

    def stop(self) -> None:
        """Stop the worker (queued requests fail with 503) and release the engine.

        Waits for the running generation at most until the drain deadline (``config.drain_s`` after
        :meth:`begin_drain`, or from now); a generation still running then is abandoned on its daemon
        thread and the engine is left to process exit, so stopping never blocks past the drain time.
        """
        if self._drain_deadline is None:
            self.begin_drain()
        assert self._drain_deadline is not None
        if self.worker is not None:
            self.worker.stop(timeout_s=max(0.0, self._drain_deadline - time.perf_counter()))
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

    def count(self, outcome: str, status: int) -> None:
        """One ``diffusion_requests_total`` count (HTTP answers are counted by the CountOutcomes middleware)."""
        if self.metrics is not None:
            self.metrics.outcome(outcome, status)

    async def run(self, request: GenerationRequest) -> Done:
        """Admit, queue and wait for one generation. Raises APIError (429, 503, 507, 500).

        When the server cancels the waiting handler (shutdown after the drain time), the queued request
        is dropped and the client gets a 503 instead of a reset connection.
        """
        _, worker = self.require_ready()
        try:
            fut = worker.submit(request, max_wait_s=self.config.max_wait_s, max_queue=self.config.max_queue)
        except Overloaded as exc:
            retry = exc.decision.retry_after_s or 1
            raise APIError(429, str(exc), code="overloaded", headers={"Retry-After": str(retry)}) from exc
        except ShuttingDown as exc:
            raise from_generation_error(exc) from exc
        try:
            done = await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            fut.cancel()  # a queued request never reaches the device; a running one is abandoned
            raise APIError(
                503,
                "the service stopped (drain time over) before this generation finished; retry on another "
                "instance",
                code="unavailable",
            ) from None
        except Exception as exc:
            raise from_generation_error(exc) from exc
        self.observe(done)
        return done

    def observe(self, done: Done) -> None:
        """Record a finished generation's queue wait, stage times and memory."""
        m = self.metrics
        if m is None:
            return
        model = m.model
        m.queue_wait.labels(model).observe(done.queue_wait_s)
        st = done.result.stages
        if st is not None:
            for stage, value in (
                ("text_encode", st.text_encode_s),
                ("denoise", st.denoise_s),
                ("vae_decode", st.vae_decode_s),
            ):
                m.stage.labels(model, stage).observe(value)
        mem = done.result.memory
        if mem is not None and mem.peak_allocated_bytes is not None:
            m.peak_memory.labels(model).set(mem.peak_allocated_bytes)


def generation_stats(done: Done) -> GenerationStats:
    """Stage durations (seconds), service time and peak memory of a finished generation."""
    st = done.result.stages
    mem = done.result.memory
    peak = mem.peak_allocated_bytes if mem is not None else None
    if mem is not None and peak is None:
        peak = mem.peak_reserved_bytes
    return GenerationStats(
        stage_durations=StageDurations(
            text_encode=st.text_encode_s if st else 0.0,
            denoise=st.denoise_s if st else 0.0,
            vae_decode=st.vae_decode_s if st else 0.0,
            other=st.other_s if st else 0.0,
            queue_wait=done.queue_wait_s,
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
