"""Tiny LoRA adapters for tiny-flux, made offline with PEFT (no download): each adds rank-4 LoRA layers to
the attention projections of the denoiser with seeded random A and B matrices and saves them with
``FluxPipeline.save_lora_weights`` — so two adapters change the picture, and differently."""

from __future__ import annotations

import copy
from pathlib import Path

TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]


def make_adapters(root: Path, names: tuple[str, ...] = ("a", "b")) -> dict[str, str]:
    """Write one adapter directory per name under ``root``; returns ``{name: directory}``."""
    import torch
    from diffusers import FluxPipeline
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    from diffbench.engines.config import EngineConfig
    from diffbench.engines.registry import create_engine

    eng = create_engine(EngineConfig(engine="diffusers", model="tiny-flux"))
    eng.start()
    try:
        out = {}
        for k, name in enumerate(names):
            tr = copy.deepcopy(eng.pipe.transformer)
            tr.add_adapter(LoraConfig(r=4, lora_alpha=4, target_modules=TARGETS, init_lora_weights="gaussian"))
            gen = torch.Generator().manual_seed(1000 + k)
            with torch.no_grad():
                for pname, p in tr.named_parameters():
                    if "lora_B" in pname:  # gaussian init leaves B at zero: no effect until set
                        p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            d = root / name
            FluxPipeline.save_lora_weights(str(d), transformer_lora_layers=get_peft_model_state_dict(tr))
            out[name] = str(d)
        return out
    finally:
        eng.stop()
