"""Reading a metrics text: parsing, files and directories, a live ``/metrics``, and the bad inputs of
``diffbench doctor`` (one row each: arguments → exit code → message fragment)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from diffbench.cli.main import main
from diffbench.errors import InputError
from diffbench.metrics.scrape import PromQuery, fetch_metrics, parse_text, read_scrapes

from .scrape_fixtures import MODEL, Exposition, healthy


def test_parse_sums_like_promql_and_keeps_the_time(tmp_path) -> None:
    exp = Exposition(shapes=("256x256", "512x512"))
    exp.serve(shape="256x256", step_s=0.01, steps=4)
    exp.serve(shape="512x512", step_s=0.03, steps=2)
    path = exp.save(tmp_path / "s.prom", 1234.5)
    [s] = read_scrapes([path])
    assert s.time_s == 1234.5
    counts = s.grouped("diffusion_denoise_step_duration_seconds_count", ("shape",))
    assert counts == {("256x256",): 4.0, ("512x512",): 2.0, ("other",): 0.0}
    assert s.total("diffusion_denoise_step_duration_seconds_sum") == pytest.approx(4 * 0.01 + 2 * 0.03)
    # a wanted label the series does not carry is not filtered on; one it carries is
    assert s.total("diffusion_queue_wait_seconds_count", traffic="user") == 2.0
    assert s.total("diffusion_requests_total", traffic="probe") is None  # no probe series exported


def test_directory_orders_before_first_and_after_last(tmp_path) -> None:
    exp = Exposition()
    healthy(exp, requests=1)
    exp.save(tmp_path / "after.prom", 30.0)
    exp.save(tmp_path / "before.prom", 10.0)
    exp.save(tmp_path / "middle.prom", 20.0)
    (tmp_path / "notes.md").write_text("not a scrape")
    assert [s.time_s for s in read_scrapes([tmp_path])] == [10.0, 20.0, 30.0]


class _Handler(http.server.BaseHTTPRequestHandler):
    bodies: dict[str, tuple[int, str, bytes]] = {}

    def do_GET(self) -> None:  # noqa: N802
        path = self.path.split("?")[0]
        code, ctype, body = self.bodies.get(path, (404, "text/plain", b"not found"))
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def odd_server() -> Iterator[str]:
    """Loopback HTTP server answering things that are not a diffusion /metrics."""
    exp = Exposition()
    healthy(exp, requests=2)
    _Handler.bodies = {
        "/html": (200, "text/html", b"<!DOCTYPE html><html><body>login</body></html>"),
        "/json/api/v1/query": (200, "application/json", b'{"hello": 1}'),
        "/html/api/v1/query": (200, "text/html", b"<html></html>"),
        "/words": (200, "text/plain", b"this is not metrics\n"),
        "/node": (200, "text/plain", b"# TYPE node_load1 gauge\nnode_load1 0.5\n"),
        "/metrics": (200, "text/plain; version=0.0.4", exp.text().encode()),
        "/binary": (200, "application/octet-stream", b"\xff\xfe\x00\x01"),
    }
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_fetch_a_live_metrics_endpoint(odd_server) -> None:
    s = fetch_metrics(odd_server + "/metrics")
    assert s.total("diffusion_requests_total", outcome="ok") == 2.0
    assert s.time_s is not None


ROWS = [
    (["p99"], 2, "give exactly one of --metrics URL, --prometheus URL or --scrape FILE"),
    (["slow", "--scrape", "ok.prom"], 2, "unknown symptom 'slow'; choose one of p99, artifacts, oom"),
    (["p99", "--scrape", "ok.prom", "--metrics", "http://127.0.0.1:9/metrics"], 2,
     "give exactly one of --metrics URL, --prometheus URL or --scrape FILE (got --metrics, --scrape)"),
    (["p99", "--metrics", "http://127.0.0.1:9/metrics"], 2, "--metrics http://127.0.0.1:9/metrics: unreachable"),
    (["p99", "--metrics", "ftp://host/metrics"], 2, "--metrics 'ftp://host/metrics': not an http(s) URL"),
    (["p99", "--metrics", "{srv}/html"], 2, "not a Prometheus metrics text (it looks like HTML)"),
    (["p99", "--metrics", "{srv}/words"], 2, "/words: not a Prometheus metrics text"),
    (["p99", "--metrics", "{srv}/node"], 2, "a metrics text without any diffusion_* metric"),
    (["p99", "--metrics", "{srv}/missing"], 2, "/missing: HTTP 404"),
    (["p99", "--metrics", "{srv}/binary"], 2, "not UTF-8 text"),
    (["p99", "--prometheus", "http://127.0.0.1:9"], 2, "--prometheus http://127.0.0.1:9/api/v1/query"),
    (["p99", "--prometheus", "{srv}/json"], 2, "not a Prometheus API answer (no status)"),
    (["p99", "--prometheus", "{srv}/html"], 2, "not a Prometheus API answer (not JSON)"),
    (["p99", "--prometheus", "localhost:9090"], 2, "not an http(s) URL"),
    (["p99", "--scrape", "missing.prom"], 2, "--scrape missing.prom: no such file"),
    (["p99", "--scrape", "a.png"], 2, "--scrape a.png: not a text file"),
    (["p99", "--scrape", "words.txt"], 2, "words.txt: not a Prometheus metrics text"),
    (["p99", "--scrape", "empty.prom"], 2, "empty.prom: no metric samples"),
    (["p99", "--scrape", "node.prom"], 2, "node.prom: a metrics text without any diffusion_* metric"),
    (["p99", "--scrape", "emptydir"], 2, "--scrape emptydir: a directory without scrape files"),
    (["p99", "--scrape", "ok.prom", "--scrape", "ok.prom", "--scrape", "ok.prom"], 2, "give one or two scrapes"),
    (["p99", "--scrape", "ok.prom", "--window", "15 minutes"], 2, "--window '15 minutes': not a Prometheus duration"),
    (["p99", "--scrape", "ok.prom", "--interval", "5"], 2, "--interval applies to --metrics"),
    (["p99", "--metrics", "{srv}/metrics", "--interval", "-1"], 2, "--interval must be between 0 and 3600"),
    (["p99", "--scrape", "ok.prom", "--json", "no/such/dir/d.json"], 2,
     "--json no/such/dir/d.json: directory no/such/dir does not exist; create it first or pass --mkdir"),
]


@pytest.mark.parametrize("argv, code, fragment", ROWS, ids=[" ".join(r[0]) for r in ROWS])
def test_doctor_bad_input_is_a_clear_error(argv, code, fragment, odd_server, tmp_path, monkeypatch,
                                           capsys) -> None:
    monkeypatch.chdir(tmp_path)
    exp = Exposition()
    healthy(exp, requests=1)
    exp.save(tmp_path / "ok.prom", 1.0)
    (tmp_path / "a.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe")
    (tmp_path / "words.txt").write_text("these are words\n")
    (tmp_path / "empty.prom").write_text("# only a comment\n")
    (tmp_path / "node.prom").write_text("node_load1 0.5\n")
    (tmp_path / "emptydir").mkdir()
    argv = [a.replace("{srv}", odd_server) for a in argv]
    assert main(["doctor", *argv]) == code
    err = capsys.readouterr().err
    assert fragment.replace("{srv}", odd_server) in err, err
    assert "Traceback" not in err and err.count("\n") == 1


def test_doctor_on_a_live_service_exits_0(odd_server, capsys) -> None:
    assert main(["doctor", "oom", "--metrics", odd_server + "/metrics"]) == 0
    out = capsys.readouterr().out
    assert "one scrape" in out and "totals" in out
    assert f"--url {odd_server} " in out  # the confirming commands name the service


def test_prom_query_rejects_a_non_vector_answer(odd_server) -> None:
    with pytest.raises(InputError, match="no status"):
        PromQuery(odd_server + "/json").query("up")


def test_parse_rejects_json_and_keeps_model_labels() -> None:
    with pytest.raises(InputError, match="looks like JSON"):
        parse_text('{"status": "success"}', "x")
    exp = Exposition()
    exp.serve()
    s = parse_text(exp.text(), "x")
    assert {smp.labels["model"] for smp in s.select("diffusion_requests_total")} == {MODEL}
