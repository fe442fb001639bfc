"""Shared helpers for quality tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

# torchvision alexnet().features conv layers: (index, in, out, kernel, stride, padding)
ALEX_CONVS = [(0, 3, 64, 11, 4, 2), (3, 64, 192, 5, 1, 2), (6, 192, 384, 3, 1, 1), (8, 384, 256, 3, 1, 1),
              (10, 256, 256, 3, 1, 1)]


def make_random_alexnet_state(seed: int) -> dict:
    """A random state dict with torchvision AlexNet key names (features.* plus a classifier key)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    sd = {}
    for idx, cin, cout, k, _, _ in ALEX_CONVS:
        sd[f"features.{idx}.weight"] = torch.randn(cout, cin, k, k, generator=g) * 0.05
        sd[f"features.{idx}.bias"] = torch.randn(cout, generator=g) * 0.01
    sd["classifier.1.weight"] = torch.zeros(4, 4)
    return sd


@pytest.fixture()
def random_alexnet_state() -> Callable[[int], dict]:
    return make_random_alexnet_state


@pytest.fixture(scope="session")
def tiny_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight CLIP (32-d towers, byte-level vocabulary) saved with its processor (no download)."""
    return make_tiny_clip(tmp_path_factory.mktemp("clip"))


def make_tiny_clip(d: Path) -> Path:
    """Save the random-weight CLIP of :func:`tiny_clip` into ``d`` (also used by tests/distributed)."""
    import torch
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizer

    torch.manual_seed(0)  # model init only; scores are compared with the same saved weights
    chars = sorted(ByteLevel.alphabet())
    tokens = ["<|startoftext|>", "<|endoftext|>"] + chars + [c + "</w>" for c in chars]
    tok = CLIPTokenizer(vocab={t: i for i, t in enumerate(tokens)}, merges=[], model_max_length=77)
    cfg = CLIPConfig(
        text_config=dict(vocab_size=len(tokens), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, max_position_embeddings=77, eos_token_id=1, bos_token_id=0),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                           image_size=32, patch_size=8),
        projection_dim=16,
    )
    CLIPModel(cfg).save_pretrained(d)
    ip = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    CLIPProcessor(image_processor=ip, tokenizer=tok).save_pretrained(d)
    return d
