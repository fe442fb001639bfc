"""Stage and step timing of a diffusers pipeline: a thin wrapper over :mod:`diffbench.engines.instrument.pipeline`.

``bench``, ``sweep`` and ``serve`` time a pipeline with the same instrumentation (one implementation); this
module keeps the older three-value interface for callers that want no signals.
"""

from __future__ import annotations

import time
from typing import Any

from diffbench.engines.base import MemoryStats, StageTimes


class StageTimer:
    """Attach to a pipeline; :meth:`run` calls it and returns (output, StageTimes, MemoryStats).

    Args:
        pipe: a diffusers pipeline with ``encode_prompt``, ``vae``, ``scheduler`` and ``transformer``/``unet``.
        device: ``"cuda..."`` uses CUDA events and memory counters; anything else the host clock.
        enabled: False runs the pipeline bare (no hooks) — used to measure the instrumentation overhead.
    """

    def __init__(self, pipe: Any, device: str, enabled: bool = True) -> None:
        from diffbench.engines.instrument.pipeline import attach

        self.pipe = pipe
        self.cuda = device.startswith("cuda")
        self.enabled = enabled
        self.last_denoiser_batch = 0
        self.inst = attach(pipe, device=device, flops=False) if enabled else None

    def run(self, kwargs: dict[str, Any], requested_batch: int) -> tuple[Any, StageTimes | None, MemoryStats]:
        """Call the pipeline with ``kwargs``; returns its output, the stage split and peak memory."""
        self.requested_batch = requested_batch
        if self.inst is None:
            import torch

            t0 = time.perf_counter_ns()
            out = self.pipe(**kwargs)
            if self.cuda:
                torch.cuda.synchronize()
            total = (time.perf_counter_ns() - t0) / 1e9
            return out, StageTimes(total_s=total, other_s=total), MemoryStats(kind="none")
        out, stages, memory, _ = self.inst.run(kwargs, requested_batch)
        self.last_denoiser_batch = self.inst.last_denoiser_batch
        return out, stages, memory

    def detach(self) -> None:
        """Remove every hook and instance wrapper, restoring the pipeline."""
        if self.inst is not None:
            self.inst.detach()
