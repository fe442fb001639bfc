"""Configuration of the reference service (``diffbench serve``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from diffbench.engines.registry import EngineConfig
from diffbench.monitor.calibration import Calibration


class Limits(BaseModel):
    """Input bounds enforced before the engine's own :meth:`~diffbench.engines.base.Engine.validate`.

    Sizes are pixels; the engine may narrow them further (e.g. a multiple of 16 for a FLUX VAE with
    2×2 patches) and its :class:`~diffbench.errors.ShapeError` message is returned as a 400.
    Ranges for ``steps``, ``n`` and ``guidance_scale`` follow vLLM-Omni's images API (steps 1–200,
    n 1–10, guidance 0–20: the bounds of ``ImageGenerationRequest`` in vllm-project/vllm-omni
    ``vllm_omni/entrypoints/openai/protocol/images.py``). ``max_pixels`` bounds the work of one request
    (width × height × frames × n), so a single 4096² request cannot hold the device for minutes while
    admission control (which predicts queue waits, not a request's own run time) lets it in.
    """

    model_config = ConfigDict(frozen=True)

    min_side: int = Field(default=16, ge=1, description="smallest width/height, pixels")
    max_side: int = Field(default=4096, ge=1, description="largest width/height, pixels")
    size_multiple: int = Field(default=8, ge=1, description="width and height must be multiples of this")
    max_steps: int = Field(default=200, ge=1, description="serve --max-steps")
    max_n: int = Field(default=10, ge=1)
    max_frames: int = Field(default=257, ge=1)
    max_prompt_chars: int = Field(default=4000, ge=1)
    max_input_bytes: int = Field(
        default=20 * 2**20,
        ge=1,
        description="serve --max-input-mb: largest encoded input image (or mask) of an edit, bytes",
    )
    max_pixels: int | None = Field(
        default=None,
        ge=1,
        description="serve --max-pixels: largest width × height × frames × n of one request (None: no cap "
        "beyond max_side)",
    )


class ServerConfig(BaseModel):
    """Everything :func:`diffbench.server.app.create_app` needs.

    ``max_wait_s``: admission control rejects a request with 429 when its estimated queue wait (seconds)
    exceeds this; None disables the wait check. ``max_queue``: at most this many requests wait (not
    counting the one running); None for no cap. ``default_steps``: steps when a request gives none (None:
    the engine's default, else 8). ``seed``: seeds the generator that picks a seed for requests that give
    none (reported back in each response). ``warmup_sizes``: ``"WIDTHxHEIGHT"`` sizes generated once at
    startup (default steps, n=1; with them every ``shapes`` label at its batch and frames,
    :mod:`diffbench.server.warmup`) before ``/health`` turns 200, so first-call costs (compile, autotune,
    allocator growth) do not land in the first measured request (a warm-up at reduced steps or one frame
    leaves them there: sgl-project/sglang PR #29306; see docs/concepts/measurement-protocol.md); they
    are not counted in metrics nor in the admission estimate.

    Monitoring (``/metrics``, :mod:`diffbench.monitor.exporter`): ``shapes`` is the ``shape`` label
    allowlist (empty: the warmup sizes and the default size); ``calibration`` the loaded calibration file
    (baselines as gauges; its per-shape baselines also predict the queue wait); ``slo_s`` the latency SLO
    gauge (wins over the calibration's); ``request_timeout_s``: a request not finished this many seconds
    after arrival answers 504 ``timeout`` (a queued one is dropped; a running one cannot be interrupted and
    finishes on the device, its result discarded); ``enable_faults`` installs ``POST /admin/faults``
    (:mod:`diffbench.server.faults`) for drills; ``url_ttl_s``: seconds the images of a
    ``response_format="url"`` answer are served (:mod:`diffbench.server.files`).
    """

    model_config = ConfigDict(frozen=True)

    engine: EngineConfig = EngineConfig()
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    max_wait_s: float | None = Field(default=None, gt=0)
    max_queue: int | None = Field(default=None, ge=0)
    limits: Limits = Limits()
    default_size: str = "256x256"
    default_steps: int | None = Field(default=None, ge=1)
    default_fps: int = Field(default=16, ge=1, le=240)
    max_jobs: int = Field(
        default=1000, ge=1, description="video jobs kept in memory (oldest finished dropped)"
    )
    warmup_sizes: tuple[str, ...] = ()
    drain_s: float = Field(
        default=10.0,
        ge=0,
        description="serve --drain: on SIGINT/SIGTERM, seconds in-flight work may take to finish before "
        "the service answers it 503 and exits",
    )
    seed: int = 0
    log_level: str = "warning"
    shapes: tuple[str, ...] = ()
    calibration: Calibration | None = None
    slo_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    request_timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    enable_faults: bool = False
    url_ttl_s: float = Field(
        default=3600.0,
        gt=0,
        allow_inf_nan=False,
        description="serve --url-ttl: seconds a response_format=url image stays downloadable (then 404 expired)",
    )
