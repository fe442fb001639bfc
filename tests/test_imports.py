"""Fast start: importing diffbench and `diffbench --help` never import torch, diffusers, httpx or aiohttp."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "diffusers", "transformers", "httpx", "aiohttp")


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
