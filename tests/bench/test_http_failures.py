"""Errors are data for ``bench --engine http``: a scripted loopback service (stdlib ``http.server``, no
torch) answers each POST as told: an image, an error status, a malformed body, or silence.

- one failed request among the timed runs is a failed run (status and message), not a sample, and the
  run goes on;
- a service that stops answering fails each request at ``--timeout`` and the shape after three in a row,
  with one clear line and exit 2 when every shape failed (never a hang);
- ``--timeout`` is a total deadline (connect, send, whole body): a service that sends its headers at once
  and then drips its body is a ``timeout`` outcome, not a sample (issue 24 item 1);
- a redirect is reported with its target (the ``Location`` header; issue 24 item 9).
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from diffbench.cli.main import main


def _png(width: int, height: int) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((height, width, 3), 7, np.uint8)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


DRIP_BYTES, DRIP_EVERY_S = 30, 0.3
"""``drip``: the last DRIP_BYTES bytes of a valid answer are sent one every DRIP_EVERY_S seconds."""


class Script:
    """What the service does for the n-th POST: ``ok``, an int status, ``garbage``, ``hang``, ``drip``
    or ``redirect``."""

    def __init__(self, plan: list[object], default: object = "ok") -> None:
        self.plan, self.default, self.bodies = list(plan), default, []  # type: ignore[var-annotated]


@pytest.fixture
def scripted() -> Iterator[tuple[str, Script]]:
    script = Script([])

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return None

        def _send(self, code: int, obj: object) -> None:
            data = json.dumps(obj).encode() if not isinstance(obj, bytes) else obj
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802
            self._send(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.bodies.append(body)
            what = script.plan.pop(0) if script.plan else script.default
            if what == "hang":
                time.sleep(1.5)
                return
            if what == "redirect":
                self.send_response(307)
                self.send_header("Location", "http://127.0.0.1:9/elsewhere/v1/images/generations")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if what == "drip":  # headers and most of a valid answer at once, the rest a byte at a time
                w, h = (int(x) for x in body["size"].split("x"))
                data = json.dumps({"data": [{"b64_json": _png(w, h)}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[:-DRIP_BYTES])
                self.wfile.flush()
                try:
                    for i in range(len(data) - DRIP_BYTES, len(data)):
                        time.sleep(DRIP_EVERY_S)
                        self.wfile.write(data[i:i + 1])
                        self.wfile.flush()
                except OSError:  # the client gave up: stop dripping
                    pass
                return
            if what == "garbage":
                self._send(200, b"not json")
                return
            if isinstance(what, int):
                self._send(what, {"error": {"message": f"injected {what}", "type": "server_error"}})
                return
            w, h = (int(x) for x in body["size"].split("x"))
            if what == "other-seed":  # a service that ignores the seed it was sent, and says so
                self._send(200, {"data": [{"b64_json": _png(w, h)}], "seed": 12345})
                return
            self._send(200, {"data": [{"b64_json": _png(w, h)}], "service_time_s": 0.001,
                             "stage_durations": {"denoise": 0.0005}, "peak_memory_mb": 1.5})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", script
    finally:
        server.shutdown()
        server.server_close()


BENCH = ["bench", "--engine", "http", "--shapes", "32x32", "--steps", "3", "--no-repro", "-q"]


def test_one_failed_request_is_a_failed_run(scripted, tmp_path: Path) -> None:
    url, script = scripted
    script.plan = ["ok", "ok", 503, "ok", "garbage"]  # warmup 1, then 6 timed: runs 2 and 4 fail
    out = tmp_path / "r.json"
    assert main([*BENCH, "--url", url, "--warmup", "1", "--runs", "6", "--json", str(out)]) == 0
    (shape,) = json.loads(out.read_text())["shapes"]
    assert shape["latency_s"]["n"] == 4 and len(shape["samples_s"]) == 4
    assert [(f["phase"], f["index"], f["status"]) for f in shape["failed_runs"]] == [("timed", 1, 503), ("timed", 3, 200)]
    assert "injected 503" in shape["failed_runs"][0]["error"] and "not JSON" in shape["failed_runs"][1]["error"]
    assert any(w["code"] == "requests_failed" and "2 of 6" in w["message"] for w in shape["warnings"])
    # the vllm-omni dialect sends steps and seed; peak memory from MiB, server stages read back
    assert script.bodies[0]["num_inference_steps"] == 3 and script.bodies[0]["seed"] == 0
    assert script.bodies[0]["model"] == "scripted"
    assert shape["memory"]["peak_allocated_bytes"] == int(1.5 * 2**20)
    assert shape["server_stages_s"]["service_time"]["median"] == pytest.approx(0.001)


def test_a_service_that_ignores_the_seed_fails_the_run(scripted, tmp_path: Path) -> None:
    url, script = scripted
    script.plan = ["other-seed"]
    out = tmp_path / "r.json"
    assert main([*BENCH, "--url", url, "--warmup", "0", "--runs", "3", "--json", str(out)]) == 0
    (shape,) = json.loads(out.read_text())["shapes"]
    assert shape["latency_s"]["n"] == 2
    (failed,) = shape["failed_runs"]
    assert "seed=12345, but 0 was sent" in failed["error"]


def test_openai_dialect_sends_no_steps_or_seed(scripted, tmp_path: Path) -> None:
    url, script = scripted
    assert main([*BENCH, "--url", url, "--dialect", "openai", "--warmup", "0", "--runs", "1"]) == 0
    assert "num_inference_steps" not in script.bodies[0] and "seed" not in script.bodies[0]


def test_a_service_that_stops_answering_is_one_clear_line(scripted, capsys, one_line_error) -> None:
    url, script = scripted
    script.default = "hang"
    t0 = time.perf_counter()
    rc = main([*BENCH, "--url", url, "--warmup", "0", "--runs", "50", "--timeout", "0.3"])
    took = time.perf_counter() - t0
    one_line_error(rc, capsys.readouterr().err, 2,
                   ["every shape failed", "3 requests in a row failed", "no complete response within 0.3 s"])
    assert took < 3 * 0.3 + 5  # three timeouts, not fifty (generous bound for a loaded machine)


def test_a_dripping_body_is_a_timeout_not_a_sample(scripted, tmp_path: Path) -> None:
    """Headers at once, then the body a byte every 0.3 s: under --timeout 1 the request fails as a timeout
    (per-read timeouts never fire: each byte arrives within 0.3 s) and the run goes on without waiting for
    the drip to end."""
    url, script = scripted
    script.plan = ["drip", "ok"]
    out = tmp_path / "r.json"
    t0 = time.perf_counter()
    rc = main([*BENCH, "--url", url, "--warmup", "0", "--runs", "2", "--timeout", "1", "--json", str(out)])
    took = time.perf_counter() - t0
    assert rc == 0
    (shape,) = json.loads(out.read_text())["shapes"]
    drip_s = DRIP_BYTES * DRIP_EVERY_S
    assert shape["latency_s"]["n"] == 1 and max(shape["samples_s"]) < drip_s
    (failed,) = shape["failed_runs"]
    assert (failed["phase"], failed["index"], failed["status"], failed["outcome"]) == ("timed", 0, None, "timeout")
    assert "within 1 s" in failed["error"]
    assert took < drip_s  # the client gave up at its deadline, it did not read the drip to its end


def test_a_redirect_is_reported_with_its_target(scripted, tmp_path: Path) -> None:
    url, script = scripted
    script.plan = ["redirect"]
    out = tmp_path / "r.json"
    assert main([*BENCH, "--url", url, "--warmup", "0", "--runs", "2", "--json", str(out)]) == 0
    (shape,) = json.loads(out.read_text())["shapes"]
    (failed,) = shape["failed_runs"]
    assert failed["status"] == 307 and failed["outcome"] == "http_error"
    assert "http://127.0.0.1:9/elsewhere/v1/images/generations" in failed["error"]


def test_when_every_run_fails_the_error_line_says_why(scripted, tmp_path: Path, capsys) -> None:
    """Fewer failures than abandon a shape, but no sample: the console error gives the last failure and the
    redirect's target (was: 'error: every shape failed: ?', the reason only in the JSON)."""
    url, script = scripted
    script.plan = ["redirect", "redirect"]
    out = tmp_path / "r.json"
    rc = main([*BENCH, "--url", url, "--warmup", "0", "--runs", "2", "--json", str(out)])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2
    (shape,) = json.loads(out.read_text())["shapes"]
    assert len(shape["failed_runs"]) == 2 and shape["latency_s"] is None
    assert "every shape failed: ?" not in err
    assert "all 2 request(s) failed (http_error)" in err
    assert "redirect to http://127.0.0.1:9/elsewhere/v1/images/generations" in err
