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

pytestmark = pytest.mark.e2e


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


def test_load_json_that_cannot_be_written_still_writes_the_csv(fake, tmp_path: Path, monkeypatch,
                                                              capsys) -> None:
    """A --json write that fails at the end (disk full) costs only --json: --csv is still written, exit 6.
    Before: the OutputError of --json ended the command and --csv was never tried."""
    from diffbench.core import jsonio
    from diffbench.errors import OutputError

    real = jsonio.write_text_atomic

    def full(path, text, **kw):  # type: ignore[no-untyped-def]
        if str(path).endswith(".json"):
            raise OutputError(f"{path}: cannot write (No space left on device)")
        return real(path, text, **kw)

    monkeypatch.setattr(jsonio, "write_text_atomic", full)
    csv = tmp_path / "r.csv"
    rc = main(["load", "--url", fake.url("ok"), "--rates", "10", "--duration", "1", "--arrival", "constant",
               "--warmup", "0", "--timeout", "5", "--json", str(tmp_path / "r.json"), "--csv", str(csv), "-q"])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 6, err
    assert "r.json" in err and "No space left on device" in err and "Traceback" not in err
    rows = csv.read_text().splitlines()
    assert len(rows) == 2  # header + the one rate measured


def _tmpfs_works(d: Path) -> bool:
    import shutil
    import subprocess

    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=16k none {d}"],
                          capture_output=True).returncode == 0


def test_simulate_jsonl_on_a_real_full_tmpfs_keeps_whole_lines(tmp_path: Path) -> None:
    """The same on a real 16 KiB tmpfs (in a private mount namespace): the JSONL is cut back to its last
    whole line (before, it ended in half a line), so every line it keeps parses."""
    import os
    import subprocess
    import sys

    disk = tmp_path / "disk"
    disk.mkdir()
    if not _tmpfs_works(disk):
        pytest.skip("no mount namespace (unshare -m) for a small tmpfs")
    out, jl = tmp_path / "s.json", disk / "s.jsonl"
    cmd = (f"mount -t tmpfs -o size=16k none {disk} && {sys.executable} -m diffbench.cli.main simulate --service "
           f"'const(1)' --rates 0.05,0.5 --duration 2000 --arrival constant --json {out} --jsonl {jl} -q; "
           f"echo rc=$?; cat {jl}")
    done = subprocess.run(["unshare", "-m", "sh", "-c", cmd], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert "rc=6" in done.stdout, done.stderr
    assert "Traceback" not in done.stderr and "No space left on device" in done.stderr
    kept = [line for line in done.stdout.split("rc=6", 1)[1].splitlines() if line.strip()]
    records = [json.loads(line) for line in kept]  # every kept line is whole JSON
    rows = json.loads(out.read_text())["rates"]
    assert [r["n"] for r in rows] == [100, 1000]  # 0.05 and 0.5 req/s x 2000 s, constant arrivals
    # the first row (~10 kB) fits in 16 KiB, the second does not: exactly the first row's lines are kept
    assert [r["id"] for r in records] == list(range(100))
