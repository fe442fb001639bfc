"""A FLUX-architecture diffusers ``FluxPipeline`` with random weights, saved to a local directory (no download).

At ``--scale 1`` (the default) the denoiser has the sizes of FLUX.1-dev: ``transformer/config.json`` of
black-forest-labs/FLUX.1-dev on the Hugging Face hub, which are also the defaults of diffusers'
``FluxTransformer2DModel`` (checked with diffusers 0.42.1): 19 double-stream and 38 single-stream blocks,
24 heads × 128 (hidden 3072), joint attention dim 4096, pooled projection dim 768, 64 input channels,
RoPE axes (16, 56, 56), guidance embedding (FLUX.1-dev is guidance-distilled) — 11.9 B parameters, 23.8 GB
in bfloat16. The VAE is diffusers' ``AutoencoderKL`` with the configuration of FLUX.1-dev's
``vae/config.json`` (16 latent channels, block widths 128/256/512/512, scaling 0.3611, shift 0.1159, no
quant convs), the scheduler that of its ``scheduler/scheduler_config.json``.

The text encoders are tiny (one layer, random weights; the in-memory tokenizers of diffbench's tiny
models) but emit the real widths — T5 4096 per token over 512 tokens, CLIP pooled 768 — so the denoiser's
context and pooled projections run at their real sizes. The figures this pipeline is for (per-step time,
MFU against the ledger, the VAE decode peak) come from the denoiser and the VAE, whose sizes are real; the
text-encode stage is *not* FLUX's (the real T5-XXL is 4.8 B parameters, about 10 ms per request on an H100
by the ledger's account) and its images are noise.

Usage::

    python benchmarks/flux_random.py OUT_DIR [--scale 1.0] [--dtype bfloat16] [--device cuda]

``--scale`` < 1 shrinks the block counts and every width (head dim 16, text widths 32, VAE widths /8): a CPU
smoke test of the script and of the commands that load its output, not a FLUX (its VAE tiles are
256 px instead of 1024, so that tiling matters at 1024x1024). ``--device`` is where the
weights are initialised (default: ``cuda`` when available — seconds instead of minutes at full size); the
saved directory loads on any device. Peak memory at full size: about 24 GB on that device.

Raises:
    SystemExit: OUT_DIR exists and is not empty (pass ``--overwrite``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

FLUX_DEV = {  # black-forest-labs/FLUX.1-dev transformer/config.json = FluxTransformer2DModel's defaults
    "patch_size": 1, "in_channels": 64, "num_layers": 19, "num_single_layers": 38, "attention_head_dim": 128,
    "num_attention_heads": 24, "joint_attention_dim": 4096, "pooled_projection_dim": 768, "guidance_embeds": True,
    "axes_dims_rope": (16, 56, 56),
}


def transformer_config(scale: float) -> dict[str, Any]:
    """FluxTransformer2DModel keyword arguments: FLUX.1-dev's at ``scale`` >= 1, else a shrunk copy
    (blocks × scale, at least 1 double and 1 single; heads × scale, at least 2, of dim 16; text widths 32)."""
    if scale >= 1:
        return dict(FLUX_DEV)
    return {**FLUX_DEV, "num_layers": max(1, round(19 * scale)), "num_single_layers": max(1, round(38 * scale)),
            "attention_head_dim": 16, "num_attention_heads": max(2, round(24 * scale)), "joint_attention_dim": 32,
            "pooled_projection_dim": 32, "axes_dims_rope": (4, 6, 6)}


def text_encoders(joint_dim: int, pooled_dim: int) -> tuple[Any, Any, Any, Any]:
    """(CLIP tokenizer, CLIP text model with hidden ``pooled_dim``, T5 tokenizer (512 tokens), T5 encoder with
    ``d_model`` ``joint_dim``): one layer each, random weights."""
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    from diffbench.engines.tiny import _clip_tokenizer, _t5_tokenizer

    clip_tok, t5_tok = _clip_tokenizer(), _t5_tokenizer(max_len=512)
    clip = CLIPTextModel(CLIPTextConfig(
        vocab_size=len(clip_tok), hidden_size=pooled_dim, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, projection_dim=pooled_dim, hidden_act="quick_gelu",
        max_position_embeddings=clip_tok.model_max_length, bos_token_id=clip_tok.bos_token_id,
        eos_token_id=clip_tok.eos_token_id, pad_token_id=clip_tok.pad_token_id))
    t5 = T5EncoderModel(T5Config(
        vocab_size=len(t5_tok), d_model=joint_dim, d_kv=16, d_ff=64, num_layers=1, num_heads=2,
        relative_attention_num_buckets=8, pad_token_id=t5_tok.pad_token_id, eos_token_id=t5_tok.eos_token_id,
        decoder_start_token_id=t5_tok.pad_token_id))
    return clip_tok, clip, t5_tok, t5


def build(scale: float = 1.0, dtype: str = "bfloat16", device: str = "cpu", seed: int = 0) -> Any:
    """The FluxPipeline (weights in ``dtype`` on ``device``). Raises ValueError for an unknown dtype."""
    import torch
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel

    dt = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}.get(dtype)
    if dt is None:
        raise ValueError(f"--dtype {dtype}: bfloat16, float16 or float32")
    torch.manual_seed(seed)
    cfg = transformer_config(scale)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dt)  # initialise in the target dtype: no float32 copy of 11.9 B parameters
    try:
        with torch.device(device):
            transformer = FluxTransformer2DModel(**cfg)
            vae = AutoencoderKL(  # FLUX.1-dev vae/config.json (widths / 8 when shrunk)
                in_channels=3, out_channels=3, latent_channels=16,
                block_out_channels=(128, 256, 512, 512) if scale >= 1 else (16, 32, 32, 32),
                down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
                layers_per_block=2, norm_num_groups=32 if scale >= 1 else 8,
                sample_size=1024 if scale >= 1 else 256,  # the decode tile (px) when tiling is on
                scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False, use_post_quant_conv=False)
            clip_tok, clip, t5_tok, t5 = text_encoders(cfg["joint_attention_dim"], cfg["pooled_projection_dim"])
    finally:
        torch.set_default_dtype(old)
    sched = FlowMatchEulerDiscreteScheduler(  # FLUX.1-dev scheduler/scheduler_config.json
        num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
        base_image_seq_len=256, max_image_seq_len=4096)
    return FluxPipeline(scheduler=sched, vae=vae, text_encoder=clip, tokenizer=clip_tok, text_encoder_2=t5,
                        tokenizer_2=t5_tok, transformer=transformer)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="output directory (a diffusers pipeline directory: model_index.json)")
    ap.add_argument("--scale", type=float, default=1.0, help="1: FLUX.1-dev sizes; < 1: shrunk (smoke test)")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    ap.add_argument("--device", default=None, help="where to initialise the weights (default: cuda if available)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--overwrite", action="store_true", help="write into a non-empty OUT_DIR")
    a = ap.parse_args(argv)
    if a.out.exists() and any(a.out.iterdir()) and not a.overwrite:
        sys.exit(f"error: {a.out} is not empty (pass --overwrite)")
    import torch

    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    t0 = time.perf_counter()
    pipe = build(a.scale, a.dtype, device, a.seed)
    t1 = time.perf_counter()
    pipe.save_pretrained(a.out)
    t2 = time.perf_counter()
    n = sum(p.numel() for p in pipe.transformer.parameters())
    cfg = pipe.transformer.config
    print(f"{a.out}: FluxPipeline, denoiser {n / 1e9:.3f} B ({n:,}) parameters ({cfg.num_layers} double + "
          f"{cfg.num_single_layers} single blocks, {cfg.num_attention_heads} x {cfg.attention_head_dim}, joint "
          f"{cfg.joint_attention_dim}, pooled {cfg.pooled_projection_dim}), {a.dtype}; built on {device} in "
          f"{t1 - t0:.1f} s, saved in {t2 - t1:.1f} s")


if __name__ == "__main__":
    main()
