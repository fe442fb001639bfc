"""FLOPs per request for ``diffusion_model_flops_total`` and MFU (docs/reference/metrics.md).

Two sources, in this order:

1. **Ledger** (model in the catalog, e.g. ``flux.1-dev``): ``diffbench.ledger.account.evaluate(...).total_flops``
   for the request's width, height, frames and steps: text encoders + denoiser forwards × steps + VAE decode,
   FLOPs = 2 × MACs (a multiply-accumulate counts as two FLOPs, as in Kaplan et al.
   2020, arXiv:2001.08361, §2.1). The GPU does not change FLOPs; ``h100-sxm`` is passed because
   ``evaluate`` needs one.
2. **Measured** (any other model, e.g. ``tiny-flux`` or a local directory): the FLOPs of *one denoiser forward*
   counted with ``torch.utils.flop_counter.FlopCounterMode`` (PyTorch docs: counts matmul/conv/attention FLOPs
   from the dispatched aten ops, 2 per multiply-add), once per input shape, outside the timed request: the first
   request of a new shape keeps a reference to the first forward's inputs, and after the request (its times
   already read) the forward is replayed eagerly (``torch.compiler.set_stance("force_eager")``) with any
   diffusers cache disabled for that one call. Per request: FLOPs per forward × denoiser forwards. Text encode
   and VAE decode are not counted on this path. A cache hit does not lower the count (model FLOPs, as MFU uses).
   Not measured (``flops`` None) when the denoiser carries accelerate offload hooks (``--offload``): the replay
   would move its weights.
"""

from __future__ import annotations

import functools
from typing import Any


@functools.lru_cache(maxsize=256)
def ledger_flops(model: str, width: int, height: int, frames: int | None, steps: int,
                 guidance: float | None) -> float | None:
    """Ledger FLOPs of one request (batch 1); None when ``model`` is not in the catalog or the shape is refused."""
    from diffbench.errors import DiffbenchError
    from diffbench.ledger.account import LedgerConfig, evaluate
    from diffbench.ledger.catalog import load_catalog

    catalog = load_catalog()
    if model not in catalog.models:
        return None
    try:
        res = evaluate(catalog, LedgerConfig(model=model, width=width, height=height, frames=frames,
                                             steps=steps, cfg=guidance, gpu="h100-sxm"))
    except (DiffbenchError, ValueError):
        return None
    return float(res.total_flops)


def count_flops(fn: Any, *args: Any, **kwargs: Any) -> float:
    """FLOPs of ``fn(*args, **kwargs)`` by ``FlopCounterMode`` (no display); runs the call once."""
    from torch.utils.flop_counter import FlopCounterMode

    mode = FlopCounterMode(display=False)
    with mode:
        fn(*args, **kwargs)
    return float(mode.get_total_flops())


def forward_flops(denoiser: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> float:
    """FLOPs of one eager forward of ``denoiser`` on ``args``/``kwargs``, with its diffusers cache (if any)
    disabled for the call and enabled again afterwards."""
    import contextlib

    import torch

    cache_cfg = getattr(denoiser, "_cache_config", None)
    if cache_cfg is not None:
        denoiser.disable_cache()
    stance = getattr(torch.compiler, "set_stance", None)
    ctx = stance("force_eager") if stance is not None else contextlib.nullcontext()
    try:
        with ctx, torch.inference_mode():
            return count_flops(denoiser, *args, **kwargs)
    finally:
        if cache_cfg is not None:
            denoiser.enable_cache(cache_cfg)
