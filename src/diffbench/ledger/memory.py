"""Memory per component and stage: weights by precision, denoiser activations, VAE decode peak, offload.

Weight bytes = parameters × bytes per parameter (bf16 2, fp8 1, int4 0.5 + scales).
INT4 (SVDQuant W4A4) also keeps a 16-bit low-rank branch per linear layer, 2 B × rank × (d_in + d_out),
counted as ``optimizations.int4_linear.lowrank_overhead`` × the BF16 denoiser bytes (:func:`lowrank_bytes`).
Activations keep one block's intermediates alive (docs/concepts/time-model.md): per token 2·d bytes for each of
hidden, Q, K, V, O and residual plus the MLP intermediate (2·r·d or 2·ffn bytes), times an fp32-upcast
factor, times 2 when the CFG pair runs batched. All results in bytes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from diffbench.errors import UsageError
from diffbench.ledger.schema import Catalog, ModelSpec
from diffbench.ledger.tokens import Tokens

Precision = Literal["bf16", "fp8", "int4", "nf4", "int8"]
Offload = Literal["none", "model", "group", "sequential"]


class ComponentBytes(BaseModel):
    """Weights of one pipeline component, in bytes, at the precision it is stored in."""

    model_config = ConfigDict(frozen=True)

    component: str        # "denoiser", "text_encoder:<name>", "vae"
    params: float
    precision: str
    bytes: int


def bytes_per_param(catalog: Catalog, precision: str) -> float:
    try:
        return catalog.memory.bytes_per_param[precision]
    except KeyError:
        valid = ", ".join(sorted(catalog.memory.bytes_per_param))
        raise UsageError(f"--precision {precision!r}: unknown; valid values: {valid}") from None


def lowrank_bytes(catalog: Catalog, den_params: float, precision: str) -> int:
    """Bytes of the 16-bit low-rank branch that INT4 (SVDQuant) keeps beside the 4-bit weights; 0 otherwise.

    Rank r on a d_in × d_out layer adds 2·r·(d_in + d_out) bytes against 2·d_in·d_out in BF16: r = 32 at
    d = 3072 gives 2.1 % (square) and 1.3 % (3072 × 12288 MLP), the catalog's ``lowrank_overhead``."""
    if precision != "int4":
        return 0
    return int(den_params * 2.0 * catalog.optimizations.int4_linear.lowrank_overhead)


def component_weights(catalog: Catalog, model: ModelSpec, precision: str = "bf16",
                      text_precision: str = "bf16") -> list[ComponentBytes]:
    """Weights of every component. Mixture-of-experts denoisers keep all experts resident; an INT4
    denoiser includes its 16-bit low-rank branch."""
    den_params = model.denoiser.params * model.experts
    den_bytes = int(den_params * bytes_per_param(catalog, precision)) + lowrank_bytes(catalog, den_params, precision)
    out = [ComponentBytes(component="denoiser", params=den_params, precision=precision, bytes=den_bytes)]
    for enc in model.text_encoders:
        out.append(ComponentBytes(component=f"text_encoder:{enc.name}", params=enc.params, precision=text_precision,
                                  bytes=int(enc.params * bytes_per_param(catalog, text_precision))))
    vae_prec = "fp32" if model.vae.fp32 else "bf16"
    out.append(ComponentBytes(component="vae", params=model.vae.params, precision=vae_prec,
                              bytes=int(model.vae.params * (4 if model.vae.fp32 else 2))))
    return out


def denoise_activation_bytes(catalog: Catalog, model: ModelSpec, tokens: Tokens, batch: int) -> int:
    """Peak activation bytes of one denoiser forward (one block alive), ``batch`` = 2 for batched CFG."""
    den = model.denoiser
    d = den.hidden
    mlp = 2 * den.ffn if den.ffn else 2 * 4 * d
    per_token = 2 * d * 6 + mlp
    return int(per_token * tokens.seq * catalog.memory.activation_fp32_factor * batch)


def vae_decode_peak_bytes(model: ModelSpec, width: int, height: int, tiling: bool) -> int:
    """VAE decode activation peak. 2D: ∝ output pixels (or one tile); 3D: one causal chunk, ∝ H×W.

    With tiling the peak is that of one ``tile_px``² tile (plus 25 % overlap); tiling is ignored for
    decoders that do not support it (AutoencoderKLWan, listed as without tiling in
    huggingface/diffusers@58eb52c:docs/source/en/optimization/memory.md L217)."""
    vae = model.vae
    px = width * height
    if tiling and vae.tiling:
        tile = vae.tile_px * vae.tile_px * 1.25
        px = int(min(px, tile))
    return int(vae.act_bytes_per_px * px)


def resident_weight_bytes(weights: list[ComponentBytes], offload: str, denoiser_blocks: int) -> int:
    """Weights resident on the GPU at the peak for an offload mode.

    ``none``: all; ``model`` (enable_model_cpu_offload): the largest component; ``group`` (block-level with a
    prefetch stream) and ``sequential``: two denoiser blocks or the largest other component, whichever is
    larger (huggingface/diffusers@58eb52c:docs/source/en/optimization/memory.md L221-403)."""
    total = sum(w.bytes for w in weights)
    if offload == "none":
        return total
    largest = max(w.bytes for w in weights)
    if offload == "model":
        return largest
    den = next(w.bytes for w in weights if w.component == "denoiser")
    others = [w.bytes for w in weights if w.component != "denoiser"]
    blocks = max(denoiser_blocks, 1)
    per_layer_other = max(others) / 24 if others else 0  # encoders are offloaded per layer too (24-layer T5)
    return int(max(2 * den / blocks, 2 * per_layer_other))


def offload_bytes_per_request(weights: list[ComponentBytes], offload: str, forwards: int) -> tuple[int, int]:
    """(bytes moved host→device per request, bytes of which move once per denoiser forward)."""
    den = next(w.bytes for w in weights if w.component == "denoiser")
    others = sum(w.bytes for w in weights if w.component != "denoiser")
    if offload == "none":
        return 0, 0
    if offload == "model":
        return den + others, 0
    return others + den * forwards, den
