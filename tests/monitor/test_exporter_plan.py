"""plan's step ⑧ names only metrics the exporter registers (issue 11, Deliver 7 / Acceptance)."""

from __future__ import annotations

import json

import pytest

from diffbench.cli.main import main
from diffbench.metrics import names
from diffbench.monitor.exporter import Exporter

ARGS = ["plan", "--model", "flux.1-dev", "--size", "1024x1024", "--steps", "28", "--gpu", "h100-sxm",
        "--gpus-per-node", "8", "--qps", "100", "--quality-budget", "30"]


@pytest.mark.parametrize("slo", ["3", "1"])  # 1 s needs a parallel plan: the per-rank signal appears
def test_every_metric_plan_names_is_registered_by_the_exporter(tmp_path, capsys, slo):
    out = tmp_path / "plan.json"
    assert main([*ARGS, "--slo-p99", slo, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    signals = [s["name"] for s in json.loads(out.read_text())["signals"]]
    assert signals
    service = Exporter("m", ["1024x1024"]).registered()
    with_probe = Exporter("m", ["1024x1024"], probes=["p"]).registered()  # the probe's own families
    body = Exporter("m", ["1024x1024"], ranks=[0, 1], probes=["p"]).render()[0].decode()
    for name in signals:
        spec = names.spec(name)  # KeyError: not in the metric table
        # a gauge or histogram family, or a counter's _total sample: the name a query writes
        assert name in spec.samples if spec.kind == "counter" else name == spec.name, name
        registered = with_probe if spec.name.startswith("diffusion_quality_") else service
        assert spec.name in registered, name
        assert f"# TYPE {name} {spec.kind}" in body, name  # what a scrape shows
        assert name in text
    if slo == "1":
        assert "diffusion_rank_step_compute_seconds" in signals
