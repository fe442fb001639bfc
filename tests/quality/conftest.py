"""Shared helpers for quality tests."""

from __future__ import annotations

from collections.abc import Callable

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
