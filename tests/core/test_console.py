"""The command line's console width (issue 24 item 9): output piped to a file or a pager was squeezed to
rich's 80-column fallback (or the table's 150), so table rows wrapped over several lines."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest

from diffbench.core.console import NON_TTY_WIDTH, make_console

SIM = ["simulate", "--devices", "4", "--service", "3.0*N(1,0.02)+0.8*B(0.1)", "--mode", "open",
       "--rates", "0.6,1.0", "--duration", "600"]


def _run(tmp_path, env_extra: dict[str, str]) -> tuple[str, dict]:
    out = tmp_path / "s.json"
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | env_extra
    proc = subprocess.run([sys.executable, "-m", "diffbench.cli.main", *SIM, "--json", str(out)],
                          capture_output=True, stdin=subprocess.DEVNULL, text=True,
                          env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, json.loads(out.read_text())


@pytest.mark.e2e  # runs a subprocess
def test_a_piped_table_row_is_never_wrapped(tmp_path) -> None:
    """Each rate's row is one line holding all its cells: the offered rate, its ok count, the KNEE flag of
    the knee row and its warning count (read from the JSON, not from the table)."""
    text, data = _run(tmp_path, {})
    lines = text.splitlines()
    for i, row in enumerate(data["rates"]):
        line = next(ln for ln in lines if ln.split() and ln.split()[0] == f"{row['offered_rate']:g}")
        assert str(row["n_ok"]) in line.split()
        if row["warnings"]:
            assert f"{len(row['warnings'])} warning(s)" in line, line
        if data["knee"]["index"] == i:
            assert "KNEE" in line
    assert any(f"{len(r['warnings'])} warning(s)" for r in data["rates"] if r["warnings"])  # the test can fail


@pytest.mark.e2e  # runs a subprocess
def test_columns_is_honoured_when_set(tmp_path) -> None:
    text, _ = _run(tmp_path, {"COLUMNS": "100"})
    assert max(len(ln) for ln in text.splitlines()) <= 100


def test_make_console_width() -> None:
    env = os.environ.pop("COLUMNS", None)
    try:
        assert make_console(file=io.StringIO()).width == NON_TTY_WIDTH
        assert make_console(file=io.StringIO(), width=33).width == 33
        os.environ["COLUMNS"] = "97"
        assert make_console(file=io.StringIO()).width == 97
        assert make_console(file=io.StringIO(), min_width=150).width == 150
    finally:
        os.environ.pop("COLUMNS", None)
        if env is not None:
            os.environ["COLUMNS"] = env
