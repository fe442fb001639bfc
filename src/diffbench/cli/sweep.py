"""``diffbench sweep``: speed-up vs quality over a cache threshold or a pipeline option, and the working point."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from diffbench.cli.options import FUSE_PROJECTIONS_HELP, QUANTIZATION_HELP, pipeline_knobs
from diffbench.errors import UsageError
from diffbench.workload.prompts import parse_seeds


def _interrupted(exc: Any, json_path: Path | None, console: Any) -> None:
    """Ctrl-C: the partial result (what had finished) on the console and in ``--json``, and how to resume."""
    from diffbench.core.jsonio import write_json_atomic
    from diffbench.report.sweep_report import print_console, write_json

    result = exc.result
    if result is not None:
        print_console(result, console)
    if json_path is not None:
        if result is not None:
            write_json(result, json_path)
        else:
            write_json_atomic(json_path, {"kind": "diffbench.sweep", "sweep_id": exc.sweep_id, "partial": True,
                                          "interrupted": True, "points": [], "working_point": None})
    done = len(result.points) if result is not None else 0
    typer.secho(
        f"interrupted: sweep {exc.sweep_id} is stored as 'interrupted' with {done} finished value(s)"
        + (f"; the partial result was written to {json_path}" if json_path else "")
        + "; rerun the same command to resume (finished points are reused, the rest are timed again in one "
        "interleaved session)", fg="red", err=True,
    )


def _value_urls(text: str | None, values: str, baseline: str) -> list[str]:
    """``--url-per-value`` as checked base URLs, one per ``--values`` entry.

    Raises:
        UsageError: missing, a count that differs from ``--values``, a malformed URL, or a URL given twice
            (or the baseline's: two configurations cannot share one service).
    """
    from diffbench.engines.http_engine import check_url

    n_values = len([v for v in values.split(",") if v.strip()])
    if text is None:
        raise UsageError(f"--engine http needs --url-per-value URL_1,...,URL_{n_values}: the service launched "
                         "with each value of --values (the option lives in the service's launch flags)")
    raw = [u.strip() for u in text.split(",") if u.strip()]
    if len(raw) != n_values:
        raise UsageError(f"--url-per-value gives {len(raw)} URL{'s' if len(raw) != 1 else ''} for {n_values} "
                         f"--values: give exactly one service URL per value, in the same order")
    urls = [check_url(u, "--url-per-value") for u in raw]
    seen = {baseline: "--url"}
    for u in urls:
        if u in seen:
            raise UsageError(f"--url-per-value {u}: already given as {seen[u]}; each value (and the baseline) "
                             "needs its own service, launched with that value")
        seen[u] = "another --url-per-value entry"
    return urls


def _check_ray(address: str, engine: str, baseline: str | None, device: str) -> None:
    """``--ray`` with options it cannot honour, refused before anything starts.

    Raises:
        UsageError: a malformed address, ``--engine http``, ``--baseline`` or ``--device cuda:N``.
    """
    from diffbench.distributed.cluster import check_address

    check_address(address)
    if engine == "http":
        raise UsageError("--ray with --engine http: the services already run where they run; --ray puts the "
                         "diffusers engine on Ray actors (drop --engine http or --ray)")
    if baseline is not None:
        raise UsageError("--ray with --baseline: each device makes its own baseline outputs on its shard; a stored "
                         "run lives in one store on one machine (drop --baseline)")
    if device.startswith("cuda:"):
        raise UsageError(f"--device {device} with --ray: Ray gives each actor its own GPU; use --device cuda")


def _run_ray(opts: Any, address: str, actors: int | None, threads: int, store: Path | None, mkdir: bool,
             json_path: Path | None, csv_path: Path | None, console: Any, quiet: bool) -> None:
    """``sweep --ray``: shards on actors, per-device and pooled results (see diffbench.distributed.sweep)."""
    from diffbench.core.jsonio import write_json_atomic, write_text_atomic
    from diffbench.distributed.sweep import print_console, run_sweep_ray, to_csv
    from diffbench.store.runs import RunStore

    with RunStore.open(store, mkdir=mkdir) as st:  # resolves the default and fails now if unwritable
        store_path = st.path

    def event(msg: str) -> None:
        if not quiet:
            typer.echo(msg, err=True)

    def save(result: Any) -> None:
        if json_path is not None:
            write_json_atomic(json_path, result.model_dump(mode="python"))
        if csv_path is not None:
            write_text_atomic(csv_path, to_csv(result))

    try:
        result = run_sweep_ray(opts, store_path, address, actors=actors, threads=threads, on_event=event)
    except KeyboardInterrupt:
        typer.secho("interrupted: the shards that had finished are kept (ray-sweeps/ beside the store), and each "
                    "running shard's finished points in its own store; rerun the same command to resume",
                    fg="red", err=True)
        raise typer.Exit(130) from None
    except Exception as exc:
        partial = getattr(exc, "result", None)
        if partial is not None:
            print_console(partial, console)
            save(partial)
        raise
    print_console(result, console)
    save(result)
    if json_path:
        console.print(f"JSON: {json_path}")
    if csv_path:
        console.print(f"curve CSV: {csv_path}")
    console.print(f"shards stored in {result.directory}")


def register(app: typer.Typer) -> None:
    @app.command()
    def sweep(
        cache: str | None = typer.Option(
            None, help="Cache to sweep: first-block (threshold) | taylorseer (interval) | magcache (threshold) "
            "| fastercache (spatial skip range) | pab (spatial skip range)."
        ),
        option: str | None = typer.Option(
            None, help="Pipeline option to sweep instead: precision | attention-backend | compile | quantization "
            "(none, int8-dynamic, fp8) | fuse-projections (off, on)."
        ),
        values: str = typer.Option(
            ..., help="Comma-separated values, e.g. 0.05,0.1,0.2,0.4 or bfloat16 or on or int8-dynamic."
        ),
        budget: float = typer.Option(
            30.0, help="Quality budget in dB: passes when psnr p10 >= budget and worst >= budget - 3."
        ),
        gate: list[str] = typer.Option(
            [], help="Gate expression(s) replacing the budget, e.g. 'psnr.p10>=32' 'ssim.worst>=0.95'."
        ),
        baseline: str | None = typer.Option(
            None, help="Use this stored run as the baseline (refused if its fingerprint differs; see --force)."
        ),
        force: bool = typer.Option(
            False, "--force", help="Compare even when the baseline's deployment fingerprint differs (reported)."
        ),
        engine: str = typer.Option(
            "diffusers", help="diffusers (a pipeline in this process) or http (running services: --url is the "
            "baseline's, --url-per-value one per value; sweeps --option, any server-side option, or --cache)."
        ),
        model: str | None = typer.Option(
            None, help="tiny-flux (default) | tiny-sdxl | tiny-wan | PATH to a local pipeline. With --engine http: "
            "the model name sent (default: each service's first model)."
        ),
        url: str | None = typer.Option(None, help="[http] Base URL of the baseline's service."),
        url_per_value: str | None = typer.Option(
            None, help="[http] Comma-separated base URLs, one per --values entry in the same order: the service "
            "launched with that value."
        ),
        dialect: str = typer.Option("vllm-omni", help="[http] Request dialect: openai | vllm-omni | sglang."),
        timeout: float = typer.Option(600.0, help="[http] Seconds one request may take."),
        device: str = typer.Option("cpu", help="cpu, cuda or cuda:N."),
        dtype: str = typer.Option("float32", help="Baseline precision: float32 | bfloat16 | float16."),
        attention_backend: str | None = typer.Option(None, help="diffusers attention backend of the baseline."),
        compile: bool = typer.Option(False, "--compile", help="torch.compile the denoiser (baseline and points)."),
        quantization: str = typer.Option("none", help=f"Baseline quantization. {QUANTIZATION_HELP}"),
        fuse_projections: bool = typer.Option(
            False, "--fuse-projections", help=f"Baseline with fused projections. {FUSE_PROJECTIONS_HELP}"
        ),
        threads: int | None = typer.Option(None, min=1, help="torch intra-op threads."),
        height: int | None = typer.Option(None, min=1, help="Height in pixels (tiny models: 128)."),
        width: int | None = typer.Option(None, min=1, help="Width in pixels (tiny models: 128)."),
        frames: int | None = typer.Option(None, min=1, help="Frames (video models)."),
        steps: int | None = typer.Option(None, min=1, help="Denoising steps (tiny models: 20)."),
        guidance: float | None = typer.Option(None, help="Guidance / CFG scale (default: the pipeline's)."),
        prompts: Path | None = typer.Option(None, help="Prompt file, one per line (default: the built-in set)."),
        num_prompts: int | None = typer.Option(
            None, min=1, max=20, help="How many built-in prompts (of 20; default: 4 for tiny models, else 20)."
        ),
        seeds: str = typer.Option("0", help="Comma-separated seeds."),
        warmup: int = typer.Option(
            1, min=0, help="Minimum warmup runs per configuration; warmup goes on until the latency stops falling "
            "(no downward trend over the last --stable-window runs)."
        ),
        max_warmup: int = typer.Option(20, min=1, help="Cap on warmup runs per configuration."),
        stable_window: int = typer.Option(5, min=4, max=20, help="Runs the warm-up trend test looks at."),
        runs: int | None = typer.Option(
            None, min=2, help="Timed runs per configuration = interleaved blocks, cycling prompts x seeds "
            "(default: 24 for tiny models, else two per prompt x seed)."
        ),
        seed: int = typer.Option(0, help="Seed of the randomized block order."),
        ssim: bool = typer.Option(True, "--ssim/--no-ssim", help="Also compute SSIM per image."),
        store: Path | None = typer.Option(
            None, help="SQLite store (default: $DIFFBENCH_STORE or ~/.local/share/diffbench/store.sqlite)."
        ),
        outputs: Path | None = typer.Option(None, help="Where outputs go (default: next to the store)."),
        resume: bool = typer.Option(True, "--resume/--no-resume", help="Reuse finished points from the store."),
        json_path: Path | None = typer.Option(None, "--json", help="Write the curve JSON here."),
        csv_path: Path | None = typer.Option(None, "--csv", help="Write the curve CSV here."),
        mkdir: bool = typer.Option(
            False, "--mkdir", help="Create missing parent directories of --store, --json, --csv and --outputs."
        ),
        allow_large: bool = typer.Option(
            False, "--allow-large", help="Allow steps, pixels or frames above the limits (see `bench --help`)."
        ),
        quiet: bool = typer.Option(
            False, "--quiet", "-q", help="No live progress line (value i of k, run j of n, ETA; drawn on stderr "
            "only when it is a terminal, or with DIFFBENCH_PROGRESS=always)."
        ),
        ray: str | None = typer.Option(
            None, "--ray", metavar="ADDRESS", help="Run on a Ray cluster: local (a private one here, loopback "
            "only) | auto | HOST:PORT. Each actor (one per GPU, or --ray-actors CPU actors with --threads each) "
            "runs the whole interleaved protocol on its shard of the prompts; per-device speed-ups are pooled "
            "per device class. The store's folder must be one every node sees."
        ),
        ray_actors: int | None = typer.Option(
            None, "--ray-actors", min=1, help="[--ray] Actors = prompt shards (default: one per GPU with --device "
            "cuda, else the cluster's CPUs // --threads)."
        ),
    ) -> None:
        """Sweep a cache threshold or a pipeline option: speed-up (95 % paired bootstrap CI, baseline and values
        interleaved after each is warm) beside the timing noise floor, per-image quality vs the baseline
        (p50/p10/worst PSNR), skipped steps and the working point (measurably faster and within budget)."""
        import math

        from diffbench.bench.limits import check_limits, check_number
        from diffbench.bench.session import Shape
        from diffbench.cli.options import shape_option
        from diffbench.core.outpath import check_output_dir, check_output_file
        from diffbench.engines.config import EngineConfig, check_device
        from diffbench.engines.knobs import parse_values
        from diffbench.errors import ShapeError
        from diffbench.quality.gates import parse_gate
        from diffbench.report.sweep_report import make_console, print_console, write_csv, write_json
        from diffbench.store.runs import RunStore
        from diffbench.sweep.axes import axis_name
        from diffbench.sweep.models import SweepOptions
        from diffbench.sweep.runner import SweepInterrupted, preflight, run_sweep
        from diffbench.sweep.working_point import default_gates

        # Every check that needs no model runs here, before anything is loaded or created.
        if engine not in ("diffusers", "http"):
            raise UsageError(f"--engine {engine!r}: choose diffusers (in-process) or http (running services)")
        pipeline_knobs(engine, quantization, fuse_projections)
        http = None
        urls: list[str] = []
        if engine == "http":
            from diffbench.cli.options import http_params

            http = http_params(url, dialect, timeout, model, locals_given={
                "--device": device != "cpu", "--dtype": dtype != "float32", "--compile": compile,
                "--attention-backend": attention_backend is not None, "--threads": threads is not None,
                "--quantization": quantization != "none", "--fuse-projections": fuse_projections})
            urls = _value_urls(url_per_value, values, http.url)
        elif url is not None or url_per_value is not None:
            raise UsageError(f"{'--url' if url is not None else '--url-per-value'}: only --engine http sends "
                             "requests to services; add --engine http")
        if ray is not None:
            _check_ray(ray, engine, baseline, device)
        elif ray_actors is not None:
            raise UsageError("--ray-actors: only with --ray ADDRESS (the actors run on a Ray cluster)")
        if not math.isfinite(budget) or not 0 < budget <= 100:
            raise UsageError(f"--budget {budget:g}: must be a finite PSNR budget in (0, 100] dB, e.g. 30")
        check_number("--guidance", guidance, 0, 50, "guidance / CFG scale")
        device = check_device(device)
        check_limits(steps=steps, batch=1, shapes=[Shape(height=height, width=width, frames=frames).limit_spec()],
                     allow_large=allow_large)
        for g in list(gate) or default_gates(budget):
            parse_gate(g)
        axis = axis_name(cache, option, any_option=engine == "http")
        opts = SweepOptions(
            engine=EngineConfig(engine=engine, model=model or "tiny-flux", device=device, dtype=dtype,  # type: ignore[arg-type]
                                attention_backend=attention_backend, compile=compile, threads=threads, http=http,
                                quantization=quantization, fuse_projections=fuse_projections),  # type: ignore[arg-type]
            axis=axis, values=parse_values(axis, values), url_per_value=urls, height=height, width=width, frames=frames,
            steps=steps, guidance=guidance, prompts_file=prompts, num_prompts=num_prompts, seeds=parse_seeds(seeds),
            warmup=warmup, max_warmup=max_warmup, stable_window=stable_window, schedule_seed=seed, runs=runs,
            budget_db=budget, gates=list(gate), ssim=ssim, baseline_run=baseline,
            force=force, resume=resume, outputs_dir=outputs,
        )
        try:
            preflight(opts)
        except ShapeError as exc:
            raise ShapeError(f"{shape_option(str(exc), None)}: {exc}") from None
        if http is not None:  # every service answers before anything is stored
            from diffbench.engines.http_engine import probe

            wait = min(http.connect_timeout_s, http.timeout_s)
            probe(http.url, wait, "--url")
            for u in urls:
                probe(u, wait, "--url-per-value")
        if json_path is not None:  # before anything runs: a bad path fails now, not after the sweep
            check_output_file(json_path, "--json", mkdir=mkdir)
        if csv_path is not None:
            check_output_file(csv_path, "--csv", mkdir=mkdir)
        if outputs is not None:
            check_output_dir(outputs, "--outputs", mkdir=mkdir)
        from diffbench.core.progress import LiveLine
        from diffbench.sweep.progress import SweepProgress

        console: Any = make_console()
        if ray is not None:
            _run_ray(opts, ray, ray_actors, threads or 1, store, mkdir, json_path, csv_path, console, quiet)
            return
        try:
            with RunStore.open(store, mkdir=mkdir) as st, LiveLine.for_cli(quiet) as line:
                prog = SweepProgress(axis, line.update)
                prog.event("starting")
                result = run_sweep(opts, st, on_event=prog.event, on_tick=prog.tick)
        except SweepInterrupted as exc:
            _interrupted(exc, json_path, console)
            raise typer.Exit(130) from None
        except KeyboardInterrupt:
            typer.secho("interrupted before the sweep started: nothing was stored"
                        + (f" and {json_path} was not written" if json_path else ""), fg="red", err=True)
            raise typer.Exit(130) from None
        print_console(result, console)
        console.print(f"stored in {result.store} as sweep {result.sweep_id}; see `diffbench runs show "
                      f"{result.sweep_id}`")
        from diffbench.core.jsonio import write_each

        def json_out() -> None:
            write_json(result, json_path)  # type: ignore[arg-type]
            console.print(f"curve JSON: {json_path}")

        def csv_out() -> None:
            write_csv(result, csv_path)  # type: ignore[arg-type]
            console.print(f"curve CSV: {csv_path}")

        # both tried (the result is already in the store); one that cannot be written exits 6 naming it
        write_each(*([json_out] if json_path else []), *([csv_out] if csv_path else []))

