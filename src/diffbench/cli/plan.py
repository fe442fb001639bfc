"""``diffbench plan``: the ordered derivation from the ledger to a serving configuration (no torch)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from diffbench.plan.models import PlanResult


def register(app: typer.Typer) -> None:
    @app.command("plan")
    def plan(
        model: str = typer.Option(..., "--model", help="Model id, e.g. flux.1-dev."),
        size: str | None = typer.Option(None, "--size", help="WIDTHxHEIGHT in pixels (or --workload)."),
        gpu: str = typer.Option(..., "--gpu", help="GPU id, e.g. h100-sxm."),
        slo_p99: float = typer.Option(..., "--slo-p99", help="Latency SLO, p99 seconds."),
        qps: float = typer.Option(..., "--qps", help="Requests per second to serve."),
        steps: int | None = typer.Option(None, "--steps", help="Denoising steps (default: the model's)."),
        frames: int | None = typer.Option(None, "--frames", help="Frames for video models (4k+1)."),
        cfg: float | None = typer.Option(None, "--cfg", help="Guidance scale (> 1: CFG, 2 forwards/step)."),
        text_tokens: int | None = typer.Option(None, "--text-tokens", help="Text tokens (prompt-dependent models)."),
        gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="GPUs per node."),
        quality_budget: float | None = typer.Option(
            None, "--quality-budget", help="Lowest PSNR (dB) vs the lossless output for lossy steps together."),
        lossy: bool | None = typer.Option(
            None, "--lossy/--no-lossy", help="Allow lossy steps within --quality-budget (the default when a budget "
            "is given; without one the plan is lossless, and --lossy alone is refused)."),
        allow_model_swap: bool = typer.Option(False, "--allow-model-swap", help="Allow a few-step model."),
        headroom: float = typer.Option(1.3, "--headroom", help="Capacity headroom factor (≥ 1)."),
        assume_fp8: bool = typer.Option(
            False, "--assume-fp8", help="Plan FP8 linear layers on GPUs outside the catalog's FP8 archs (Ada)."),
        service_from: Path | None = typer.Option(
            None, "--service-from", help="bench JSON whose per-request latency spread (rescaled to the plan's "
            "latency) drives the queueing-aware capacity."),
        service_cv: float = typer.Option(
            0.05, "--service-cv", help="Coefficient of variation of the service time when no --service-from "
            "(an estimate; default 0.05)."),
        max_batch: int = typer.Option(
            1, "--max-batch", help="Largest batch of requests one GPU serves at once: tries every limit up to it "
            "and keeps the one with the most throughput per GPU under the p99 SLO with queueing (a free GPU "
            "serves whatever is queued, up to the limit)."),
        workload: Path | None = typer.Option(
            None, "--workload", help="Workload file of `diffbench load` (shapes with weights): one pool per "
            "shape class, sized at its share of --qps, and the total."),
        catalog: Path | None = typer.Option(None, "--catalog", help="YAML file extending/overriding the catalog."),
        replace_anchors: bool = typer.Option(False, "--replace-anchors", help="Fit the time model to the "
                                             "--catalog file's anchors alone (default: they add to the built-in "
                                             "ones)."),
        json_path: Path | None = typer.Option(None, "--json", help="Write the plan as JSON to this path."),
        mkdir: bool = typer.Option(False, "--mkdir", help="Create the missing parent directories of --json."),
        calibrate: Path | None = typer.Option(None, "--calibrate", help="A diffbench bench --json result of "
                                              "--model on --gpu: fit this GPU's η to its per-step times first "
                                              "(--calibrate-force: even for another GPU or model)."),
        calibrate_force: bool = typer.Option(False, "--calibrate-force", help="Use --calibrate even for another GPU or model."),
        gpu_hour_price: float | None = typer.Option(
            None, "--gpu-hour-price", help="Price per GPU-hour (any currency): adds the cost per 1,000 outputs "
            "(the plan's GPUs paid all the time: price x GPUs / QPS x 1000 / 3600)."),
    ) -> None:
        """Derive a serving configuration: lossless, lossy, multi-GPU, few-step, capacity, signals.

        Exit 1 (gate failed) when the chosen configuration misses --slo-p99; the plan is printed
        (and written to --json) first."""
        from pydantic import ValidationError

        from diffbench.cli.options import config_error
        from diffbench.core.console import make_console
        from diffbench.core.jsonio import write_json_atomic
        from diffbench.core.outpath import check_output_file
        from diffbench.errors import ShapeError, UsageError
        from diffbench.ledger.catalog import get_model, load_catalog
        from diffbench.ledger.options import BOUNDS, MIN_QPS, Bound, check_numbers, check_size
        from diffbench.ledger.tokens import check_text_tokens, shape_option, size_option
        from diffbench.plan.derive import plan as derive
        from diffbench.plan.models import PlanConfig
        from diffbench.plan.render import plan_renderable

        if (size is None) == (workload is None):
            raise UsageError("pass --size WIDTHxHEIGHT for one shape or --workload FILE for a mix of shapes "
                             "(exactly one of them)")
        if size is not None:
            width, height = size_option(size)
            check_size(size, width, height)
        else:
            width, height = 1024, 1024  # replaced by each pool's shape
        check_numbers(steps=steps, frames=frames, cfg=cfg, text_tokens=text_tokens, gpus_per_node=gpus_per_node,
                      slo_p99_s=slo_p99, qps=qps, quality_budget_db=quality_budget, headroom=headroom,
                      max_batch=max_batch)
        Bound("--service-cv", 0, 1, "coefficient of variation of the service time").check(service_cv)
        if qps < MIN_QPS:
            raise UsageError(f"--qps {qps:g}: must be at least {MIN_QPS:g} (one request every ~3 hours; "
                             "slower, the simulated arrival times lose the service time's precision): in "
                             f"[{MIN_QPS:g}, {BOUNDS['qps'].hi:.0e}] requests per second")
        if lossy and quality_budget is None:
            raise UsageError("--lossy without --quality-budget: lossy steps need a PSNR budget and none is taken "
                             "without one (the plan stays lossless); pass --quality-budget DB, e.g. 30, or drop --lossy")
        if gpu_hour_price is not None:
            from diffbench.core.workcost import price_error

            if why := price_error(gpu_hour_price):
                raise UsageError(f"--gpu-hour-price {why}")
        if service_from is not None and service_cv != 0.05:
            raise UsageError("--service-cv and --service-from both set the service-time spread; pass one")
        if json_path is not None:
            check_output_file(json_path, "--json", mkdir=mkdir)
        cat = load_catalog(catalog, replace_anchors)
        check_text_tokens(model.strip().lower(), get_model(cat, model), text_tokens)
        samples = None
        if service_from is not None:
            from diffbench.plan.sizing import load_bench_samples

            samples = load_bench_samples(service_from)
        if workload is not None:
            from diffbench.load.client.workload import load_workload

            if steps is not None or frames is not None:
                raise UsageError("--steps/--frames with --workload: each pool's steps and frames come from its shape "
                                 "in the workload file; drop the flags or edit the file")
            wl = load_workload(workload)  # validate the file before any planning
            spec = cat.models.get(model.strip().lower())
            if spec is not None and wl.kind != spec.kind:
                raise UsageError(f"--workload {workload}: {'an' if wl.kind == 'image' else 'a'} {wl.kind} workload for "
                                 f"{spec.display_name}, {'an' if spec.kind == 'image' else 'a'} {spec.kind} model; set kind: {spec.kind}" + (" with frames on every shape" if spec.kind == "video"
                                                                   else " and drop frames"))
            shapes = [(s.width, s.height, s.steps, s.frames, s.weight) for s in wl.shapes]
        if calibrate is not None:
            from diffbench.ledger.calibrate import apply_calibration, describe

            cat, cal = apply_calibration(cat, calibrate, model, gpu, calibrate_force)
            typer.echo(describe(cal))  # type: ignore[arg-type]
        try:
            pc = PlanConfig(model=model, width=width, height=height, frames=frames, steps=steps, cfg=cfg,
                            text_tokens=text_tokens, gpu=gpu, gpus_per_node=gpus_per_node, slo_p99_s=slo_p99,
                            qps=qps, quality_budget_db=quality_budget, allow_lossy=lossy is not False,
                            allow_model_swap=allow_model_swap, headroom=headroom, assume_fp8=assume_fp8,
                            service_cv=service_cv, service_from=str(service_from) if service_from else None,
                            max_batch=max_batch)
        except ValidationError as exc:
            raise config_error(exc) from None
        if workload is not None:
            from diffbench.plan.pools import plan_pools

            result = plan_pools(cat, pc, shapes, workload, samples)
        else:
            try:
                result = derive(cat, pc, samples)
            except ShapeError as exc:
                raise ShapeError(f"{shape_option(str(exc), str(size))}: {exc}") from None
        if service_from is not None:
            from diffbench.plan.sizing import source_warnings

            model_spec = cat.models.get(model.strip().lower())
            extra = source_warnings(service_from, model, model_spec.display_name if model_spec else model, gpu)
            result = result.model_copy(update={"warnings": [*extra, *result.warnings]})
        if gpu_hour_price is not None:
            from diffbench.plan.cost import plan_cost

            gpus = result.pool_plan.total_gpus if result.pool_plan is not None else result.total_gpus
            result = result.model_copy(update={"cost": plan_cost(gpus, qps, gpu_hour_price)})
        make_console(min_width=140).print(plan_renderable(result))
        if json_path is not None:
            write_json_atomic(json_path, result.model_dump(mode="json"))
        _slo_gate(result, slo_p99)


def _slo_gate(result: PlanResult, slo_p99: float) -> None:
    """GateFailed (exit 1) when the chosen configuration, or a pool of a workload plan, misses the p99 SLO."""
    from diffbench.errors import GateFailed

    if result.pool_plan is not None:
        missed = [r.shape for r in result.pool_plan.rows if not r.slo_met]
        if missed:
            raise GateFailed(f"the plan misses --slo-p99 {slo_p99:g} for the pool(s) {'; '.join(missed)} (see the "
                             "pools table); relax the SLO, or allow more (--quality-budget, --allow-model-swap, "
                             "--gpus-per-node)")
        return
    if not result.slo_met:
        p99 = result.sizing.p99_s if result.sizing is not None else result.latency_s
        where = f" (stopped at {result.stopped_at})" if result.stopped_at else ""
        raise GateFailed(f"the plan misses --slo-p99 {slo_p99:g}: its p99 with queueing is {p99:.2f} s{where}; "
                         "relax the SLO, or allow more (--quality-budget, --allow-model-swap, --gpus-per-node)")
