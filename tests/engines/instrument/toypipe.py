"""A pipeline-shaped toy (encode_prompt, transformer, scheduler.step, vae.decode) for the monitor tests.

It has the attributes the instrumentation hooks, so each test controls exactly what a stage does: sleeps
(lower bounds on times), allocations of a known size (memory), a Linear (FLOPs); the ranks tests swap in a
denoiser with collectives (_dist_worker.py).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch


class ToyScheduler:
    def step(self, noise: torch.Tensor, t: int, latents: torch.Tensor) -> torch.Tensor:
        return latents - 0.1 * noise.mean(dim=-1, keepdim=True)


class ToyDenoiser(torch.nn.Module):
    """``y = x @ W.T`` (W: n×k, no bias): 2·m·n·k FLOPs per forward for x of shape (m, k)."""

    def __init__(self, k: int = 8, n: int = 8, sleep_s: float = 0.0, fn: Any = None) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(k, n, bias=False)
        self.sleep_s = sleep_s
        self.fn = fn

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        y = self.lin(hidden_states)
        if self.fn is not None:
            self.fn(hidden_states)
        return y


class ToyVAE:
    def __init__(self, sleep_s: float = 0.0, alloc_bytes: int = 0) -> None:
        self.sleep_s = sleep_s
        self.alloc_bytes = alloc_bytes

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if self.alloc_bytes:
            buf = np.ones(self.alloc_bytes, dtype=np.uint8)  # touches every page: resident
            z = z + float(buf[-1]) - 1.0
            del buf
        return z


class ToyPipe:
    def __init__(self, denoiser: ToyDenoiser | None = None, vae: ToyVAE | None = None,
                 encode_sleep_s: float = 0.0) -> None:
        self.transformer = denoiser or ToyDenoiser()
        self.scheduler = ToyScheduler()
        self.vae = vae or ToyVAE()
        self.encode_sleep_s = encode_sleep_s

    def encode_prompt(self, prompt: str) -> torch.Tensor:
        if self.encode_sleep_s:
            time.sleep(self.encode_sleep_s)
        return torch.zeros(1, 4)

    def __call__(self, prompt: str = "x", num_inference_steps: int = 4, m: int = 4, cfg_calls: int = 1,
                 **kwargs: Any) -> torch.Tensor:
        self.encode_prompt(prompt)
        k = self.transformer.lin.in_features
        x = torch.ones(m, k)
        for i in range(num_inference_steps):
            for _ in range(cfg_calls):
                noise = self.transformer(hidden_states=x)
            x = self.scheduler.step(noise, i, x)
        return self.vae.decode(x)
