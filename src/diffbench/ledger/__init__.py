"""The ledger: FLOPs, memory and time per stage (text encode, denoise, VAE decode) from a data catalog.

Importing this package never imports torch, diffusers or an HTTP client.
"""

from diffbench.ledger.account import LedgerConfig, LedgerResult, Stage, evaluate, fit_suggestions
from diffbench.ledger.catalog import get_gpu, get_model, load_catalog
from diffbench.ledger.flops import (
    ForwardFlops,
    derived_params,
    forward_flops,
    forwards_per_step,
    text_encode_flops,
    vae_decode_flops,
)
from diffbench.ledger.multigpu import ParallelPlan, evaluate_parallel
from diffbench.ledger.schema import Catalog, GpuSpec, ModelSpec
from diffbench.ledger.timing import mfu
from diffbench.ledger.tokens import Tokens, check_shape, count_tokens, size_option

__all__ = [
    "Catalog",
    "ForwardFlops",
    "GpuSpec",
    "LedgerConfig",
    "LedgerResult",
    "ModelSpec",
    "ParallelPlan",
    "Stage",
    "Tokens",
    "check_shape",
    "count_tokens",
    "derived_params",
    "evaluate",
    "evaluate_parallel",
    "fit_suggestions",
    "forward_flops",
    "forwards_per_step",
    "get_gpu",
    "get_model",
    "load_catalog",
    "mfu",
    "size_option",
    "text_encode_flops",
    "vae_decode_flops",
]
