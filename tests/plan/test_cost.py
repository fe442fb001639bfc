"""``plan --gpu-hour-price``: the plan's GPUs priced per 1,000 outputs (closed form)."""

from __future__ import annotations

import json

import pytest

from diffbench.cli.main import main
from diffbench.plan.cost import plan_cost


def test_plan_cost_closed_form():
    # 8 GPUs for 2 QPS: 4 GPU-s per output; at 2.5 per GPU-hour, 1000 outputs = 4000 GPU-s = 10/9 hours
    c = plan_cost(8, 2.0, 2.5)
    assert c.gpu_s_per_output == pytest.approx(4.0)
    assert c.cost_per_1000 == pytest.approx(2.5 * 4000 / 3600)
    assert c.cost_per_hour == pytest.approx(20.0)
    # an hour of the pool serves qps x 3600 outputs: the two prices agree
    assert c.cost_per_hour / (2.0 * 3600) * 1000 == pytest.approx(c.cost_per_1000)


def test_cli_prices_the_plan_gpus(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["plan", "--model", "flux.1-dev", "--size", "1024x1024", "--gpu", "h100-sxm", "--slo-p99", "7.5",
                 "--qps", "3", "--gpu-hour-price", "2", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    gpus = res["total_gpus"]
    assert res["cost"]["gpus"] == gpus
    assert res["cost"]["cost_per_1000"] == pytest.approx(2 * gpus / 3 * 1000 / 3600)
    assert "per 1,000 outputs" in capsys.readouterr().out
    out2 = tmp_path / "q.json"
    assert main(["plan", "--model", "flux.1-dev", "--size", "1024x1024", "--gpu", "h100-sxm", "--slo-p99", "7.5",
                 "--qps", "3", "--json", str(out2)]) == 0
    assert json.loads(out2.read_text())["cost"] is None
