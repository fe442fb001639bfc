"""SIGTERM handled like the first Ctrl-C, for every command that runs in the main thread.

``timeout``, ``docker stop``, a CI cancellation and Kubernetes all send SIGTERM. Python's default for it is
to die at once (exit 143, no output); :func:`install` replaces that with the Ctrl-C path: the handler raises
:class:`KeyboardInterrupt` in the main thread, so each command's existing interrupt handling writes its
partial result, and records that the interrupt was a SIGTERM so the CLI exits 143 (128 + 15) instead of
130 (128 + 2) and says "SIGTERM" instead of "Ctrl-C".

Commands that run an event loop with their own signal handlers replace this one while the loop runs and
agree on the codes: ``load`` drains and exits 130 / 143 itself, ``probe`` calls :func:`note`, ``serve``'s
uvicorn drains and then re-raises the signal to this handler; ``load`` and ``probe`` re-:func:`install` it
when their loop ends (asyncio leaves SIGTERM at its default), as does ``ray.init``'s caller
(:func:`diffbench.distributed.cluster.connect`: Ray sets a SIGTERM handler that exits at once).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None

EXIT_SIGINT = 130  # 128 + SIGINT (2): the shell's code for a process stopped by Ctrl-C
EXIT_SIGTERM = 143  # 128 + SIGTERM (15)

_received: list[str] = []  # names of the signals that interrupted this process, in order


def install() -> Handler:
    """Handle SIGTERM like Ctrl-C from now on (main thread only; elsewhere a no-op).

    Returns:
        The handler it replaced (for :func:`restore`).
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _on_sigterm)


def restore(previous: Handler) -> None:
    """Put back the SIGTERM handler :func:`install` replaced (an in-process caller of the CLI keeps its own)."""
    if previous is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, previous)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    first = not _received
    _received.append("SIGTERM")
    if first:  # os.write: safe inside a signal handler (print may re-enter a buffered stderr)
        os.write(2, b"\nSIGTERM: stopping as on Ctrl-C (what has finished is kept)\n")
    raise KeyboardInterrupt


def note(name: str) -> None:
    """Record that ``name`` ("SIGTERM" or "Ctrl-C") interrupted the run (for a command's own handler)."""
    _received.append(name)


def by_sigterm() -> bool:
    """True when the first interrupt of this process was a SIGTERM."""
    return bool(_received) and _received[0] == "SIGTERM"


def interrupt_name() -> str:
    """"SIGTERM" or "Ctrl-C": what stopped the run, for messages."""
    return "SIGTERM" if by_sigterm() else "Ctrl-C"


def exit_code() -> int:
    """143 after a SIGTERM, else 130 (Ctrl-C)."""
    return EXIT_SIGTERM if by_sigterm() else EXIT_SIGINT


def reset() -> None:
    """Forget the interrupts seen (tests that call the CLI in-process several times)."""
    _received.clear()
