"""The drill harness without a service: threshold choice, reports, alert timing, scrape parsing, the CLI's
bad inputs (refused before anything starts)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from diffbench.cli.main import main
from diffbench.monitor.drills.cache import pick_thresholds
from diffbench.monitor.drills.common import client_p99
from diffbench.monitor.drills.core import (
    POLL_S,
    AlertTiming,
    AlertWatcher,
    DrillReport,
    parse_scrape,
    rule_exprs,
    rule_for_s,
    sample_sum,
    series_keys,
)
from diffbench.monitor.drills.harness import DrillError
from diffbench.monitor.promserver import Alert

GRID = {0.1: math.inf, 0.2: math.inf, 0.25: 60.1, 0.3: 55.7, 0.4: 51.5, 0.5: 49.3, 1.0: 47.1}


def test_served_threshold_is_the_largest_inside_the_budget_with_skips() -> None:
    assert pick_thresholds(GRID, 55.0) == (0.3, 1.0)  # 55.7 >= 55; 1.0 is the largest under 52 dB
    assert pick_thresholds(GRID, 52.0) == (0.3, 1.0)  # 51.5 < 52 is outside the budget
    assert pick_thresholds(GRID, 51.0) == (0.4, 1.0)  # 47.1 < 48


def test_no_threshold_outside_the_budget_is_an_error_naming_the_fix() -> None:
    with pytest.raises(DrillError, match="--budget-db"):
        pick_thresholds(GRID, 50.0)  # inside: 0.25-0.4, but nothing below 47 dB
    with pytest.raises(DrillError, match="--budget-db"):
        pick_thresholds(GRID, 70.0)  # nothing inside


def test_identical_outputs_are_never_the_served_threshold() -> None:
    # inf = no step skipped: a hit-ratio baseline of 0, which the drift alert cannot divide by
    assert pick_thresholds({0.1: math.inf, 0.3: 56.0, 1.0: 40.0}, 50.0) == (0.3, 1.0)


def test_alert_timing_bound_is_for_plus_two_scrapes() -> None:
    t = AlertTiming("X", for_s=5.0, bound_s=7.0, condition_s=1.0, fired_s=8.0)
    assert t.latency_s == 7.0 and t.within_bound
    late = AlertTiming("X", for_s=5.0, bound_s=7.0, condition_s=1.0, fired_s=8.0 + POLL_S + 0.01)
    assert not late.within_bound
    assert not AlertTiming("X", 5.0, 7.0, condition_s=1.0).within_bound  # never fired


def test_report_passes_only_with_checks_all_passing_and_no_error(capsys: pytest.CaptureFixture[str]) -> None:
    r = DrillReport("cache")
    assert not r.passed  # no check at all is not a pass
    r.check("a", True, "ok")
    assert r.passed
    r.mark_inject("push")
    r.check("b", False, "nope")
    assert not r.passed
    doc = json.loads(json.dumps(r.as_dict(), default=str))
    assert [c["passed"] for c in doc["checks"]] == [True, False]
    assert doc["timeline"][0]["t_s"] is None and doc["timeline"][-1]["t_s"] >= 0
    out = capsys.readouterr().out
    assert "[cache]" in out and "inject" in out and "FAIL b: nope" in out


RULES = {"groups": [
    {"name": "r", "rules": [{"record": "x:y", "expr": "sum(y)"}]},
    {"name": "a", "rules": [
        {"alert": "A", "expr": "x:y > 1", "for": "5s"},
        {"alert": "B", "expr": "z > 1"},
        {"alert": "B", "expr": "w > 1", "for": "2s"},
    ]},
]}


def test_rule_lookups() -> None:
    assert rule_for_s(RULES, "A") == 5.0 and rule_for_s(RULES, "B") == 2.0
    assert rule_exprs(RULES, "B") == ["z > 1", "w > 1"]
    with pytest.raises(KeyError):
        rule_for_s(RULES, "C")


class _FakeProm:
    """Alert states and query results scripted by poll number."""

    def __init__(self) -> None:
        self.polls = 0

    def alerts(self) -> list[Alert]:
        self.polls += 1
        out = []
        if self.polls >= 3:
            out.append(Alert("A", "pending", {"alertname": "A"}))
        if self.polls >= 5:
            out = [Alert("A", "firing", {"alertname": "A"})]
        return out

    def query(self, expr: str) -> list[dict]:
        return [{"metric": {}, "value": [0, "2"]}] if self.polls >= 3 and expr == "x:y > 1" else []


def test_watcher_records_condition_pending_and_firing_in_order() -> None:
    prom = _FakeProm()
    with AlertWatcher(prom, RULES, ["A"]) as w:  # type: ignore[arg-type]
        assert w.wait_fired(["A"], timeout_s=10)
    assert w.first_condition["A"] <= w.first_state[("A", "pending")] <= w.first_state[("A", "firing")]
    assert w.seen("A") == "firing" and w.seen("B") is None
    assert w.seen("A", since=time.monotonic() + 1) is None


def test_scrape_parsing_against_prometheus_client_output() -> None:
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    reg = CollectorRegistry()
    c = Counter("diffusion_cache_hits", "h", ["shape"], registry=reg)
    c.labels("64x64").inc(3)
    c.labels("other").inc(2)
    h = Histogram("diffusion_x_seconds", "x", ["shape"], buckets=(0.5, 1.0), registry=reg)
    h.labels("64x64").observe(0.7)
    s = parse_scrape(generate_latest(reg).decode())
    assert sample_sum(s, "diffusion_cache_hits_total") == 5.0
    assert sample_sum(s, "diffusion_cache_hits_total", shape="other") == 2.0
    assert sample_sum(s, "diffusion_x_seconds_bucket", le="1.0") == 1.0
    assert sample_sum(s, "diffusion_x_seconds_bucket", le="0.5") == 0.0
    assert not any(name.endswith("_created") for name, _ in series_keys(s))


def test_client_p99_is_numpys_linear_quantile() -> None:
    import numpy as np

    lat = [0.1 * i for i in range(1, 51)]
    assert client_p99(lat) == pytest.approx(float(np.percentile(lat, 99)))
    assert client_p99([]) is None


CASES = [
    ("unknown-drill", ["drill", "oom"], 2, "choose one of cache, shapes, vae, all"),
    ("zero-max-for", ["drill", "cache", "--max-for", "0"], 2, "--max-for 0.0: must be a finite number > 0"),
    ("nan-scrape", ["drill", "cache", "--scrape-interval", "nan"], 2, "--scrape-interval nan"),
    ("bad-size", ["drill", "cache", "--size", "64"], 2, "--size '64': write it as WIDTHxHEIGHT"),
    ("size-not-16", ["drill", "cache", "--size", "72x64"], 2, "multiples of 16"),
    ("one-step", ["drill", "cache", "--steps", "1"], 2, "--steps 1: must be at least 2"),
    ("json-missing-parent", ["drill", "cache", "--json", "{T}/no/such/d.json"], 2, "pass --mkdir"),
    ("json-is-dir", ["drill", "cache", "--json", "{T}"], 2, "is a directory"),
    ("scrapes-missing-parent", ["drill", "cache", "--record-scrapes", "{T}/no/such/dir"], 2, "--mkdir"),
    ("no-prometheus", ["drill", "vae"], 3, "apt-get install prometheus"),
]


@pytest.mark.parametrize(("case", "argv", "code", "fragment"), CASES, ids=[c[0] for c in CASES])
def test_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                   case: str, argv: list[str], code: int, fragment: str) -> None:
    if case == "no-prometheus":
        import diffbench.monitor.promserver as ps

        monkeypatch.setattr(ps.shutil, "which", lambda name: None)
    rc = main([a.format(T=tmp_path) for a in argv])
    cap = capsys.readouterr()
    assert rc == code, cap.err + cap.out
    assert fragment.format(T=tmp_path) in " ".join(cap.err.split()), cap.err
    assert "Traceback" not in cap.err + cap.out
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize(("text", "seconds"), [("5s", 5.0), ("1m30s", 90.0), ("500ms", 0.5), ("2h", 7200.0)])
def test_durations(text: str, seconds: float) -> None:
    from diffbench.monitor.drills.core import duration_s

    assert duration_s(text) == seconds


def test_prometheus_series_back_to_a_text_scrape() -> None:
    """What Prometheus stored, rendered as a scrape, parses back to the same samples (job/instance dropped)."""
    from diffbench.monitor.drills.core import prom_exposition

    base = {"job": "diffusion", "instance": "127.0.0.1:1", "model": "tiny-flux", "shape": "64x64",
            "traffic": "user"}
    result = [
        {"metric": {"__name__": "diffusion_request_duration_seconds_bucket", **base, "le": le}, "value": [1.0, v]}
        for le, v in (("+Inf", "3"), ("0.5", "1"), ("10.0", "2"))
    ] + [
        {"metric": {"__name__": "diffusion_request_duration_seconds_count", **base}, "value": [1.0, "3"]},
        {"metric": {"__name__": "diffusion_gpu_memory_peak_bytes", "job": "diffusion", "gpu": "cpu"},
         "value": [1.0, "2742902784"]},
        {"metric": {"__name__": "up", "job": "diffusion"}, "value": [1.0, "1"]},  # not a diffbench family
        {"metric": {"__name__": "diffusion_deployment_info", "job": "diffusion", "vae_tiling": "false",
                    "module": "x"}, "value": [1.0, "1"]},  # label names ending in "le" are not buckets
    ]
    text = prom_exposition(result, note="test")
    s = parse_scrape(text)
    assert sample_sum(s, "diffusion_request_duration_seconds_bucket", le="0.5") == 1.0
    assert sample_sum(s, "diffusion_request_duration_seconds_bucket", le="+Inf") == 3.0
    assert sample_sum(s, "diffusion_request_duration_seconds_count", shape="64x64") == 3.0
    assert sample_sum(s, "diffusion_gpu_memory_peak_bytes", gpu="cpu") == 2742902784.0
    assert not any("job" in dict(labels) or "instance" in dict(labels) for _, labels in s)
    assert "up" not in text and "# TYPE diffusion_request_duration_seconds histogram" in text
    buckets = [ln for ln in text.splitlines() if "_bucket" in ln]
    assert [b.split('le="')[1].split('"')[0] for b in buckets] == ["0.5", "10.0", "+Inf"]
