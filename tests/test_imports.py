"""Fast start: importing diffbench and `diffbench --help` never import torch, diffusers, httpx, aiohttp or ray."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e

HEAVY = ("torch", "diffusers", "transformers", "httpx", "aiohttp", "matplotlib", "selenium", "ray")


def _loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    import json

    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "code",
    [
        "import diffbench",
        "import diffbench.core.stats, diffbench.engines.base, diffbench.engines.registry, diffbench.engines.sim",
        "import diffbench.bench.protocol, diffbench.bench.session",
        "from diffbench.cli.main import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass",
        "from diffbench.cli.main import main\ntry:\n    main(['bench', '--help'])\nexcept SystemExit:\n    pass",
        "from diffbench.cli.main import main\ntry:\n    main(['report', '--help'])\nexcept SystemExit:\n    pass",
        "import diffbench.report.loader, diffbench.report.document, diffbench.report.kinds",
        # every module of the planning and load packages (their rung of the ladder keeps them torch-free)
        "import importlib, pkgutil, diffbench.ledger, diffbench.plan, diffbench.queueing, diffbench.load\n"
        "for p in (diffbench.ledger, diffbench.plan, diffbench.queueing, diffbench.load):\n"
        "    for m in pkgutil.walk_packages(p.__path__, p.__name__ + '.'):\n"
        "        importlib.import_module(m.name)",
    ],
)
def test_no_heavy_imports(code: str) -> None:
    assert _loaded_after(code) == set()


def test_sim_bench_does_not_import_torch(tmp_path) -> None:
    code = (
        "from diffbench.cli.main import main\n"
        f"rc = main(['bench', '--engine', 'sim', '--runs', '3', '--warmup', '1', '--json', r'{tmp_path / 'a.json'}'])\n"
        "assert rc == 0, rc"
    )
    assert "torch" not in _loaded_after(code)


def test_ledger_report_does_not_import_torch(tmp_path) -> None:
    """A report of a torch-free result stays torch-free (matplotlib is the only heavy import it needs)."""
    code = (
        "from diffbench.cli.main import main\n"
        f"assert main(['ledger', '--model', 'flux.1-dev', '--size', '1024x1024', '--gpu', 'h100-sxm', '--json', r'{tmp_path / 'l.json'}']) == 0\n"
        f"assert main(['report', r'{tmp_path / 'l.json'}', '-o', r'{tmp_path / 'l.html'}', '-q']) == 0"
    )
    assert _loaded_after(code) <= {"matplotlib"}


def test_planner_start_loads_neither_numpy_nor_the_simulator() -> None:
    """`diffbench plan` starts fast: numpy and the queueing simulator load when the plan is sized, not when the
    CLI and the planner are imported (benchmarks/bench_ledger.py prints the start-up against python -c pass)."""
    code = ("import sys, diffbench.cli.main, diffbench.cli.plan, diffbench.plan.derive, diffbench.plan.render\n"
            "import json; print(json.dumps([m for m in ('numpy', 'diffbench.queueing.simulator') if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
