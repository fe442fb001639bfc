"""Every bad input of ``diffbench probe``, one row each: args → exit code → message fragments.

All are refused before the first probe request; a small stdlib HTTP server on loopback plays a service
that answers ``GET /v1/models`` (with a fingerprint) and nothing else.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from diffbench.cli.main import main

FP = {"model": "fake", "precision": "float32", "cache": "none"}
SEEN: list[tuple[str, str, str | None]] = []
HANG_S: list[float] = []  # when set, a generation request is answered only after this many seconds
ANSWER: list[bytes] = []  # when set, generation requests get these PNG bytes as their one image


class _Models(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        SEEN.append(("GET", self.path, self.headers.get("X-Diffbench-Traffic")))
        if self.path != "/v1/models":
            self.send_error(404)
            return
        body = json.dumps({"object": "list", "data": [{"id": "fake", "fingerprint": FP,
                                                        "fingerprint_id": "0" * 16}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        SEEN.append(("POST", self.path, self.headers.get("X-Diffbench-Traffic")))
        if HANG_S:
            import time

            time.sleep(HANG_S[0])
        if ANSWER:
            import base64

            body = json.dumps({"created": 0, "data": [{"b64_json": base64.b64encode(ANSWER[0]).decode()}],
                               "num_inference_steps": 2}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_error(500)

    def log_message(self, *args: object) -> None:
        pass


class _Quiet(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that gave up (the timeout test) is expected


@pytest.fixture(scope="module")
def fake() -> Iterator[str]:
    server = _Quiet(("127.0.0.1", 0), _Models)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _reference(d: Path, fingerprint: dict | None = FP) -> Path:
    from PIL import Image

    d.mkdir()
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(d / "p0_s0_i0.png")
    sha = hashlib.sha256((d / "p0_s0_i0.png").read_bytes()).hexdigest()
    m = {"schema_version": 1, "kind": "diffbench-outputs", "conditions": {"batch": 1}, "fingerprint": fingerprint,
         "entries": [{"prompt_id": "p0", "prompt": "a", "seed": 0, "index": 0, "height": 32, "width": 32,
                      "steps": 2, "file": "p0_s0_i0.png", "sha256": sha}]}
    (d / "manifest.json").write_text(json.dumps(m))
    return d


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


P = ["probe", "--url", "{url}"]
R = [*P, "--reference", "{ref}"]
T = ["--psnr-threshold", "30"]
REC = [*P, "--record-reference", "{tmp}/rec", "--once"]

ROWS = [
    (["probe", "--reference", "{ref}", *T], 2, ["--url URL is required"]),
    (["probe", "--url", "localhost:8000", "--reference", "{ref}", *T], 2, ["--url", "http://"]),
    ([*P, *T], 2, ["exactly one of --reference"]),
    ([*R, "--record-reference", "{tmp}/x", *T], 2, ["exactly one of --reference"]),
    ([*P, "--reference", "{tmp}/missing", *T], 2, ["--reference", "does not exist"]),
    ([*P, "--reference", "{empty}", *T], 2, ["--reference", "no manifest.json"]),
    ([*P, "--reference", "{changed}", *T], 2, ["changed since it was recorded", "re-record"]),
    (R, 2, ["--psnr-threshold DB or --calibration FILE is required"]),
    ([*R, "--psnr-threshold", "-3"], 2, ["--psnr-threshold", "positive, finite"]),
    ([*R, "--psnr-threshold", "nan"], 2, ["--psnr-threshold", "positive, finite"]),
    ([*R, "--psnr-threshold", "abc"], 2, ["--psnr-threshold"]),
    ([*R, *T, "--calibration", "{tmp}/cal.json"], 2, ["--psnr-threshold or --calibration, not both"]),
    ([*R, "--calibration", "{tmp}/missing.json"], 2, ["--calibration", "file not found"]),
    ([*R, "--calibration", "{cal}", "--probe-name", "nightly"], 2, ["no finite probes.nightly", "golden"]),
    ([*R, *T, "--interval", "0"], 2, ["--interval 0", "positive"]),
    ([*R, *T, "--timeout", "-1"], 2, ["--timeout -1", "positive"]),
    ([*R, *T, "--count", "0"], 2, ["--count 0"]),
    ([*R, *T, "--once", "--count", "3"], 2, ["--once", "--count 3"]),
    ([*R, *T, "--metrics-port", "70000"], 2, ["--metrics-port 70000", "0..65535"]),
    ([*R, *T, "--probe-name", " "], 2, ["--probe-name"]),
    ([*R, *T, "--prompt", "x", "--n", "2"], 2, ["--prompt, --n", "only for --record-reference"]),
    ([*REC, "--size", "64by64"], 2, ["--size '64by64'", "WIDTHxHEIGHT"]),
    ([*REC, "--n", "0"], 2, ["--n 0"]),
    ([*REC, "--steps", "0"], 2, ["--steps 0"]),
    ([*REC, "--frames", "5", "--n", "2"], 2, ["--n 2", "one video per job"]),
    ([*REC, "--prompt", "  "], 2, ["--prompt", "empty prompt"]),
    ([*P, "--record-reference", "{ref}", "--once"], 2, ["already holds manifest.json", "--reference"]),
    ([*P, "--record-reference", "{tmp}/a/b/rec", "--once"], 2, ["--record-reference", "--mkdir"]),
    ([*P, "--record-reference", "{tmp}/rec"], 2, ["--psnr-threshold DB or --calibration FILE is required"]),
    ([*R, *T, "--json", "{tmp}/nope/out.json"], 2, ["--json", "does not exist", "--mkdir"]),
    ([*R, *T, "--jsonl", "{tmp}/nope/out.jsonl"], 2, ["--jsonl", "does not exist", "--mkdir"]),
    ([*R, *T, "--json", "{tmp}/a.json", "--jsonl", "{tmp}/b.jsonl"], 2, ["--json and --jsonl", "give one"]),
    (["probe", "--url", "{dead}", "--reference", "{ref}", *T], 2, ["--url", "cannot read the service's model card"]),
    ([*R, *T, "--metrics-port", "{busy}"], 2, ["--metrics-port", "cannot listen"]),
    ([*P, "--reference", "{nofp}", *T], 2, ["no deployment fingerprint", "--allow-unfingerprinted"]),
    ([*P, "--reference", "{otherfp}", *T], 2, ["another deployment", "precision: reference 'bfloat16'",
                                               "re-record"]),
]


@pytest.mark.parametrize(("argv", "code", "fragments"), ROWS, ids=[" ".join(r[0][1:])[:70] for r in ROWS])
def test_bad_input(fake: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], code: int,
                   fragments: list[str]) -> None:
    ref = _reference(tmp_path / "ref")
    changed = _reference(tmp_path / "changed")
    (changed / "p0_s0_i0.png").write_bytes((changed / "p0_s0_i0.png").read_bytes() + b"x")
    (tmp_path / "empty").mkdir()
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"probes": {"golden": {"psnr_threshold_db": 30}}}))
    ph = {"url": fake, "ref": ref, "tmp": tmp_path, "empty": tmp_path / "empty", "changed": changed, "cal": cal,
          "dead": f"http://127.0.0.1:{_dead_port()}", "busy": fake.rsplit(":", 1)[1],
          "nofp": _reference(tmp_path / "nofp", None),
          "otherfp": _reference(tmp_path / "otherfp", {**FP, "precision": "bfloat16"})}
    SEEN.clear()
    rc = main([a.format(**ph) for a in argv])
    out = capsys.readouterr()
    text = out.err + out.out
    assert rc == code, text
    for frag in fragments:
        assert frag in text, (frag, text)
    assert "Traceback" not in text
    assert not [s for s in SEEN if s[0] == "POST"]  # refused before the first probe request
    assert all(h == "probe" for _, _, h in SEEN)


def test_a_failed_once_pass_exits_5_with_the_results_written(fake: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    ref = _reference(tmp_path / "ref")
    out = tmp_path / "o.json"
    rc = main(["probe", "--url", fake, "--reference", str(ref), "--once", "--psnr-threshold", "30",
               "--json", str(out)])
    assert rc == 5
    rec = json.loads(out.read_text())
    assert rec["outcome"] == "error" and rec["entries"][0]["verdict"] == "error" and "HTTP 500" in rec["errors"][0]
    assert "pass failed" in capsys.readouterr().err


def test_a_hanging_service_is_a_timeout_error_not_a_hang(fake: str, tmp_path: Path) -> None:
    ref = _reference(tmp_path / "ref")
    out = tmp_path / "o.json"
    HANG_S[:] = [3.0]
    try:
        rc = main(["probe", "--url", fake, "--reference", str(ref), "--once", "--psnr-threshold", "30",
                   "--timeout", "0.3", "--json", str(out)])
    finally:
        HANG_S.clear()
    rec = json.loads(out.read_text())
    assert rc == 5 and "no answer within --timeout 0.3 s" in rec["errors"][0]


@pytest.mark.e2e  # runs a subprocess
def test_probe_does_not_import_torch(fake: str, tmp_path: Path) -> None:
    """A probe runs on a monitoring host without the model stack: no torch, diffusers or transformers."""
    import os
    import subprocess
    import sys

    ref = _reference(tmp_path / "ref")
    code = ("import sys, json\nfrom diffbench.cli.main import main\n"
            f"rc = main(['probe', '--url', {fake!r}, '--reference', {str(ref)!r}, '--once', '--psnr-threshold', '30'])\n"
            "print(json.dumps([rc, sorted(m for m in ('torch', 'diffusers', 'transformers') if m in sys.modules)]))")
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    ANSWER[:] = [(ref / "p0_s0_i0.png").read_bytes()]  # the reference itself: PSNR inf, a full good pass
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    finally:
        ANSWER.clear()
    rc, heavy = json.loads(out.stdout.strip().splitlines()[-1])
    assert rc == 0 and heavy == [], out.stderr
    assert "inf" in out.stdout
