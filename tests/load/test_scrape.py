"""``diffbench load --scrape URL`` against ``diffbench serve --engine sim`` on loopback.

- the server-side outcome counts of each row equal the client's (both count the same requests);
- the per-stage means scraped from ``/metrics`` equal the means of the stage times the server put in
  each response (the client's ``server_stages_s``): two independent paths for the same numbers;
- the rows together account for every request the server's own ``/metrics`` counted during the run;
- behind a proxy that holds each request 300 ms (the server's queue wait stays ≈ 0), the mismatch
  warning fires; without it, it does not;
- bad ``--scrape`` inputs: one row each (arguments → exit code → message fragment).
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest

from diffbench.cli.main import main
from diffbench.engines.registry import EngineConfig, SimParams
from diffbench.load.scrape import ServerSide, mismatch_warning
from diffbench.metrics.scrape import fetch_metrics
from diffbench.server.background import run_in_background
from diffbench.server.config import ServerConfig

pytestmark = pytest.mark.e2e

# service ~0.2 s (4 steps of 50 ms: the sim scales step_s by pixels with a floor of 0.05, so 1.0 s is 50 ms
# at 64x64): the client's own overhead (HTTP, PNG decode, ~5-20 ms on a busy 2-core machine with the
# server in this process) stays well under the mismatch rule's 25 % of the p50
SIM = {"realtime": True, "compile_s": 0.0, "jitter": 0.0, "tail_prob": 0.0, "step_s": 1.0,
       "text_encode_s": 0.002, "vae_decode_s": 0.002, "other_s": 0.001, "launch_s": 0.0}


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    cfg = ServerConfig(engine=EngineConfig(engine="sim", sim=SimParams(**SIM)))  # type: ignore[arg-type]
    with run_in_background(cfg, mode="thread") as url:
        yield url


def _load(url: str, scrape: str, out, *extra: str, rates: str = "1,2") -> dict:
    argv = ["load", "--url", url, "--scrape", scrape, "--rates", rates, "--duration", "3", "--warmup", "0",
            "--size", "64x64", "--quiet", "--json", str(out), *extra]
    assert main(argv) == 0
    return json.loads(out.read_text())


def test_server_side_agrees_with_the_client_and_the_servers_own_metrics(sim_url, tmp_path, capsys) -> None:
    before = fetch_metrics(sim_url + "/metrics")
    doc = _load(sim_url, sim_url, tmp_path / "r.json", "--csv", str(tmp_path / "r.csv"))
    after = fetch_metrics(sim_url + "/metrics")
    out = capsys.readouterr().out
    assert "server side (scraped from" in out
    assert "server mismatch" not in out
    total = 0
    for row in doc["rates"]:
        sv = row["server"]
        assert sv is not None
        assert sv["outcomes"]["ok"] == row["outcomes"]["ok"] == row["n_ok"]
        assert sv["n"] == row["n"]
        total += sv["n"]
        for stage in ("text_encode", "denoise", "vae_decode"):
            assert sv["stages_mean_s"][stage] == pytest.approx(row["server_stages_s"][stage], rel=1e-6)
        assert sv["queue_wait_mean_s"] == pytest.approx(row["server_stages_s"]["queue_wait"], rel=1e-6, abs=1e-9)
    own = (after.total("diffusion_requests_total") or 0) - (before.total("diffusion_requests_total") or 0)
    assert total == own
    csv_lines = (tmp_path / "r.csv").read_text().splitlines()
    header = csv_lines[0].split(",")
    first = dict(zip(header, csv_lines[1].split(","), strict=True))
    assert int(first["server_outcome_ok"]) == doc["rates"][0]["n_ok"]
    assert float(first["server_denoise_mean_s"]) == doc["rates"][0]["server"]["stages_mean_s"]["denoise"]


class _Proxy(http.server.BaseHTTPRequestHandler):
    """Holds every POST ``hold_s`` before forwarding it: a queue in front of the server."""

    backend = ""
    hold_s = 0.3
    protocol_version = "HTTP/1.1"

    def _forward(self, method: str) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if method == "POST" else None
        if method == "POST":
            time.sleep(self.hold_s)
        req = urllib.request.Request(self.backend + self.path, data=body, method=method,
                                     headers={"Content-Type": self.headers.get("Content-Type", "application/json")})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                code, data, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            code, data, ctype = exc.code, exc.read(), exc.headers.get("Content-Type", "")
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802
        self._forward("POST")

    def do_GET(self) -> None:  # noqa: N802
        self._forward("GET")

    def log_message(self, *args: object) -> None:
        pass


def test_a_queue_in_front_of_the_server_is_flagged(sim_url, tmp_path, capsys) -> None:
    _Proxy.backend = sim_url
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        proxy = f"http://127.0.0.1:{srv.server_address[1]}"
        # constant arrivals 0.5 or 1 s apart, each served in ~0.2 s: the server's own queue stays empty
        doc = _load(proxy, sim_url, tmp_path / "p.json", "--arrival", "constant", rates="1,2")
    finally:
        srv.shutdown()
        srv.server_close()
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "spent in front of the server" in out, out
    for row in doc["rates"]:
        sv = row["server"]
        assert sv["outcomes"]["ok"] == row["n_ok"]
        # every request is held 300 ms before it reaches the server, and the server does not see it
        assert row["latency_from_arrival_s"]["min"] >= _Proxy.hold_s
        assert sv["queue_wait_mean_s"] < _Proxy.hold_s / 2
        # the client's mean latency = mean time outside the server + the server's mean request time
        assert row["latency_from_arrival_s"]["mean"] - sv["request_mean_s"] >= _Proxy.hold_s
        assert any(w.startswith("server mismatch") for w in row["warnings"])
    assert any(w.startswith("1 req/s: client mean latency") and "spent in front of the server" in w
               for w in doc["warnings"]), doc["warnings"]


@pytest.mark.parametrize("client_mean, server_s, qwait, fires", [
    (0.200, 0.040, 0.0, True),     # 160 ms outside the server, no queue inside: a queue in front
    (0.200, 0.190, 0.150, False),  # the server's own queue explains it
    (0.045, 0.040, 0.0, False),    # 5 ms outside: transfer, under the floor
    (0.200, 0.040, 0.100, False),  # 160 ms outside but the server queue is 100 ms (not ≫)
])
def test_mismatch_rule(client_mean, server_s, qwait, fires) -> None:
    sv = ServerSide(url="u", scrapes=1, request_mean_s=server_s, queue_wait_mean_s=qwait)
    assert (mismatch_warning(client_mean, None, sv) is not None) == fires


ROWS = [
    (["--scrape", "ftp://host/metrics"], 2, "--scrape 'ftp://host/metrics': not an http(s) URL"),
    (["--scrape", "http://127.0.0.1:9/metrics"], 2, "--scrape http://127.0.0.1:9/metrics: unreachable"),
    (["--scrape", "{sim}/health"], 2, "/health: not a Prometheus metrics text (it looks like JSON)"),
    (["--scrape", "{sim}/nothing-here"], 2, "/nothing-here: HTTP 404"),
    (["--scrape", " "], 2, "--scrape is empty"),
    (["--scrape", "{sim}", "--scrape-interval", "0"], 2, "--scrape-interval must be > 0"),
    (["--scrape", "{sim}", "--scrape-interval", "nan"], 2, "--scrape-interval must be > 0"),
    (["--scrape-interval", "2"], 2, "--scrape-interval applies to --scrape URL"),
    (["--scrape", "local"], 2, "--scrape local names the reference service started without --url"),
]


@pytest.mark.parametrize("argv, code, fragment", ROWS, ids=[" ".join(r[0]) for r in ROWS])
def test_scrape_bad_input_is_a_clear_error(argv, code, fragment, sim_url, capsys) -> None:
    argv = [a.replace("{sim}", sim_url) for a in argv]
    # --url is a closed port: a row that got past the --scrape checks would fail differently
    assert main(["load", "--url", "http://127.0.0.1:9", "--rates", "1", "--duration", "1", *argv]) == code
    err = capsys.readouterr().err
    assert fragment in err, err
    assert "Traceback" not in err and err.count("\n") == 1


def _text(ok: int, qwait_sum: float, depth: float) -> str:
    return (f'diffusion_requests_total{{model="m",outcome="ok",status="200",traffic="user"}} {ok}\n'
            f'diffusion_queue_wait_seconds_sum{{model="m"}} {qwait_sum}\n'
            f'diffusion_queue_wait_seconds_count{{model="m"}} {ok}\n'
            f'diffusion_queue_depth{{model="m"}} {depth}\n')


def test_end_of_row_waits_until_the_server_counted_every_answer() -> None:
    """The server counts a request after its answer is sent: the end scrape is retried until the count
    reaches the client's answered requests (here the third read), so the row's delta is exact."""
    from diffbench.load.scrape import MetricsScraper
    from diffbench.metrics.scrape import parse_text

    reads = iter([_text(10, 1.0, 0), _text(13, 1.3, 0), _text(14, 1.4, 0), _text(15, 1.5, 0), _text(99, 9, 0)])
    scraper = MetricsScraper("http://127.0.0.1:1/metrics", fetch=lambda u: parse_text(next(reads), u))
    scraper.begin_row("1 req/s")
    scraper.end_row(answered=5)
    view = scraper.windows[0].view
    assert view is not None and view.outcomes["ok"] == 5 and view.n == 5
    assert view.queue_wait_mean_s == pytest.approx(0.5 / 5)


def test_a_scrape_failing_during_the_row_is_recorded_and_the_row_kept() -> None:
    from diffbench.errors import InputError
    from diffbench.load.scrape import MetricsScraper
    from diffbench.metrics.scrape import parse_text

    calls = {"n": 0}

    def fetch(u: str):
        calls["n"] += 1
        if calls["n"] == 1:
            return parse_text(_text(0, 0.0, 0), u)
        if calls["n"] < 4:
            raise InputError(f"--scrape {u}: unreachable (refused)")
        return parse_text(_text(2, 0.2, 3), u)

    scraper = MetricsScraper("http://127.0.0.1:1/metrics", interval_s=0.05, fetch=fetch)
    scraper.begin_row("2 req/s")
    scraper.start()
    deadline = time.monotonic() + 10
    while calls["n"] < 5 and time.monotonic() < deadline:
        time.sleep(0.02)
    scraper.stop()
    scraper.end_row(answered=2)
    view = scraper.windows[0].view
    assert view is not None and view.n == 2
    assert view.errors and "unreachable" in view.errors[0]
    assert view.queue_depth_max == 3.0


@pytest.mark.parametrize(("counted", "client_ok", "fragment"), [
    ({}, 8, "counted none of the 8"),             # another service / the probe's endpoint (user trial)
    ({"ok": 4}, 8, "counted only 4 of the 8"),    # one replica behind a balancer
    ({"ok": 8, "oom": 1}, 8, None),               # the service under load: every ok answer counted
    ({}, 0, None),                                # nothing answered ok: nothing to compare
])
def test_coverage_warning_when_the_endpoint_did_not_count_the_rows_requests(counted, client_ok, fragment):
    from diffbench.load.scrape import ServerSide, coverage_warning

    view = ServerSide(url="http://127.0.0.1:9/metrics", scrapes=3, outcomes=counted, n=sum(counted.values()))
    w = coverage_warning(client_ok, view)
    assert (w is None) if fragment is None else (fragment in w and "http://127.0.0.1:9/metrics" in w)
