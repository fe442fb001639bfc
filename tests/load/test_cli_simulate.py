"""``diffbench simulate`` end to end, its errors, and the import-weight rule of diffbench.load."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from diffbench.cli.main import main
from diffbench.core.records import OUTCOMES, RequestRecord

SERVICE = "3.0*N(1,0.02)+0.8*B(0.1)"


def test_acceptance_open_loop(tmp_path, capsys) -> None:
    out = tmp_path / "open.json"
    rc = main(["simulate", "--devices", "4", "--service", SERVICE, "--mode", "open", "--rates", "0.6,1.0,1.2,1.4",
               "--duration", "1800", "--json", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "UNSTABLE" in printed and "KNEE" in printed and "knee:" in printed
    data = json.loads(out.read_text())
    assert data["mode"] == "open" and len(data["rates"]) == 4
    for row in data["rates"]:
        for key in ("offered_rate", "achieved_rate", "ok_rate", "goodput", "completed_rate", "failed_fraction",
                    "lag_s", "outcomes"):
            assert key in row
        for key in ("latency_from_arrival_s", "latency_from_send_s"):
            assert {"n", "p50", "p90", "p99", "p999"} <= set(row[key])
        assert set(row["outcomes"]) == set(OUTCOMES)
    unstable = {row["offered_rate"]: row["unstable"] for row in data["rates"]}
    assert unstable == {0.6: False, 1.0: False, 1.2: False, 1.4: True}
    assert data["knee"]["offered_rate"] is not None and data["knee"]["offered_rate"] < 1.3


def test_acceptance_closed_loop(tmp_path, capsys) -> None:
    out = tmp_path / "closed.json"
    jsonl = tmp_path / "closed.jsonl"
    rc = main(["simulate", "--devices", "4", "--service", SERVICE, "--mode", "closed", "--users", "2,4,8,16",
               "--duration", "1800", "--json", str(out), "--jsonl", str(jsonl)])
    assert rc == 0
    data = json.loads(out.read_text())
    rows = data["rates"]
    assert [r["users"] for r in rows] == [2, 4, 8, 16]
    capacity = 4 / 3.08
    assert all(abs(r["ok_rate"] - capacity) / capacity < 0.02 for r in rows[1:])
    assert not any(r["unstable"] for r in rows)
    lines = jsonl.read_text().splitlines()
    assert len(lines) == sum(r["n"] for r in rows)
    rec = RequestRecord.model_validate_json(lines[-1])
    assert rec.outcome == "ok" and rec.done_s > rec.intended_s
    assert json.loads(lines[0])["users"] == 2


def test_missing_service_file_is_input_error(tmp_path, capsys) -> None:
    rc = main(["simulate", "--service-from", str(tmp_path / "nope.json"), "--rates", "1", "--duration", "10"])
    assert rc == 2 and "nope.json: file not found" in capsys.readouterr().err


def test_gamma_and_ramp_runs(tmp_path) -> None:
    out = tmp_path / "g.json"
    assert main(["simulate", "--devices", "2", "--service", "exp(1)", "--arrival", "gamma", "--burstiness", "0.5",
                 "--rates", "1", "--duration", "300", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["conditions"]["burstiness"] == "0.5"
    assert main(["simulate", "--devices", "2", "--service", "1", "--ramp", "0.5:1.5", "--duration", "300"]) == 0


@pytest.mark.e2e  # runs a subprocess
def test_import_load_does_not_pull_torch_or_httpx() -> None:
    code = (
        "import sys\n"
        "import diffbench.load, diffbench.queueing.schedules, diffbench.load.summary, diffbench.load.knee\n"
        "import diffbench.load.simulator, diffbench.queueing.service_time, diffbench.report.load_table\n"
        "import diffbench.cli.simulate\n"
        "bad = [m for m in ('torch', 'diffusers', 'httpx') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
