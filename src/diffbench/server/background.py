"""Run the reference service on loopback in the background (for ``diffbench load`` without ``--url``).

Usage::

    from diffbench.server.background import run_in_background
    from diffbench.server.config import ServerConfig

    with run_in_background(ServerConfig()) as base_url:      # e.g. "http://127.0.0.1:41234"
        ...  # send requests to f"{base_url}/v1/images/generations"

The listening socket is bound here to ``127.0.0.1`` on a free port (port 0 picked by the OS) before the
server starts, so there is no race for the port. ``ServerConfig.host``/``port`` are ignored.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from diffbench.core.httpget import request
from diffbench.errors import ModelError, UsageError
from diffbench.server.config import ServerConfig

if TYPE_CHECKING:
    from diffbench.engines.base import Engine

_POLL_S = 0.05


def _listening_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    return sock


def _health_ok(base_url: str) -> bool:
    """``GET /health`` answers 200 within 1 s in all (connect + whole body)."""
    try:
        return request(f"{base_url}/health", deadline_s=1.0).status == 200
    except (OSError, http.client.HTTPException, ValueError):
        return False


@contextlib.contextmanager
def run_in_background(
    config: ServerConfig,
    *,
    mode: Literal["subprocess", "thread"] = "subprocess",
    startup_timeout_s: float = 300.0,
    shutdown_timeout_s: float = 10.0,
    engine: Engine | None = None,
) -> Iterator[str]:
    """Start the reference service on ``127.0.0.1`` (free port) and yield its base URL.

    Args:
        config: the service configuration (engine, admission, limits). ``host``/``port`` are ignored.
        mode: ``"subprocess"`` (default) runs the server in a child Python process, so a load generator in
            this process does not share the GIL with the server's event loop and worker; ``"thread"``
            runs uvicorn in a daemon thread of this process (starts faster; used by tests).
        startup_timeout_s: seconds to wait for the engine to load and ``GET /health`` to answer 200.
        shutdown_timeout_s: seconds to wait for a graceful stop before killing the child / giving up
            on the thread.
        engine: an engine object to serve (``"thread"`` mode only; default: the one ``config`` names).

    Yields:
        The base URL, e.g. ``"http://127.0.0.1:41234"`` (no trailing slash).

    Raises:
        ModelError: the service did not come up (engine failed to start, or no healthy answer within
            ``startup_timeout_s``); the message carries the server's error output.
    """
    if engine is not None and mode != "thread":
        raise UsageError("run_in_background(engine=...) serves an engine object in this process: use mode='thread'")
    sock = _listening_socket()
    base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    if mode == "thread":
        with _thread_server(config, sock, base_url, startup_timeout_s, shutdown_timeout_s, engine):
            yield base_url
    else:
        with _subprocess_server(config, sock, base_url, startup_timeout_s, shutdown_timeout_s):
            yield base_url


@contextlib.contextmanager
def _thread_server(
    config: ServerConfig, sock: socket.socket, base_url: str, startup_s: float, shutdown_s: float,
    engine: Engine | None = None,
) -> Iterator[None]:
    import uvicorn

    from diffbench.server.app import create_app

    app = create_app(config, engine=engine)
    server = uvicorn.Server(
        uvicorn.Config(app, log_level=config.log_level, timeout_graceful_shutdown=max(1, int(shutdown_s)))
    )

    def serve() -> None:
        with contextlib.suppress(SystemExit):  # uvicorn exits the (thread's) loop on a startup failure
            server.run(sockets=[sock])

    thread = threading.Thread(target=serve, name="diffbench-serve", daemon=True)
    thread.start()
    try:
        deadline = time.perf_counter() + startup_s
        while not (server.started and _health_ok(base_url)):
            if not thread.is_alive():
                err = getattr(app.state, "startup_error", None)
                raise ModelError(f"reference service failed to start: {err or 'see log above'}")
            if time.perf_counter() > deadline:
                raise ModelError(f"reference service did not answer /health within {startup_s:g} s")
            time.sleep(_POLL_S)
        yield
    finally:
        server.should_exit = True
        thread.join(timeout=shutdown_s + 5)
        sock.close()


@contextlib.contextmanager
def _subprocess_server(
    config: ServerConfig, sock: socket.socket, base_url: str, startup_s: float, shutdown_s: float
) -> Iterator[None]:
    fd = sock.fileno()
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    with tempfile.TemporaryFile(mode="w+b") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "diffbench.server._child", str(fd), config.model_dump_json()],
            pass_fds=(fd,),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        sock.close()  # the child holds its own copy of the listening socket

        def tail() -> str:
            log.seek(0)
            return log.read().decode(errors="replace")[-4000:].strip()

        try:
            deadline = time.perf_counter() + startup_s
            while not _health_ok(base_url):
                if proc.poll() is not None:
                    raise ModelError(f"reference service exited with code {proc.returncode}:\n{tail()}")
                if time.perf_counter() > deadline:
                    raise ModelError(
                        f"reference service gave no healthy /health in {startup_s:g} s:\n{tail()}"
                    )
                time.sleep(_POLL_S)
            yield
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=shutdown_s + 5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
