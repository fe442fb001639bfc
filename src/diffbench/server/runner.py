"""Run the app under uvicorn with a bounded drain: Ctrl-C / SIGTERM stop the service within ``drain_s``.

On the first SIGINT or SIGTERM uvicorn stops accepting connections and waits for in-flight requests;
:class:`DrainingServer` also starts the service's drain clock. After ``ServerConfig.drain_s`` seconds
uvicorn cancels the requests still waiting: each answers 503 (``code: unavailable``) instead of a reset
connection or a CancelledError traceback; queued requests and video jobs fail with 503; a generation still
on the device is cancelled at its next denoising step (:mod:`diffbench.engines.cancel`; the service log
says at which step). Only one that reaches no step within ``CANCEL_GRACE_S`` is abandoned, and the process
then exits through :func:`exit_now` (a normal interpreter exit would destroy torch's running C++ threads
and abort with "terminate called without an active exception", exit 134). A second Ctrl-C exits at once,
quietly, 130.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from fastapi import FastAPI


def exit_now(code: int, message: str | None = None) -> NoReturn:
    """Print ``message`` to stderr, flush stdout/stderr and end the process with ``os._exit(code)``.

    For exits while a worker thread may still be inside the engine (torch): ``os._exit`` skips the
    interpreter teardown and C++ static destructors, which abort (SIGABRT, exit 134) when a thread pool
    is still busy.
    """
    if message:
        print(message, file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind (not yet listen) a TCP socket on ``host``:``port`` as uvicorn would; check before any work.

    Connections are refused until the server listens (after the model loaded). Port 0 picks a free port
    (read it with ``getsockname()``).

    Raises:
        UsageError: ``host`` does not resolve or is not an address of this machine, or ``port`` is in
            use or not allowed; the message names ``--host`` / ``--port`` (exit 2).
    """
    from diffbench.errors import UsageError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except socket.gaierror as exc:
        sock.close()
        raise UsageError(
            f"--host {host!r} does not resolve ({exc.strerror}); give an address of this machine such as "
            "127.0.0.1"
        ) from None
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(
                f"--port {port}: {host}:{port} is already in use; stop the process using it or choose "
                "another --port (0 picks a free one)"
            ) from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise UsageError(
                f"--host {host}: not an address of this machine ({exc.strerror}); use 127.0.0.1 or one "
                "of this machine's addresses"
            ) from None
        raise UsageError(f"--host {host} --port {port}: cannot bind ({exc.strerror})") from None
    return sock


def service_log(level: str) -> None:
    """Print the service's own log (``diffbench.server``: the step log of each cancelled generation) to
    stderr at uvicorn's ``level`` (``trace`` counts as debug), as ``INFO: message``. Idempotent."""
    import logging

    log = logging.getLogger("diffbench.server")
    name = "DEBUG" if level.lower() == "trace" else level.upper()
    log.setLevel(name if isinstance(logging.getLevelName(name), int) else logging.INFO)
    if not any(getattr(h, "diffbench_service", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
        handler.diffbench_service = True  # type: ignore[attr-defined]
        log.addHandler(handler)
    log.propagate = False


def make_server(
    app: FastAPI,
    *,
    host: str,
    port: int,
    log_level: str,
    drain_s: float,
    on_force_exit: Callable[[], None] | None = None,
) -> Any:
    """A ``uvicorn.Server`` for ``app`` whose shutdown starts the service's drain clock.

    A second SIGINT while draining calls ``on_force_exit`` (default: :func:`exit_now` with 130 and no
    message) instead of uvicorn's force-exit, which cancels the lifespan and prints tracebacks.
    """
    import uvicorn

    service = app.state.service
    service_log(log_level)

    class DrainingServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            if self.should_exit and sig == signal.SIGINT:
                (on_force_exit or (lambda: exit_now(130)))()
            super().handle_exit(sig, frame)

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            service.begin_drain()
            await super().shutdown(sockets)

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=drain_s,  # type: ignore[arg-type]  # uvicorn passes it to wait_for
    )
    return DrainingServer(config)
