"""Run the app under uvicorn with a bounded drain: Ctrl-C / SIGTERM stop the service within ``drain_s``.

On the first SIGINT or SIGTERM uvicorn stops accepting connections and waits for in-flight requests;
:class:`DrainingServer` also starts the service's drain clock. After ``ServerConfig.drain_s`` seconds
uvicorn cancels the requests still waiting: each answers 503 (``code: unavailable``) instead of a reset
connection or a CancelledError traceback; queued requests and video jobs fail with 503; a generation still
on the device is abandoned (generation is not interruptible) and the process exits.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI


def make_server(app: FastAPI, *, host: str, port: int, log_level: str, drain_s: float) -> Any:
    """A ``uvicorn.Server`` for ``app`` whose shutdown starts the service's drain clock."""
    import uvicorn

    service = app.state.service

    class DrainingServer(uvicorn.Server):
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
