"""``vllm bench serve`` command lines on ``diffbench load`` (issue 24 item 12).

- a vllm-style command line (``--base-url --model --backend --endpoint --save-result --result-dir
  --max-concurrency --request-rate --num-prompts --percentile-metrics --metric-percentiles``) runs against the
  reference service (sim engine) and writes its result where vLLM would:
  ``DIR/{backend}-{rate as float}qps-concurrency{N}-{model basename}-{YYYYmmdd-HHMMSS}.json``;
- ``--model X`` is sent in every request of every dialect (a recording proxy sees the bodies);
- the vLLM names that cannot apply are one clear line each.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from diffbench.cli.main import main
from diffbench.engines.registry import EngineConfig, SimParams
from diffbench.load.client.dialects import DIALECTS
from diffbench.server.background import run_in_background
from diffbench.server.config import ServerConfig

pytestmark = pytest.mark.e2e

SIM = SimParams(realtime=True, compile_s=0.0, jitter=0.0, tail_prob=0.0, step_s=0.001)  # type: ignore[call-arg]
MODEL = "sim"  # the sim service checks the name (a wrong one answers 404)


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with run_in_background(ServerConfig(engine=EngineConfig(engine="sim", sim=SIM)), mode="thread") as url:
        yield url


@pytest.fixture
def recording(sim_url: str) -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    """A proxy in front of the sim service that keeps (path, body) of every POST."""
    seen: list[tuple[str, bytes]] = []
    host, port = sim_url.removeprefix("http://").split(":")

    class Proxy(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            return None

        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.command == "POST":
                seen.append((self.path, body))
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
            conn.request(self.command, self.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            conn.close()

        do_GET = do_POST = do_DELETE = _forward  # noqa: N815

    server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_vllm_bench_serve_command_line_runs_and_saves_where_vllm_would(sim_url, tmp_path, capsys) -> None:
    rdir = tmp_path / "results"  # does not exist yet: vLLM creates it
    argv = ["load", "--backend", "openai", "--base-url", sim_url, "--endpoint", "/v1/images/generations",
            "--model", MODEL, "--request-rate", "4", "--num-prompts", "3", "--max-concurrency", "2",
            "--percentile-metrics", "e2el", "--metric-percentiles", "50,99", "--save-result",
            "--result-dir", str(rdir), "--size", "64x64", "--warmup", "0", "--quiet"]
    assert main(argv) == 0
    (saved,) = list(rdir.iterdir())
    assert re.fullmatch(r"openai-4\.0qps-concurrency2-sim-\d{8}-\d{6}\.json", saved.name), saved.name
    doc = json.loads(saved.read_text())
    (row,) = doc["rates"]
    assert row["n_ok"] == 3 and doc["conditions"]["dialect"] == "openai"
    out = capsys.readouterr().out
    p50_ms = row["latency_from_send_s"]["p50"] * 1e3  # the JSON's seconds, printed in vLLM's milliseconds
    assert f"P50 E2EL (ms): {p50_ms:.2f}" in out and "P99 E2EL (ms):" in out


@pytest.mark.parametrize("kind", ["image", "edit"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_model_is_sent_in_every_dialect(recording, tmp_path, dialect: str, kind: str) -> None:
    url, seen = recording
    work: list[str] = ["--size", "64x64"]
    if kind == "edit":  # edits: a multipart form (the chat dialect: an image_url part in the JSON body)
        import numpy as np
        from PIL import Image

        (tmp_path / "in").mkdir()
        Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(tmp_path / "in" / "a.png")
        (tmp_path / "w.yaml").write_text("kind: edit\nimages: in\nshapes: [{size: 64x64, steps: 2}]\n")
        work = ["--workload", str(tmp_path / "w.yaml")]
    assert main(["load", "--url", url, "--dialect", dialect, "--model", MODEL, "--request-rate", "4",
                 "--num-requests", "2", *work, "--warmup", "1", "--quiet"]) == 0
    assert len(seen) == 3  # one warm-up and two measured
    for path, body in seen:
        if body.startswith(b"{"):
            assert json.loads(body)["model"] == MODEL, (path, body[:200])
        else:  # a multipart form (edits, videos): the field model holds the name
            assert re.search(rb'name="model"\r\n\r\n' + re.escape(MODEL.encode()) + rb"\r\n", body), body[:300]


def test_model_is_sent_for_video_jobs(recording) -> None:
    url, seen = recording
    assert main(["load", "--url", url, "--model", MODEL, "--request-rate", "4", "--num-requests", "1",
                 "--size", "64x64", "--frames", "5", "--warmup", "0", "--quiet", "--poll-interval", "0.02"]) == 0
    creates = [body for path, body in seen if path == "/v1/videos"]
    assert creates and all(re.search(rb'name="model"\r\n\r\n' + re.escape(MODEL.encode()), b) for b in creates)


@pytest.mark.parametrize(("args", "fragments"), [
    (["--backend", "tgi"], ["--backend 'tgi'", "openai"]),
    (["--backend", "openai", "--dialect", "sglang"], ["--backend openai means --dialect openai"]),
    (["--endpoint", "/v1/completions"], ["--endpoint /v1/completions", "/v1/images/generations"]),
    (["--url", "http://127.0.0.1:1", "--base-url", "http://127.0.0.1:2"], ["disagree"]),
    (["--result-dir", "x"], ["--save-result"]),
    (["--percentile-metrics", "ttft"], ["token metric", "e2el"]),
    (["--metric-percentiles", "95"], ["--metric-percentiles 95", "50, 90, 99, 99.9"]),
])
def test_vllm_names_that_cannot_apply_are_one_line(args, fragments, capsys, one_line_error) -> None:
    base = [] if any(a in args for a in ("--url", "--base-url")) else ["--url", "http://127.0.0.1:1"]
    rc = main(["load", *base, *args, "--request-rate", "1", "--num-requests", "1"])
    one_line_error(rc, capsys.readouterr().err, 2, fragments)


def test_a_result_dir_that_is_a_file_is_one_line(tmp_path, capsys, one_line_error) -> None:
    """--result-dir naming a file: one error line, exit 2 (was: a FileExistsError traceback from makedirs)."""
    f = tmp_path / "afile"
    f.write_text("")
    rc = main(["load", "--url", "http://127.0.0.1:1", "--save-result", "--result-dir", str(f),
               "--request-rate", "1", "--num-requests", "1"])
    one_line_error(rc, capsys.readouterr().err, 2, [f"--result-dir {f}", "is a file, not a folder"])
