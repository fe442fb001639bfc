"""``simulate --jsonl`` and ``load --jsonl`` on a disk that fills mid-run (issue 24, item 3).

Reproduction: ``load --jsonl`` printed 125 "Task exception was never retrieved" tracebacks, no summary, and
did not write ``--json`` (on a healthy disk); ``simulate --jsonl`` died with a traceback. Now the failing
output is warned once, the run goes on, the other outputs are written and the exit code is 6. The full disk
is a fake file object that raises ``OSError(ENOSPC)`` once its capacity is used.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.core.fulldisk import FullDisk

from diffbench.cli.main import main
from diffbench.core.linesink import LineSink


def _full_disk(monkeypatch: pytest.MonkeyPatch, capacity: int) -> None:
    monkeypatch.setattr(LineSink, "_open", lambda self: FullDisk(capacity))


def test_simulate_jsonl_on_a_full_disk_still_writes_table_and_json(tmp_path: Path, monkeypatch, capsys) -> None:
    _full_disk(monkeypatch, capacity=2000)
    out = tmp_path / "s.json"
    rc = main(["simulate", "--service", "const(1)", "--rates", "0.5,0.8", "--duration", "100", "--arrival",
               "constant", "--json", str(out), "--jsonl", str(tmp_path / "s.jsonl"), "-q"])
    cap = capsys.readouterr()
    assert rc == 6, cap.err
    assert "Traceback" not in cap.err and cap.err.count("No space left on device") == 2  # warned once + error
    assert "--jsonl" in cap.err and "other outputs were written" in " ".join(cap.err.split())
    doc = json.loads(out.read_text())
    assert [r["n"] for r in doc["rates"]] == [50, 80]  # constant arrivals: rate x duration requests each


def test_load_jsonl_on_a_full_disk_still_writes_summary_and_json(fake, tmp_path: Path, monkeypatch, capsys) -> None:
    _full_disk(monkeypatch, capacity=1500)  # a few records fit, then the disk is full
    fake.delay_s = 0.01
    out = tmp_path / "r.json"
    rc = main(["load", "--url", fake.url("ok"), "--rates", "20", "--duration", "1", "--arrival", "constant",
               "--warmup", "0", "--timeout", "5", "--json", str(out), "--jsonl", str(tmp_path / "r.jsonl"), "-q"])
    cap = capsys.readouterr()
    err = " ".join(cap.err.split())
    assert rc == 6, cap.out + cap.err
    assert "Traceback" not in err and "never retrieved" not in err
    assert err.count("warning: --jsonl") == 1 and "No space left on device" in err
    res = json.loads(out.read_text())
    assert res["rates"][0]["n"] == 20 and res["rates"][0]["outcomes"]["ok"] == 20  # the run went on
