"""The report of a ``plan --json`` shows the issue-13 fields: lossy sets, layouts with queueing, pools."""

from __future__ import annotations

import json

import pytest

from diffbench.cli.main import main


@pytest.mark.slow
def test_markdown_report_has_the_new_tables(tmp_path):
    wl = tmp_path / "mix.yaml"
    wl.write_text("shapes:\n  - {width: 1024, height: 1024, steps: 28, weight: 4}\n"
                  "  - {size: 512x512, steps: 28, weight: 1}\n")
    pj, md = tmp_path / "p.json", tmp_path / "r.md"
    assert main(["plan", "--model", "flux.1-dev", "--workload", str(wl), "--gpu", "h100-sxm", "--slo-p99", "1",
                 "--qps", "100", "--quality-budget", "30", "--json", str(pj)]) == 0
    assert main(["report", str(pj), "-o", str(md), "--format", "markdown", "--quiet"]) == 0
    data, text = json.loads(pj.read_text()), md.read_text()
    assert "Lossy sets within the budget" in text and "⑤ Layouts (p99 with queueing)" in text
    assert "Shape pools" in text
    z = data["sizing"]
    assert f"max(formula {z['formula_instances']}, queue {z['queue_instances']}) = {z['instances']}" in text
    total = data["pool_plan"]["total_gpus"]
    assert any(line.startswith("| total |") and f"| {total} |" in line for line in text.splitlines())
    for lay in data["layouts"]:
        assert lay["label"] in text
