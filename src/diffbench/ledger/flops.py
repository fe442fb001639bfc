"""FLOPs per stage: denoiser forward, text encoders, VAE decode (derivation: docs/concepts/time-model.md).

FLOPs = 2 × MACs. Denoiser forward (batch 1): linear 2·P_tok·N + self-attention core 4·N²·d per layer
+ cross-attention core 4·N_v·N_t·d + text-side K/V 2·(2d²)·N_t, summed over block groups. The per-token linear counts match the diffusion MFU counter of verl-omni
(verl-project/verl-omni:verl_omni/utils/mfu/diffusion_flops_counter.py, qwen_image.py, wan.py).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from diffbench.ledger.schema import ModelSpec
from diffbench.ledger.tokens import Tokens

_REF_PX = 1024 * 1024


class ForwardFlops(BaseModel):
    """One denoiser forward, batch 1. ``linear`` includes convolutions for a UNet."""

    model_config = ConfigDict(frozen=True)

    linear: float
    attention: float

    @property
    def total(self) -> float:
        return self.linear + self.attention

    @property
    def attention_share(self) -> float:
        return self.attention / self.total if self.total else 0.0


def forward_flops(model: ModelSpec, tokens: Tokens, width: int, height: int) -> ForwardFlops:
    """Per-forward FLOPs of the denoiser (one expert for mixture-of-experts models)."""
    den = model.denoiser
    if den.arch == "unet":
        assert den.unet is not None
        unet = den.unet
        linear = unet.nonattn_flops_at_1024 * (width * height) / _REF_PX
        attention = 0.0
        n_t = tokens.text_cross or 77
        for lvl in unet.attention_levels:
            n = (width // lvl.downsample) * (height // lvl.downsample)
            attention += lvl.layers * (4.0 * n * n * lvl.channels + 4.0 * n * n_t * lvl.channels)
        return ForwardFlops(linear=linear, attention=attention)
    d = float(den.hidden)
    linear = attention = 0.0
    for g in den.blocks:
        n = tokens.seq if g.seq == "joint" else tokens.visual
        p_tok = g.tok_params_d2 * d * d + g.tok_params_ffn * d * den.ffn
        lin = 2.0 * p_tok * n + 2.0 * g.text_kv_d2 * d * d * tokens.text_cross
        if not g.self_attn:
            att = 0.0
        elif den.attention_kind == "linear":  # ReLU linear attention: KᵀV then Q(KᵀV), 4·N·d·head_dim
            att = 4.0 * n * d * den.head_dim
        else:
            att = 4.0 * n * n * d
        if g.cross_attn:
            att += 4.0 * n * tokens.text_cross * d
        linear += g.count * lin
        attention += g.count * att
    return ForwardFlops(linear=linear, attention=attention)


def forwards_per_step(model: ModelSpec, cfg: float | None) -> int:
    """Denoiser forwards per step: 2 with classic/true CFG (scale > 1), else 1 (the decision order of
    ``get_forward_passes_per_step`` in verl-project/verl-omni:verl_omni/utils/mfu/diffusion_flops_counter.py).

    Guidance-distilled (FLUX.1-dev, HunyuanVideo) and un-guided (FLUX.1-schnell) models count 1.
    """
    if model.guidance != "cfg":
        return 1
    scale = model.default_cfg if cfg is None else cfg
    return 2 if scale > 1.0 else 1


def text_encode_flops(model: ModelSpec, cfg_forwards: int, text_tokens: int | None = None) -> float:
    """Text encoders: 2·P·N_txt each, twice when CFG encodes a negative prompt (docs/concepts/time-model.md)."""
    total = 0.0
    for enc in model.text_encoders:
        n = enc.tokens
        if text_tokens is not None and enc.tokens > 77:
            n = text_tokens
        total += 2.0 * (enc.lm_params or enc.params) * n
    return total * (2 if cfg_forwards == 2 else 1)


def vae_decode_flops(model: ModelSpec, width: int, height: int, latent_frames: int) -> float:
    """VAE decode FLOPs: 2D = convs ∝ pixels + single-head mid-attention 4·N²·c over (H/8)·(W/8) tokens;
    3D = FLOPs per megapixel per latent frame × frames (chunked causal decode,
    Wan-Video/Wan2.1@9737cba:wan/modules/vae.py decode loop L544-568)."""
    vae = model.vae
    px = width * height
    if vae.kind == "3d":
        assert vae.flops_per_mpx_per_latent_frame is not None
        return vae.flops_per_mpx_per_latent_frame * px / 1e6 * latent_frames
    assert vae.conv_flops_at_1024 is not None
    c = vae.spatial_compression
    n = (width // c) * (height // c)
    return vae.conv_flops_at_1024 * px / _REF_PX + 4.0 * n * n * vae.mid_attn_channels


def derived_params(model: ModelSpec) -> float:
    """Denoiser parameters derived from the block layout: Σ count·(w·d² + w_ffn·d·ffn) + embedders.

    Per-block weights counted layer by layer (MMDiT 36d², FLUX single 15d², Wan 8d² + 2·d·ffn; the count is in
    docs/concepts/time-model.md).
    For a UNet this returns the catalog's ``params`` (no block layout)."""
    den = model.denoiser
    if den.arch == "unet":
        return den.params
    d = float(den.hidden)
    total = sum(g.count * (g.weights_d2 * d * d + g.weights_ffn * d * den.ffn) for g in den.blocks)
    return total + den.extra_params
