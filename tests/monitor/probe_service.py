"""A real ``diffbench serve`` app (tiny-flux on the CPU) on loopback for the probe tests, behind a thin
test-only ASGI shim that

- records the ``X-Diffbench-Traffic`` header of every request (the probe must send ``probe`` on each);
- fills ``data[0].fingerprint`` / ``fingerprint_id`` of ``GET /v1/models`` from
  :func:`diffbench.engines.fingerprint.deployment_fingerprint` when the service does not report them yet
  (helper B adds them to serve; once it does, the shim passes the service's own values through) and can
  override fields of it (``overrides``) to play "another deployment";
- answers generation requests with HTTP 500 while ``fail`` is set (a failing service).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

GEN_PATHS = ("/v1/images/generations", "/v1/videos")


@dataclass
class Shim:
    app: Any
    fingerprint: dict[str, object] | None = None  # computed lazily from the running service
    overrides: dict[str, object] = field(default_factory=dict)
    drop_fingerprint: bool = False
    fail: bool = False
    traffic: list[tuple[str, str, str | None]] = field(default_factory=list)  # (method, path, header)

    def _card_fingerprint(self, card: dict[str, Any]) -> None:
        if self.drop_fingerprint:
            card.pop("fingerprint", None)
            card.pop("fingerprint_id", None)
            return
        if not isinstance(card.get("fingerprint"), dict):
            if self.fingerprint is None:
                from diffbench.core.env import capture_env
                from diffbench.engines.fingerprint import deployment_fingerprint

                info = self.app.state.service.info
                self.fingerprint = deployment_fingerprint(info, capture_env())
            card["fingerprint"] = dict(self.fingerprint)
        card["fingerprint"].update(self.overrides)
        blob = json.dumps(card["fingerprint"], sort_keys=True, default=str).encode()
        card["fingerprint_id"] = hashlib.sha256(blob).hexdigest()[:16]

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
        path = scope["path"]
        if path == "/__shim/traffic":  # for a shim in another process: the headers it has seen
            body = json.dumps(self.traffic).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        self.traffic.append((scope["method"], path, headers.get("x-diffbench-traffic")))
        if self.fail and scope["method"] == "POST" and path in GEN_PATHS:
            body = json.dumps({"error": {"message": "injected failure", "code": "generation_failed"}}).encode()
            await send({"type": "http.response.start", "status": 500,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        if not (scope["method"] == "GET" and path == "/v1/models"):
            await self.app(scope, receive, send)
            return
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(msg: dict) -> None:
            if msg["type"] == "http.response.start":
                start.update(msg)
            else:
                chunks.append(msg.get("body", b""))
                if not msg.get("more_body"):
                    body = b"".join(chunks)
                    if start.get("status") == 200:
                        data = json.loads(body)
                        self._card_fingerprint(data["data"][0])
                        body = json.dumps(data).encode()
                    hdrs = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
                    hdrs.append((b"content-length", str(len(body)).encode()))
                    await send({**start, "headers": hdrs})
                    await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, capture)


@contextlib.contextmanager
def serve_tiny_flux(**config: Any) -> Iterator[tuple[str, Shim]]:
    """Start ``create_app(ServerConfig(**config))`` (tiny-flux, CPU) with uvicorn in a thread; yield
    ``(base_url, shim)``."""
    import urllib.request

    import uvicorn

    from diffbench.server.app import create_app
    from diffbench.server.config import ServerConfig

    app = create_app(ServerConfig(**config))
    shim = Shim(app)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(shim, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=lambda: server.run(sockets=[sock]), daemon=True)
    thread.start()
    deadline = time.monotonic() + 300
    try:
        while True:
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/health", timeout=1) as r:
                if r.status == 200:
                    break
            assert thread.is_alive() and time.monotonic() < deadline, "tiny-flux service did not start"
            time.sleep(0.1)
        shim.traffic.clear()
        yield url, shim
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@contextlib.contextmanager
def serve_in_subprocess(model: str, size: str, steps: int, *, lossless_video: bool = False) -> Iterator[str]:
    """The same service and shim in a child process of its own (as a deployment runs), so no state of
    earlier tests in this process can touch it; yields the URL. ``lossless_video`` swaps serve's MP4
    encoder for :func:`lossless_mp4`.
    ``GET {url}/__shim/traffic`` lists the ``(method, path, X-Diffbench-Traffic)`` the shim has seen."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    args = [sys.executable, __file__, model, size, str(steps), *(["--lossless-video"] if lossless_video else [])]
    proc = subprocess.Popen(args, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("http://"), f"service child said {line!r} (exit {proc.poll()})"
        yield line
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def lossless_mp4(frames: Any, fps: int) -> bytes:
    """Test double for :func:`diffbench.server.mp4.encode_mp4`: lossless RGB H.264 (``libx264rgb``, qp 0),
    so decoded frames equal the generated ones exactly. serve's own encoder (yuv420p, CRF 18) is lossy and,
    as measured here, not repeatable: encoding the same frames twice can decode to pixels up to 12 levels
    apart, which would put a codec noise floor under every video replay."""
    import io

    import av

    _, height, width, _ = frames.shape
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264rgb", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "rgb24"
        stream.options = {"qp": "0", "preset": "veryfast"}
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buf.getvalue()


if __name__ == "__main__":  # the child of serve_in_subprocess: serve until stdin closes
    import sys

    import diffbench.server.mp4
    from diffbench.engines.registry import EngineConfig

    _model, _size, _steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if "--lossless-video" in sys.argv:  # read by install_video_routes when the app is built
        diffbench.server.mp4.encode_mp4 = lossless_mp4  # type: ignore[assignment]
    with serve_tiny_flux(engine=EngineConfig(model=_model), default_size=_size, default_steps=_steps) as (u, _):
        print(u, flush=True)
        sys.stdin.read()
