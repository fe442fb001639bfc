"""Per-rank compute time before the collective (equal wall times hid a rank 200 ms slower in
traceopt-ai/traceml#252).

In a sequence/tensor/CFG-parallel step every rank waits in the same collective, so the step's wall time is
equal on every rank and hides a slow one. What differs is the time from the step's start to the moment the
rank *enters* its first collective: that is its compute time.

Method (chosen over a ``TorchDispatchMode``, which would see every op and cost far more): while at least one
instrumentation is attached, the collective functions of ``torch.distributed`` and of
``torch.distributed._functional_collectives`` (the module diffusers' context parallelism calls) are replaced
by module attributes that notify the listeners and then call the original. Code that imported a collective
by name before attaching (``from torch.distributed import all_gather``) is not seen. The originals are put
back when the last listener leaves.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

_DIST = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
         "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "broadcast", "reduce", "gather", "scatter",
         "barrier", "send", "recv", "isend", "irecv", "batch_isend_irecv")
_FUNCOL = ("all_reduce", "all_gather_tensor", "all_gather_tensor_autograd", "reduce_scatter_tensor",
           "reduce_scatter_tensor_autograd", "all_to_all_single", "all_to_all_single_autograd", "broadcast")

_lock = threading.Lock()
_listeners: list[Callable[[], None]] = []
_saved: list[tuple[Any, str, Any]] = []


def _notify() -> None:
    for fn in list(_listeners):
        fn()


def _wrap(orig: Any) -> Any:
    @functools.wraps(orig)
    def collective(*args: Any, **kwargs: Any) -> Any:
        if _listeners:
            _notify()
        return orig(*args, **kwargs)

    collective.__diffbench_wrapped__ = orig  # type: ignore[attr-defined]
    return collective


def _patch() -> None:
    import torch.distributed as dist

    mods: list[tuple[Any, tuple[str, ...]]] = [(dist, _DIST)]
    try:
        import torch.distributed._functional_collectives as funcol

        mods.append((funcol, _FUNCOL))
    except ImportError:  # pragma: no cover - older torch
        pass
    for mod, names in mods:
        for name in names:
            orig = getattr(mod, name, None)
            if orig is None or hasattr(orig, "__diffbench_wrapped__"):
                continue
            _saved.append((mod, name, orig))
            setattr(mod, name, _wrap(orig))


def _unpatch() -> None:
    while _saved:
        mod, name, orig = _saved.pop()
        setattr(mod, name, orig)


def add_listener(fn: Callable[[], None]) -> None:
    """Call ``fn()`` (no arguments) just before every collective call; patches on the first listener."""
    with _lock:
        if not _listeners:
            _patch()
        _listeners.append(fn)


def remove_listener(fn: Callable[[], None]) -> None:
    """Stop calling ``fn``; restores the original collectives after the last listener (unknown fn: no-op)."""
    with _lock:
        if fn in _listeners:
            _listeners.remove(fn)
            if not _listeners:
                _unpatch()


def current_rank() -> int | None:
    """This process's rank when ``torch.distributed`` is initialised, else None."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return None
