"""diffbench.monitor.rules: loading, durations, the drill-speed copy (shorten_for) and find_promtool."""

from __future__ import annotations

import copy
import os
import re
import stat
import subprocess

import pytest
import yaml

from diffbench.errors import InputError, UsageError
from diffbench.monitor import lint, rules

PROMTOOL = rules.find_promtool()
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not found (Debian package `prometheus`: apt-get install prometheus; .ci/run installs it)",
)


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("10m", 600), ("1h30m", 5400), ("500ms", 0.5),
                                               ("6h", 21600), ("2d", 172800)])
def test_parse_duration(text: str, seconds: float) -> None:
    assert rules.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10", "1.5m", "m", "10 m", "-5s"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(UsageError, match="not a Prometheus duration"):
        rules.parse_duration(text)


@pytest.mark.parametrize(("seconds", "text"), [(30, "30s"), (0.5, "500ms"), (600, "600s"), (1.25, "1250ms")])
def test_format_duration_round_trips(seconds: float, text: str) -> None:
    assert rules.format_duration(seconds) == text
    assert rules.parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("content", "fragment"),
    [(None, "cannot read"), ("groups: [unclosed", "not valid YAML"), ("rules: []", "'groups' list"),
     ("- a\n- b", "'groups' list")],
)
def test_load_rules_errors(tmp_path, content: str | None, fragment: str) -> None:
    p = tmp_path / "r.yaml"
    if content is not None:
        p.write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=re.escape(fragment)) as exc:
        rules.load_rules(p)
    assert str(p) in str(exc.value)


def _windows(expr: str, fn: str) -> list[float]:
    return [rules.parse_duration(w) for w in re.findall(rf"\b{fn}\s*\([^()\[\]]*\[([0-9a-z]+)\]\)", expr)]


def test_shorten_for_mapping() -> None:
    original = rules.load_rules()
    before = copy.deepcopy(original)
    short = rules.shorten_for(original, 5, rate_window_s=30)
    assert original == before, "shorten_for modified its input"
    orig_rules = list(lint.iter_rules(original))
    short_rules = list(lint.iter_rules(short))
    assert len(orig_rules) == len(short_rules)
    for o, s in zip(orig_rules, short_rules, strict=True):
        assert o.get("alert") == s.get("alert") and o.get("record") == s.get("record")
        if "for" in o:
            assert rules.parse_duration(s["for"]) == min(rules.parse_duration(o["for"]), 5)
        else:
            assert "for" not in s
        # averaging windows shrink to 30 s; detection windows (increase, max_over_time) are kept
        assert _windows(s["expr"], "rate") == [min(w, 30) for w in _windows(o["expr"], "rate")]
        for fn in ("increase", "max_over_time"):
            assert _windows(s["expr"], fn) == _windows(o["expr"], fn)
    assert any(_windows(o["expr"], "rate") for o in orig_rules)
    assert any(_windows(o["expr"], "increase") for o in orig_rules)


def test_shorten_for_keeps_short_values() -> None:
    doc = {"groups": [{"name": "g", "rules": [
        {"alert": "A", "expr": "rate(diffusion_queue_depth[10s]) > 0", "for": "3s", "keep_firing_for": "1m"}]}]}
    out = rules.shorten_for(doc, 5, rate_window_s=30)["groups"][0]["rules"][0]
    assert out == {"alert": "A", "expr": "rate(diffusion_queue_depth[10s]) > 0", "for": "3s",
                   "keep_firing_for": "5s"}


@pytest.mark.parametrize("kwargs", [{"max_for_s": 0}, {"max_for_s": -1}, {"max_for_s": 5, "rate_window_s": 0}])
def test_shorten_for_rejects_bad_limits(kwargs: dict) -> None:
    with pytest.raises(UsageError, match="must be positive"):
        rules.shorten_for(rules.load_rules(), **kwargs)


@needs_promtool
@pytest.mark.promtool
def test_shortened_rules_fire_within_for_plus_window(tmp_path) -> None:
    """The drill copy, evaluated each second like the drill's Prometheus: a cache hit ratio that jumps
    from its baseline 0.5 to 0.875 at t = 60 s fires DiffusionCacheHitRatioDrift by t = 60 + 30 (window)
    + 5 (for) s; with the 15m window and for of the real file it is still silent then."""
    short = rules.shorten_for(rules.load_rules(), 5, rate_window_s=30)
    (tmp_path / "short.yaml").write_text(yaml.safe_dump(short, sort_keys=False), encoding="utf-8")
    (tmp_path / "full.yaml").write_text(rules.RULES_PATH.read_text(encoding="utf-8"), encoding="utf-8")
    # 2 lookups/s throughout; 1 hit/s for 60 s, then 1.75 hits/s
    hits = " ".join(str(min(t, 60) * 1.0 + max(t - 60, 0) * 1.75) for t in range(0, 121))
    labels = 'job="diffusion",instance="a",model="m",shape="256x256"'
    firing = [{"exp_labels": {"severity": "warning", "job": "diffusion", "instance": "a", "model": "m",
                              "shape": "256x256"},
               "exp_annotations": {
                   "summary": "m 256x256: step-cache hit ratio more than 30 % away from its baseline",
                   "description": "relative drift 75% on a; more hits than calibrated risk quality, fewer cost speed",
                   "runbook_url": "diffbench drill cache --json FILE; diffbench doctor artifacts --prometheus URL"}}]

    def case(rule_file: str, at_95: list) -> dict:
        return {"rule_files": [rule_file], "evaluation_interval": "1s",
                "group_eval_order": ["diffusion-recording", "diffusion-alerts"],
                "tests": [{"interval": "1s", "input_series": [
                    {"series": f'diffusion_cache_lookups_total{{{labels},cache="fbcache"}}', "values": "0+2x120"},
                    {"series": f'diffusion_cache_hits_total{{{labels},cache="fbcache"}}', "values": hits},
                    {"series": f"diffusion_cache_hit_ratio_baseline{{{labels}}}", "values": "0.5x120"}],
                    "alert_rule_test": [
                        {"eval_time": "59s", "alertname": "DiffusionCacheHitRatioDrift", "exp_alerts": []},
                        {"eval_time": "95s", "alertname": "DiffusionCacheHitRatioDrift", "exp_alerts": at_95}]}]}

    for name, doc in (("short_test.yaml", case("short.yaml", firing)), ("full_test.yaml", case("full.yaml", []))):
        (tmp_path / name).write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        proc = subprocess.run([PROMTOOL, "test", "rules", str(tmp_path / name)], capture_output=True, text=True,
                              timeout=60, check=False)
        assert proc.returncode == 0, name + "\n" + proc.stdout + proc.stderr
    check = subprocess.run([PROMTOOL, "check", "rules", str(tmp_path / "short.yaml")], capture_output=True,
                           text=True, timeout=60, check=False)
    assert check.returncode == 0, check.stdout + check.stderr


def test_find_promtool_env(tmp_path, monkeypatch) -> None:
    tool = tmp_path / "promtool"
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PROMTOOL", str(tool))
    assert rules.find_promtool() == str(tool)
    monkeypatch.setenv("PROMTOOL", str(tmp_path / "missing"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert rules.find_promtool() is None


def test_rules_path_is_the_repo_file() -> None:
    assert rules.RULES_PATH.is_file() and rules.RULES_TEST_PATH.is_file()
    assert os.path.samefile(rules.RULES_PATH.parent, rules.MONITORING_DIR)
