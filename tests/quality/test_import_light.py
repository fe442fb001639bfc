"""``import diffbench.quality`` and ``diffbench quality --help`` stay light (no torch at import)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.e2e  # runs a subprocess
def test_import_does_not_load_torch() -> None:
    code = (
        "import sys, diffbench.quality as q, diffbench.cli.quality, diffbench.quality.gates; "
        "assert callable(q.evaluate_gates); "
        "bad = [m for m in ('torch', 'scipy', 'PIL', 'skimage', 'av', 'torchmetrics') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
