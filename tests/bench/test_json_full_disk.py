"""``bench --json`` on a disk that fills mid-run (issue 24, item 3): the run goes on, warned once; a final
write that fails exits 6 (OutputError) naming ``--json``, with no ``*.tmp`` left beside it."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

import diffbench.core.jsonio as jsonio
from diffbench.cli.main import main

ARGS = ["bench", "--engine", "sim", "--warmup", "1", "--runs", "6", "-q"]


def _disk_full_for(monkeypatch: pytest.MonkeyPatch, failing: set[int]) -> list[int]:
    """Path.write_text fails with ENOSPC on the calls numbered in ``failing`` (1-based), after creating the
    file (as a real full disk does)."""
    calls: list[int] = []
    real = Path.write_text

    def write_text(self: Path, text: str, *args: object, **kw: object) -> int:
        calls.append(1)
        if len(calls) in failing:
            real(self, "")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, text, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(jsonio.Path, "write_text", write_text)
    return calls


def test_a_json_write_failing_mid_run_is_warned_once_and_the_run_goes_on(tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "b.json"
    calls = _disk_full_for(monkeypatch, {2, 3, 4})
    rc = main([*ARGS, "--json", str(out)])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert err.count("No space left on device") == 1 and "Traceback" not in err
    doc = json.loads(out.read_text())
    assert doc["partial"] is False and len(doc["shapes"][0]["samples_s"]) == 6
    assert len(calls) > 4 and sorted(p.name for p in tmp_path.iterdir()) == ["b.json"]


def test_a_final_json_write_that_fails_exits_6(tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "b.json"
    _disk_full_for(monkeypatch, set(range(1, 1000)))
    rc = main([*ARGS, "--json", str(out)])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 6, err
    assert f"--json {out}: cannot write (No space left on device)" in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())  # neither b.json nor b.json.tmp
