"""A fixed-body HTTP/1.1 responder for measuring the load client itself (benchmarks, fidelity tests).

Meant to run in its own process, so it never shares the client's GIL or event loop::

    python -m diffbench.load.client.noop_server --body-bytes N [--delay S] [--port 0]

It prints the port it listens on (one line on stdout), then answers every request it receives on
127.0.0.1 (any method, any path) with the same precomputed ``200 OK`` response, keep-alive, after ``--delay``
seconds (default 0: at once). The body is an images-API response (``{"created": 0, "data": [{"b64_json":
...}]}``) whose ``b64_json`` is a valid PNG:

- ``--body-bytes 0`` (default, the *no-op* mode): an 8x8 gradient PNG (body ~150 bytes; not flat, so the
  client's black/constant checks pass);
- ``--body-bytes N``: an incompressible noise PNG (``compress_level=1``) of the square size
  :func:`image_size_for` returns, so the whole body is ~N bytes (the side is rounded down: a little under
  N, within 0.5 % from 1 MB up). A client whose payload check should pass requests that size.

Every request gets the same picture: a row summary counts those answers as ``duplicate_across_seeds`` (the
runners' records themselves stay ok; the benchmarks and fidelity tests read the records).

The server is a raw :class:`asyncio.Protocol` on uvloop when installed: requests are framed by
``Content-Length`` (no chunked request bodies, no ``Expect: 100-continue``) and never parsed further, so it
out-runs any client it measures.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import math
import resource
import sys

NOOP_SIZE = (8, 8)
"""Image size (width, height) of the no-op mode (``body_bytes`` 0)."""
_PNG_OVERHEAD = 70
"""PNG signature, IHDR, IDAT/IEND chunk framing and the zlib header/trailer, in bytes (approximate)."""
_JSON_FRAME = len(b'{"created": 0, "data": [{"b64_json": ""}]}')


def image_size_for(body_bytes: int) -> tuple[int, int]:
    """(width, height) in pixels of the image served for a ``body_bytes`` body (``NOOP_SIZE`` for 0).

    An RGB noise PNG at ``compress_level=1`` takes ``3 * w * h + h`` bytes of scanlines (one filter byte
    per row) plus ~5 bytes per 64 kB stored deflate block; base64 makes it 4/3 larger. The side is the
    square that fills ``body_bytes``.

    Raises:
        ValueError: ``body_bytes`` negative or too small for a 16x16 image (a few kB).
    """
    if body_bytes < 0:
        raise ValueError(f"body_bytes must be >= 0, got {body_bytes}")
    if body_bytes == 0:
        return NOOP_SIZE
    png = (body_bytes - _JSON_FRAME) * 3 / 4 - _PNG_OVERHEAD
    png -= png / 65536 * 5  # stored-block headers
    side = int((-1 + math.sqrt(1 + 12 * png)) / 6) if png > 0 else 0  # 3 s^2 + s = png
    if side < 16:
        raise ValueError(f"body_bytes {body_bytes} is too small for a noise image; use 0 (no-op) or >= 4096")
    return side, side


def build_body(body_bytes: int = 0) -> bytes:
    """The JSON body served for ``body_bytes`` (see the module docstring); deterministic (seed 0)."""
    import numpy as np
    from PIL import Image

    w, h = image_size_for(body_bytes)
    if body_bytes == 0:
        y, x = np.mgrid[0:h, 0:w]
        img = Image.fromarray(np.stack([x * 32, y * 32, (x + y) * 16], axis=-1).astype(np.uint8), "RGB")
    else:
        img = Image.fromarray(np.random.default_rng(0).integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=1)
    return json.dumps({"created": 0, "data": [{"b64_json": base64.b64encode(buf.getvalue()).decode()}]}).encode()


def build_response(body: bytes) -> bytes:
    """The full HTTP/1.1 response bytes for ``body`` (status line, headers, body)."""
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: keep-alive\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    return head + body


class Responder(asyncio.Protocol):
    """One connection: answer each complete request (headers + ``Content-Length`` bytes) with ``response``."""

    response: bytes = b""
    delay_s: float = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buf = bytearray()
        self.need = -1  # bytes of the current request still to come (-1: reading headers)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            if self.need < 0:
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(self.buf[:end]).lower()
                i = head.find(b"content-length:")
                length = 0
                if i >= 0:
                    j = head.find(b"\r\n", i)
                    length = int(head[i + 15:j if j >= 0 else len(head)])
                del self.buf[:end + 4]
                self.need = length
            if len(self.buf) < self.need:
                return
            del self.buf[:self.need]
            self.need = -1
            if self.delay_s > 0:
                asyncio.get_running_loop().call_later(self.delay_s, self._reply)
            else:
                self.transport.write(self.response)

    def _reply(self) -> None:
        if not self.transport.is_closing():
            self.transport.write(self.response)


def raise_nofile_limit() -> None:
    """Raise the soft open-file limit to the hard limit (thousands of connections in flight)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def serve(body_bytes: int = 0, delay_s: float = 0.0, port: int = 0) -> None:
    """Serve forever on 127.0.0.1:``port`` (0: a free port), printing the port on stdout once listening."""
    Responder.response = build_response(build_body(body_bytes))
    Responder.delay_s = delay_s
    server = await asyncio.get_running_loop().create_server(Responder, "127.0.0.1", port, backlog=8192)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


class ServerProcess:
    """This module's server in a child process (``sys.executable -m``, the parent's environment).

    ``cpu``: pin the server to that CPU (``os.sched_setaffinity``; Linux), so a client pinned elsewhere does
    not share a core with it. ``url`` is ``http://127.0.0.1:PORT``; ``size`` the image size to request.
    Use as a context manager, or call :meth:`close`.

    Raises:
        RuntimeError: the child exited before printing its port (its stderr is in the message).
    """

    def __init__(self, body_bytes: int = 0, delay_s: float = 0.0, cpu: int | None = None) -> None:
        import os
        import subprocess

        self.body_bytes, self.delay_s = body_bytes, delay_s
        self.size = image_size_for(body_bytes)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "diffbench.load.client.noop_server", "--body-bytes", str(body_bytes),
             "--delay", repr(delay_s)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.strip().isdigit():
            err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
            self.proc.wait(10)
            raise RuntimeError(f"noop server did not start: {err.strip()[-500:]}")
        self.port = int(line)
        self.url = f"http://127.0.0.1:{self.port}"
        if cpu is not None:
            os.sched_setaffinity(self.proc.pid, {cpu})

    def close(self) -> None:
        """Stop the child (SIGTERM, then SIGKILL after 10 s)."""
        import subprocess

        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m diffbench.load.client.noop_server",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--body-bytes", type=int, default=0, help="body size in bytes (0: an 8x8 PNG)")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds before each answer (default 0)")
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one, printed)")
    args = ap.parse_args(argv)
    if args.delay < 0 or not math.isfinite(args.delay):
        ap.error(f"--delay must be a finite number >= 0, got {args.delay}")
    try:
        image_size_for(args.body_bytes)
    except ValueError as exc:
        ap.error(f"--body-bytes: {exc}")
    raise_nofile_limit()
    coro = serve(args.body_bytes, args.delay, args.port)
    try:
        import uvloop
    except ImportError:
        runner = asyncio.run
    else:
        runner = uvloop.run
    try:
        runner(coro)
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
