"""Stage and step timing of a diffusers pipeline through public hooks (no diffusers changes).

Pieces (shared/reference/offline-setup.md §6):

1. instance attributes wrapping ``pipe.encode_prompt`` and ``pipe.vae.decode`` (the pipeline reaches them
   through ``self.``, so the instance attribute takes precedence; removing it restores the original);
2. a forward pre-hook on the denoiser (``transformer`` or ``unet``) that counts forwards (CFG shows as 2
   calls per step, or as a doubled batch when the pipeline batches CFG) and marks the start of denoising;
3. ``callback_on_step_end``, invoked right after ``scheduler.step``, for the step boundaries.

On CUDA every boundary synchronizes the device before reading the clock; peak memory per stage is read
and reset at each boundary, so the stage holding the peak is known.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from diffbench.engines.base import MemoryStats, StageTimes


class _RssSampler:
    """Samples the process's resident set every ``interval_s`` and remembers the peak and its stage."""

    def __init__(self, stage_of: Callable[[], str], interval_s: float = 0.005) -> None:
        import psutil

        self._proc = psutil.Process()
        self._stage_of = stage_of
        self._interval = interval_s
        self._stop = threading.Event()
        self.base = self._proc.memory_info().rss
        self.peak = self.base
        self.peak_stage = "other"
        self._thread = threading.Thread(target=self._run, name="diffbench-rss", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def sample(self) -> None:
        rss = self._proc.memory_info().rss
        if rss > self.peak:
            self.peak = rss
            self.peak_stage = self._stage_of()

    def __enter__(self) -> _RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def _read_status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_hwm() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) of this process: ``echo 5 > /proc/self/clear_refs``."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


class _HwmTracker:
    """Peak resident set per stage from the kernel's high-water mark (Linux), with no sampling thread.

    At every stage boundary the high-water mark is read and reset (``/proc/self/clear_refs``), so the peak
    of each stage is exact and the instrumentation costs a few microseconds per boundary.
    """

    def __init__(self) -> None:
        self.base = _read_status_kib("VmRSS:") or 0
        self.peak = self.base
        self.peak_stage = "other"
        _reset_hwm()

    @staticmethod
    def available() -> bool:
        return _read_status_kib("VmHWM:") is not None and _reset_hwm()

    def mark(self, stage: str) -> None:
        hwm = _read_status_kib("VmHWM:") or 0
        if hwm > self.peak:
            self.peak, self.peak_stage = hwm, stage
        _reset_hwm()


class StageTimer:
    """Attach to a pipeline; :meth:`run` calls it and returns (output, StageTimes, MemoryStats).

    Args:
        pipe: a diffusers pipeline with ``encode_prompt``, ``vae`` and ``transformer`` or ``unet``.
        device: ``"cuda..."`` enables device synchronization and CUDA memory statistics.
        enabled: False runs the pipeline bare (no hooks) — used to measure the instrumentation overhead.
    """

    def __init__(self, pipe: Any, device: str, enabled: bool = True) -> None:
        import torch

        self.pipe = pipe
        self.cuda = device.startswith("cuda")
        self.enabled = enabled
        self._torch = torch
        self.denoiser = getattr(pipe, "transformer", None) or getattr(pipe, "unet", None)
        self._handles: list[Any] = []
        self._reset()
        if enabled:
            self._attach()

    # -- state --------------------------------------------------------------------------------
    def _reset(self) -> None:
        self.stage = "other"
        self.enc_s = 0.0
        self.dec_s = 0.0
        self.first_call_ns: int | None = None
        self.step_ns: list[int] = []
        self.calls = 0
        self.denoiser_batch = 0
        self.stage_peak: dict[str, tuple[int, int]] = {}
        self._hwm: _HwmTracker | None = None

    def _now(self) -> int:
        if self.cuda:
            self._torch.cuda.synchronize()
        return time.perf_counter_ns()

    def _mark_memory(self, stage: str) -> None:
        if not self.cuda:
            if self._hwm is not None:
                self._hwm.mark(stage)
            return
        cuda = self._torch.cuda
        alloc, reserved = cuda.max_memory_allocated(), cuda.max_memory_reserved()
        prev = self.stage_peak.get(stage, (0, 0))
        self.stage_peak[stage] = (max(prev[0], alloc), max(prev[1], reserved))
        cuda.reset_peak_memory_stats()

    # -- hooks --------------------------------------------------------------------------------
    def _attach(self) -> None:
        pipe = self.pipe
        orig_encode = pipe.encode_prompt
        orig_decode = pipe.vae.decode

        def encode_prompt(*args: Any, **kwargs: Any) -> Any:
            t0 = self._now()
            self._mark_memory(self.stage)
            self.stage = "text_encode"
            try:
                return orig_encode(*args, **kwargs)
            finally:
                t1 = self._now()
                self._mark_memory("text_encode")
                self.enc_s += (t1 - t0) / 1e9
                self.stage = "other"

        def vae_decode(*args: Any, **kwargs: Any) -> Any:
            t0 = self._now()
            self._mark_memory(self.stage)
            self.stage = "vae_decode"
            try:
                return orig_decode(*args, **kwargs)
            finally:
                t1 = self._now()
                self._mark_memory("vae_decode")
                self.dec_s += (t1 - t0) / 1e9
                self.stage = "other"

        pipe.encode_prompt = encode_prompt
        pipe.vae.decode = vae_decode

        disable = getattr(self._torch.compiler, "disable", lambda f: f)

        @disable
        def pre_hook(module: Any, args: Any, kwargs: Any) -> None:
            if self.first_call_ns is None:
                self.first_call_ns = self._now()
                self._mark_memory(self.stage)
                self.stage = "denoise"
            self.calls += 1
            x = kwargs.get("hidden_states", kwargs.get("sample"))
            if x is None and args:
                x = args[0]
            if x is not None and hasattr(x, "shape"):
                self.denoiser_batch = max(self.denoiser_batch, int(x.shape[0]))

        if self.denoiser is not None:
            self._handles.append(self.denoiser.register_forward_pre_hook(pre_hook, with_kwargs=True))

    def detach(self) -> None:
        """Remove every hook and instance wrapper, restoring the pipeline."""
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self.pipe.__dict__.pop("encode_prompt", None)
        self.pipe.vae.__dict__.pop("decode", None)

    def _on_step_end(
        self, pipe: Any, step: int, timestep: Any, callback_kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        self.step_ns.append(self._now())
        if len(self.step_ns) == 1 or self.cuda:
            self._mark_memory("denoise")
        return callback_kwargs

    # -- run ----------------------------------------------------------------------------------
    def run(self, kwargs: dict[str, Any], requested_batch: int) -> tuple[Any, StageTimes | None, MemoryStats]:
        """Call the pipeline with ``kwargs``; returns its output, the stage split and peak memory."""
        self._reset()
        if not self.enabled:
            t0 = self._now()
            out = self.pipe(**kwargs)
            total = (self._now() - t0) / 1e9
            return out, StageTimes(total_s=total, other_s=total), MemoryStats(kind="none")
        kwargs = dict(kwargs, callback_on_step_end=self._on_step_end)
        if self.cuda:
            self._torch.cuda.reset_peak_memory_stats()
            base_alloc = self._torch.cuda.memory_allocated()
        t0 = self._now()
        if self.cuda:
            out = self.pipe(**kwargs)
            t_end = self._now()
            self._mark_memory(self.stage)
            memory = self._cuda_memory(base_alloc)
        else:
            with _RssSampler(lambda: self.stage) as sampler:
                out = self.pipe(**kwargs)
                t_end = self._now()
            memory = MemoryStats(
                kind="cpu-rss",
                peak_allocated_bytes=sampler.peak - sampler.base,
                peak_stage=sampler.peak_stage,
            )
        total = (t_end - t0) / 1e9
        steps: list[float] = []
        if self.step_ns:
            start = self.first_call_ns if self.first_call_ns is not None else self.step_ns[0]
            prev = start
            for t in self.step_ns:
                steps.append((t - prev) / 1e9)
                prev = t
        denoise = sum(steps)
        stages = StageTimes(
            text_encode_s=self.enc_s,
            denoise_s=denoise,
            vae_decode_s=self.dec_s,
            other_s=max(0.0, total - self.enc_s - denoise - self.dec_s),
            total_s=total,
            step_s=steps,
            denoiser_calls=self.calls,
        )
        self.last_denoiser_batch = self.denoiser_batch
        self.requested_batch = requested_batch
        return out, stages, memory

    def _cuda_memory(self, base_alloc: int) -> MemoryStats:
        if not self.stage_peak:
            return MemoryStats(kind="cuda")
        stage, (alloc, reserved) = max(self.stage_peak.items(), key=lambda kv: kv[1][0])
        return MemoryStats(
            kind="cuda",
            peak_allocated_bytes=int(alloc),
            peak_reserved_bytes=int(max(r for _, r in self.stage_peak.values())),
            peak_stage=stage,
        )
