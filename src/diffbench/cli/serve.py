"""``diffbench serve``: the reference service (images API + video jobs) over one engine, on loopback."""

from __future__ import annotations

import math
import re
import time
from typing import TYPE_CHECKING

import typer

from diffbench.cli.options import FUSE_PROJECTIONS_HELP, OFFLOAD_HELP, QUANTIZATION_HELP, pipeline_knobs
from diffbench.engines.knobs import parse_cache_spec

if TYPE_CHECKING:
    from diffbench.engines.config import EngineConfig, SimParams

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_BYTES = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_bytes(text: str, flag: str = "--memory-budget") -> int:
    """``"2GiB"`` → 2147483648. Decimal (kB, MB, GB, TB) and binary (KiB, MiB, GiB, TiB) suffixes; bytes
    without one.

    Raises:
        UsageError: not a number with a known suffix, or not > 0; the message names ``flag``.
    """
    from diffbench.errors import UsageError

    m = _BYTES.match(text)
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _UNITS:
        raise UsageError(f"{flag} {text!r}: not a size in bytes; give e.g. 2GiB, 512MiB or 1500000000")
    value = float(m.group(1)) * _UNITS[unit]
    if not (math.isfinite(value) and value >= 1):
        raise UsageError(f"{flag} {text!r}: must be at least 1 byte")
    return int(value)


def serve_engine_config(
    *,
    engine: str,
    model: str,
    device: str,
    dtype: str,
    sim: SimParams,
    attention_backend: str | None = None,
    offload: str = "none",
    quantization: str = "none",
    fuse_projections: bool = False,
    cache: str | None = None,
    compile_: bool = False,
    vae_tiling: bool = False,
    memory_budget: str | None = None,
    lora: list[str] | None = None,
) -> EngineConfig:
    """The engine ``serve`` runs, from its flags, checked before anything is loaded (device availability,
    the attention backend and where a quantization can run are checked when the engine starts).

    Raises:
        UsageError: an unknown engine, a bad ``--cache`` spec, an unknown ``--quantization`` or ``--offload``, a
            pipeline option on the sim engine, a bad ``--memory-budget``, or a ``--lora`` that is not
            ``NAME=DIR`` with a LoRA directory (:func:`~diffbench.engines.adapters.parse_adapters`).
    """
    from diffbench.engines.config import EngineConfig
    from diffbench.errors import UsageError

    if engine not in ("diffusers", "sim"):
        raise UsageError(f"--engine {engine!r} is not known; use diffusers or sim")
    cache_spec = parse_cache_spec(cache, engine) if cache is not None else None
    if engine == "sim":
        for flag, on in (("--compile", compile_), ("--vae-tiling", vae_tiling),
                         ("--attention-backend", attention_backend is not None)):
            if on:
                raise UsageError(f"{flag}: the sim engine has no denoiser or VAE to apply it to; use "
                                 "--engine diffusers")
    pipeline_knobs(engine, quantization, fuse_projections, offload)
    budget = parse_bytes(memory_budget) if memory_budget is not None else None
    from diffbench.engines.adapters import parse_adapters

    adapters = parse_adapters(lora or [])
    return EngineConfig(
        engine=engine,  # type: ignore[arg-type]
        model=model,
        device=device,
        dtype=dtype,
        sim=sim,
        attention_backend=attention_backend,
        offload=offload,  # type: ignore[arg-type]
        quantization=quantization,  # type: ignore[arg-type]
        fuse_projections=fuse_projections,
        cache=cache_spec,
        compile=compile_,
        vae_tiling=vae_tiling,
        memory_budget_bytes=budget,
        adapters=adapters,
    )


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(
        host: str = typer.Option("127.0.0.1", help="Address to bind (loopback by default)."),
        port: int = typer.Option(8000, min=0, max=65535, help="TCP port."),
        engine: str = typer.Option("diffusers", help="Engine: diffusers or sim (simulated device)."),
        model: str = typer.Option(
            "tiny-flux", help="Model: tiny-flux (embedded, offline), another tiny-* model, or a local path."
        ),
        device: str = typer.Option("cpu", help="Device for the diffusers engine, e.g. cpu or cuda:0."),
        dtype: str = typer.Option("float32", help="Weights dtype for the diffusers engine."),
        attention_backend: str | None = typer.Option(
            None, help="diffusers attention backend, e.g. native, flash, sage (diffusers engine)."
        ),
        offload: str = typer.Option("none", help=OFFLOAD_HELP),
        quantization: str = typer.Option("none", help=QUANTIZATION_HELP),
        fuse_projections: bool = typer.Option(False, "--fuse-projections", help=FUSE_PROJECTIONS_HELP),
        lora: list[str] = typer.Option(
            [], "--lora", help="A LoRA adapter loaded at start, NAME=DIR (repeat for more): a request activates "
            "it with the images API's lora field ({\"name\": NAME, \"scale\": 1.0}); swaps are timed and exported."),
        max_wait: float | None = typer.Option(
            None,
            "--max-wait",
            help="Reject (429 + Retry-After) when the estimated queue wait, "
            "seconds, exceeds this. Default: no limit.",
        ),
        max_queue: int | None = typer.Option(None, "--max-queue", min=0, help="At most N requests waiting."),
        default_size: str = typer.Option("256x256", help="Size when a request gives none (WIDTHxHEIGHT)."),
        default_steps: int | None = typer.Option(None, min=1, help="Steps when a request gives none."),
        max_side: int = typer.Option(4096, min=1, help="Largest width/height accepted, pixels."),
        size_multiple: int = typer.Option(8, min=1, help="Width and height must be multiples of this."),
        max_steps: int = typer.Option(200, min=1, help="Largest num_inference_steps accepted (else 400)."),
        max_pixels: int | None = typer.Option(
            None,
            "--max-pixels",
            min=1,
            help="Largest width × height × frames × n of one request (else 400). Bounds how long one "
            "request can hold the device; --max-wait does not. Default: no cap beyond --max-side.",
        ),
        max_frames: int = typer.Option(257, min=1, help="Largest num_frames accepted (else 400)."),
        max_n: int = typer.Option(10, min=1, help="Largest n (images per request) accepted."),
        max_prompt_chars: int = typer.Option(4000, min=1, help="Longest prompt accepted, characters."),
        max_input_mb: float = typer.Option(
            20.0, "--max-input-mb", help="Largest encoded input image (or mask) of an edit "
            "(POST /v1/images/edits, chat image_url), MiB (else 400)."
        ),
        sim_step_s: float | None = typer.Option(
            None,
            help="sim engine: seconds per denoising step at its reference size (diffbench.engines.sim).",
        ),
        sim_fail_above_pixels: int | None = typer.Option(
            None, min=1, help="sim engine: simulate out of memory above this many pixels (H*W*frames*n)."
        ),
        warmup: list[str] = typer.Option(
            [], "--warmup", help="Generate once at this WIDTHxHEIGHT before serving (repeatable); with --shapes, "
            "every declared shape is warmed too, at its batch size and frames (one request per warm-up key)."
        ),
        drain: float = typer.Option(
            10.0,
            "--drain",
            help="On Ctrl-C/SIGTERM: seconds in-flight requests may take before they answer 503 and the "
            "service exits; a generation still running then stops at its next denoising step.",
        ),
        seed: int = typer.Option(0, help="Seeds the generator that picks seeds for requests without one."),
        log_level: str = typer.Option("info", help="uvicorn log level."),
        cache: str | None = typer.Option(
            None, "--cache", help="Enable a diffusers step cache, AXIS=VALUE as sweep takes it (first-block=0.1)."
        ),
        compile_: bool = typer.Option(False, "--compile", help="torch.compile the denoiser (diffusers engine)."),
        vae_tiling: bool = typer.Option(
            False, "--vae-tiling/--no-vae-tiling", help="Decode with VAE tiling (less memory at large sizes)."
        ),
        memory_budget: str | None = typer.Option(
            None,
            "--memory-budget",
            help="Injected device memory budget (bytes; 2GiB, 512MiB ok): a request whose peak exceeds it fails "
            "as out of memory (507) and it is exported as the device total. For OOM drills on a CPU.",
        ),
        calibration: str | None = typer.Option(
            None,
            "--calibration",
            help="Calibration file (diffbench monitor calibrate): baselines, thresholds and SLO exported as "
            "gauges; its per-shape baselines predict the queue wait.",
        ),
        slo: float | None = typer.Option(
            None, "--slo", help="Latency SLO, seconds, exported as diffusion_latency_slo_seconds (wins over the file)."
        ),
        shapes: str | None = typer.Option(
            None,
            "--shapes",
            help="Shape label allowlist, comma-separated WxH, WxHfF (video) or WxHbB (batch), e.g. 256x256,512x512b2; "
            "other sizes are exported as shape=other. Default: --default-size and the --warmup sizes.",
        ),
        request_timeout: float | None = typer.Option(
            None,
            "--request-timeout",
            help="Seconds after arrival an image request may take; then 504 (outcome timeout). A queued one is "
            "dropped; a running one finishes on the device and is discarded (it cannot be interrupted).",
        ),
        url_ttl: float = typer.Option(
            3600.0,
            "--url-ttl",
            help="Seconds the images of a response_format=url answer stay downloadable at /v1/files/images/...; "
            "then 404 expired.",
        ),
        enable_faults: bool = typer.Option(
            False, "--enable-faults", help="Install POST /admin/faults (fault drills change settings at run time)."
        ),
        write_tokenizer: str | None = typer.Option(
            None,
            "--write-tokenizer",
            help="Write a tiny byte-level tokenizer (tokenizer.json + tokenizer_config.json) into DIR and exit, "
            "without serving: for AIPerf --tokenizer DIR offline.",
        ),
    ) -> None:
        """Serve POST /v1/images/generations, /v1/chat/completions (vLLM-Omni form), /v1/videos jobs, /health, /v1/models and /metrics."""
        if write_tokenizer is not None:
            from diffbench.server.tokenizer import write_tokenizer as write

            out = write(write_tokenizer)
            typer.echo(f"wrote a byte-level tokenizer to {out} (AIPerf: --tokenizer {out})")
            return
        from diffbench.engines.registry import SimParams
        from diffbench.errors import UsageError
        from diffbench.metrics.shapes import parse_shapes
        from diffbench.monitor.calibration import read_calibration
        from diffbench.server.config import Limits, ServerConfig
        from diffbench.server.validation import api_size

        numbers = (("--max-wait", max_wait, 0.001), ("--drain", drain, 0.0), ("--sim-step-s", sim_step_s, 0.0))
        for flag, value, low in numbers:
            if value is not None and not (math.isfinite(value) and value >= low):
                raise UsageError(f"{flag} {value}: must be a finite number >= {low:g} (seconds)")
        if not (math.isfinite(max_input_mb) and max_input_mb * 2**20 >= 1):
            raise UsageError(f"--max-input-mb {max_input_mb}: must be a finite number of MiB (at least 1 byte), "
                             "e.g. 20")
        for flag, value in (("--slo", slo), ("--request-timeout", request_timeout), ("--url-ttl", url_ttl)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise UsageError(f"{flag} {value}: must be a finite number of seconds > 0")
        sim = SimParams(realtime=True)
        if sim_step_s is not None or sim_fail_above_pixels is not None:
            sim = sim.model_copy(
                update={
                    "step_s": sim.step_s if sim_step_s is None else sim_step_s,
                    "fail_above_pixels": sim_fail_above_pixels,
                }
            )
        engine_config = serve_engine_config(
            engine=engine, model=model, device=device, dtype=dtype, sim=sim, attention_backend=attention_backend,
            offload=offload, quantization=quantization, fuse_projections=fuse_projections, cache=cache,
            compile_=compile_, vae_tiling=vae_tiling, memory_budget=memory_budget, lora=lora,
        )
        allowlist = parse_shapes(shapes) if shapes is not None else ()
        cal = read_calibration(calibration) if calibration is not None else None
        for flag, size in [("--default-size", default_size)] + [("--warmup", w) for w in warmup]:
            try:
                api_size(size, flag)
            except Exception as exc:
                raise UsageError(str(exc)) from exc
        config = ServerConfig(
            engine=engine_config,
            host=host,
            port=port,
            max_wait_s=max_wait,
            max_queue=max_queue,
            default_size=default_size,
            default_steps=default_steps,
            limits=Limits(
                max_side=max_side,
                size_multiple=size_multiple,
                max_steps=max_steps,
                max_pixels=max_pixels,
                max_frames=max_frames,
                max_n=max_n,
                max_prompt_chars=max_prompt_chars,
                max_input_bytes=int(max_input_mb * 2**20),
            ),
            warmup_sizes=tuple(warmup),
            drain_s=drain,
            seed=seed,
            log_level=log_level,
            shapes=allowlist,
            calibration=cal,
            slo_s=slo,
            request_timeout_s=request_timeout,
            enable_faults=enable_faults,
            url_ttl_s=url_ttl,
        )
        from diffbench.engines.registry import create_engine
        from diffbench.server.app import create_app
        from diffbench.server.runner import bind_socket, exit_now, make_server

        if host not in ("127.0.0.1", "localhost", "::1"):
            typer.secho(f"warning: binding {host}: the service has no authentication", fg="yellow", err=True)
        sock = bind_socket(host, port)  # a bad --host / busy --port fails here, before the model loads
        try:
            port = sock.getsockname()[1]
            eng = create_engine(config.engine)
            t0 = time.perf_counter()
            info = eng.start()  # a bad model/device ends here as "error: ..." with the CLI's exit code
            load_s = time.perf_counter() - t0
            app = create_app(config, eng, engine_started=True)
            service = app.state.service
            service.startup_s["load"] = load_s  # exported as diffusion_startup_duration_seconds{phase="load"}
            service.prepare()  # --default-size/--warmup/--default-steps checked before serving
            service.warm_up()  # a warmup that fails (e.g. over --memory-budget) is a one-line error
        except BaseException:
            sock.close()
            raise
        typer.echo(
            f"diffbench serve: {info.engine} engine, model {info.model} on {info.device}, "
            f"http://{host}:{port} (Ctrl-C stops it within --drain {drain:g} s)"
        )
        typer.echo(f"diffbench serve: {service.energy_note}", err=True)
        if service.calibration_differences:
            typer.secho(
                f"warning: --calibration {calibration}: measured on another deployment (differs in "
                f"{', '.join(service.calibration_differences)}); its baselines are exported, but alerts compare "
                "against them: recalibrate on this deployment (diffbench monitor calibrate)",
                fg="yellow",
                err=True,
            )
        stopped = f"diffbench serve: stopped (in-flight work had --drain {drain:g} s)"
        server = make_server(
            app,
            host=host,
            port=port,
            log_level=log_level,
            drain_s=drain,
            on_force_exit=lambda: exit_now(130, "diffbench serve: stopped at once (second Ctrl-C)"),
        )
        from diffbench.core import interrupt

        try:
            server.run(sockets=[sock])
        except KeyboardInterrupt:
            if service.worker is not None and service.worker.running:
                # a generation is still inside the engine: a normal exit would abort in torch's teardown
                exit_now(interrupt.exit_code(), f"{stopped}; the generation still running was abandoned")
            typer.secho(stopped, err=True)
            raise typer.Exit(130) from None  # 143 after a SIGTERM (diffbench.cli.main)
        if not server.started:
            raise UsageError(f"the service did not start on {host}:{port} (see the log above)")
