"""The alerts a plan names are the rules the project ships (monitoring/alerts.yaml), thresholds from the plan."""

from __future__ import annotations

from pathlib import Path

import yaml

from diffbench.cli.main import main

RULES = Path(__file__).resolve().parents[2] / "monitoring" / "alerts.yaml"


def _shipped_alerts() -> set[str]:
    doc = yaml.safe_load(RULES.read_text())
    return {r["alert"] for g in doc["groups"] for r in g["rules"] if "alert" in r}


def test_every_planned_alert_is_a_shipped_rule_and_the_p99_alert_carries_the_slo(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    rc = main(["plan", "--model", "flux.1-dev", "--gpu", "h100-sxm", "--size", "1024x1024",
               "--steps", "28", "--slo-p99", "7.5", "--qps", "1", "--json", str(out)])
    assert rc == 0
    import json

    alerts = {a["name"]: a for a in json.loads(out.read_text())["alerts"]}
    assert set(alerts) <= _shipped_alerts()
    # the latency-quantile rule is named with the SLO the plan was given
    assert alerts["DiffusionLatencyP99OverSLO"]["threshold"] == "7.5 s"
