"""Per-rank compute time over the whole step: step time minus the time the rank waited in collectives
(equal wall times hid a rank 200 ms slower in traceopt-ai/traceml#252).

In a sequence/tensor/CFG-parallel step every rank waits in the same collectives, so the step's wall time is
equal on every rank and hides a slow one. What differs is how long each rank *waits* in them: the fast ranks
wait for the slow one. A rank's compute time of a step is therefore its step time minus the time it spent
inside collectives; a rank slow anywhere in the step (before its first collective, between two of them —
where the attention all-to-alls of Ulysses/USP sit — or after its last) shows a larger compute time than the
others, while their extra wait is subtracted from theirs.

Method (chosen over a ``TorchDispatchMode``, which would see every op and cost far more): while at least one
listener is attached, the collective functions of ``torch.distributed`` and of
``torch.distributed._functional_collectives`` (the module diffusers' context parallelism calls) are replaced
by module attributes that call ``listener.collective_begin()``, the original, then
``listener.collective_end()`` (also when the original raises). The listener takes a timestamp at each (the
instrumentation's clock: ``perf_counter_ns`` on the host, a CUDA event on the current stream). What that
interval holds:

- a blocking collective (gloo, or ``async_op=False``): on the host, the whole blocking call; on CUDA, the
  current stream's time from the work before it until the collective's result is ready (the stream waits
  for NCCL's stream), which includes the wait for the slowest peer;
- a functional collective (``funcol.all_to_all_single`` …, returning an ``AsyncCollectiveTensor``): its launch,
  and separately its ``wait_tensor`` (patched too), where the rank actually waits for its peers;
- nested calls (``all_gather_object`` calls ``all_gather``) count once, as the outermost call.

Not seen: code that imported a collective by name before attaching (``from torch.distributed import
all_gather``), ``Work.wait()`` of an ``async_op=True`` call (only its launch is timed; the wait then counts
as compute), and ``torch.ops._c10d_functional`` called directly (a compiled graph). The originals are put back
when the last listener leaves.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Protocol

_DIST = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
         "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "broadcast", "reduce", "gather", "scatter",
         "barrier", "send", "recv", "isend", "irecv", "batch_isend_irecv")
_FUNCOL = ("all_reduce", "all_gather_tensor", "all_gather_tensor_autograd", "all_gather_single",
           "all_gather_single_autograd", "reduce_scatter_tensor", "reduce_scatter_tensor_autograd",
           "all_to_all_single", "all_to_all_single_autograd", "broadcast", "permute_tensor", "all_reduce_coalesced",
           "all_gather_into_tensor_coalesced", "reduce_scatter_tensor_coalesced", "wait_tensor")


class CollectiveListener(Protocol):
    """Told about every (outermost) collective call of the process, on the calling thread."""

    def collective_begin(self) -> None:
        """Just before the collective is called."""

    def collective_end(self) -> None:
        """Just after it returned (or raised)."""


_lock = threading.Lock()
_listeners: list[CollectiveListener] = []
_saved: list[tuple[Any, str, Any]] = []
_depth = threading.local()


def _wrap(orig: Any) -> Any:
    @functools.wraps(orig)
    def collective(*args: Any, **kwargs: Any) -> Any:
        if not _listeners:
            return orig(*args, **kwargs)
        depth = getattr(_depth, "n", 0)
        _depth.n = depth + 1
        if depth == 0:
            for li in list(_listeners):
                li.collective_begin()
        try:
            return orig(*args, **kwargs)
        finally:
            _depth.n = depth
            if depth == 0:
                for li in list(_listeners):
                    li.collective_end()

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


def add_listener(listener: CollectiveListener) -> None:
    """Tell ``listener`` about every collective call from now on; patches the collectives on the first one."""
    with _lock:
        if not _listeners:
            _patch()
        _listeners.append(listener)


def remove_listener(listener: CollectiveListener) -> None:
    """Stop telling ``listener``; restores the original collectives after the last one (unknown: no-op)."""
    with _lock:
        if listener in _listeners:
            _listeners.remove(listener)
            if not _listeners:
                _unpatch()


def current_rank() -> int | None:
    """This process's rank when ``torch.distributed`` is initialised, else None."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return None
