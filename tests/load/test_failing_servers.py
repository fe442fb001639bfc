"""``diffbench load`` against servers that fail (issue 9 §2 acceptance): throughput, capacity and the knee
count only ok requests; a run where nothing succeeded exits 1 with the outcome counts and the first error.

Servers: the fake server of conftest.py (``stall``: accepts and never answers; ``reset``: closes every
connection; ``mix60``: 60 % of requests fail with 429/500/bad payloads) and a closed port (refused).
Every run is bounded: <= 2 s of arrivals, per-request timeout <= 0.5 s.
"""

from __future__ import annotations

import json
import socket

import pytest

from diffbench.cli.main import main
from diffbench.load.client import read_jsonl

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens here any more: connections are refused
    return port


def _assert_no_capacity(res: dict) -> None:
    assert res["capacity_rps"] is None
    assert res["knee"]["index"] is None
    for row in res["rates"]:
        assert row["ok_rate"] == 0.0 and row["goodput"] == 0.0 and row["failed_fraction"] == 1.0
    assert res["failed_fraction"] == 1.0


@pytest.mark.parametrize("mode, outcome, first_error", [
    ("stall", "timeout", "no complete response within --timeout 0.5 s"),
    ("reset", "connection_error", "connection_error"),
    ("refused", "connection_error", "connection_error"),
    ("r500", "http_error", 'HTTP 500: {"error":"boom"}'),  # the server's own explanation is kept
])
def test_open_loop_where_nothing_succeeds_exits_1(fake, tmp_path, capsys, mode, outcome, first_error):
    url = f"http://127.0.0.1:{_closed_port()}" if mode == "refused" else fake.url(mode)
    out, jl = tmp_path / "r.json", tmp_path / "r.jsonl"
    rc = main(["load", "--url", url, "--rates", "4,8", "--duration", "1", "--timeout", "0.5", "--warmup", "0",
               "--arrival", "constant", "--json", str(out), "--jsonl", str(jl)])
    captured = capsys.readouterr()
    assert rc == 1, captured.err
    res = json.loads(out.read_text())  # written even though the run failed
    _assert_no_capacity(res)
    n = sum(r["n"] for r in res["rates"])
    assert n == 12 and len(read_jsonl(jl)) == 12
    assert res["outcomes"][outcome] == 12
    assert "no request succeeded" in captured.err and f"{outcome} 12" in captured.err
    first = read_jsonl(jl)[0].error
    assert first and first[:40] in captured.err  # the first error text is shown
    if mode in ("stall", "r500"):
        assert first_error in captured.err
    text = captured.out
    assert "KNEE" not in text and "capacity:" not in text.replace("capacity: none", "")


@pytest.mark.parametrize("mode", ["stall", "reset"])
def test_closed_loop_where_nothing_succeeds_exits_1(fake, tmp_path, capsys, mode):
    out = tmp_path / "r.json"
    rc = main(["load", "--url", fake.url(mode), "--mode", "closed", "--users", "1,2", "--duration", "0.5",
               "--timeout", "0.3", "--warmup", "0", "--json", str(out)])
    assert rc == 1
    res = json.loads(out.read_text())
    _assert_no_capacity(res)
    for row in res["rates"]:
        assert row["achieved_rate"] == 0.0  # closed loop: achieved = ok completions/s
        assert row["completed_rate"] > 0  # they did complete, as failures
    assert "no request succeeded" in capsys.readouterr().err


def test_refused_during_warmup_exits_1_with_the_error(tmp_path, capsys):
    out = tmp_path / "closed.json"
    rc = main(["load", "--url", f"http://127.0.0.1:{_closed_port()}", "--rates", "2", "--duration", "1",
               "--timeout", "2", "--json", str(out)])
    assert rc == 1
    err = capsys.readouterr().err
    assert "no warm-up request succeeded" in err and "connection_error 1" in err and "--url" in err
    # the README promises --json even for a failed run: the warm-up outcomes, no rows, partial, the error
    res = json.loads(out.read_text())
    assert res["rates"] == [] and res["n"] == 0 and res["n_ok"] == 0 and res["capacity_rps"] is None
    assert res["partial"] is True and res["interrupted"] is False
    assert res["warmup_outcomes"] == {"connection_error": 1}
    assert "no warm-up request succeeded" in res["error"] and res["knee"]["index"] is None


def test_auto_rates_against_a_failing_server_exits_1(fake, tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["load", "--url", fake.url("reset"), "--rates", "auto", "--duration", "0.3", "--timeout", "0.3",
               "--warmup", "0", "--json", str(out)])
    assert rc == 1
    err = capsys.readouterr().err
    assert "no request succeeded" in err and "capacity probe" in err
    assert json.loads(out.read_text())["capacity_rps"] is None


def test_sixty_percent_failures_report_ok_throughput(fake, tmp_path, capsys):
    out, jl = tmp_path / "r.json", tmp_path / "r.jsonl"
    rc = main(["load", "--url", fake.url("mix60"), "--rates", "20", "--duration", "2", "--timeout", "2",
               "--warmup", "0", "--arrival", "constant", "--size", "64x48", "--json", str(out),
               "--jsonl", str(jl)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    res = json.loads(out.read_text())
    row = res["rates"][0]
    recs = read_jsonl(jl)
    ok = [r for r in recs if r.outcome == "ok"]
    assert len(recs) == 40 and len(ok) == 16  # 4 ok in every 10
    # ok/s recomputed here from the raw records: ok count over [0, max(duration, last ok done)]
    window = max(2.0, max(r.done_s for r in ok))
    assert row["ok_rate"] == pytest.approx(len(ok) / window, rel=1e-9)
    assert row["ok_rate"] == pytest.approx(16 / 2.0, rel=0.1)
    done_any = max(r.done_s for r in recs)
    assert row["completed_rate"] == pytest.approx(40 / max(2.0, done_any), rel=1e-9)
    assert row["failed_fraction"] == pytest.approx(0.6) and res["failed_fraction"] == pytest.approx(0.6)
    assert res["capacity_rps"] == row["ok_rate"]  # ok requests only, never completed/s
    assert not res["capacity_saturated"]  # 500s and bad payloads are a broken server, not a saturated one
    assert res["knee"]["index"] is None  # 60 % failures: past any knee
    text = captured.out
    assert "60% of requests failed" in text
    assert "ok/s" in text and "completed/s" in text


def test_warmup_where_every_answer_is_an_http_error_stops_before_measuring(fake, tmp_path, capsys):
    """A wrong base URL (404) or a shape the service refuses (400) fails every request the same way: stop
    after the warm-up with the server's own explanation instead of running the schedule into errors."""
    out = tmp_path / "r.json"
    rc = main(["load", "--url", fake.url("r500"), "--rates", "4", "--duration", "1", "--timeout", "2",
               "--json", str(out)])
    captured = capsys.readouterr()
    assert rc == 1, captured.err
    assert 'no warm-up request succeeded (http_error 1): HTTP 500: {"error":"boom"}' in captured.err
    res = json.loads(out.read_text())
    assert res["rates"] == [] and res["partial"] is True and res["warmup_outcomes"] == {"http_error": 1}
