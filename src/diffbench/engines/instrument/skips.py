"""Counting skipped computations of a diffusers cache, through public torch hooks.

Method. After ``enable_cache``, every module that the cache hooked carries a diffusers hook registry
(``module._diffusers_hook``). A cache skips by *not calling the hooked module's original forward*, so none
of that module's children run. For each hooked module (except the denoiser itself and the always-computed
"leader" block of First-Block-Cache / MagCache) the recorder registers two torch forward pre-hooks:

- on the hooked module: fires on every call (torch hooks run in ``__call__``, before diffusers' forward
  wrapper decides) → ``total``;
- on its first descendant that owns parameters: fires only when the original forward ran → ``computed``.

``fraction = 1 − computed / total``. For First-Block-Cache and MagCache the hooked modules are the blocks
after the first, which all skip together, so the fraction is the fraction of denoiser forwards (steps, for
a model without separate CFG calls) whose remaining blocks were skipped. For TaylorSeer, FasterCache and
pyramid attention broadcast the hooked modules are attention layers, so it is the fraction of attention
calls served from the cache.
"""

from __future__ import annotations

from typing import Any

from diffbench.store.models import SkipStats

_LEADER_AXES = ("first-block", "magcache")


def hook_names(module: Any) -> list[str]:
    """Names of the diffusers hooks registered on ``module`` (empty when none)."""
    return _hook_names(module)


def _hook_names(module: Any) -> list[str]:
    reg = getattr(module, "_diffusers_hook", None)
    hooks = getattr(reg, "hooks", None)
    return list(hooks) if hooks else []


def _first_param_descendant(module: Any) -> Any | None:
    for _, sub in module.named_modules():
        if sub is module:
            continue
        if any(True for _ in sub.parameters(recurse=False)):
            return sub
    return None


class SkipRecorder:
    """Counts calls of cache-hooked modules and of their computations. Attach after ``enable_cache``.

    ``first_only``: hook only the first cache-hooked module (in ``named_modules`` order). For First-Block-Cache
    and MagCache, whose non-leader blocks all skip together, ``total`` then counts one cache decision per
    denoiser forward (what :mod:`diffbench.engines.instrument.cache_counter` exports as lookups).
    """

    def __init__(self, denoiser: Any, axis: str, *, first_only: bool = False) -> None:
        self.axis = axis
        self.total = 0
        self.computed = 0
        self._handles: list[Any] = []
        for _name, mod in denoiser.named_modules():
            if mod is denoiser:
                continue
            names = _hook_names(mod)
            if not names or any("leader" in n for n in names):
                continue
            inner = _first_param_descendant(mod)
            if inner is None:
                continue
            self._handles.append(mod.register_forward_pre_hook(self._on_call))
            self._handles.append(inner.register_forward_pre_hook(self._on_compute))
            if first_only:
                break

    @property
    def attached(self) -> bool:
        return bool(self._handles)

    def _on_call(self, module: Any, args: Any) -> None:
        self.total += 1

    def _on_compute(self, module: Any, args: Any) -> None:
        self.computed += 1

    def reset(self) -> None:
        self.total = self.computed = 0

    def stats(self) -> SkipStats | None:
        """Counts since the last :meth:`reset`; None when nothing hooked was called."""
        return self.stats_of(self.axis, self.total, self.computed)

    @staticmethod
    def stats_of(axis: str, total: int, computed: int) -> SkipStats | None:
        """The stored form of ``computed`` of ``total`` hooked calls (None when ``total`` is 0)."""
        if not total:
            return None
        unit = (
            "denoiser forward (blocks after the first)" if axis in _LEADER_AXES else "attention call"
        )
        return SkipStats(
            fraction=max(0.0, 1.0 - computed / total),
            computed=computed,
            total=total,
            unit=unit,
            method="torch pre-hooks on cache-hooked modules vs on their first parameterized child",
        )

    def detach(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
