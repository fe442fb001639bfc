"""Step-cache lookups and hits of a diffusers cache, for ``diffusion_cache_{lookups,hits}_total``
(docs/reference/metrics.md), counted with :class:`~diffbench.engines.instrument.skips.SkipRecorder` (the skip
fractions of ``sweep`` use it too).

A lookup is one cache decision, a hit one decision that skipped compute:

- First-Block-Cache (``fbcache``) and MagCache (``magcache``): one decision per denoiser forward, taken by the
  leader block for all the blocks after it. Counted on the first non-leader hooked block: lookups = its calls,
  hits = calls whose original forward did not run. The first forward of each cache context always computes
  (there is no residual to reuse yet), so with any threshold ``hits <= lookups - 1`` per context.
- TaylorSeer (``taylorseer``), FasterCache (``fastercache``), pyramid attention broadcast (``pab``): one decision
  per hooked attention call; lookups = calls of the hooked attention modules, hits = calls served from the cache.

The cache is recognised by the diffusers hook names on the denoiser's modules (``module._diffusers_hook``);
a cache that registers none of them exposes no decisions and :func:`find_cache` returns None.
"""

from __future__ import annotations

from typing import Any

from diffbench.engines.instrument.signals import CacheCounts
from diffbench.engines.instrument.skips import SkipRecorder, hook_names

# diffusers hook-name prefix -> (short ``cache`` label, sweep axis)
_HOOKS: tuple[tuple[str, str, str], ...] = (
    ("fbc_", "fbcache", "first-block"),
    ("mag_cache_", "magcache", "magcache"),
    ("taylorseer_cache", "taylorseer", "taylorseer"),
    ("faster_cache_", "fastercache", "fastercache"),
    ("pyramid_attention_broadcast", "pab", "pab"),
)
AXIS_CACHE = {axis: short for _, short, axis in _HOOKS}
"""Sweep axis name (``first-block``) → ``cache`` label value (``fbcache``)."""


def find_cache(denoiser: Any) -> tuple[str, str] | None:
    """(short name, sweep axis) of the diffusers cache enabled on ``denoiser``; None when there is none."""
    if denoiser is None or not hasattr(denoiser, "named_modules"):
        return None
    for _name, mod in denoiser.named_modules():
        for hook in hook_names(mod):
            for prefix, short, axis in _HOOKS:
                if hook.startswith(prefix):
                    return short, axis
    return None


class CacheCounter:
    """Counts the decisions of the cache enabled on ``denoiser`` (attach after ``enable_cache``).

    :meth:`take` returns the counts since the previous :meth:`take` (or since construction) and restarts them.
    """

    def __init__(self, denoiser: Any, short: str, axis: str) -> None:
        self.cache = short
        self.axis = axis
        self._skips = SkipRecorder(denoiser, axis, first_only=axis in ("first-block", "magcache"))

    @classmethod
    def for_denoiser(cls, denoiser: Any) -> CacheCounter | None:
        """A counter for the cache enabled on ``denoiser``, or None when no known cache is enabled."""
        found = find_cache(denoiser)
        if found is None:
            return None
        counter = cls(denoiser, *found)
        if not counter._skips.attached:
            counter.detach()
            return None
        return counter

    def take(self) -> CacheCounts:
        """Counts since the last call, then reset: ``lookups`` decisions, ``hits`` skipped (``hits <= lookups``)."""
        total, computed = self._skips.total, self._skips.computed
        self._skips.reset()
        return CacheCounts(cache=self.cache, lookups=total, hits=max(0, total - computed))

    def reset(self) -> None:
        """Forget the counts."""
        self._skips.reset()

    def detach(self) -> None:
        """Remove the torch hooks (the cache itself stays enabled)."""
        self._skips.detach()
