"""Fused QKV projections: which pipelines offer them, and fusing them on a loaded pipeline.

Fusing concatenates the query, key and value projection weights of each self-attention layer into one
``to_qkv`` Linear (key and value into ``to_kv`` for cross-attention): one matmul instead of three, the same
arithmetic, so the output equals the unfused one up to float rounding. Where diffusers offers it
(huggingface/diffusers ``src/diffusers/models/attention.py``, ``AttentionMixin.fuse_qkv_projections``, and
``src/diffusers/pipelines/pipeline_utils.py``, ``StableDiffusionMixin.fuse_qkv_projections``):

==========================  ==========================================================================
pipeline class              what is fused
==========================  ==========================================================================
FluxPipeline                ``transformer.fuse_qkv_projections()`` (FluxAttnProcessor reads ``to_qkv``)
WanPipeline                 ``transformer.fuse_qkv_projections()`` (WanAttnProcessor reads ``to_qkv``)
StableDiffusion3Pipeline    ``transformer.fuse_qkv_projections()`` (sets FusedJointAttnProcessor2_0)
StableDiffusionXLPipeline   ``pipe.fuse_qkv_projections()``: UNet and VAE (sets FusedAttnProcessor2_0)
StableDiffusionPipeline     ``pipe.fuse_qkv_projections()``: UNet and VAE (sets FusedAttnProcessor2_0)
==========================  ==========================================================================

QwenImagePipeline is not fused: its attention processor (QwenDoubleStreamAttnProcessor2_0) computes Q, K and
V with separate projections, so fused weights would never be used. Nothing here imports torch or diffusers
until :func:`fuse_projections` runs.
"""

from __future__ import annotations

from typing import Any

from diffbench.errors import UsageError

FUSION: dict[str, str] = {
    "FluxPipeline": "denoiser",
    "WanPipeline": "denoiser",
    "StableDiffusion3Pipeline": "denoiser",
    "StableDiffusionXLPipeline": "pipeline",
    "StableDiffusionPipeline": "pipeline",
}
"""Pipeline class → where ``fuse_qkv_projections`` is called: on the ``denoiser`` (transformer) or the
``pipeline`` (StableDiffusionMixin: UNet and VAE)."""
_NOT_FUSED = {
    "QwenImagePipeline": "its attention processor (QwenDoubleStreamAttnProcessor2_0) computes Q, K and V with "
    "separate projections, so fused weights would not be used",
}


def fusion_unavailable(pipeline_class: str) -> str | None:
    """Why ``--fuse-projections`` cannot be used with ``pipeline_class``; None when it can (no torch import).

    Returns:
        One sentence naming ``--fuse-projections``, the pipeline and the reason, or None.
    """
    if pipeline_class in FUSION:
        return None
    why = _NOT_FUSED.get(pipeline_class, "diffusers offers no fused QKV projections for it here")
    return (f"--fuse-projections: {pipeline_class} cannot fuse its QKV projections ({why}); pipelines that "
            f"can: {', '.join(FUSION)}")


def fusion_supported(pipeline_class: str) -> bool:
    """True when ``--fuse-projections`` applies to ``pipeline_class`` (:func:`fusion_unavailable` is None)."""
    return fusion_unavailable(pipeline_class) is None


def fuse_projections(pipe: Any) -> None:
    """Fuse the QKV projections of the loaded pipeline ``pipe`` in place (see :data:`FUSION`).

    Call it before quantizing (fusion reads the float weights) and before ``torch.compile``.

    Raises:
        UsageError: the pipeline class cannot fuse (:func:`fusion_unavailable`), or the installed diffusers
            has no ``fuse_qkv_projections`` where :data:`FUSION` expects one.
    """
    cls = type(pipe).__name__
    reason = fusion_unavailable(cls)
    if reason is not None:
        raise UsageError(reason)
    target = pipe if FUSION[cls] == "pipeline" else getattr(pipe, "transformer", None)
    fuse = getattr(target, "fuse_qkv_projections", None)
    if not callable(fuse):
        raise UsageError(f"--fuse-projections: {type(target).__name__} of {cls} has no fuse_qkv_projections in "
                         f"the installed diffusers; drop --fuse-projections or upgrade diffusers")
    fuse()
