"""The reference service's FastAPI app: images API (generations; edits in :mod:`diffbench.server.edits`),
chat completions (vLLM-Omni form, :mod:`diffbench.server.chat`), video jobs, /health, /v1/models, /metrics.

``create_app(config)`` builds the app; the engine loads in the app's lifespan (uvicorn does not accept
connections before it finished, and ``GET /health`` answers 200 from then on). Status codes and error
bodies are listed in :mod:`diffbench.server.http_errors`; stage durations and peak memory travel in the
response body (``stage_durations``, ``peak_memory_mb``, ``peak_memory_bytes``) and in the
``Server-Timing`` / ``X-Peak-Memory-Bytes`` headers.
"""

# No ``from __future__ import annotations``: FastAPI reads the route annotations at runtime, and some
# of them (Request, Response) are imported inside create_app.
import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from diffbench.engines.base import Engine
from diffbench.engines.registry import create_engine
from diffbench.server.config import ServerConfig
from diffbench.server.files import FILES_PREFIX, ImageFiles
from diffbench.server.images import generate_pngs, image_data
from diffbench.server.schemas import (
    Health,
    ImageGenerationRequest,
    ImageResponse,
    ModelCard,
    ModelList,
    ignored_parameters,
)
from diffbench.server.service import Service, timing_headers
from diffbench.server.validation import refuse_stream, resolve_lora

if TYPE_CHECKING:
    from fastapi import FastAPI


def _realtime(config: ServerConfig) -> ServerConfig:
    """The service runs the simulated engine in real time: a virtual clock means nothing behind HTTP."""
    eng = config.engine
    if eng.engine != "sim" or eng.sim.realtime:
        return config
    sim = eng.sim.model_copy(update={"realtime": True})
    return config.model_copy(update={"engine": eng.model_copy(update={"sim": sim})})


def create_app(
    config: ServerConfig, engine: Engine | None = None, *, engine_started: bool = False
) -> "FastAPI":
    """Build the app over ``engine`` (default: ``create_engine(config.engine)``).

    The engine is started in the app's lifespan unless ``engine_started`` says the caller started it.
    A simulated engine made here always runs in real time (``SimParams.realtime`` is set to True).

    Raises:
        MissingDependencyError: FastAPI is not installed (``serve`` extra).
    """
    from diffbench.errors import require

    require("fastapi", "serve")
    from fastapi import FastAPI, Request, Response

    from diffbench.server.http_errors import CountOutcomes, install_handlers
    from diffbench.server.videos import install_video_routes

    if engine is None:
        engine = create_engine(_realtime(config).engine)
    service = Service(config=config, engine=engine, engine_started=engine_started)
    files = ImageFiles(config.url_ttl_s)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            await asyncio.to_thread(service.start)
        except Exception as exc:
            app.state.startup_error = f"{type(exc).__name__}: {exc}"
            raise
        try:
            yield
        finally:
            await asyncio.to_thread(service.stop)
            files.close()

    app = FastAPI(title="diffbench reference service", lifespan=lifespan)
    app.state.service = service
    app.state.image_files = files
    app.state.startup_error = None
    install_handlers(app)
    app.add_middleware(CountOutcomes, count=service.count)
    if config.enable_faults:
        _install_faults(app, service)

    @app.get("/health", response_model=Health)
    async def health(response: Response) -> Health:
        worker = service.worker
        queued, running, est = worker.snapshot() if worker else (0, 0, None)
        c = worker.counters if worker else None
        status = "ok" if service.ready else ("starting" if service.info is None else "unavailable")
        if status != "ok":
            response.status_code = 503
        return Health(
            status=status,
            model=service.info.model if service.info else None,
            engine=service.info.engine if service.info else None,
            queue_length=queued,
            running=running,
            estimated_wait_s=est,
            completed=c.completed if c else 0,
            failed=c.failed if c else 0,
            rejected=c.rejected if c else 0,
            timed_out=c.timed_out if c else 0,
        )

    @app.get("/v1/models", response_model=ModelList)
    async def models() -> ModelList:
        info, _ = service.require_ready()
        card = ModelCard(
            id=info.model,
            created=service.started_unix,
            engine=info.engine,
            engine_version=info.engine_version,
            pipeline_class=info.pipeline_class,
            device=info.device,
            dtype=info.dtype,
            is_video=info.is_video,
            default_steps=service.default_steps,
            gpus=1 if info.device.split(":")[0] == "cuda" else None,  # one engine, one device
            fingerprint_id=service.fingerprint_id,
            fingerprint=service.fingerprint,
        )
        return ModelList(data=[card])

    @app.get("/metrics")
    async def metrics() -> Response:
        if service.exporter is None:
            return Response("", media_type="text/plain", status_code=503)
        body, ctype = service.exporter.render()
        return Response(body, media_type=ctype)

    @app.post("/v1/images/generations", response_model=ImageResponse)
    async def generate_images(body: ImageGenerationRequest, request: Request, response: Response) -> ImageResponse:
        arrival = time.perf_counter()
        refuse_stream(body.stream)
        model = service.check_model(body.model)
        adapter, adapter_scale = resolve_lora(body.lora, service.config.engine.adapters)
        out = await generate_pngs(
            service, request, arrival=arrival, size=body.size, width=body.width, height=body.height,
            steps=body.num_inference_steps, seed=body.seed, prompt=body.prompt,
            negative_prompt=body.negative_prompt, guidance=body.guidance_scale, n=body.n, model=model,
            adapter=adapter, adapter_scale=adapter_scale,
        )
        response.headers.update(timing_headers(out.stats))
        return ImageResponse(
            created=int(time.time()),
            data=await image_data(request, out.pngs, body.response_format),
            model=model,
            size=f"{out.width}x{out.height}",
            num_inference_steps=out.steps,
            seed=out.seed,
            ignored_parameters=ignored_parameters(
                body, service.ignored(body.guidance_scale, body.negative_prompt)
            ),
            **out.stats.model_dump(),
        )

    @app.get(FILES_PREFIX + "/{name}")
    async def get_file(name: str) -> Response:
        data = await asyncio.to_thread(files.get, name)
        return Response(data, media_type="image/png")

    from diffbench.server.chat import install_chat_route
    from diffbench.server.edits import install_edit_route

    install_chat_route(app, service)
    install_edit_route(app, service)
    install_video_routes(app, service)
    return app


def _install_faults(app: "FastAPI", service: Service) -> None:
    """``serve --enable-faults``: the drill routes of :mod:`diffbench.server.faults` (``POST /admin/faults``)."""
    from diffbench.server.faults import install_fault_routes

    install_fault_routes(app, service)
