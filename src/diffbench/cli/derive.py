"""``diffbench derive``: the configuration derivation executed and proven step by step on the real pipeline.

Exit codes: 0 done (whatever was decided; derive.json says what and why); 2 bad input (checked before the
model loads); 130 / 143 interrupted by Ctrl-C / SIGTERM (every finished step kept in a partial derive.json;
rerun the same command to resume).
"""

from __future__ import annotations

from pathlib import Path

import typer

from diffbench.errors import UsageError


def _values(text: str, option: str) -> list[str]:
    out = [v.strip() for v in text.split(",") if v.strip()]
    if not out:
        raise UsageError(f"{option} is empty; give comma-separated values")
    return out


def register(app: typer.Typer) -> None:
    @app.command("derive")
    def derive(
        model: str = typer.Option("tiny-flux", help="Model: tiny-flux | tiny-sdxl | tiny-wan or a local diffusers "
                                  "pipeline directory."),
        device: str = typer.Option("cpu", help="Device: cpu, cuda, cuda:N."),
        dtype: str = typer.Option("float32", help="Starting precision: float32 | bfloat16 | float16."),
        size: str = typer.Option("256x256", help="WIDTHxHEIGHT in pixels."),
        frames: int | None = typer.Option(None, min=1, help="Frames (video models)."),
        steps: int = typer.Option(8, min=1, help="Denoising steps."),
        guidance: float | None = typer.Option(None, help="Guidance / CFG scale (default: the pipeline's)."),
        slo_p99: float = typer.Option(..., "--slo-p99", help="p99 latency SLO, seconds."),
        qps: float = typer.Option(..., "--qps", help="Throughput target, requests per second."),
        budget: float = typer.Option(30.0, "--budget", help="Quality budget: the lowest combined PSNR p10 (dB) "
                                     "against the lossless deployment that the lossy steps may reach together."),
        gpu: str | None = typer.Option(None, "--gpu", help="Ledger GPU id for predictions and multi-GPU layouts "
                                       "(e.g. h100-sxm; see diffbench ledger)."),
        gpus_per_node: int = typer.Option(8, "--gpus-per-node", min=1, help="GPUs per node."),
        ledger_model: str | None = typer.Option(None, "--ledger-model", help="Ledger model id whose architecture "
                                                "the model has (default: --model when the catalog has it)."),
        prompts: Path | None = typer.Option(None, "--prompts", help="Prompt file (text, one per line, # "
                                            "comments; or JSONL with a text field)."),
        num_prompts: int | None = typer.Option(None, "--num-prompts", min=1, help="Built-in prompts to use "
                                               "(default 4 tiny models, else 20)."),
        seeds: str = typer.Option("0", help="Seeds, comma-separated: each prompt × each seed is one baseline image."),
        few_step_model: str | None = typer.Option(None, "--few-step-model", help="A few-step model (schnell, "
                                                  "Turbo, DMD) tried when one device misses the SLO."),
        few_step_steps: int | None = typer.Option(None, "--few-step-steps", min=1, help="Its steps (default 4)."),
        cache: str = typer.Option("first-block", "--cache", help="Step cache swept in ④ (first-block, taylorseer, "
                                  "magcache, fastercache, pab)."),
        cache_values: str = typer.Option("0.05,0.1,0.2,0.3", "--cache-values", help="Its values."),
        attention_backends: str | None = typer.Option(None, "--attention-backends", help="Attention backends to "
                                                      "try in ② (default: flash and FA3 on CUDA, none on a CPU)."),
        skip: str | None = typer.Option(None, "--skip", help="Candidates not to try, comma-separated (e.g. "
                                        "compile,fuse-projections,attention,cache)."),
        runs: int | None = typer.Option(None, "--runs", min=2, help="Timed interleaved blocks per comparison "
                                        "(default: the sweep's)."),
        max_warmup: int = typer.Option(10, "--max-warmup", min=1, help="Warmup cap per configuration."),
        threads: int | None = typer.Option(None, "--threads", min=1, help="torch CPU threads."),
        store: Path | None = typer.Option(None, "--store", help="Run store (default: OUT/runs.sqlite)."),
        out: Path = typer.Option(..., "--out", help="Output directory: derive.json, serve.sh, calibration.json, "
                                 "references/, review.html, report.html."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the ordered plan with predictions and what "
                                     "would be measured; load nothing."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines."),
    ) -> None:
        """Derive the serving configuration step by step on the real pipeline: ① account, ② lossless, ③ lossy
        I, ④ lossy II, ⑤ SLO check, ⑥ few-step model, ⑦ capacity, ⑧ signals; each step measured against the
        fixed-seed baseline of the current deployment (interleaved, paired bootstrap CI beside the noise
        floor), gated, and recorded with its reason in OUT/derive.json."""
        import math

        from pydantic import ValidationError

        from diffbench.cli.validation import usage_error
        from diffbench.core.shapes import SizeSyntaxError, parse_size
        from diffbench.derive.models import DeriveConfig
        from diffbench.engines.config import EngineConfig, check_device
        from diffbench.engines.knobs import CACHE_AXES, parse_values
        from diffbench.workload.prompts import parse_seeds

        for flag, v in (("--slo-p99", slo_p99), ("--qps", qps)):
            if not (math.isfinite(v) and v > 0):
                raise UsageError(f"{flag} {v:g}: must be a finite number > 0")
        if not (math.isfinite(budget) and 0 < budget <= 100):
            raise UsageError(f"--budget {budget:g}: must be a PSNR in (0, 100] dB, e.g. 30")
        try:
            width, height = parse_size(size)
        except SizeSyntaxError as exc:
            raise UsageError(f"--size {size!r}: {exc}") from None
        if cache not in CACHE_AXES:
            raise UsageError(f"--cache {cache!r}: choose one of {', '.join(CACHE_AXES)}")
        if prompts is not None and not prompts.is_file():
            raise UsageError(f"--prompts {prompts}: file not found")
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out {out} is a file; give a directory")
        try:
            cfg = DeriveConfig(
                engine=EngineConfig(model=model, device=check_device(device), dtype=dtype, threads=threads),
                width=width, height=height, frames=frames, steps=steps, guidance=guidance, slo_p99_s=slo_p99,
                qps=qps, budget_db=budget, gpu=gpu, gpus_per_node=gpus_per_node, ledger_model=ledger_model,
                prompts_file=prompts, num_prompts=num_prompts, seeds=parse_seeds(seeds),
                few_step_model=few_step_model, few_step_steps=few_step_steps, cache_axis=cache,
                cache_values=parse_values(cache, cache_values),
                attention_backends=_values(attention_backends, "--attention-backends") if attention_backends else [],
                skip=_values(skip, "--skip") if skip else [], runs=runs, max_warmup=max_warmup, out=out,
            )
        except ValidationError as exc:
            raise usage_error(exc, {"slo_p99_s": "--slo-p99", "budget_db": "--budget", "width": "--size",
                                    "height": "--size"}) from None
        if dry_run:
            from diffbench.derive.dryrun import dry_run as plan

            for line in plan(cfg):
                typer.echo(line)
            return
        _run(cfg, store, quiet)


def _run(cfg: object, store: Path | None, quiet: bool) -> None:
    from diffbench.core.console import make_console
    from diffbench.core.progress import LiveLine
    from diffbench.derive.models import DeriveConfig
    from diffbench.derive.run import DeriveInterrupted, run_derive
    from diffbench.store.runs import RunStore

    assert isinstance(cfg, DeriveConfig)
    cfg.out.mkdir(parents=True, exist_ok=True)
    console = make_console()
    try:
        with RunStore.open(store or cfg.out / "runs.sqlite", mkdir=True) as st, LiveLine.for_cli(quiet) as line:
            result = run_derive(cfg, st, event=line.update if not quiet else None)
    except DeriveInterrupted as exc:
        typer.secho(f"interrupted: {len(exc.result.steps)} finished step(s) kept in {cfg.out / 'derive.json'}; "
                    "rerun the same command to resume", fg="red", err=True)
        raise typer.Exit(130) from None
    _finish(result, cfg, console)


def _finish(result: object, cfg: object, console: object) -> None:
    """The review page and the HTML report beside derive.json, then the summary."""
    from diffbench.derive.models import DeriveConfig, DeriveResult

    assert isinstance(result, DeriveResult) and isinstance(cfg, DeriveConfig)
    base, cand = (result.outputs.get("review_baseline_outputs"), result.outputs.get("review_candidate_outputs"))
    if base and cand:
        from diffbench.cli.review import write_review

        write_review(Path(base), Path(cand), cfg.out / "review.html", cfg.out / "review.key.json")
        result.outputs.update({"review": "review.html", "review_key": "review.key.json"})
    from diffbench.derive.run import write_result

    result.outputs["report"] = "report.html"
    write_result(result, cfg.out / "derive.json")
    from diffbench.core.jsonio import write_text_atomic
    from diffbench.report.build import build_document
    from diffbench.report.html_render import render_html
    from diffbench.report.kinds import ReportOptions

    doc = build_document([cfg.out / "derive.json"], ReportOptions(), title=None, on_step=None)
    write_text_atomic(cfg.out / "report.html", render_html(doc))
    from diffbench.report.derive_table import print_console

    print_console(result, console)
    typer.echo(f"derive.json, report.html, serve.sh, calibration.json, references/ in {cfg.out} "
               f"({result.elapsed_s or 0:.0f} s)")
