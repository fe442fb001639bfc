"""Run a coroutine on uvloop where it is installed (the ``fast`` extra), else on the standard asyncio loop.

uvloop (libuv) lowers the per-callback overhead of the event loop; it is optional and never required for a
correct measurement. :func:`loop_name` says which loop ran, so a report can state it.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Coroutine
from typing import Any, Literal, TypeVar

from diffbench.errors import MissingDependencyError

T = TypeVar("T")
LoopName = Literal["uvloop", "asyncio"]

_last: LoopName | None = None


def uvloop_available() -> bool:
    """True when the ``uvloop`` package can be imported (checked without importing it)."""
    return importlib.util.find_spec("uvloop") is not None


def choose_loop(use_uvloop: bool | None = None) -> LoopName:
    """The loop :func:`run` would use: ``None`` = uvloop when installed, ``True`` = uvloop (required),
    ``False`` = asyncio.

    Raises:
        MissingDependencyError: ``use_uvloop=True`` and uvloop is not installed (names the extra).
    """
    if use_uvloop is False:
        return "asyncio"
    if uvloop_available():
        return "uvloop"
    if use_uvloop:
        raise MissingDependencyError("uvloop is not installed; install the 'fast' extra "
                                     "(pip install 'diffbench[fast]') or drop the uvloop option")
    return "asyncio"


def run(coro: Coroutine[Any, Any, T], *, use_uvloop: bool | None = None) -> T:
    """Run ``coro`` to completion on a fresh event loop (as :func:`asyncio.run`) and return its result.

    Raises:
        MissingDependencyError: as :func:`choose_loop`.
    """
    global _last
    try:
        name = choose_loop(use_uvloop)
    except MissingDependencyError:
        coro.close()
        raise
    _last = name
    if name == "uvloop":
        import uvloop

        if hasattr(asyncio, "Runner"):  # Python >= 3.11
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                return runner.run(coro)
        loop = uvloop.new_event_loop()  # pragma: no cover - Python 3.10
        try:
            asyncio.set_event_loop(loop)
            return loop.run_until_complete(coro)
        finally:
            asyncio.set_event_loop(None)
            loop.close()
    return asyncio.run(coro)


def loop_name() -> LoopName | None:
    """``"uvloop"`` or ``"asyncio"``: the loop of the last :func:`run` in this process (None before any)."""
    return _last


def running_loop_name() -> LoopName:
    """The kind of the loop running now (call from inside a coroutine)."""
    loop = asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
