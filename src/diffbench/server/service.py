"""The state one reference service holds: engine, worker, seed generator, metrics, video jobs."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from diffbench.engines.base import Engine, EngineInfo, GenerationRequest
from diffbench.errors import DeviceOutOfMemory
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
    engine_started: bool = False
    started_unix: int = field(default_factory=lambda: int(time.time()))
    _rng: np.random.Generator = field(init=False)
    _rng_lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.config.seed)

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> None:
        """Load the engine (blocking) and start the device worker."""
        self.info = self.engine.info() if self.engine_started else self.engine.start()
        self._warm_up()
        self.worker = DeviceWorker(self.engine)
        self.worker.start()
        self.metrics = Metrics(self.info.model, self.worker.snapshot)

    def _warm_up(self) -> None:
        from diffbench.server.validation import parse_size

        for size in self.config.warmup_sizes:
            width, height = parse_size(size, "warmup_sizes")
            req = GenerationRequest(prompt="warmup", width=width, height=height, steps=self.default_steps)
            self.engine.validate(req)
            self.engine.generate(req)
            self.engine.sync()

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()
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

    def pick_seed(self, seed: int | None) -> int:
        """The request's seed, or one drawn from the service's seeded generator (reported back)."""
        if seed is not None:
            return seed
        with self._rng_lock:
            return int(self._rng.integers(0, 2**31 - 1))

    def count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.outcome(outcome)

    async def run(self, request: GenerationRequest) -> Done:
        """Admit, queue and wait for one generation. Raises APIError (429, 503, 507, 500)."""
        _, worker = self.require_ready()
        try:
            fut = worker.submit(request, max_wait_s=self.config.max_wait_s, max_queue=self.config.max_queue)
        except Overloaded as exc:
            self.count("rejected")
            retry = exc.decision.retry_after_s or 1
            raise APIError(429, str(exc), code="overloaded", headers={"Retry-After": str(retry)}) from exc
        except ShuttingDown as exc:
            raise from_generation_error(exc) from exc
        try:
            done = await asyncio.wrap_future(fut)
        except Exception as exc:
            self.count("oom" if isinstance(exc, DeviceOutOfMemory) else "error")
            raise from_generation_error(exc) from exc
        self.observe(done)
        return done

    def observe(self, done: Done) -> None:
        """Count an ok outcome and record its stage times and memory."""
        m = self.metrics
        if m is None:
            return
        m.outcome("ok")
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
