"""An engine wrapper that applies a diffusers cache to a started diffusers engine.

:class:`CachedEngine` implements the Engine protocol around a :class:`~diffbench.engines.diffusers_engine.
DiffusersEngine` (anything with a ``pipe`` attribute): :meth:`set_cache` enables a cache on the denoiser
(``enable_cache``), :meth:`clear_cache` disables it (``disable_cache`` restores bitwise-identical output),
and every :meth:`generate` first resets the cache's state (``HookRegistry.reset_stateful_hooks``), so no
measured run reuses residuals from the previous one. :meth:`info` reports the cache configuration in
``EngineInfo.cache``, so it enters the deployment fingerprint.

Interleaved sweeps switch the cache between runs with :meth:`use` (a no-op when that configuration is
already current; a switch costs well under a millisecond on tiny-flux and happens outside the timed
window). Skip counts accumulate per value across switches (:meth:`skip_stats`).
"""

from __future__ import annotations

from typing import Any

from diffbench.engines.base import Engine, EngineInfo, GenerationRequest, GenerationResult
from diffbench.engines.instrument.skips import SkipRecorder
from diffbench.engines.knobs import build_cache_config, check_cache_supported, describe_cache
from diffbench.store.models import SkipStats


class CachedEngine:
    """Wraps a started engine that exposes ``pipe``; see the module docstring."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.cache = "none"
        self._value: str | None = None
        self._axis = ""
        self._skips: SkipRecorder | None = None
        self._tally: dict[str, tuple[int, int]] = {}  # value -> (total, computed) of detached recorders

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
        """Enable cache ``axis`` = ``value`` (replacing any enabled cache) and attach the skip recorder."""
        self.clear_cache()
        self.check(axis)
        self.denoiser.enable_cache(build_cache_config(axis, value, self.pipe, steps))
        self.cache = describe_cache(axis, value)
        self._value, self._axis = value, axis
        self._skips = SkipRecorder(self.denoiser, axis)

    def use(self, axis: str, value: str | None, steps: int) -> None:
        """Make cache ``axis`` = ``value`` current (``None``: no cache); nothing happens if it already is."""
        if value == self._value:
            return
        if value is None:
            self.clear_cache()
        else:
            self.set_cache(axis, value, steps)

    def clear_cache(self) -> None:
        """Disable the cache (if any) and detach the skip recorder (its counts are kept per value)."""
        if self._skips is not None:
            if self._value is not None:
                t, c = self._tally.get(self._value, (0, 0))
                self._tally[self._value] = (t + self._skips.total, c + self._skips.computed)
            self._skips.detach()
            self._skips = None
        self._value = None
        d = self.denoiser
        if d is not None and getattr(d, "is_cache_enabled", False):
            d.disable_cache()
        self.cache = "none"

    def reset_skips(self) -> None:
        """Forget every skip count."""
        if self._skips is not None:
            self._skips.reset()
        self._tally.clear()

    def skip_stats(self, value: str | None = None) -> SkipStats | None:
        """Skip counts of ``value`` (default: the current one) since :meth:`reset_skips`; None when its hooked
        modules were never called."""
        value = value if value is not None else self._value
        if value is None:
            return None
        total, computed = self._tally.get(value, (0, 0))
        skips = self._skips if self._value == value else None
        if skips is not None:
            total, computed = total + skips.total, computed + skips.computed
        return SkipRecorder.stats_of(self._axis, total, computed)

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
