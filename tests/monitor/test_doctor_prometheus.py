"""``diffbench doctor --prometheus``: the same checks as PromQL, against a real local Prometheus.

The series are written by prometheus_client (the table's families) every 15 s over 20 minutes, backfilled
with ``promtool tsdb create-blocks-from openmetrics`` and served by the Debian ``prometheus`` binary on
127.0.0.1; the doctor queries its HTTP API at the end of the data. Skipped (with the reason) where the
binaries are not installed.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.openmetrics.exposition import generate_latest as om_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from tests.metrics.scrape_fixtures import MODEL, Exposition, healthy

from diffbench.cli.main import main
from diffbench.metrics.scrape import PromQuery
from diffbench.monitor.doctor import diagnose
from diffbench.monitor.doctor_views import PromView

pytestmark = [pytest.mark.promtool,
              pytest.mark.skipif(not (shutil.which("prometheus") and shutil.which("promtool")),
                                 reason="prometheus/promtool not installed (Debian package 'prometheus')")]

STEP_S = 15
POINTS = 81  # 20 minutes


def _labels(d: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in d.items()) + "}" if d else ""


def _openmetrics(snapshots: list[tuple[float, str]]) -> str:
    """Merge OpenMetrics snapshots (time, text) into one file with timestamps, family by family."""
    fams: dict[str, tuple[str, str, list[str]]] = {}
    for t, text in snapshots:
        for fam in om_parse(text):
            _, _, lines = fams.setdefault(fam.name, (fam.type, fam.documentation, []))
            for s in fam.samples:
                if s.name.endswith("_created"):
                    continue
                lines.append(f"{s.name}{_labels(s.labels)} {s.value!r} {t:.3f}")
    out = []
    for name, (kind, doc, lines) in fams.items():
        out += [f"# TYPE {name} {kind}", f"# HELP {name} {doc}", *lines]
    return "\n".join(out) + "\n# EOF\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def prom(tmp_path_factory) -> Iterator[tuple[str, float]]:
    """(Prometheus base URL, Unix time of the last sample): a step regression (13 ms vs 10 ms) all along,
    two recompiles at minute 15, a peak of 7.5 of 8 GiB once at minute 10."""
    root = tmp_path_factory.mktemp("prom")
    end = time.time() - 30
    start = end - (POINTS - 1) * STEP_S
    exp = Exposition()
    healthy(exp, requests=0)
    snaps = []
    for k in range(POINTS):
        for _ in range(3):
            exp.serve(step_s=0.013, cache=("fbcache", 20, 10))
        if k == 60:
            exp.inc("diffusion_compile_recompiles", 2, model=MODEL)
        exp.set("diffusion_gpu_memory_peak_bytes", (7.5 if k == 40 else 2.0) * 2**30, gpu="0")
        snaps.append((start + k * STEP_S, om_latest(exp.registry).decode()))
    src = root / "data.om"
    src.write_text(_openmetrics(snaps))
    data = root / "tsdb"
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(src), str(data)],
                   check=True, capture_output=True, timeout=120)
    cfg = root / "prometheus.yml"
    cfg.write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={data}",
                             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1d"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + "/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("prometheus did not become ready")
            time.sleep(0.2)
        yield url, end
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_p99_from_promql(prom) -> None:
    url, end = prom
    rep = diagnose("p99", PromView(PromQuery(url, at=end), "10m"))
    v = {c.key: c.verdict for c in rep.checks}
    assert v == {"queue_vs_service": "ok", "step_vs_baseline": "suspect", "recompiles": "suspect",
                 "rank_skew": "no data", "cache_hit_ratio": "ok"}
    # increase() extrapolates _sum and _count by the same factor: the ratio is the injected one
    assert rep.checks[1].value == pytest.approx(1.3, rel=1e-6)
    assert rep.checks[2].value >= 2.0
    assert "PromQL over the last 10m" in rep.basis


def test_oom_peak_is_held_by_max_over_time(prom) -> None:
    """The 7.5 GiB peak sat in one sample 10 minutes before the end: inside a 15m window, outside 5m."""
    url, end = prom
    wide = diagnose("oom", PromView(PromQuery(url, at=end), "15m")).checks[0]
    narrow = diagnose("oom", PromView(PromQuery(url, at=end), "5m")).checks[0]
    assert (wide.verdict, wide.value) == ("suspect", pytest.approx(7.5 / 8))
    assert (narrow.verdict, narrow.value) == ("ok", pytest.approx(2 / 8))


def test_cli_with_prometheus_writes_json(prom, tmp_path: Path) -> None:
    url, _ = prom
    out = tmp_path / "d.json"
    # now (not at the end of the data): the last sample is 30 s old, inside the 5 min lookback
    assert main(["doctor", "artifacts", "--prometheus", url, "--window", "15m", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [c["verdict"] for c in doc["checks"]] == ["ok", "ok", "ok", "ok"]
