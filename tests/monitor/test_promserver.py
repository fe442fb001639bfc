"""The local Prometheus harness against a fixed-body /metrics endpoint and a one-line rule."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator

import pytest

from diffbench.errors import MissingDependencyError
from diffbench.monitor import promserver
from diffbench.monitor.promserver import PromServer, Target, prometheus_config

needs_prometheus = pytest.mark.skipif(
    promserver.find_prometheus() is None,
    reason=f"the prometheus binary is not installed ({promserver.INSTALL_HINT})",
)

BODY = {"value": 3.0}


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server API
        text = (
            "# HELP drill_test_value a value the test sets\n# TYPE drill_test_value gauge\n"
            f'drill_test_value{{kind="fixed"}} {BODY["value"]}\n'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        yield f"127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_config_has_the_intervals_and_one_job_per_target() -> None:
    cfg = prometheus_config([Target("a", "127.0.0.1:1"), Target("b", "127.0.0.1:2")], "/r.yaml")
    assert cfg["global"]["scrape_interval"] == "1s" and cfg["global"]["evaluation_interval"] == "1s"
    assert [j["job_name"] for j in cfg["scrape_configs"]] == ["a", "b"]
    assert cfg["scrape_configs"][1]["static_configs"] == [{"targets": ["127.0.0.1:2"]}]
    assert cfg["rule_files"] == ["/r.yaml"]


def test_missing_binary_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(promserver.shutil, "which", lambda name: None)
    with pytest.raises(MissingDependencyError, match="apt-get install prometheus") as exc:
        PromServer([Target("a", "127.0.0.1:1")]).start()
    assert exc.value.exit_code == 3


@needs_prometheus
@pytest.mark.promtool
def test_scrapes_queries_fires_and_cleans_up(endpoint: str) -> None:
    BODY["value"] = 3.0
    rules = {"groups": [{"name": "t", "rules": [
        {"alert": "DrillTestHigh", "expr": "drill_test_value > 5", "labels": {"severity": "info"}},
    ]}]}
    server = PromServer([Target("fixed", endpoint)], rules=rules)
    with server:
        workdir = server.workdir
        assert workdir is not None and (workdir / "prometheus.yml").exists()
        server.wait_scraped(timeout_s=30)
        assert server.query_value('drill_test_value{job="fixed"}') == 3.0
        assert server.query_value("up") == 1.0
        assert "DrillTestHigh" not in server.firing()
        BODY["value"] = 7.0  # the endpoint's next scrape crosses the rule's threshold
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "DrillTestHigh" not in server.firing():
            time.sleep(0.2)
        assert "DrillTestHigh" in server.firing()
        assert server.query_value("drill_test_value") == 7.0
        proc = server._proc
    assert proc is not None and proc.poll() is not None  # the process is gone after the block
    assert not workdir.exists()
