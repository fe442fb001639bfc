"""monitoring/alerts.yaml: promtool check/test, the case count per alert, mutations the tests must catch,
the metric names it uses, and the offline rule lint (diffbench.monitor.lint)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from diffbench.metrics import names
from diffbench.monitor import lint, rules

PROMTOOL = rules.find_promtool()
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not found (Debian package `prometheus`: apt-get install prometheus; .ci/run installs it)",
)

ALERTS = (
    "DiffusionDenoiseStepRegression", "DiffusionCacheHitRatioDrift", "DiffusionQueueWaitOverHalfSLO",
    "DiffusionGPUPeakMemoryHigh", "DiffusionQualityPSNRDrop", "DiffusionRecompileDetected",
    "DiffusionRankStepSkew", "DiffusionExporterDown", "DiffusionProbeStale", "DiffusionErrorBudgetBurnFast",
    "DiffusionErrorBudgetBurnSlow", "DiffusionBaselineMissing", "DiffusionLatencyP99OverSLO",
)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, check=False)


def _tests_doc() -> dict:
    return yaml.safe_load(rules.RULES_TEST_PATH.read_text(encoding="utf-8"))


def _cases(alert: str) -> list[dict]:
    return [c for t in _tests_doc()["tests"] for c in t.get("alert_rule_test", []) if c["alertname"] == alert]


# -- promtool -----------------------------------------------------------------------------------------------


@needs_promtool
@pytest.mark.promtool
def test_promtool_check_rules() -> None:
    proc = _promtool("check", "rules", str(rules.RULES_PATH))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    n = sum(len(g["rules"]) for g in rules.load_rules()["groups"])
    assert f"SUCCESS: {n} rules found" in proc.stdout


@needs_promtool
@pytest.mark.promtool
def test_promtool_test_rules() -> None:
    proc = _promtool("test", "rules", str(rules.RULES_TEST_PATH))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


# Each mutation breaks one property of the rules (every occurrence of the anchor is replaced); the unit
# tests must then fail, so they are not vacuous.
MUTATIONS = [
    ("step limit 1.2 -> 1.3 misses +25 %", "(1.2 * diffusion_denoise_step_baseline_seconds)",
     "(1.3 * diffusion_denoise_step_baseline_seconds)"),
    ("step baseline matched across shapes", "> on (job, instance, model, shape)\n          (1.2",
     "> on (job, instance, model)\n          (1.2"),
    ("cache drift in one direction only", "abs(\n", "(\n"),
    ("probe and warmup errors charged to the budget", '{traffic="user", outcome=~', "{outcome=~"),
    ("rejections charged to the budget", 'outcome=~"oom|timeout|error"}', 'outcome=~"oom|timeout|error|rejected"}'),
    ("unknown total divides into +Inf", "(diffusion_gpu_memory_total_bytes > 0)",
     "diffusion_gpu_memory_total_bytes"),
    ("queue alert without for", "(0.5 * diffusion_latency_slo_seconds)\n        for: 2m",
     "(0.5 * diffusion_latency_slo_seconds)"),
    ("exporter down on every job", 'up{job=~"diffusion.*"} == 0', "up == 0"),
    ("PSNR threshold only from the probe's own target",
     "on (model, probe) group_left ()\n          (max by (model, probe) (diffusion_quality_psnr_threshold_decibels) - 3)",
     "on (job, instance, model, probe)\n          (diffusion_quality_psnr_threshold_decibels - 3)"),
    ("recompile alert on the raw counter", "increase(diffusion_compile_recompiles_total[15m]) > 0",
     "diffusion_compile_recompiles_total > 0"),
    ("rank spread limit 10 % -> 20 %", "spread_ratio5m > 0.1", "spread_ratio5m > 0.2"),
    ("rank skew without its absolute floor", "spread_seconds5m > 0.002", "spread_seconds5m > 0"),
    ("probe stale after 10 intervals", "(2 * diffusion_quality_probe_interval_seconds)",
     "(10 * diffusion_quality_probe_interval_seconds)"),
    ("latency p99 counts probe traffic", 'diffusion_request_duration_seconds_bucket{traffic="user"}',
     "diffusion_request_duration_seconds_bucket"),
    ("latency quantile 0.99 -> 0.9", "0.99,\n", "0.9,\n"),
    ("latency p99 per shape", "sum by (job, instance, model, le)", "sum by (job, instance, model, shape, le)"),
    ("latency alert without for", "          diffusion_latency_slo_seconds\n        for: 10m",
     "          diffusion_latency_slo_seconds"),
    ("baseline guard fires on zero-initialised series",
     "(increase(diffusion_denoise_step_duration_seconds_count{shape!=\"other\"}[15m])) > 0",
     "(increase(diffusion_denoise_step_duration_seconds_count{shape!=\"other\"}[15m])) >= 0"),
]


@needs_promtool
@pytest.mark.promtool
@pytest.mark.parametrize(("why", "old", "new"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_unit_tests_catch_mutation(tmp_path, why: str, old: str, new: str) -> None:
    text = rules.RULES_PATH.read_text(encoding="utf-8")
    assert old in text, f"mutation anchor for {why!r} not found in alerts.yaml"
    (tmp_path / "alerts.yaml").write_text(text.replace(old, new), encoding="utf-8")
    shutil.copy(rules.RULES_TEST_PATH, tmp_path / "alerts_test.yaml")
    assert _promtool("check", "rules", str(tmp_path / "alerts.yaml")).returncode == 0, why
    proc = _promtool("test", "rules", str(tmp_path / "alerts_test.yaml"))
    assert proc.returncode != 0, f"the unit tests did not notice: {why}\n{proc.stdout}"


# -- the test file's coverage ---------------------------------------------------------------------------------


def test_alert_names_are_the_agreed_set() -> None:
    assert set(rules.alert_names(rules.load_rules())) == set(ALERTS)


@pytest.mark.parametrize("alert", ALERTS)
def test_each_alert_fires_and_stays_silent(alert: str) -> None:
    cases = _cases(alert)
    assert len(cases) >= 2, f"{alert}: {len(cases)} promtool case(s), need >= 2"
    assert any(c["exp_alerts"] for c in cases), f"{alert}: no case where it fires"
    assert any(not c["exp_alerts"] for c in cases), f"{alert}: no case where it stays silent"
    # Every firing case also has inputs that must stay silent (a label set absent from exp_alerts).
    for test in _tests_doc()["tests"]:
        mine = [c for c in test.get("alert_rule_test", []) if c["alertname"] == alert]
        if any(c["exp_alerts"] for c in mine):
            fired = {tuple(sorted(a["exp_labels"].items())) for c in mine for a in c["exp_alerts"]}
            assert len(test["input_series"]) > len(fired), f"{alert}: every input series fires"


def test_for_alerts_have_a_pending_case() -> None:
    for rule in lint.iter_rules(rules.load_rules()):
        if "alert" not in rule or "for" not in rule:
            continue
        for_s = rules.parse_duration(rule["for"])
        firing = [rules.parse_duration(c["eval_time"]) for c in _cases(rule["alert"]) if c["exp_alerts"]]
        pending = [rules.parse_duration(c["eval_time"]) for c in _cases(rule["alert"]) if not c["exp_alerts"]]
        assert firing and pending and min(pending) < min(firing), rule["alert"]
        assert min(firing) - min(pending) <= for_s, rule["alert"]


def test_recompile_trap_series_is_kept() -> None:
    """A counter first scraped at 1 shows no increase (https://prometheus.io/docs/practices/instrumentation/#avoid-missing-metrics): the test keeps that series."""
    series = [s for t in _tests_doc()["tests"] for s in t["input_series"]
              if s["series"].startswith("diffusion_compile_recompiles_total")]
    assert any(s["values"].strip().startswith("_x5 1x20") for s in series)
    assert any(s["values"].strip().startswith("0x5 1x20") for s in series)


# -- names and lint -------------------------------------------------------------------------------------------


def test_rule_file_is_lint_clean() -> None:
    assert lint.rule_problems(rules.load_rules()) == []


def test_rule_file_names_only_table_metrics_or_its_recording_rules() -> None:
    doc = rules.load_rules()
    recorded = rules.recorded_names(doc)
    samples = names.sample_names()
    for rule in lint.iter_rules(doc):
        for ident in lint.metric_identifiers(str(rule["expr"])):
            assert ident in (recorded if ":" in ident else samples), (rule.get("alert") or rule["record"], ident)
    # the colon rule: the recording rule is one identifier, not a diffusion_... name inside it
    assert lint.metric_identifiers("model:diffusion_requests_failed:ratio_rate5m > 0.1") == {
        "model:diffusion_requests_failed:ratio_rate5m"}


def _doc(expr: str, *, record: str | None = None, labels: dict | None = None,
         annotations: dict | None = None) -> dict:
    if record:
        rule = {"record": record, "expr": expr}
    else:
        rule = {"alert": "X", "expr": expr, "labels": {"severity": "warning"} if labels is None else labels,
                "annotations": {"summary": "s", "runbook_url": "diffbench doctor p99"}
                if annotations is None else annotations}
    return {"groups": [{"name": "g", "rules": [rule]}]}


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        (_doc('sum(rate(diffusion_request_duration_seconds_bucket{traffic="user", le="30"}[5m]))'),
         'integer le matcher le="30"'),
        (_doc('rate(diffusion_request_duration_seconds_bucket{traffic="user", le=~"10"}[5m])'), "integer le"),
        (_doc("rate(diffusion_denoise_step_seconds_sum[5m])"), "unknown metric diffusion_denoise_step_seconds_sum"),
        (_doc("diffusion_requests_failed:ratio > 0"), "unknown metric diffusion_requests_failed:ratio"),
        (_doc('rate(diffusion_requests_total{outcome="error"}[5m]) > 0'), 'without traffic="user"'),
        (_doc("diffusion_queue_depth", record="queue_depth"), "level:metric:operations"),
        (_doc("diffusion_queue_depth > 1", labels={"severity": "critical"}), "severity 'critical'"),
        (_doc("diffusion_queue_depth > 1", annotations={"summary": "s"}), "no runbook_url"),
        (_doc("diffusion_queue_depth > 1", annotations={"runbook_url": "r"}), "no summary"),
    ],
)
def test_rule_lint_rejects(doc: dict, fragment: str) -> None:
    problems = lint.rule_problems(doc)
    assert any(fragment in p for p in problems), problems


def test_rule_lint_accepts_float_le() -> None:
    ok = _doc('sum(rate(diffusion_request_duration_seconds_bucket{traffic="user", le="30.0"}[5m])) > 0')
    assert lint.rule_problems(ok) == []
    assert lint.integer_le_values('x{le="+Inf"} + y{le="0.5"}') == []


# -- plan names only exported metrics (issue 11, item 7 / acceptance) ---------------------------------------


def test_plan_names_only_table_metrics() -> None:
    import ast
    from pathlib import Path

    import diffbench.plan as plan

    known = names.sample_names() | set(names.BY_NAME) | rules.recorded_names(rules.load_rules())
    found: dict[str, str] = {}
    for path in Path(plan.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for ident in lint.metric_identifiers(node.value):
                    found[ident] = path.name
    assert found, "plan names no diffusion_ metric at all: the scan is broken"
    unknown = {k: v for k, v in found.items() if k not in known}
    assert not unknown, f"plan names metrics the exporter does not register: {unknown}"
