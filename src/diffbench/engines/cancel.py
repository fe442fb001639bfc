"""Cancel a running generation at its next denoising step, and the step log that shows where it stopped.

A caller that may abandon a generation (the service's device worker: a client that disconnected, a video
job that was deleted, a server that drains) runs it inside :func:`cancellable` with a :class:`CancelToken`
and calls :meth:`CancelToken.cancel` from any thread. The engine calls :func:`checkpoint` at every
denoising step boundary (step 0 = denoising starts, step k = step k finished); the checkpoint appends the
boundary's time to the token's step log and, once the token is cancelled, raises :class:`Cancelled`,
which unwinds the pipeline call. Outside :func:`cancellable` a checkpoint does nothing (``bench`` and
``sweep`` are unaffected).

Where the checkpoint sits: the diffusers engine's instrumentation calls it from its wrapper of
``scheduler.step`` (:mod:`diffbench.engines.instrument.pipeline`), the point where diffusers calls
``callback_on_step_end``; the simulated engine calls it at each simulated step boundary while it waits for
its device (:meth:`diffbench.engines.sim.SimEngine.sync`). On CUDA the host can be ahead of the device by
the kernels it already launched; the caller synchronizes after :class:`Cancelled` so the device is free
when it says so.

The token is carried in a :class:`contextvars.ContextVar`: it follows the thread (and task) that runs the
generation, so no engine signature changes. This module imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar

from diffbench.errors import GenerationError
from diffbench.metrics.names import CANCEL_REASONS

REASONS = CANCEL_REASONS
"""Why a generation is cancelled: its client disconnected (images API), its video job was deleted, or the
server drained (stop signal, drain time over); the ``reason`` label of the exported cancel series."""


class Cancelled(GenerationError):
    """A generation stopped at a step boundary because its token was cancelled.

    ``reason``: one of :data:`REASONS`; ``step``: the step boundary it stopped at (0: before the first
    step; k: after k steps); ``steps``: the steps it would have run (None when unknown). The caller that
    ran it may fill ``service_s`` (seconds from the start on the device to the worker released).
    """

    def __init__(self, reason: str, step: int, steps: int | None) -> None:
        of = f" of {steps}" if steps is not None else ""
        super().__init__(f"generation cancelled ({reason}) at step {step}{of}")
        self.reason = reason
        self.step = step
        self.steps = steps
        self.service_s: float | None = None


class CancelToken:
    """A one-shot cancel flag with the step log of the generation it guards. Thread-safe.

    ``steps_ns``: ``time.perf_counter_ns()`` of every step boundary the generation reached (index = step
    number, 0 = denoising started); ``total_steps``: the steps planned (as the last checkpoint said);
    ``requested_ns``: when :meth:`cancel` was first called; ``stopped_at``: the step at which
    :class:`Cancelled` was raised (None while running or when it ran to the end); ``released_ns``: set by
    whoever ran the generation when it ended and the device was free again.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reason: str | None = None
        self.requested_ns: int | None = None
        self.steps_ns: list[int] = []
        self.total_steps: int | None = None
        self.stopped_at: int | None = None
        self.released_ns: int | None = None

    @property
    def cancelled(self) -> bool:
        return self.reason is not None

    def cancel(self, reason: str) -> bool:
        """Ask the generation to stop at its next step boundary. The first call wins; True when this call
        cancelled it.

        Raises:
            ValueError: ``reason`` is not one of :data:`REASONS`.
        """
        if reason not in REASONS:
            raise ValueError(f"cancel reason {reason!r}: one of {', '.join(REASONS)}")
        with self._lock:
            if self.reason is not None:
                return False
            self.requested_ns = time.perf_counter_ns()
            self.reason = reason
            return True

    def release_s(self) -> float | None:
        """Seconds from the cancel to the device released (None unless both happened; 0 when the generation
        ended before the cancel)."""
        if self.requested_ns is None or self.released_ns is None:
            return None
        return max(0.0, (self.released_ns - self.requested_ns) / 1e9)

    def step_s(self) -> float | None:
        """Mean seconds between the step boundaries reached after denoising started (None before two)."""
        ns = self.steps_ns
        if len(ns) < 2:
            return None
        return (ns[-1] - ns[0]) / (len(ns) - 1) / 1e9

    def check(self, step: int, steps: int | None = None) -> None:
        """Log step boundary ``step`` (of ``steps``); raise :class:`Cancelled` when cancelled."""
        with self._lock:
            self.steps_ns.append(time.perf_counter_ns())
            if steps is not None:
                self.total_steps = steps
            if self.reason is None:
                return
            self.stopped_at = step
            reason = self.reason
        raise Cancelled(reason, step, self.total_steps)


_CURRENT: ContextVar[CancelToken | None] = ContextVar("diffbench_cancel_token", default=None)


def current() -> CancelToken | None:
    """The token of the generation running in this context (None outside :func:`cancellable`)."""
    return _CURRENT.get()


@contextlib.contextmanager
def cancellable(token: CancelToken) -> Iterator[CancelToken]:
    """Run the block's generation under ``token``: its step checkpoints log to it and honour its cancel."""
    reset = _CURRENT.set(token)
    try:
        yield token
    finally:
        _CURRENT.reset(reset)


def checkpoint(step: int, steps: int | None = None) -> None:
    """A denoising step boundary (``step`` 0 = denoising starts; k = k steps done, of ``steps``).

    Does nothing outside :func:`cancellable`. Raises :class:`Cancelled` when the current token was cancelled.
    """
    token = _CURRENT.get()
    if token is not None:
        token.check(step, steps)


def plan_steps(steps: int) -> None:
    """Tell the current token (if any) how many steps the generation will run, for its step log."""
    token = _CURRENT.get()
    if token is not None:
        token.total_steps = steps
