"""A process-wide count of torch.compile compilations (what triggers a recompile:
https://docs.pytorch.org/docs/stable/compile/programming_model.recompilation.html).

Method: ``torch._dynamo.callback_handler.register_start_callback(fn)`` calls ``fn`` once at the start of
every compilation: the first compile of a frame and each recompile (a function called with inputs of
rank 1, 1, 2, 3 under ``torch.compile(backend="eager")`` starts 3 compilations; tested in
``tests/monitor/test_instrument_compile.py``). This is a private PyTorch API (tested on torch 2.13); the
test exercises it so a change of the API fails the suite instead of silently exporting 0.

There is one counter per process, whatever the number of attached instrumentations: :func:`acquire`
registers the callback on the first use and :func:`release` removes it after the last, so attaching and
detaching never leaks callbacks into dynamo. ``torch._dynamo.reset()`` clears every callback; the
instrumentation re-registers at the start of each request (:meth:`CompileCounter.ensure`). Callbacks run on the compiling thread; ``starts`` is a plain
int increment (atomic under the GIL).
"""

from __future__ import annotations

import threading
from typing import Any


class CompileCounter:
    """Counts compilation starts while registered. Use the process-wide one through :func:`acquire`."""

    def __init__(self) -> None:
        self.starts = 0
        self._users = 0
        self._lock = threading.Lock()

    def _on_start(self, *args: Any, **kwargs: Any) -> None:  # CallbackArgs; the signature varies by version
        self.starts += 1

    def acquire(self) -> CompileCounter:
        """Register the dynamo start callback if this is the first user; returns the counter."""
        with self._lock:
            if self._users == 0:
                import torch._dynamo

                torch._dynamo.callback_handler.register_start_callback(self._on_start)
            self._users += 1
        return self

    def release(self) -> None:
        """Drop one user; the callback is removed when the last one leaves (extra calls are ignored)."""
        with self._lock:
            if self._users == 0:
                return
            self._users -= 1
            if self._users == 0:
                import torch._dynamo

                handler = torch._dynamo.callback_handler
                if self._on_start in handler.start_callbacks:
                    handler.remove_start_callback(self._on_start)

    def ensure(self) -> None:
        """Register the callback again if something cleared dynamo's callbacks while it is held
        (``torch._dynamo.reset()`` calls ``callback_handler.clear()``); called at every request start."""
        if self._users == 0:
            return
        import torch._dynamo

        handler = torch._dynamo.callback_handler
        if self._on_start not in handler.start_callbacks:
            with self._lock:
                if self._users and self._on_start not in handler.start_callbacks:
                    handler.register_start_callback(self._on_start)

    @property
    def registered(self) -> bool:
        """True while at least one instrumentation holds the counter."""
        return self._users > 0


COUNTER = CompileCounter()
"""The one counter of this process."""


def acquire() -> CompileCounter:
    """The process-wide :class:`CompileCounter`, registered with dynamo (call :func:`release` when done)."""
    return COUNTER.acquire()


def release() -> None:
    """Release one :func:`acquire`."""
    COUNTER.release()
