"""The HTTP engine's own rules, against a loopback stdlib server (no torch, no diffbench serve).

- the request body is the load client's for each dialect (one implementation of the field names);
- the latency it reports stops at the last byte of the answer: parsing and PNG decoding are not timed.
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from diffbench.engines.base import GenerationRequest
from diffbench.engines.config import EngineConfig, HttpParams
from diffbench.engines.http_engine import HttpEngine
from diffbench.load.client.dialects import image_body
from diffbench.load.client.workload import RequestSpec, ShapeMix


@pytest.fixture
def service() -> Iterator[str]:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.zeros((32, 48, 3), np.uint8)).save(buf, format="PNG")
    answer = json.dumps({"data": [{"b64_json": base64.b64encode(buf.getvalue()).decode()}]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return None

        def do_GET(self) -> None:  # noqa: N802
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


REQ = GenerationRequest(prompt="a fox", height=32, width=48, steps=5, guidance=3.5, seed=9,
                        negative_prompt="blurry")


@pytest.mark.parametrize("dialect", ["openai", "vllm-omni", "sglang"])
def test_body_is_the_load_clients(dialect: str) -> None:
    engine = HttpEngine(EngineConfig(engine="http", http=HttpParams(url="http://127.0.0.1:1", dialect=dialect,
                                                                    model="m")))
    spec = RequestSpec(index=0, kind="image", prompt="a fox", seed=9, model="m",
                       shape=ShapeMix(width=48, height=32, steps=5, guidance=3.5, negative_prompt="blurry"))
    assert engine.body(REQ) == image_body(spec, dialect)  # type: ignore[arg-type]
    assert engine.body(REQ)["size"] == "48x32"


def test_latency_excludes_decoding(service: str, monkeypatch) -> None:
    """A decode that takes 0.3 s (patched in) shows in the wall time of generate, not in its latency."""
    engine = HttpEngine(EngineConfig(engine="http", http=HttpParams(url=service)))
    info = engine.start()
    assert info.model == "unknown" and info.engine == "http"  # GET /v1/models answered 404: measured anyway
    real = HttpEngine._decode

    def slow(obj, request):  # type: ignore[no-untyped-def]
        time.sleep(0.3)
        return real(obj, request)

    monkeypatch.setattr(HttpEngine, "_decode", staticmethod(slow))
    try:
        engine.generate(REQ)  # connect once
        t0 = time.perf_counter()
        res = engine.generate(REQ)
        wall = time.perf_counter() - t0
    finally:
        engine.stop()
    assert res.images is not None and res.images.shape == (1, 32, 48, 3)
    latency = res.extra["client_latency_s"]
    assert wall >= 0.3 and latency <= wall - 0.3
    assert res.stages is None and res.memory is None  # the service reported neither: nothing invented


def test_server_stages_fill_the_split_including_an_edits_image_encode() -> None:
    from diffbench.engines.http_engine import stage_times

    st = stage_times({"text_encode": 0.01, "image_encode": 0.02, "denoise": 0.3, "vae_decode": 0.05,
                      "service_time": 0.4}, latency=0.5)
    assert (st.text_encode_s, st.image_encode_s, st.denoise_s, st.vae_decode_s) == (0.01, 0.02, 0.3, 0.05)
    assert st.other_s == pytest.approx(0.5 - 0.38) and st.total_s == 0.5
    assert stage_times({"text_encode": 0.01}, 0.5).image_encode_s == 0.0
    assert stage_times({"service_time": 0.4}, 0.5) is None


BLOCKED_HTTPX = """
import sys
sys.modules["httpx"] = None  # any `import httpx` now raises ImportError
import base64, io, json, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import numpy as np
from PIL import Image

buf = io.BytesIO()
Image.fromarray(np.zeros((32, 48, 3), np.uint8)).save(buf, format="PNG")
ANSWER = json.dumps({"data": [{"b64_json": base64.b64encode(buf.getvalue()).decode()}]}).encode()

class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def _send(self, code, data):
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self._send(200, json.dumps({"data": [{"id": "m"}]}).encode())
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self._send(200, ANSWER)

server = ThreadingHTTPServer(("127.0.0.1", 0), H)
threading.Thread(target=server.serve_forever, daemon=True).start()
from diffbench.cli.main import main
rc = main(["bench", "--engine", "http", "--url", f"http://127.0.0.1:{server.server_address[1]}",
           "--shapes", "48x32", "--steps", "2", "--warmup", "0", "--runs", "2", "--no-repro", "-q"])
print("RC", rc)
"""


@pytest.mark.e2e  # runs a subprocess
def test_the_engine_runs_without_httpx() -> None:
    """``bench --engine http`` with httpx unimportable (it is only in the test extra, issue 24 item 2): the
    engine's transport is aiohttp, a core dependency."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run([sys.executable, "-c", BLOCKED_HTTPX], capture_output=True, text=True, timeout=120,
                          env=env)
    assert "RC 0" in proc.stdout, proc.stdout + proc.stderr
