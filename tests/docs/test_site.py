"""The documentation site builds with ``mkdocs build --strict`` (what ``.ci/run`` runs) and loads nothing from
the network (``theme.font: false`` in mkdocs.yml: no web fonts).

Without mkdocs (the ``docs`` extra, part of ``test``) the test fails under CI (``CI`` set) and skips otherwise.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _require_mkdocs() -> None:
    missing = [m for m in ("mkdocs", "material") if importlib.util.find_spec(m) is None]
    if not missing:
        return
    reason = f"{', '.join(missing)} not installed: pip install -c constraints.txt -e '.[docs]'"
    if os.environ.get("CI"):
        pytest.fail(f"the site build must run in CI: {reason}")
    pytest.skip(reason)


@pytest.mark.slow
def test_site_builds_strict_and_offline(tmp_path: Path) -> None:
    _require_mkdocs()
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(site)],
        capture_output=True, text=True, cwd=ROOT, timeout=240, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (site / "reference" / "commands" / "bench" / "index.html").is_file()
    assert not (site / "gen_reference.py").exists()  # the generator is not published as a page asset
    home = (site / "index.html").read_text(encoding="utf-8")
    assert "fonts.googleapis.com" not in home and "fonts.gstatic.com" not in home
