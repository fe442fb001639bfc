"""``diffbench serve``: the reference service (images API + video jobs) over one engine, on loopback."""

from __future__ import annotations

import typer


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
        sim_step_s: float | None = typer.Option(
            None,
            help="sim engine: seconds per denoising step at its reference size (diffbench.engines.sim).",
        ),
        sim_fail_above_pixels: int | None = typer.Option(
            None, min=1, help="sim engine: simulate out of memory above this many pixels (H*W*frames*n)."
        ),
        warmup: list[str] = typer.Option(
            [], "--warmup", help="Generate once at this WIDTHxHEIGHT before serving (repeatable)."
        ),
        drain: float = typer.Option(
            10.0,
            "--drain",
            help="On Ctrl-C/SIGTERM: seconds in-flight requests may take before they answer 503 and the "
            "service exits.",
        ),
        seed: int = typer.Option(0, help="Seeds the generator that picks seeds for requests without one."),
        log_level: str = typer.Option("info", help="uvicorn log level."),
    ) -> None:
        """Serve POST /v1/images/generations, /v1/videos jobs, /health, /v1/models and /metrics."""
        import math

        from diffbench.engines.registry import EngineConfig, SimParams
        from diffbench.errors import UsageError
        from diffbench.server.config import Limits, ServerConfig
        from diffbench.server.validation import parse_size

        numbers = (("--max-wait", max_wait, 0.001), ("--drain", drain, 0.0), ("--sim-step-s", sim_step_s, 0.0))
        for flag, value, low in numbers:
            if value is not None and not (math.isfinite(value) and value >= low):
                raise UsageError(f"{flag} {value}: must be a finite number >= {low:g} (seconds)")
        if engine not in ("diffusers", "sim"):
            raise UsageError(f"--engine {engine!r} is not known; use diffusers or sim")
        for flag, size in [("--default-size", default_size)] + [("--warmup", w) for w in warmup]:
            try:
                parse_size(size, flag)
            except Exception as exc:
                raise UsageError(str(exc)) from exc
        sim = SimParams(realtime=True)
        if sim_step_s is not None or sim_fail_above_pixels is not None:
            sim = sim.model_copy(
                update={
                    "step_s": sim.step_s if sim_step_s is None else sim_step_s,
                    "fail_above_pixels": sim_fail_above_pixels,
                }
            )
        config = ServerConfig(
            engine=EngineConfig(engine=engine, model=model, device=device, dtype=dtype, sim=sim),  # type: ignore[arg-type]
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
            ),
            warmup_sizes=tuple(warmup),
            drain_s=drain,
            seed=seed,
            log_level=log_level,
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
            info = eng.start()  # a bad model/device ends here as "error: ..." with the CLI's exit code
            app = create_app(config, eng, engine_started=True)
            service = app.state.service
            service.prepare()  # --default-size/--warmup/--default-steps checked before serving
        except BaseException:
            sock.close()
            raise
        typer.echo(
            f"diffbench serve: {info.engine} engine, model {info.model} on {info.device}, "
            f"http://{host}:{port} (Ctrl-C stops it within --drain {drain:g} s)"
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
        try:
            server.run(sockets=[sock])
        except KeyboardInterrupt:
            if service.worker is not None and service.worker.running:
                # a generation is still inside the engine: a normal exit would abort in torch's teardown
                exit_now(130, f"{stopped}; the generation still running was abandoned")
            typer.secho(stopped, err=True)
            raise typer.Exit(130) from None
        if not server.started:
            raise UsageError(f"the service did not start on {host}:{port} (see the log above)")
