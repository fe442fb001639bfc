"""``diffbench ledger``: FLOPs, time and memory of the three stages on one GPU (no torch)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from diffbench.cli.options import config_error

if TYPE_CHECKING:
    from diffbench.ledger.account import LedgerConfig, LedgerResult
    from diffbench.ledger.schema import Catalog


def register(app: typer.Typer) -> None:
    @app.command("ledger")
    def ledger(
        model: str | None = typer.Option(None, "--model", help="Model id, e.g. flux.1-dev (see the catalog)."),
        size: str | None = typer.Option(None, "--size", help="WIDTHxHEIGHT in pixels, e.g. 1024x1024."),
        gpu: str | None = typer.Option(None, "--gpu", help="GPU id, e.g. h100-sxm."),
        steps: int | None = typer.Option(None, "--steps", help="Denoising steps (default: the model's)."),
        frames: int | None = typer.Option(None, "--frames", help="Frames for video models (4k+1)."),
        cfg: float | None = typer.Option(None, "--cfg", help="Guidance scale; > 1 means 2 forwards/step for CFG models."),
        text_tokens: int | None = typer.Option(None, "--text-tokens", help="Text tokens (prompt-dependent models)."),
        precision: str = typer.Option("bf16", "--precision", help="Denoiser weights/linear: bf16, fp8, int4, nf4, int8."),
        attention: str = typer.Option("sdpa", "--attention", help="Attention backend: sdpa, flash2, cudnn, fa3, sage, sage8, ck, aiter."),
        compile_: bool = typer.Option(False, "--compile", help="Assume torch.compile (fewer elementwise passes, no launch overhead; fitted)."),
        accumulate: str = typer.Option("fp32", "--accumulate", help="GEMM accumulation: fp32 (PyTorch's), or fp16 "
                                       "for a runtime with FP16-accumulate kernels (GeForce: 2× rate)."),
        vae_tiling: bool = typer.Option(False, "--vae-tiling", help="Tiled VAE decode."),
        offload: str = typer.Option("none", "--offload", help="none, model, group, sequential."),
        eta_gemm: float | None = typer.Option(None, "--eta-gemm", help="Override the GEMM efficiency (0-1]."),
        eta_attn: float | None = typer.Option(None, "--eta-attn", help="Override the attention efficiency (0-1]."),
        eta_vae: float | None = typer.Option(None, "--eta-vae", help="Override the VAE efficiency (0-1]."),
        margin: float | None = typer.Option(None, "--margin", help="Memory margin, fraction (default 0.10)."),
        measured_s: float | None = typer.Option(None, "--measured-s", help="Measured seconds per request → MFU."),
        gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="GPUs per node for the multi-GPU table."),
        batch: int = typer.Option(1, "--batch", help="Requests run as one batch: GEMMs batched, attention, text "
                                  "encode and VAE decode per sample; times are those of the whole batch."),
        catalog: Path | None = typer.Option(None, "--catalog", help="YAML file extending/overriding the catalog."),
        replace_anchors: bool = typer.Option(False, "--replace-anchors", help="Fit the time model to the "
                                             "--catalog file's anchors alone (default: they add to the built-in "
                                             "ones; an anchor with a built-in id replaces it)."),
        json_path: Path | None = typer.Option(None, "--json", help="Write the result as JSON to this path."),
        mkdir: bool = typer.Option(False, "--mkdir", help="Create the missing parent directories of --json."),
        validate: bool = typer.Option(False, "--validate", help="Check the time model against the catalog's "
                                      "published anchors: each predicted by a fit that leaves it out. Exit 1 "
                                      "when a leave-one-out ratio of a non-outlier is outside 0.8-1.25."),
        calibrate: Path | None = typer.Option(None, "--calibrate", help="A diffbench bench --json result of "
                                              "--model on --gpu: fit this GPU's GEMM (and attention) η to its "
                                              "per-step times before accounting."),
        calibrate_force: bool = typer.Option(False, "--calibrate-force", help="Use --calibrate even when the "
                                             "bench ran another GPU or model."),
    ) -> None:
        """FLOPs, time and memory per stage (text encode, denoise, VAE decode) on one GPU.

        With --validate (no --model/--size/--gpu needed): the time model's leave-one-out table over the
        catalog's anchors; exit 1 (gate failed) when a non-outlier ratio is outside 0.8-1.25."""
        if validate:
            given = [flag for flag, v, default in (
                ("--model", model, None), ("--size", size, None), ("--gpu", gpu, None), ("--steps", steps, None),
                ("--frames", frames, None), ("--cfg", cfg, None), ("--text-tokens", text_tokens, None),
                ("--precision", precision, "bf16"), ("--attention", attention, "sdpa"), ("--compile", compile_, False),
                ("--accumulate", accumulate, "fp32"), ("--vae-tiling", vae_tiling, False), ("--offload", offload, "none"),
                ("--eta-gemm", eta_gemm, None), ("--eta-attn", eta_attn, None), ("--eta-vae", eta_vae, None),
                ("--margin", margin, None), ("--measured-s", measured_s, None), ("--gpus-per-node", gpus_per_node, 8),
                ("--batch", batch, 1), ("--calibrate", calibrate, None), ("--calibrate-force", calibrate_force, False),
            ) if v != default]
            if given:
                from diffbench.errors import UsageError

                raise UsageError(f"--validate checks the catalog's anchors and takes no {', '.join(given)}; drop "
                                 f"{'it' if len(given) == 1 else 'them'} (only --catalog, --replace-anchors, --json "
                                 "and --mkdir apply), or leave out --validate to account for one configuration")
            _validate(catalog, json_path, mkdir, replace_anchors)
            return
        from diffbench.errors import UsageError

        missing = [f for f, v in (("--model", model), ("--size", size), ("--gpu", gpu)) if v is None]
        if missing:
            raise UsageError(f"missing {', '.join(missing)}: ledger needs --model, --size and --gpu "
                             "(or --validate)")
        assert model is not None and size is not None and gpu is not None
        from pydantic import ValidationError

        from diffbench.core.console import make_console
        from diffbench.core.jsonio import write_json_atomic
        from diffbench.core.outpath import check_output_file
        from diffbench.errors import ModelError, ShapeError
        from diffbench.ledger.account import LedgerConfig, evaluate, fit_suggestions
        from diffbench.ledger.catalog import get_model, load_catalog
        from diffbench.ledger.multigpu import parallel_options
        from diffbench.ledger.options import check_numbers, check_size
        from diffbench.ledger.render import ledger_renderable
        from diffbench.ledger.tokens import check_text_tokens, shape_option, size_option

        width, height = size_option(size)
        check_size(size, width, height)
        check_numbers(steps=steps, frames=frames, cfg=cfg, text_tokens=text_tokens, eta_gemm=eta_gemm,
                      eta_attn=eta_attn, eta_vae=eta_vae, margin=margin, measured_s=measured_s,
                      gpus_per_node=gpus_per_node, batch=batch)
        if json_path is not None:
            check_output_file(json_path, "--json", mkdir=mkdir)
        cat = load_catalog(catalog, replace_anchors)
        check_text_tokens(model.strip().lower(), get_model(cat, model), text_tokens)
        if calibrate is not None:
            from diffbench.ledger.calibrate import apply_calibration, describe

            cat, cal = apply_calibration(cat, calibrate, model, gpu, calibrate_force)
            assert cal is not None
            typer.echo(describe(cal))
            for sf in cal.shapes:
                typer.echo(f"  {sf.shape}: measured {sf.measured_step_s * 1e3:.2f} ms/step, predicted "
                           f"{sf.predicted_step_s * 1e3:.2f} ms/step ({sf.residual:+.4f} log)")
        try:
            lc = LedgerConfig(model=model, width=width, height=height, frames=frames, steps=steps, cfg=cfg,
                              text_tokens=text_tokens, gpu=gpu, precision=precision, attention=attention,
                              compile=compile_, accumulate=accumulate, vae_tiling=vae_tiling, offload=offload, eta_gemm=eta_gemm,
                              eta_attn=eta_attn, eta_vae=eta_vae, margin=margin, measured_s=measured_s,
                              batch=batch)
        except ValidationError as exc:
            raise config_error(exc) from None
        try:
            result = evaluate(cat, lc)
        except ShapeError as exc:
            raise ShapeError(f"{shape_option(str(exc), size)}: {exc}") from None
        _check_measured(cat, lc, result)
        suggestions = None
        if not result.fits:
            suggestions = fit_suggestions(cat, lc)
            if not suggestions:
                raise ModelError(
                    f"{model} at {size}" + (f" with {result.frames} frames" if result.frames > 1 else "")
                    + f" needs {result.peak_memory_bytes / 2**30:.1f} GiB and fits no single GPU in the catalog "
                    "even with tiling, offload or fp8; use a smaller size or fewer frames, or split it across "
                    f"GPUs (diffbench plan --model {model} --size {size} ... shows TP/sequence-parallel layouts)")
        parallel = parallel_options(cat, result, gpus_per_node)
        make_console(min_width=150).print(ledger_renderable(result, suggestions, parallel, gpus_per_node))
        if json_path is not None:
            data = result.model_dump(mode="json")
            data["fit_suggestions"] = suggestions or []
            data["parallel"] = [p.model_dump(mode="json") for p in parallel]
            write_json_atomic(json_path, data)


def _check_measured(cat: Catalog, lc: LedgerConfig, result: LedgerResult) -> None:
    """Refuse a ``--measured-s`` faster than the peak allows: the request's FLOPs at the BF16 dense peak (× 4, the
    fastest tensor-core format, when the denoiser or the attention runs in fewer bits)."""
    from diffbench.errors import UsageError

    mfu = result.measured_mfu
    backend = cat.optimizations.attention_backends.get(lc.attention)
    low_bits = lc.precision != "bf16" or (backend is not None and not backend.lossless)
    limit = 4.0 if low_bits else 1.0
    if mfu is not None and mfu > limit:
        fastest = result.total_flops / (cat.gpus[lc.gpu.strip().lower()].bf16_tflops * 1e12 * limit)
        raise UsageError(f"--measured-s {lc.measured_s:g}: faster than the peak allows (MFU {mfu:.3g} > {limit:g}: "
                         f"{result.total_flops:.3g} FLOPs take at least {fastest:.3g} s on a {result.gpu_name}); "
                         "pass the measured seconds per request")


def _validate(catalog: Path | None, json_path: Path | None, mkdir: bool, replace_anchors: bool = False) -> None:
    """``ledger --validate``: print the leave-one-out table; GateFailed when a non-outlier is off target."""
    from diffbench.core.console import make_console
    from diffbench.core.jsonio import write_json_atomic
    from diffbench.core.outpath import check_output_file
    from diffbench.errors import GateFailed
    from diffbench.ledger.catalog import load_catalog
    from diffbench.ledger.fit import TARGET, by_group, fitted_params, validate
    from diffbench.ledger.render import validate_table

    if json_path is not None:
        check_output_file(json_path, "--json", mkdir=mkdir)
    cat = load_catalog(catalog, replace_anchors)
    fitted = [a.id for a in cat.anchors if a.outlier is None]
    if len(fitted) == 1:
        from diffbench.errors import InputError

        raise InputError(f"--catalog {catalog}: anchors: the leave-one-out check needs at least two anchors that are "
                         f"not outliers and has one ({fitted[0]}); add anchors, or drop --replace-anchors so "
                         "the built-in ones stay")
    rows = validate(cat)
    fr = fitted_params(cat)
    groups = by_group(cat, rows, fr)
    make_console(min_width=150).print(validate_table(rows, fr, groups))
    bad = [r for r in rows if r.anchor.outlier is None and not TARGET[0] <= r.ratio <= TARGET[1]]
    if json_path is not None:
        write_json_atomic(json_path, {
            "kind": "diffbench.ledger.validate", "schema_version": 1, "target": list(TARGET),
            "fit": {"eta_gemm": fr.eta_gemm, "eta_attn": {f"{b}@{a}": v for (b, a), v in fr.eta_attn.items()},
                    "passes_eager": fr.passes[False], "passes_compiled": fr.passes[True],
                    "launch_eager_s": fr.launch[False], "free": fr.free, "anchors": fr.n_anchors,
                    "rms_log_residual": fr.rms_log_residual, "gemm_arch": fr.gemm_arch, "elem_arch": fr.elem_arch,
                    "tflops_per_watt": fr.tflops_per_watt},
            "by_arch": [{"arch": g.group, "anchors": g.anchors, "within_target": g.within,
                         "min_ratio": g.min_ratio, "max_ratio": g.max_ratio, "gemm_factor": g.gemm_factor,
                         "elementwise_factor": g.elementwise_factor} for g in groups],
            "rows": [{**r.anchor.model_dump(mode="json"), "loo_s": r.loo_s, "in_sample_s": r.in_sample_s,
                      "ratio": r.ratio, "within_target": TARGET[0] <= r.ratio <= TARGET[1]} for r in rows],
            "passed": not bad})
    if bad:
        names = ", ".join(f"{r.anchor.id} ({r.ratio:.2f})" for r in bad)
        raise GateFailed(f"time model: leave-one-out ratio outside {TARGET[0]}-{TARGET[1]} for {names}; fix the "
                         "anchor, or mark it outlier: \"reason\" in the catalog")
