"""A simulated device that behaves like a GPU for the measurement protocol.

What it models (so the protocol itself is testable without a GPU):

- **Asynchronous launch**: :meth:`SimEngine.generate` returns after ``launch_s`` of host time; the work
  completes later on the device queue. :meth:`SimEngine.sync` waits for the queue.
- **First-call compile**: the first call at each warm-up key (:attr:`GenerationRequest.warmup_key`: size,
  frames, steps, batch, CFG on/off, negative prompt, edit, adapter) pays ``compile_s`` of host time, as ``torch.compile`` / autotuning / memory-pool growth do.
- **Jitter and tails**: each stage time is multiplied by a log-normal factor (sd ``jitter``); with
  probability ``tail_prob`` one step takes ``tail_s`` longer (a preemption, a GC pause, a clock drop).
- **Scaling**: per-step and VAE times scale with pixels × frames × batch relative to 1024×1024×1×1 (defaults resemble FLUX at 1024² on a datacenter GPU).

- **Edits** (image-to-image, ``request.image`` set): the input image's VAE encode (:data:`VAE_ENCODE_RATIO`
  × the VAE decode time at the same shape) is the ``image_encode`` stage, and ``int(steps × strength)``
  steps run (the StableDiffusion img2img rule, :func:`~diffbench.engines.images.edit_steps`); an edit is a
  different compiled shape than text-to-image (:attr:`GenerationRequest.warmup_key`).
- **Cancellation**: under a cancel token (:mod:`diffbench.engines.cancel`) :meth:`SimEngine.sync` waits
  step by step and stops at the first step boundary after the token is cancelled; the device is free from
  that boundary on.
- **Monitoring signals** (:class:`~diffbench.engines.instrument.signals.RequestSignals`): the first call at a shape
  after :meth:`SimEngine.mark_warm` counts as one recompile; ``EngineConfig.memory_budget_bytes`` is the
  device total, and a request whose simulated peak exceeds it fails as out of memory. No cache decisions
  and no FLOPs (nothing is computed).

By default time is *virtual*: :meth:`SimEngine.clock` returns a simulated nanosecond clock that advances
with launches and syncs, so runs are instant and exactly reproducible for a seed. ``realtime=True``
sleeps for real against ``time.perf_counter_ns``. Outputs are deterministic images from (prompt, seed) and, for an edit, the input image's and mask's bytes
and the strength.
"""

from __future__ import annotations

import hashlib
import time
from collections import deque

import numpy as np

from diffbench import __version__
from diffbench.engines.adapters import SIM_SWAP_S, adapter_hashes, check_adapter
from diffbench.engines.base import (
    EngineInfo,
    GenerationRequest,
    GenerationResult,
    MemoryStats,
    StageTimes,
)
from diffbench.engines.cancel import Cancelled, checkpoint, current
from diffbench.engines.config import EngineConfig
from diffbench.engines.images import edit_steps
from diffbench.engines.instrument.signals import RequestSignals
from diffbench.errors import DeviceOutOfMemory, ShapeError

_REF_PIXELS = 1024 * 1024
SIM_FPS = 16.0  # playback rate of simulated videos (requests with frames), as Wan2.1's sample_fps


def _request_seed(req: GenerationRequest, index: int) -> int:
    h = hashlib.sha256(f"{req.prompt}\x00{req.seed}\x00{index}".encode())
    if req.adapter is not None:  # a LoRA adapter changes the picture (and only then is it hashed)
        h.update(f"\x00lora\x00{req.adapter}\x00{req.adapter_scale!r}".encode())
    if req.is_edit:
        h.update(b"\x00edit" + (req.image or b"") + b"\x00" + (req.mask or b"") + f"\x00{req.strength!r}".encode())
    return int.from_bytes(h.digest()[:8], "little")


VAE_ENCODE_RATIO = 0.5
"""Simulated VAE encode time / VAE decode time at the same shape. An estimate from the architecture: the
SD/FLUX ``AutoencoderKL`` encoder runs 2 ResNet blocks per level against the decoder's 3 and has no
full-resolution upsampling convolutions; measure the real ratio with ``bench --input-images`` on the real
pipeline (the ``image_encode`` and ``vae_decode`` stages). Not a :class:`SimParams` field, so the sim's model
hash (and every stored sim fingerprint) is unchanged."""

EDIT_RULE = "floor"
"""Steps an edit runs on the simulated device: ``int(steps × strength)`` (see :func:`edit_steps`)."""


class SimEngine:
    """The simulated engine (see module docstring). Parameters come from ``config.sim``."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.p = config.sim
        self._rng = np.random.default_rng(self.p.seed)
        self._host_ns = 0
        self._device_free_ns = 0
        self._compiled: set[object] = set()
        self._info: EngineInfo | None = None
        self.launches = 0
        self._warm = False
        self._adapter: tuple[str, float] | None = None  # the active LoRA adapter and scale
        self._bounds: deque[tuple[int, int, int]] = deque()  # (device ns, step, steps) of launched work

    def mark_warm(self) -> None:
        """Warmups are over: from now on a first call at a new shape counts as a recompile."""
        self._warm = True

    # -- clock ---------------------------------------------------------------------------------
    def clock(self) -> int:
        """Nanoseconds: the virtual host clock, or ``perf_counter_ns`` when realtime."""
        return time.perf_counter_ns() if self.p.realtime else self._host_ns

    def _host_advance(self, seconds: float) -> None:
        if self.p.realtime:
            time.sleep(seconds)
        else:
            self._host_ns += int(round(seconds * 1e9))

    # -- protocol ------------------------------------------------------------------------------
    def start(self) -> EngineInfo:
        """No model to load; returns the conditions."""
        self._info = EngineInfo(
            engine="sim",
            engine_version=__version__,
            model=self.config.model if self.config.model != "tiny-flux" else "sim",
            model_hash=hashlib.sha256(self.p.model_dump_json().encode()).hexdigest()[:16],
            pipeline_class="SimulatedPipeline",
            device="sim",
            adapters=adapter_hashes(self.config.adapters) if self.config.adapters else {},
            dtype="n/a",
            asynchronous=True,
            default_steps=8,
            default_guidance=None,
            cfg="none",
            fps=SIM_FPS,
            fps_source=f"stated default of the sim engine ({SIM_FPS:g} fps, Wan2.1's sample_fps)",
            details={k: str(v) for k, v in self.p.model_dump().items()},
        )
        return self._info

    def info(self) -> EngineInfo:
        """The conditions (starts lazily)."""
        return self._info or self.start()

    def validate(self, request: GenerationRequest) -> None:
        """Every shape is accepted by the simulated device (OOM is simulated at generate time); an edit
        whose strength leaves no step (``int(steps × strength) = 0``) is not.

        Raises:
            ShapeError: an edit with ``int(steps × strength) < 1``; an adapter the engine did not load.
        """
        check_adapter(self.config.adapters, request.adapter)
        if request.is_edit and edit_steps(request.steps, request.strength, EDIT_RULE) < 1:
            raise ShapeError(
                f"strength {request.strength:g} x {request.steps} steps leaves 0 denoising steps (the simulated "
                "pipeline runs int(steps x strength)); raise the strength or the steps"
            )

    def steps_run(self, request: GenerationRequest) -> int:
        """Denoising steps ``request`` runs: ``steps``, or ``int(steps × strength)`` for an edit."""
        return edit_steps(request.steps, request.strength, EDIT_RULE) if request.is_edit else request.steps

    def _stage(self, base: float) -> float:
        if base <= 0:
            return 0.0
        return base * float(np.exp(self._rng.normal(0.0, self.p.jitter))) if self.p.jitter else base

    def generate(self, request: GenerationRequest) -> GenerationResult:
        """Launch one generation: returns after the launch; the device finishes it later.

        Raises:
            DeviceOutOfMemory: when ``fail_above_pixels`` is set and the request is larger.
            ShapeError: an edit that leaves no step (see :meth:`validate`).
        """
        self.info()
        self.validate(request)
        frames = request.frames or 1
        pixels = request.height * request.width * frames * request.batch
        if self.p.fail_above_pixels is not None and pixels > self.p.fail_above_pixels:
            raise DeviceOutOfMemory(
                f"simulated out of memory at {request.shape_label()} ({pixels} pixels > "
                f"{self.p.fail_above_pixels})"
            )
        budget = self.config.memory_budget_bytes
        peak = int(self.p.memory_bytes_per_pixel * pixels)
        if budget is not None and peak > budget:
            err = DeviceOutOfMemory(
                f"simulated out of memory at {request.shape_label()} (peak {peak} bytes > the memory budget "
                f"{budget} bytes)"
            )
            err.memory = MemoryStats(kind="sim", peak_allocated_bytes=peak, peak_reserved_bytes=peak,
                                     peak_stage="vae_decode")
            err.signals = RequestSignals(device="sim", device_total_bytes=budget)
            raise err
        swap_s = 0.0
        active = (request.adapter, request.adapter_scale) if request.adapter is not None else None
        if active != self._adapter:  # an adapter swap: host time before the launch
            self._host_advance(SIM_SWAP_S)
            swap_s, self._adapter = SIM_SWAP_S, active
        key = request.warmup_key
        recompiles = 0
        compile_s = 0.0
        if key not in self._compiled:
            self._compiled.add(key)
            self._host_advance(self.p.compile_s)
            compile_s = self.p.compile_s
            recompiles = int(self._warm)
        scale = pixels / _REF_PIXELS
        n_steps = self.steps_run(request)
        steps = [self._stage(self.p.step_s * max(scale, 0.05)) for _ in range(n_steps)]
        if self.p.tail_prob and self._rng.random() < self.p.tail_prob:
            steps[int(self._rng.integers(len(steps)))] += self.p.tail_s
        enc = self._stage(self.p.text_encode_s)
        dec = self._stage(self.p.vae_decode_s * max(scale, 0.05))
        other = self._stage(self.p.other_s)
        img = self._stage(VAE_ENCODE_RATIO * self.p.vae_decode_s * max(scale, 0.05)) if request.is_edit else 0.0
        work = enc + img + sum(steps) + dec + other
        self._host_advance(self.p.launch_s)
        self.launches += 1
        now = self.clock()
        start = max(now, self._device_free_ns)
        self._device_free_ns = start + int(round(work * 1e9))
        at = start + int(round((enc + img) * 1e9))
        self._bounds.append((at, 0, n_steps))
        for i, s in enumerate(steps, 1):
            at += int(round(s * 1e9))
            self._bounds.append((at, i, n_steps))
        stages = StageTimes(
            text_encode_s=enc,
            image_encode_s=img,
            denoise_s=sum(steps),
            vae_decode_s=dec,
            other_s=other + compile_s,  # a first call's compile is host time outside the stages: "other" holds it
            total_s=work + compile_s,
            step_s=steps,
            denoiser_calls=n_steps,
        )
        memory = MemoryStats(
            kind="sim",
            peak_allocated_bytes=peak,
            peak_reserved_bytes=int(self.p.memory_bytes_per_pixel * pixels * 1.25),
            peak_stage="vae_decode",
        )
        signals = RequestSignals(recompiles=recompiles, device="sim", device_total_bytes=budget)
        extra = {"adapter_swap_s": swap_s} if self.config.adapters else {}
        return GenerationResult(images=self._images(request), stages=stages, memory=memory, signals=signals,
                                extra=extra)

    def _images(self, request: GenerationRequest) -> np.ndarray:
        """Deterministic uint8 images from (prompt, seed): a random 16×16 tile per image, tiled."""
        outs = []
        for i in range(request.batch):
            rng = np.random.default_rng(_request_seed(request, i))
            frames = request.frames or 1
            tile = rng.integers(0, 256, size=(frames, 16, 16, 3), dtype=np.uint8)
            reps = (1, -(-request.height // 16), -(-request.width // 16), 1)
            img = np.tile(tile, reps)[:, : request.height, : request.width]
            if self.p.nondeterminism:
                noise = self._rng.normal(0, self.p.nondeterminism, img.shape)
                img = np.clip(img + noise, 0, 255).astype(np.uint8)
            outs.append(img if request.frames else img[0])
        return np.stack(outs)

    def sync(self) -> None:
        """Wait until every launched generation has completed.

        Under a cancel token (:func:`diffbench.engines.cancel.cancellable`) the wait goes step boundary by
        step boundary, each a :func:`~diffbench.engines.cancel.checkpoint`: once the token is cancelled the
        device drops the rest of the launched work (it is free from that boundary on) and
        :class:`~diffbench.engines.cancel.Cancelled` is raised.
        """
        if current() is not None:
            self._sync_steps()
        self._bounds.clear()
        if self.p.realtime:
            remaining = self._device_free_ns - time.perf_counter_ns()
            if remaining > 0:
                time.sleep(remaining / 1e9)
        else:
            self._host_ns = max(self._host_ns, self._device_free_ns)

    def _sync_steps(self) -> None:
        while self._bounds:
            at, step, steps = self._bounds[0]
            if self.p.realtime:
                wait = at - time.perf_counter_ns()
                if wait > 0:
                    time.sleep(wait / 1e9)
            else:
                self._host_ns = max(self._host_ns, at)
            self._bounds.popleft()
            try:
                checkpoint(step, steps)
            except Cancelled:
                self._bounds.clear()
                self._device_free_ns = self.clock()
                raise

    def pending_s(self) -> float:
        """Seconds of queued device work not yet complete at the current clock (0 when idle)."""
        return max(0.0, (self._device_free_ns - self.clock()) / 1e9)

    def stop(self) -> None:
        """Nothing to release."""
