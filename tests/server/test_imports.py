"""Importing the server package (and the CLI) stays light: no FastAPI, uvicorn or torch until used."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.e2e  # runs a subprocess
def test_import_server_package_is_light():
    code = (
        "import sys, diffbench.server, diffbench.cli.main; "
        "print(sorted(m for m in ('fastapi', 'uvicorn', 'torch', 'diffusers', 'av') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
