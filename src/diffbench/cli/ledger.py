"""``diffbench ledger``: FLOPs, time and memory of the three stages on one GPU (no torch)."""

from __future__ import annotations

from pathlib import Path

import typer


def _config_error(exc: Exception) -> Exception:
    """A pydantic error on a config model as a one-line :class:`UsageError` naming the real flag."""
    from diffbench.errors import UsageError
    from diffbench.ledger.options import flag_of

    errs = getattr(exc, "errors", None)
    if callable(errs):
        e = errs()[0]
        field = flag_of(str(e["loc"][0])) if e["loc"] else "input"
        return UsageError(f"{field} {e.get('input')!r}: {e['msg']}")
    return UsageError(str(exc))


def register(app: typer.Typer) -> None:
    @app.command("ledger")
    def ledger(
        model: str = typer.Option(..., "--model", help="Model id, e.g. flux.1-dev (see the catalog)."),
        size: str = typer.Option(..., "--size", help="WIDTHxHEIGHT in pixels, e.g. 1024x1024."),
        gpu: str = typer.Option(..., "--gpu", help="GPU id, e.g. h100-sxm."),
        steps: int | None = typer.Option(None, "--steps", help="Denoising steps (default: the model's)."),
        frames: int | None = typer.Option(None, "--frames", help="Frames for video models (4k+1)."),
        cfg: float | None = typer.Option(None, "--cfg", help="Guidance scale; > 1 means 2 forwards/step for CFG models."),
        text_tokens: int | None = typer.Option(None, "--text-tokens", help="Text tokens (prompt-dependent models)."),
        precision: str = typer.Option("bf16", "--precision", help="Denoiser weights/linear: bf16, fp8, int4."),
        attention: str = typer.Option("sdpa", "--attention", help="Attention backend: sdpa, fa3, sage8."),
        compile_: bool = typer.Option(False, "--compile", help="Assume torch.compile (calibrated η)."),
        vae_tiling: bool = typer.Option(False, "--vae-tiling", help="Tiled VAE decode."),
        offload: str = typer.Option("none", "--offload", help="none, model, group, sequential."),
        eta_gemm: float | None = typer.Option(None, "--eta-gemm", help="Override the GEMM efficiency (0-1]."),
        eta_attn: float | None = typer.Option(None, "--eta-attn", help="Override the attention efficiency (0-1]."),
        eta_vae: float | None = typer.Option(None, "--eta-vae", help="Override the VAE efficiency (0-1]."),
        margin: float | None = typer.Option(None, "--margin", help="Memory margin, fraction (default 0.10)."),
        measured_s: float | None = typer.Option(None, "--measured-s", help="Measured seconds per request → MFU."),
        gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="GPUs per node for the multi-GPU table."),
        catalog: Path | None = typer.Option(None, "--catalog", help="YAML file extending/overriding the catalog."),
        json_path: Path | None = typer.Option(None, "--json", help="Write the result as JSON to this path."),
        mkdir: bool = typer.Option(False, "--mkdir", help="Create the missing parent directories of --json."),
    ) -> None:
        """FLOPs, time and memory per stage (text encode, denoise, VAE decode) on one GPU."""
        from pydantic import ValidationError
        from rich.console import Console

        from diffbench.core.jsonio import write_json_atomic
        from diffbench.core.outpath import check_output_file
        from diffbench.errors import ModelError, ShapeError
        from diffbench.ledger.account import LedgerConfig, evaluate, fit_suggestions
        from diffbench.ledger.catalog import load_catalog
        from diffbench.ledger.multigpu import parallel_options
        from diffbench.ledger.options import check_numbers, check_size
        from diffbench.ledger.render import ledger_renderable
        from diffbench.ledger.tokens import parse_size, shape_option

        width, height = parse_size(size)
        check_size(size, width, height)
        check_numbers(steps=steps, frames=frames, cfg=cfg, text_tokens=text_tokens, eta_gemm=eta_gemm,
                      eta_attn=eta_attn, eta_vae=eta_vae, margin=margin, measured_s=measured_s,
                      gpus_per_node=gpus_per_node)
        if json_path is not None:
            check_output_file(json_path, "--json", mkdir=mkdir)
        cat = load_catalog(catalog)
        try:
            lc = LedgerConfig(model=model, width=width, height=height, frames=frames, steps=steps, cfg=cfg,
                              text_tokens=text_tokens, gpu=gpu, precision=precision, attention=attention,
                              compile=compile_, vae_tiling=vae_tiling, offload=offload, eta_gemm=eta_gemm,
                              eta_attn=eta_attn, eta_vae=eta_vae, margin=margin, measured_s=measured_s)
        except ValidationError as exc:
            raise _config_error(exc) from None
        try:
            result = evaluate(cat, lc)
        except ShapeError as exc:
            raise ShapeError(f"{shape_option(str(exc), size)}: {exc}") from None
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
        Console(width=max(Console().width, 150)).print(ledger_renderable(result, suggestions, parallel, gpus_per_node))
        if json_path is not None:
            data = result.model_dump(mode="json")
            data["fit_suggestions"] = suggestions or []
            data["parallel"] = [p.model_dump(mode="json") for p in parallel]
            write_json_atomic(json_path, data)
