"""``diffbench bench``: single-request latency benchmark (warmed up, synchronized, percentiles with n)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from diffbench.cli.options import (
    FUSE_PROJECTIONS_HELP,
    OFFLOAD_HELP,
    QUANTIZATION_HELP,
    http_params,
    pipeline_knobs,
    shape_option,
)
from diffbench.engines.knobs import parse_cache_spec
from diffbench.errors import UsageError

if TYPE_CHECKING:
    from diffbench.bench.result import BenchResult
from diffbench.workload.prompts import parse_seeds

ENGINE_HELP = ("sim (simulated GPU-like device), diffusers (a real pipeline) or http (a running image service at "
               "--url, measured at the client).")


def register(app: typer.Typer) -> None:
    @app.command()
    def bench(
        engine: str = typer.Option("diffusers", help=ENGINE_HELP),
        model: str | None = typer.Option(
            None,
            help="tiny-flux (default) | tiny-sdxl | tiny-wan | PATH to a local "
            "diffusers pipeline directory (never a hub id: nothing is downloaded). With --engine http: the "
            "model name sent (default: the service's first model in GET /v1/models).",
        ),
        url: str | None = typer.Option(
            None, help="[http] Base URL of the running service, e.g. http://127.0.0.1:8000 (without /v1)."
        ),
        dialect: str = typer.Option(
            "vllm-omni", help="[http] Request dialect: openai | vllm-omni | sglang (as `load --dialect`; openai "
            "sends no steps or seed, so the service's defaults apply)."
        ),
        timeout: float = typer.Option(
            600.0, help="[http] Seconds one request may take before it counts as a failed run."
        ),
        device: str = typer.Option("cpu", help="cpu, cuda, cuda:N or mps."),
        dtype: str = typer.Option("float32", help="float32 | bfloat16 | float16."),
        attention_backend: str | None = typer.Option(
            None, help="diffusers attention backend, e.g. native, flash, sage."
        ),
        compile: bool = typer.Option(
            False, "--compile", help="torch.compile the denoiser (warm up every shape!)."
        ),
        steps: int | None = typer.Option(
            None,
            min=1,
            help="Denoising steps (default: 8 for tiny models, 28 image / 30 video; at most 1000 "
            "without --allow-large).",
        ),
        guidance: float | None = typer.Option(None, help="Guidance / CFG scale (default: the pipeline's)."),
        negative_prompt: str | None = typer.Option(None, help="Negative prompt (CFG models)."),
        height: int | None = typer.Option(None, min=1, help="Height in pixels (default per model)."),
        width: int | None = typer.Option(None, min=1, help="Width in pixels (default per model)."),
        frames: int | None = typer.Option(
            None, min=1, help="Frames (video models; 4k+1 for Wan; at most 1025 without --allow-large)."
        ),
        shapes: str | None = typer.Option(
            None,
            help="Several shapes, WIDTHxHEIGHT[xFRAMES] comma separated, width first as in --size, e.g. "
            "'1024x768,832x480x33' (overrides --height/--width/--frames).",
        ),
        batch: int = typer.Option(1, min=1, help="Images (or videos) per call (at most 64 without --allow-large)."),
        allow_large: bool = typer.Option(
            False,
            "--allow-large",
            help="Lift the sanity limits (steps 1000, 4096x4096 pixels per frame, 1025 frames, batch 64).",
        ),
        gpus: int | None = typer.Option(
            None, "--gpus", help="GPUs one run occupies: adds megapixel·steps/s per GPU and GPU·s per output."
        ),
        gpu_hour_price: float | None = typer.Option(
            None, "--gpu-hour-price", help="Price per GPU-hour (any currency): adds the cost per 1,000 outputs "
            "(GPU·s per output = GPUs / outputs per s; one GPU without --gpus)."
        ),
        fps: float | None = typer.Option(
            None,
            help="Playback fps of a video model's output, for video-seconds per second (default: the "
            "model's, e.g. 16 for Wan).",
        ),
        vae_tiling: bool = typer.Option(
            False, "--vae-tiling", help="Decode in tiles (bounds the VAE decode peak)."
        ),
        cache: str | None = typer.Option(
            None,
            "--cache",
            help="Enable a diffusers step cache for every run, AXIS=VALUE as sweep takes it (first-block=0.1): "
            "bench the deployment as it serves, e.g. for monitor calibrate.",
        ),
        offload: str = typer.Option("none", help=OFFLOAD_HELP),
        quantization: str = typer.Option("none", help=QUANTIZATION_HELP),
        fuse_projections: bool = typer.Option(False, "--fuse-projections", help=FUSE_PROJECTIONS_HELP),
        prompts: Path | None = typer.Option(
            None, help="Prompt file, one per line (default: the built-in set)."
        ),
        num_prompts: int = typer.Option(4, min=1, help="How many built-in prompts to cycle through."),
        input_images: Path | None = typer.Option(
            None, "--input-images", help="Folder of input pictures (PNG, JPEG, WebP): bench image-to-image "
            "(edits) instead of text-to-image; each image is resized to the shape and cycled with the prompts "
            "and seeds. The VAE encode of the input is the image_encode stage.",
        ),
        strength: float | None = typer.Option(
            None, help="Edit strength in (0, 1] (with --input-images; default 0.6): the share of the schedule "
            "re-noised; diffusers runs int(steps x strength) steps (Flux: steps - int(steps - steps x strength)).",
        ),
        masks: Path | None = typer.Option(
            None, "--masks", help="Folder of inpainting masks, one per input image with the same file stem "
            "(white = repaint): inpainting instead of image-to-image.",
        ),
        seeds: str = typer.Option("0", help="Comma-separated seeds, e.g. 0,1."),
        warmup: str = typer.Option(
            "2",
            help="Warmup runs per shape (reported apart, never in the statistics), or 'auto': run until the "
            "last 5 show no downward trend (the sweep's warm test), at most --max-warmup.",
        ),
        max_warmup: int = typer.Option(20, min=1, max=10000, help="Cap of --warmup auto per shape."),
        runs: int = typer.Option(100, min=1, help="Timed runs per shape (p99 needs >= 100)."),
        no_sync: bool = typer.Option(
            False,
            "--no-sync",
            help="Do NOT synchronize the device (demonstrates the mistake; the result is marked invalid and the command fails).",
        ),
        repro: bool = typer.Option(
            True, "--repro/--no-repro", help="Generate the first request twice and report PSNR."
        ),
        threads: int | None = typer.Option(
            None, min=1, help="torch intra-op threads (recorded in the report)."
        ),
        json_path: Path | None = typer.Option(
            None, "--json", help="Write the versioned JSON result here (streamed as runs finish)."
        ),
        markdown_path: Path | None = typer.Option(None, "--markdown", help="Write a Markdown report here."),
        save_outputs: Path | None = typer.Option(
            None, help="Save each output (PNG / PNG frames) plus manifest.json here."
        ),
        mkdir: bool = typer.Option(
            False, "--mkdir", help="Create missing parent directories of --json, --markdown, --save-outputs."
        ),
        ray: str | None = typer.Option(
            None, "--ray", help="Run the bench on Ray engine actors (with --save-outputs DIR, a path every node "
            "sees): 'local' (a private cluster on this machine, loopback only), 'auto' (the cluster `ray start` "
            "began here) or HOST:PORT. Tasks have deterministic ids; a rerun skips the finished ones.",
        ),
        ray_actors: int | None = typer.Option(
            None, "--ray-actors", min=1, help="[--ray] Engine actors (default: one per GPU for --device cuda, else "
            "the cluster's CPUs / --threads). Each gets --threads threads (default 1).",
        ),
        quiet: bool = typer.Option(
            False, "--quiet", "-q", help="No live progress line on stderr (it is off anyway when stderr is not a "
            "terminal; DIFFBENCH_PROGRESS=always|never overrides)."
        ),
        sim_compile_s: float = typer.Option(5.0, help="[sim] first-call compile cost per shape (s)."),
        sim_step_s: float = typer.Option(0.04, help="[sim] per-step time at 1024x1024 (s)."),
        sim_jitter: float = typer.Option(0.02, help="[sim] relative jitter (log-normal sd)."),
        sim_tail_prob: float = typer.Option(0.02, help="[sim] probability of a tail event per run."),
        sim_tail_s: float = typer.Option(0.5, help="[sim] tail event duration (s)."),
        sim_realtime: bool = typer.Option(
            False, "--sim-realtime", help="[sim] sleep for real instead of a virtual clock."
        ),
        sim_seed: int = typer.Option(0, help="[sim] random seed."),
        sim_fail_above_pixels: int | None = typer.Option(
            None, min=1, help="[sim] simulate out-of-memory above H*W*frames*batch pixels."
        ),
    ) -> None:
        """Single-request latency: warmup per shape, synchronized timed runs, stage split, memory, reproducibility."""
        from diffbench.bench.limits import check_limits, check_number
        from diffbench.bench.protocol import BenchConfig
        from diffbench.bench.render import print_console
        from diffbench.bench.session import BenchOptions, Shape, parse_shapes, run_session
        from diffbench.core.outpath import check_output_dir, check_output_file
        from diffbench.engines.config import ENGINES, EngineConfig, SimParams, check_device
        from diffbench.errors import DiffbenchError, ShapeError

        # Every check that needs no model runs here, before anything is loaded or created.
        if offload not in ("none", "model", "sequential"):
            raise UsageError(f"--offload {offload!r}: choose none, model or sequential")
        if engine not in ENGINES:
            raise UsageError(f"--engine {engine!r}: choose one of {', '.join(ENGINES)}")
        pipeline_knobs(engine, quantization, fuse_projections)
        http = None
        if engine == "http":
            http = http_params(url, dialect, timeout, model, locals_given={
                "--device": device != "cpu", "--dtype": dtype != "float32", "--compile": compile,
                "--attention-backend": attention_backend is not None, "--cache": cache is not None,
                "--offload": offload != "none", "--vae-tiling": vae_tiling, "--threads": threads is not None,
                "--quantization": quantization != "none", "--fuse-projections": fuse_projections,
                "--no-sync": no_sync})
            if save_outputs is not None and dialect == "openai":
                raise UsageError("--save-outputs with --dialect openai: that dialect sends no seed, so the outputs "
                                 "cannot be paired by seed in `quality`; use --dialect vllm-omni or sglang")
        elif url is not None:
            raise UsageError(f"--url {url}: only --engine http sends requests to a URL; add --engine http")
        if input_images is None:
            for flag, given in (("--strength", strength is not None), ("--masks", masks is not None)):
                if given:
                    raise UsageError(f"{flag}: applies to edits only; add --input-images DIR (a folder of input "
                                     "pictures)")
        elif engine == "http":
            raise UsageError("--input-images with --engine http: the http engine sends text-to-image requests "
                             "only so far (edits go to POST /v1/images/edits, not yet wired into it); bench edits "
                             "with --engine diffusers or sim")
        from diffbench.bench.inputs import check_strength, load_inputs

        edit_strength = check_strength(strength) if strength is not None else 0.6
        device = check_device(device)
        from diffbench.core.workcost import gpus_error, price_error

        if gpus is not None and (why := gpus_error(gpus)):
            raise UsageError(f"--gpus {why}")
        if gpu_hour_price is not None and (why := price_error(gpu_hour_price)):
            raise UsageError(f"--gpu-hour-price {why}")
        if fps is not None and not (0 < fps <= 1000):
            raise UsageError(f"--fps {fps:g}: must be a playback rate in (0, 1000] frames per second")
        for flag, value, lo, hi, what in (
            ("--guidance", guidance, 0, 50, "guidance / CFG scale"),
            ("--sim-compile-s", sim_compile_s, 0, 3600, "seconds"),
            ("--sim-step-s", sim_step_s, 0, 60, "seconds per step at 1024x1024"),
            ("--sim-jitter", sim_jitter, 0, 2, "log-normal sd"),
            ("--sim-tail-prob", sim_tail_prob, 0, 1, "a probability"),
            ("--sim-tail-s", sim_tail_s, 0, 3600, "seconds"),
        ):
            check_number(flag, value, lo, hi, what)
        warmup_auto = warmup.strip().lower() == "auto"
        if not warmup_auto and not (warmup.strip().isdigit() and int(warmup) <= 10000):
            raise UsageError(f"--warmup {warmup!r}: expected a count of runs in [0, 10000] or 'auto'")
        shape_list = parse_shapes(shapes) if shapes else [Shape(height=height, width=width, frames=frames)]
        check_limits(steps=steps, batch=batch, shapes=[s.limit_spec() for s in shape_list], allow_large=allow_large)
        for option, out_path in (("--json", json_path), ("--markdown", markdown_path)):
            if out_path is not None:
                check_output_file(out_path, option, mkdir=mkdir)  # also creates and removes a scratch file
        if save_outputs is not None:
            check_output_dir(save_outputs, "--save-outputs", mkdir=mkdir)
        if ray is not None:
            from diffbench.distributed.cluster import check_address

            ray = check_address(ray)  # the rest of --ray's checks: run_distributed_session, before Ray starts
        elif ray_actors is not None:
            raise UsageError(f"--ray-actors {ray_actors}: applies to a distributed run; add --ray ADDRESS")
        edit_inputs = load_inputs(input_images, masks) if input_images is not None else []
        sim = SimParams(
            compile_s=sim_compile_s,
            step_s=sim_step_s,
            jitter=sim_jitter,
            tail_prob=sim_tail_prob,
            tail_s=sim_tail_s,
            realtime=sim_realtime,
            seed=sim_seed,
            fail_above_pixels=sim_fail_above_pixels,
        )
        opts = BenchOptions(
            engine=EngineConfig(
                engine=engine,  # type: ignore[arg-type]
                model=model or "tiny-flux",
                device=device,
                dtype=dtype,
                attention_backend=attention_backend,
                compile=compile,
                vae_tiling=vae_tiling,
                cache=parse_cache_spec(cache, engine) if cache is not None else None,
                offload=offload,
                quantization=quantization,  # type: ignore[arg-type]
                fuse_projections=fuse_projections,
                threads=threads,
                sim=sim,
                http=http,
            ),
            shapes=shape_list,
            steps=steps,
            guidance=guidance,
            negative_prompt=negative_prompt,
            batch=batch,
            prompts_file=prompts,
            num_prompts=num_prompts,
            seeds=parse_seeds(seeds),
            protocol=BenchConfig(warmup=0 if warmup_auto else int(warmup), warmup_auto=warmup_auto,
                                 max_warmup=max_warmup, runs=runs, sync=not no_sync, repro=repro, fps=fps,
                                 gpus=gpus, gpu_hour_price=gpu_hour_price),
            json_path=json_path,
            markdown_path=markdown_path,
            save_outputs=save_outputs,
            edit_inputs=edit_inputs,
            strength=edit_strength,
        )
        from diffbench.bench.progress import RunEvent, progress_text
        from diffbench.core.progress import LiveLine

        latest: dict[str, BenchResult] = {}  # the newest (partial) result, for the Ctrl-C summary
        try:
            with LiveLine.for_cli(quiet) as line:
                line.update(f"starting {engine} {url if engine == 'http' else model or 'tiny-flux'} ...")

                def on_run(ev: RunEvent) -> None:
                    line.update(progress_text(ev))

                if ray is not None:
                    from diffbench.distributed.bench import run_distributed_session

                    line.update(f"starting Ray ({ray}) ...")
                    result = run_distributed_session(opts, ray, ray_actors,
                                                     on_update=lambda r: latest.__setitem__("r", r))
                else:
                    result = run_session(opts, on_update=lambda r: latest.__setitem__("r", r),
                                         on_run=on_run if line.enabled else None)
        except ShapeError as exc:
            raise ShapeError(f"{shape_option(str(exc), shapes)}: {exc}") from None
        except KeyboardInterrupt:
            from diffbench.bench.render import partial_lines

            for line in partial_lines(latest["r"]) if latest else []:
                typer.echo(line, err=True)
            written = json_path is not None and json_path.exists()
            typer.secho(
                f"interrupted: the partial result was written to {json_path}"
                if written
                else "interrupted: nothing was written (no --json)"
                if json_path is None
                else "interrupted before the first measured run; nothing was written",
                fg="red",
                err=True,
            )
            raise typer.Exit(130) from None
        print_console(result)
        if not result.valid:
            raise DiffbenchError(
                "refused: the measurement was not synchronized with the device (it timed the "
                "launch, not the work); rerun without --no-sync"
            )
        if all(s.latency_s is None for s in result.shapes):
            raise DiffbenchError("every shape failed: " + "; ".join(s.error or "?" for s in result.shapes))
