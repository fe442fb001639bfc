"""Every `diffbench ...` command the planner suggests parses with the real CLI (no drift between them)."""

from __future__ import annotations

import shlex

import pytest
import typer

from diffbench.cli.main import app
from diffbench.ledger import load_catalog
from diffbench.plan import plan
from diffbench.plan.models import PlanConfig


@pytest.mark.parametrize(
    "cfg",
    [
        PlanConfig(model="flux.1-dev", width=1024, height=1024, steps=28, gpu="h100-sxm", gpus_per_node=8,
                   slo_p99_s=3, qps=100, quality_budget_db=30),
        PlanConfig(model="flux.1-dev", width=1024, height=1024, steps=28, gpu="h100-sxm", gpus_per_node=8,
                   slo_p99_s=1, qps=100, quality_budget_db=30),
        PlanConfig(model="wan2.1-14b", width=1280, height=720, frames=81, steps=50, gpu="h100-sxm",
                   gpus_per_node=8, slo_p99_s=60, qps=1),
    ],
)
def test_suggested_commands_parse(cfg: PlanConfig) -> None:
    group = typer.main.get_command(app)
    checked = 0
    for step in plan(load_catalog(), cfg).steps:
        if not step.command.startswith("diffbench"):
            continue
        words = shlex.split(step.command.split("  #")[0])
        name, args = words[1], words[2:]
        cmd = group.get_command(None, name)  # type: ignore[arg-type]
        assert cmd is not None, f"{step.name}: no command {name!r}"
        cmd.make_context(name, args)  # raises on an unknown option or a bad value
        checked += 1
    assert checked >= 5
