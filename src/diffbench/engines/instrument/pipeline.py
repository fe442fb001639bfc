"""Instrumentation of any diffusers pipeline: one call attaches it, one removes it (no diffusers edits).

The same implementation times ``bench``/``sweep`` runs (through the diffusers engine) and feeds the exporter
of ``serve`` or of someone else's server::

    from diffbench.engines.instrument.pipeline import attach   # also diffbench.monitor.attach
    inst = attach(pipe, device="cuda", model="my-flux", exporter=exporter)
    warm_up(pipe); inst.mark_warm()             # compiles before this are expected, not exported
    with inst.request(shape="1024x1024") as rec:
        image = pipe(prompt, height=1024, width=1024).images[0]
    rec.stages.step_s, rec.memory.peak_reserved_bytes, rec.signals.recompiles

Hooks (all removed by :meth:`Instrumentation.detach`):

1. instance attributes wrapping ``pipe.encode_prompt``, ``pipe.vae.encode`` and ``pipe.vae.decode`` (the
   pipeline reaches them through ``self.``, so the instance attribute wins; removing it restores the original)
   → text-encode, image-encode (an image-to-image request's input picture) and VAE-decode times; a second
   pipeline built from the same components (``FluxImg2ImgPipeline.from_pipe(pipe)``) shares the VAE,
   scheduler and denoiser hooks and gets its own ``encode_prompt`` wrapper with :meth:`Instrumentation.add_pipeline`;
2. a forward pre-hook on the denoiser (``transformer`` or ``unet``): its first call marks the start of
   denoising; it counts forwards (``denoiser_calls``; CFG shows as 2 calls per step, or as a doubled batch
   when the pipeline batches CFG: ``last_denoiser_batch``);
3. an instance attribute wrapping ``pipe.scheduler.step``: each return is a step boundary, so the caller
   need not pass ``callback_on_step_end`` (``step_s`` has one entry per scheduler step); the boundary (and
   the denoiser's first call, step 0) is also a cancel checkpoint (:mod:`~diffbench.engines.cancel`): a
   generation run under a cancelled token stops there with :class:`~diffbench.engines.cancel.Cancelled`;
4. the cache counter (:mod:`~diffbench.engines.instrument.cache_counter`), the compile counter
   (:mod:`~diffbench.engines.instrument.compile_counter`) and the collective listener (:mod:`~diffbench.engines.instrument.ranks`):
   each collective called during denoising is timed on this rank (a mark before, a mark after) and charged
   to the step it runs in; a step's compute time is its step time minus those waits (``rank_compute_s``).

Timing (docs/concepts/measurement-protocol.md). On CUDA every boundary records a ``torch.cuda.Event(enable_timing=True)`` on
the current stream (events come from a pool reused across requests); nothing synchronizes on the hot path.
When the request ends, one ``Event.synchronize()`` on its last event waits for the device, then every
interval is read with ``Event.elapsed_time`` (milliseconds, PyTorch docs) / 1000. On any other device the
boundaries read ``time.perf_counter_ns()`` (host timing; the CPU runs synchronously). ``total_s`` is the
host time from the request's start to after its final sync; ``other_s = total_s − text_encode − image_encode −
denoise − vae_decode``.

Memory: see :mod:`diffbench.engines.instrument.memory`; marks only at stage boundaries. With an
injected ``memory_budget_bytes`` the budget is reported as the device total, and a request whose peak
growth over its start exceeds it raises :class:`~diffbench.errors.DeviceOutOfMemory` at that boundary.

One request at a time per instrumentation (a pipeline runs one call at a time); a nested request raises
:class:`~diffbench.errors.UsageError`.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from diffbench.engines.base import MemoryStats, StageTimes
from diffbench.engines.cancel import checkpoint
from diffbench.engines.instrument import compile_counter, ranks
from diffbench.engines.instrument.cache_counter import CacheCounter
from diffbench.engines.instrument.memory import StageMemory
from diffbench.engines.instrument.signals import RequestSignals
from diffbench.errors import DeviceOutOfMemory, UsageError
from diffbench.metrics.names import OTHER_SHAPE

if TYPE_CHECKING:  # pragma: no cover
    from diffbench.engines.instrument.observer import GenerationObserver

_NO_CACHE_CFG = object()


@dataclass
class Record:
    """What one :meth:`Instrumentation.request` measured, filled when the block exits.

    ``stages``/``memory``/``signals`` are None until then (and ``stages`` stays None after a failure);
    ``shape`` is the label passed to the exporter; ``traffic`` is ``user``, ``probe`` or ``warmup``.
    """

    shape: str
    traffic: str
    stages: StageTimes | None = None
    memory: MemoryStats | None = None
    signals: RequestSignals | None = None


@dataclass
class _Req:
    t0_host: int
    start: Any
    mem: StageMemory
    compile_start: int
    stage: str = "other"
    enc: list[tuple[Any, Any]] = field(default_factory=list)
    img: list[tuple[Any, Any]] = field(default_factory=list)
    dec: list[tuple[Any, Any]] = field(default_factory=list)
    den_start: Any = None
    step_end: list[Any] = field(default_factory=list)
    waits: list[tuple[int, Any, Any]] = field(default_factory=list)
    wait_open: tuple[int, Any] | None = None
    calls: int = 0
    batch: int = 0
    flops_key: tuple[Any, ...] | None = None
    flops_args: tuple[tuple[Any, ...], dict[str, Any]] | None = None
    failed: bool = False
    cleaned: bool = False


def default_shape_label(kwargs: dict[str, Any]) -> str:
    """``WxH``, ``WxHfF`` for video, suffix ``bB`` when batch > 1, from diffusers call kwargs (``width``,
    ``height``, ``num_frames``, ``num_images_per_prompt``/``num_videos_per_prompt``); ``other`` without a size."""
    w, h = kwargs.get("width"), kwargs.get("height")
    if not w or not h:
        return OTHER_SHAPE
    f = kwargs.get("num_frames")
    b = kwargs.get("num_images_per_prompt") or kwargs.get("num_videos_per_prompt") or 1
    return f"{w}x{h}" + (f"f{f}" if f else "") + (f"b{b}" if b > 1 else "")


def _tensor_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    items = [(i, a) for i, a in enumerate(args)] + sorted(kwargs.items(), key=lambda kv: str(kv[0]))
    return tuple((k, tuple(v.shape), str(v.dtype)) for k, v in items if hasattr(v, "shape") and hasattr(v, "dtype"))


_FLOPS_PER_FORWARD: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], float]] = weakref.WeakKeyDictionary()


def _flop_cache(denoiser: Any) -> dict[tuple[Any, ...], float]:
    """FLOPs per forward by input shapes, kept per denoiser module for the life of the module (so attaching
    again to the same pipeline does not measure again)."""
    if denoiser is None:
        return {}
    try:
        return _FLOPS_PER_FORWARD.setdefault(denoiser, {})
    except TypeError:  # not weak-referenceable
        return {}


@contextlib.contextmanager
def _hooks_suspended(module: Any) -> Iterator[None]:
    """Temporarily empty the torch forward (pre-)hooks of ``module`` and its children (for the FLOP replay)."""
    saved = []
    for sub in module.modules():
        saved.append((sub, sub._forward_pre_hooks, sub._forward_hooks))
        sub._forward_pre_hooks, sub._forward_hooks = type(sub._forward_pre_hooks)(), type(sub._forward_hooks)()
    try:
        yield
    finally:
        for sub, pre, post in saved:
            sub._forward_pre_hooks, sub._forward_hooks = pre, post


class Instrumentation:
    """Hooks on one pipeline; see the module docstring. Create with :func:`attach`.

    Attributes: ``exporter`` (settable: the object whose ``observe_generation`` is called after each request),
    ``build_info`` (the ``diffusion_build_info`` labels, :func:`build_info`), ``device_label`` (the ``gpu``
    label: ``"0"`` for cuda:0, ``"cpu"``), ``device_total_bytes`` (capacity or the injected budget),
    ``last_denoiser_batch`` (largest batch the denoiser saw in the last request), ``last_memory`` /
    ``last_signals`` (of the last request, also after a failed one: the peak of a request that ran out of
    memory is what the memory alert needs).
    """

    def __init__(self, pipe: Any, *, device: str, model: str | None = None, exporter: GenerationObserver | None = None,
                 memory_budget_bytes: int | None = None, shape_of: Callable[[dict], str] | None = None,
                 flops: bool = True) -> None:
        import torch

        if memory_budget_bytes is not None and memory_budget_bytes <= 0:
            raise UsageError(f"memory budget {memory_budget_bytes}: must be a positive number of bytes")
        self._torch = torch
        self.pipe = pipe
        self.device = device
        self.cuda = device.startswith("cuda")
        self.model = model
        self.exporter = exporter
        self.memory_budget_bytes = memory_budget_bytes
        self.shape_of = shape_of
        self.measure_flops = flops
        self.denoiser = getattr(pipe, "transformer", None) or getattr(pipe, "unet", None)
        self.device_label = "cpu"
        self.device_total_bytes: int | None = memory_budget_bytes
        if self.cuda:
            index = torch.device(device).index
            index = torch.cuda.current_device() if index is None else index
            self.device_label = str(index)
            if memory_budget_bytes is None:
                self.device_total_bytes = int(torch.cuda.mem_get_info(index)[1])
        elif device != "cpu":
            self.device_label = device
        self.build_info = build_info(device)
        self.last_denoiser_batch = 0
        self.last_memory: MemoryStats | None = None
        self.last_signals: RequestSignals | None = None
        self._active: _Req | None = None
        self._events: list[Any] = []
        self._ev_i = 0
        self._warm_starts: int | None = None
        self._cache: CacheCounter | None = None
        self._cache_cfg: Any = _NO_CACHE_CFG
        self._fpf = _flop_cache(self.denoiser)
        self._handles: list[Any] = []
        self._extra_pipes: list[Any] = []
        self._compile = compile_counter.acquire()
        self.attached = True
        self._install()
        self._collectives = _CollectiveTimer(self)
        ranks.add_listener(self._collectives)

    # -- hooks ------------------------------------------------------------------------------------------
    def _install(self) -> None:
        pipe, torch = self.pipe, self._torch
        sched = getattr(pipe, "scheduler", None)
        if getattr(getattr(sched, "step", None), "__diffbench__", False) or getattr(
            getattr(pipe, "encode_prompt", None), "__diffbench__", False
        ):
            compile_counter.release()
            raise UsageError("this pipeline is already instrumented; detach the first instrumentation first")
        if hasattr(pipe, "encode_prompt"):
            pipe.encode_prompt = self._wrap_stage(pipe.encode_prompt, "text_encode")
        vae = getattr(pipe, "vae", None)
        if vae is not None and hasattr(vae, "decode"):
            vae.decode = self._wrap_stage(vae.decode, "vae_decode")
        if vae is not None and hasattr(vae, "encode"):
            vae.encode = self._wrap_stage(vae.encode, "image_encode")
        if sched is not None and hasattr(sched, "step"):
            orig_step = sched.step

            def step(*args: Any, **kwargs: Any) -> Any:
                out = orig_step(*args, **kwargs)
                r = self._active
                if r is not None:
                    r.step_end.append(self._mark())
                    checkpoint(len(r.step_end))  # where diffusers calls callback_on_step_end
                return out

            step.__diffbench__ = True  # type: ignore[attr-defined]
            sched.step = step
        disable = getattr(torch.compiler, "disable", lambda f: f)

        @disable
        def pre_hook(module: Any, args: Any, kwargs: Any) -> None:
            r = self._active
            if r is None:
                return
            if r.den_start is None:
                self._boundary(r, r.stage)
                r.stage = "denoise"
                r.den_start = self._mark()
                checkpoint(0)
                if self.measure_flops:
                    key = _tensor_key(args, kwargs)
                    if key not in self._fpf:
                        r.flops_key, r.flops_args = key, (tuple(args), dict(kwargs))
                    else:
                        r.flops_key = key
            r.calls += 1
            x = kwargs.get("hidden_states", kwargs.get("sample"))
            if x is None and args:
                x = args[0]
            if x is not None and hasattr(x, "shape") and len(x.shape):
                r.batch = max(r.batch, int(x.shape[0]))

        if self.denoiser is not None and hasattr(self.denoiser, "register_forward_pre_hook"):
            self._handles.append(self.denoiser.register_forward_pre_hook(pre_hook, with_kwargs=True))

    def _wrap_stage(self, orig: Callable[..., Any], stage: str) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            r = self._active
            if r is None:
                return orig(*args, **kwargs)
            self._boundary(r, r.stage)
            r.stage = stage
            t0 = self._mark()
            try:
                out = orig(*args, **kwargs)
            except BaseException:
                self._intervals(r, stage).append((t0, self._mark()))
                raise
            self._intervals(r, stage).append((t0, self._mark()))
            self._boundary(r, stage)
            r.stage = "other"
            return out

        wrapped.__diffbench__ = True  # type: ignore[attr-defined]
        return wrapped

    @staticmethod
    def _intervals(r: _Req, stage: str) -> list[tuple[Any, Any]]:
        return r.enc if stage == "text_encode" else r.img if stage == "image_encode" else r.dec

    def add_pipeline(self, other: Any) -> None:
        """Also time ``other``'s text encoder: a pipeline built from this one's components (an img2img or
        inpainting pipeline from ``from_pipe``), which shares the VAE, scheduler and denoiser (already
        hooked) but has its own ``encode_prompt``. Removed by :meth:`detach`; a second call does nothing."""
        if other is self.pipe or getattr(getattr(other, "encode_prompt", None), "__diffbench__", False):
            return
        if hasattr(other, "encode_prompt"):
            other.encode_prompt = self._wrap_stage(other.encode_prompt, "text_encode")
        self._extra_pipes.append(other)

    def _collective_begin(self) -> None:
        r = self._active
        if r is None or r.den_start is None:
            return
        r.wait_open = (len(r.step_end), self._mark())

    def _collective_end(self) -> None:
        r = self._active
        if r is None or r.wait_open is None:
            return
        step, start = r.wait_open
        r.wait_open = None
        r.waits.append((step, start, self._mark()))

    # -- clock and memory -------------------------------------------------------------------------------
    def _mark(self) -> Any:
        """A timestamp: a recorded CUDA event (from the pool) on CUDA, ``perf_counter_ns()`` elsewhere."""
        if not self.cuda:
            return time.perf_counter_ns()
        if self._ev_i == len(self._events):
            self._events.append(self._torch.cuda.Event(enable_timing=True))
        ev = self._events[self._ev_i]
        self._ev_i += 1
        ev.record()
        return ev

    def _elapsed(self, a: Any, b: Any) -> float:
        """Seconds between two marks (after the final sync on CUDA)."""
        if self.cuda:
            return float(a.elapsed_time(b)) / 1e3
        return (b - a) / 1e9

    def _boundary(self, r: _Req, closing: str) -> None:
        """Attribute the memory peak since the last boundary to ``closing``; enforce the injected budget."""
        r.mem.mark(closing)
        budget = self.memory_budget_bytes
        if budget is not None and not r.failed:
            growth = r.mem.growth()
            if growth > budget:
                r.failed = True
                raise DeviceOutOfMemory(
                    f"generation exceeded the injected memory budget of {budget} bytes at stage {closing} "
                    f"(peak growth {growth} bytes); lower the size or batch, enable VAE tiling, or raise "
                    f"--memory-budget"
                )

    # -- cache ------------------------------------------------------------------------------------------
    def _sync_cache(self) -> None:
        """(Re)attach the cache counter when the denoiser's diffusers cache config changed since last time."""
        cfg = getattr(self.denoiser, "_cache_config", None)
        if cfg is self._cache_cfg:
            if self._cache is not None:
                self._cache.reset()
            return
        if self._cache is not None:
            self._cache.detach()
        self._cache = CacheCounter.for_denoiser(self.denoiser) if cfg is not None else None
        self._cache_cfg = cfg

    # -- requests ---------------------------------------------------------------------------------------
    def mark_warm(self) -> None:
        """Snapshot the compile counter: compilations that start after this are recompiles (the
        method of :mod:`~diffbench.monitor.compile_counter`); call it once every allowlisted shape has been warmed up. Before it, ``recompiles`` is 0."""
        self._compile.ensure()
        self._warm_starts = self._compile.starts

    def _open(self) -> _Req:
        if not self.attached:
            raise UsageError("this instrumentation was detached; attach the pipeline again")
        if self._active is not None:
            raise UsageError("a request is already being recorded on this pipeline (one at a time)")
        self._sync_cache()
        self._compile.ensure()
        self._ev_i = 0
        r = _Req(t0_host=time.perf_counter_ns(), start=None,
                 mem=StageMemory(self.cuda, self._torch, lambda: self._active.stage if self._active else "other"),
                 compile_start=self._compile.starts)
        r.start = self._mark()
        self._active = r
        return r

    def _signals(self, r: _Req, ok: bool) -> RequestSignals:
        sig = RequestSignals(device=self.device_label, device_total_bytes=self.device_total_bytes)
        if ok and self._cache is not None:
            sig.cache = self._cache.take()
        if self._warm_starts is not None:
            sig.recompiles = max(0, self._compile.starts - max(r.compile_start, self._warm_starts))
        sig.stage_peak_bytes = r.mem.by_stage()
        return sig

    def _close(self, r: _Req) -> tuple[StageTimes, MemoryStats, RequestSignals]:
        """End the request: one sync, read every interval, memory and signals."""
        end = self._mark()
        if self.cuda:
            end.synchronize()
        t_end = time.perf_counter_ns()
        self._active = None
        r.mem.mark(r.stage)
        memory = r.mem.close()
        el = self._elapsed
        enc = sum(el(a, b) for a, b in r.enc)
        dec = sum(el(a, b) for a, b in r.dec)
        img = sum(el(a, b) for a, b in r.img)
        steps: list[float] = []
        starts: list[Any] = []
        prev = r.den_start if r.den_start is not None else (r.step_end[0] if r.step_end else None)
        for t in r.step_end:
            starts.append(prev)
            steps.append(el(prev, t))
            prev = t
        den = sum(steps)
        total = (t_end - r.t0_host) / 1e9
        stages = StageTimes(text_encode_s=enc, image_encode_s=img, denoise_s=den, vae_decode_s=dec,
                            other_s=max(0.0, total - enc - img - den - dec), total_s=total, step_s=steps,
                            denoiser_calls=r.calls)
        sig = self._signals(r, ok=True)
        rank = ranks.current_rank() if r.waits else None
        if rank is not None:
            waited = [0.0] * len(steps)
            for i, a, b in r.waits:
                if i < len(steps):  # a collective after the last step (in the decode) is no step's
                    waited[i] += el(a, b)
            sig.rank_compute_s = {rank: [max(0.0, s - w) for s, w in zip(steps, waited, strict=True)]}
        self.last_denoiser_batch = r.batch
        budget = self.memory_budget_bytes
        if budget is not None and not r.failed and r.mem.growth() > budget:
            r.failed = True
            self._fail(r, memory)
            raise DeviceOutOfMemory(
                f"generation exceeded the injected memory budget of {budget} bytes at stage {r.stage} "
                f"(peak growth {r.mem.growth()} bytes)"
            )
        return stages, memory, sig

    def _fail(self, r: _Req, memory: MemoryStats | None = None) -> RequestSignals:
        """Clean up after a failed request: forget it, reset the cache state and peak counters."""
        self._active = None
        r.cleaned = True
        if memory is None:
            with contextlib.suppress(Exception):
                r.mem.mark(r.stage)
            memory = r.mem.close()
        sig = self._signals(r, ok=False)
        self.last_memory, self.last_signals = memory, sig
        if self._cache is not None:
            self._cache.reset()
        reset = getattr(self.denoiser, "_reset_stateful_cache", None)
        if callable(reset):  # the pipeline's own reset (maybe_free_model_hooks) did not run
            with contextlib.suppress(Exception):
                reset()
        if self.cuda:
            self._torch.cuda.reset_peak_memory_stats()
        return sig

    def _flops(self, r: _Req, kwargs: dict[str, Any] | None) -> float | None:
        if not self.measure_flops:
            return None
        if kwargs is not None and self.model:
            from diffbench.engines.instrument.flops import ledger_flops

            steps = kwargs.get("num_inference_steps")
            w, h = kwargs.get("width"), kwargs.get("height")
            if steps and w and h:
                per = ledger_flops(self.model, int(w), int(h), kwargs.get("num_frames"), int(steps),
                                   kwargs.get("guidance_scale"))
                if per is not None:
                    b = kwargs.get("num_images_per_prompt") or kwargs.get("num_videos_per_prompt") or 1
                    return per * b
        if r.flops_key is None:
            return None
        if getattr(self.denoiser, "_hf_hook", None) is not None:
            return None  # accelerate offload hooks: a replay would move the weights; not measured
        if r.flops_args is not None and self.denoiser is not None:
            from diffbench.engines.instrument.flops import forward_flops

            args, kw = r.flops_args
            r.flops_args = None
            with _hooks_suspended(self.denoiser):
                self._fpf[r.flops_key] = forward_flops(self.denoiser, args, kw)
        per_forward = self._fpf.get(r.flops_key)
        return None if per_forward is None else per_forward * r.calls

    def _export(self, shape: str, traffic: str, stages: StageTimes | None, memory: MemoryStats | None,
                signals: RequestSignals | None) -> None:
        if self.exporter is not None and traffic != "warmup":
            self.exporter.observe_generation(shape=shape, stages=stages, memory=memory, signals=signals,
                                             traffic=traffic)

    @contextlib.contextmanager
    def request(self, shape: str | None = None, traffic: str = "user") -> Iterator[Record]:
        """Record the pipeline calls inside the block as one request.

        On exit: one sync (CUDA), every event read, ``rec.stages`` / ``rec.memory`` / ``rec.signals`` filled,
        and ``exporter.observe_generation(shape=..., stages=..., memory=..., signals=..., traffic=...)`` called
        (not for ``traffic="warmup"``: startup warmups are not traffic). ``shape`` is the bounded label
        (default ``other``). If the block raises, the error propagates; memory and signals of the failed
        request are exported with ``stages=None`` and kept in ``last_memory``/``last_signals``.

        Raises:
            UsageError: a request is already open on this pipeline, or the instrumentation was detached.
            DeviceOutOfMemory: the injected memory budget was exceeded.
        """
        rec = Record(shape=shape or OTHER_SHAPE, traffic=traffic)
        r = self._open()
        try:
            yield rec
            rec.stages, rec.memory, rec.signals = self._close(r)
        except BaseException:
            sig = self.last_signals if r.cleaned else self._fail(r)
            self._export(rec.shape, traffic, None, self.last_memory, sig)
            raise
        rec.signals.flops = self._flops(r, None)
        self.last_memory, self.last_signals = rec.memory, rec.signals
        self._export(rec.shape, traffic, rec.stages, rec.memory, rec.signals)

    def run(self, kwargs: dict[str, Any], requested_batch: int, *, traffic: str = "user",
            shape: str | None = None, pipe: Any = None) -> tuple[Any, StageTimes, MemoryStats, RequestSignals]:
        """Call ``pipe(**kwargs)`` as one request; returns (output, stage times, peak memory, signals).

        ``pipe``: the pipeline to call, default the instrumented one; another must share its components and
        have been registered with :meth:`add_pipeline` (an edit's img2img pipeline).

        ``requested_batch`` is the batch the caller asked for (kept for the CFG-batch check of ``bench``).
        ``shape``: the exporter label; default ``shape_of(kwargs)``, else the exporter's ``shape_label``, else
        :func:`default_shape_label`. FLOPs: ledger when ``model`` is in the catalog, else measured
        (:mod:`diffbench.engines.instrument.flops`).

        Raises:
            whatever the pipeline raises; DeviceOutOfMemory when the injected budget is exceeded.
        """
        self.requested_batch = requested_batch
        label = shape or self._shape_label(kwargs)
        r = self._open()
        try:
            out = (pipe if pipe is not None else self.pipe)(**kwargs)
            stages, memory, sig = self._close(r)
        except BaseException:
            sig_f = self.last_signals if r.cleaned else self._fail(r)
            self._export(label, traffic, None, self.last_memory, sig_f)
            raise
        sig.flops = self._flops(r, kwargs)
        self.last_memory, self.last_signals = memory, sig
        self._export(label, traffic, stages, memory, sig)
        return out, stages, memory, sig

    def _shape_label(self, kwargs: dict[str, Any]) -> str:
        if self.shape_of is not None:
            return self.shape_of(kwargs)
        fn = getattr(self.exporter, "shape_label", None)
        if fn is not None and kwargs.get("width") and kwargs.get("height"):
            b = kwargs.get("num_images_per_prompt") or kwargs.get("num_videos_per_prompt") or 1
            return str(fn(int(kwargs["width"]), int(kwargs["height"]), kwargs.get("num_frames"), int(b)))
        return default_shape_label(kwargs)

    # -- detach -----------------------------------------------------------------------------------------
    def detach(self) -> None:
        """Remove every hook, wrapper and counter, restoring the pipeline (a second call does nothing)."""
        if not self.attached:
            return
        self.attached = False
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self.pipe.__dict__.pop("encode_prompt", None)
        for other in self._extra_pipes:
            other.__dict__.pop("encode_prompt", None)
        self._extra_pipes.clear()
        for name, attr in (("vae", "decode"), ("vae", "encode"), ("scheduler", "step")):
            obj = getattr(self.pipe, name, None)
            if obj is not None:
                obj.__dict__.pop(attr, None)
        if self._cache is not None:
            self._cache.detach()
            self._cache = None
        ranks.remove_listener(self._collectives)
        compile_counter.release()


class _CollectiveTimer:
    """The :class:`~diffbench.engines.instrument.ranks.CollectiveListener` of one instrumentation: marks
    the clock around each collective of an open request's denoising."""

    def __init__(self, inst: Instrumentation) -> None:
        self.inst = inst

    def collective_begin(self) -> None:
        self.inst._collective_begin()

    def collective_end(self) -> None:
        self.inst._collective_end()


def build_info(device: str = "cpu") -> dict[str, str]:
    """Label values of ``diffusion_build_info`` (docs/reference/metrics.md): ``version`` (diffbench), ``torch``, ``cuda``
    (``torch.version.cuda``, ``none`` on a CPU-only build) and ``gpu_model`` (``torch.cuda.get_device_name``
    for a CUDA ``device``, else ``cpu``)."""
    import torch

    import diffbench

    gpu = "cpu"
    if device.startswith("cuda") and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(torch.device(device))
    return {"version": str(getattr(diffbench, "__version__", "unknown")), "torch": torch.__version__.split("+")[0],
            "cuda": torch.version.cuda or "none", "gpu_model": gpu}


def attach(pipe: Any, *, device: str, model: str | None = None, exporter: GenerationObserver | None = None,
           memory_budget_bytes: int | None = None, shape_of: Callable[[dict], str] | None = None,
           flops: bool = True) -> Instrumentation:
    """Instrument ``pipe`` (a diffusers pipeline, or anything with ``encode_prompt``/``vae.decode``/
    ``scheduler.step`` and a ``transformer`` or ``unet``); see the module docstring.

    Args:
        device: ``"cuda"``/``"cuda:N"`` (events, CUDA memory counters) or ``"cpu"`` (host clock, VmHWM).
        model: model name; a catalog id (``flux.1-dev``) takes FLOPs from the ledger.
        exporter: called after each request (``observe_generation``); settable later as ``inst.exporter``.
        memory_budget_bytes: injected budget (bytes): reported as the device total; a request whose peak
            growth exceeds it fails with DeviceOutOfMemory at that stage boundary.
        shape_of: maps the pipeline kwargs of :meth:`Instrumentation.run` to the ``shape`` label.
        flops: False skips FLOP counting.

    Raises:
        UsageError: a non-positive memory budget.
    """
    return Instrumentation(pipe, device=device, model=model, exporter=exporter,
                           memory_budget_bytes=memory_budget_bytes, shape_of=shape_of, flops=flops)


def detach(inst: Instrumentation) -> None:
    """Remove ``inst``'s hooks (same as ``inst.detach()``)."""
    inst.detach()
