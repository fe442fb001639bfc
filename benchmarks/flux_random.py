"""A FLUX-architecture diffusers pipeline with random weights, saved to a local directory (no download).

The denoiser has the sizes of FLUX.1-dev (``transformer/config.json`` of black-forest-labs/FLUX.1-dev on the
Hugging Face hub, which are also the defaults of diffusers' ``FluxTransformer2DModel``): 19 double-stream and
38 single-stream blocks, 24 heads × 128 (hidden 3072), joint attention dim 4096, pooled projection 768,
64 input channels, guidance embedding; the VAE is diffusers' ``AutoencoderKL`` with FLUX's 16 latent channels.
The text encoders are the embedded tiny ones of diffbench (random weights): the figures of interest — per-step
time, MFU against the ledger, the VAE decode peak — come from the denoiser and the VAE, whose sizes are real.

Usage::

    python benchmarks/flux_random.py OUT_DIR [--scale 1.0] [--dtype bfloat16]

``--scale`` < 1 shrinks the block counts and width (a CPU smoke test of the script, not a FLUX).
"""

from __future__ import annotations

import argparse


def build(scale: float, dtype: str):  # type: ignore[no-untyped-def]
    import torch
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel

    from diffbench.engines.tiny import _clip_text, _clip_tokenizer, _t5_encoder, _t5_tokenizer

    torch.manual_seed(0)
    heads = max(2, round(24 * scale))
    transformer = FluxTransformer2DModel(
        patch_size=1, in_channels=64, num_layers=max(1, round(19 * scale)), num_single_layers=max(1, round(38 * scale)),
        attention_head_dim=128 if scale >= 1 else 16, num_attention_heads=heads,
        joint_attention_dim=32, pooled_projection_dim=32, guidance_embeds=True, axes_dims_rope=(16, 56, 56)
        if scale >= 1 else (4, 6, 6),
    )
    # joint/pooled dims follow the tiny text encoders (32); the ledger counts the denoiser's blocks, which
    # dominate its FLOPs at 1024² (the context projection is one linear layer).
    width = (128, 256, 512, 512) if scale >= 1 else (16, 32, 32, 32)
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=16, block_out_channels=width,
                        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
                        layers_per_block=2, shift_factor=0.1159, scaling_factor=0.3611, use_quant_conv=False,
                        use_post_quant_conv=False, norm_num_groups=32 if scale >= 1 else 8)
    sched = FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                                            base_image_seq_len=256, max_image_seq_len=4096)
    clip_tok, t5_tok = _clip_tokenizer(), _t5_tokenizer()
    pipe = FluxPipeline(scheduler=sched, vae=vae, text_encoder=_clip_text(clip_tok), tokenizer=clip_tok,
                        text_encoder_2=_t5_encoder(t5_tok), tokenizer_2=t5_tok, transformer=transformer)
    return pipe.to(getattr(torch, dtype))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()
    pipe = build(a.scale, a.dtype)
    pipe.save_pretrained(a.out)
    n = sum(p.numel() for p in pipe.transformer.parameters())
    print(f"{a.out}: FluxPipeline, denoiser {n / 1e9:.2f} B parameters ({a.dtype})")


if __name__ == "__main__":
    main()
