"""Child-process entry point of :func:`diffbench.server.background.run_in_background` (not public).

``python -m diffbench.server._child FD CONFIG_JSON`` serves on the inherited listening socket ``FD``.
"""

from __future__ import annotations

import socket
import sys


def main(argv: list[str]) -> int:
    from diffbench.server.app import create_app
    from diffbench.server.config import ServerConfig
    from diffbench.server.runner import make_server

    fd, raw = int(argv[0]), argv[1]
    config = ServerConfig.model_validate_json(raw)
    sock = socket.socket(fileno=fd)
    app = create_app(config)
    server = make_server(app, host="127.0.0.1", port=0, log_level=config.log_level, drain_s=config.drain_s)
    server.run(sockets=[sock])
    return 0 if server.started else 3


if __name__ == "__main__":  # pragma: no cover - exercised through run_in_background
    sys.exit(main(sys.argv[1:]))
