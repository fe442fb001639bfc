"""An engine wrapper that applies a diffusers cache to a started diffusers engine.

:class:`CachedEngine` implements the Engine protocol around a :class:`~diffbench.engines.diffusers_engine.
DiffusersEngine` (anything with a ``pipe`` attribute): :meth:`set_cache` enables a cache on the denoiser
(``enable_cache``), :meth:`clear_cache` disables it (``disable_cache`` restores bitwise-identical output),
and every :meth:`generate` first resets the cache's state (``HookRegistry.reset_stateful_hooks``), so no
measured run reuses residuals from the previous one. :meth:`info` reports the cache configuration in
``EngineInfo.cache``, so it enters the deployment fingerprint.
"""

from __future__ import annotations

from typing import Any

from diffbench.engines.base import Engine, EngineInfo, GenerationRequest, GenerationResult
from diffbench.store.models import SkipStats
from diffbench.sweep.axes import build_cache_config, check_cache_supported, describe_cache
from diffbench.sweep.probe import SkipProbe


class CachedEngine:
    """Wraps a started engine that exposes ``pipe``; see the module docstring."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.cache = "none"
        self._probe: SkipProbe | None = None

    @property
    def pipe(self) -> Any:
        return getattr(self.inner, "pipe", None)

    @property
    def denoiser(self) -> Any:
        pipe = self.pipe
        return getattr(pipe, "transformer", None) or getattr(pipe, "unet", None)

    def check(self, axis: str) -> None:
        """Raise UsageError when the pipeline cannot take the cache ``axis`` (names the supported options)."""
        check_cache_supported(self.pipe, axis, self.inner.info().model)

    def set_cache(self, axis: str, value: str, steps: int) -> None:
        """Enable cache ``axis`` = ``value`` (replacing any enabled cache) and attach the skip probe."""
        self.clear_cache()
        self.check(axis)
        self.denoiser.enable_cache(build_cache_config(axis, value, self.pipe, steps))
        self.cache = describe_cache(axis, value)
        self._probe = SkipProbe(self.denoiser, axis)

    def clear_cache(self) -> None:
        """Disable the cache (if any) and detach the probe."""
        if self._probe is not None:
            self._probe.detach()
            self._probe = None
        d = self.denoiser
        if d is not None and getattr(d, "is_cache_enabled", False):
            d.disable_cache()
        self.cache = "none"

    def reset_skips(self) -> None:
        if self._probe is not None:
            self._probe.reset()

    def skip_stats(self) -> SkipStats | None:
        """Skip counts since :meth:`reset_skips` (None without a cache)."""
        return self._probe.stats() if self._probe is not None else None

    def _reset_state(self) -> None:
        d = self.denoiser
        if d is None or self.cache == "none":
            return
        from diffusers.hooks import HookRegistry

        HookRegistry.check_if_exists_or_initialize(d).reset_stateful_hooks(recurse=True)

    # -- Engine protocol ----------------------------------------------------------------------
    def start(self) -> EngineInfo:
        return self.info()

    def info(self) -> EngineInfo:
        return self.inner.info().model_copy(update={"cache": self.cache})

    def validate(self, request: GenerationRequest) -> None:
        self.inner.validate(request)

    def generate(self, request: GenerationRequest) -> GenerationResult:
        self._reset_state()
        return self.inner.generate(request)

    def sync(self) -> None:
        self.inner.sync()

    def clock(self) -> int:
        return self.inner.clock()

    def stop(self) -> None:
        self.clear_cache()
        self.inner.stop()
