"""Every bad input of ``diffbench simulate``: one row each (arguments -> exit code -> message fragment).

Each must fail before anything is drawn: a one-line ``error:``, never a traceback, a hang or an
out-of-memory kill (``--rates 1e9`` once tried to allocate tens of TiB).
"""

from __future__ import annotations

import json
import math

import pytest

from diffbench.cli.main import main

BASE = ["simulate", "--devices", "2", "--duration", "60"]

ROWS = [
    (["--rates", "0,1"], 2, "rate must be > 0, got 0"),
    (["--rates", "-1"], 2, "rate must be > 0"),
    (["--rates", "1", "--duration", "0"], 2, "--duration must be a positive"),
    (["--rates", "1", "--service", "3*Q(1)"], 2, "unknown factor"),
    (["--rates", "1", "--burstiness", "2"], 2, "--arrival gamma"),
    (["--users", "2"], 2, "--users is for --mode closed"),
    (["--mode", "closed", "--users", "2", "--arrival", "gamma"], 2, "are for --mode open"),
    (["--mode", "closed"], 2, "closed loop needs --users"),
    (["--mode", "sideways", "--rates", "1"], 2, "use open or closed"),
    (["--rates", "1", "--think", "1"], 2, "--think applies to --mode closed"),
    # issue 9 §4
    (["--rates", "1e9"], 2, "above --max-requests 1,000,000"),
    (["--rates", "1", "--duration", "1e12"], 2, "above --max-requests"),
    (["--mode", "closed", "--users", "4", "--duration", "1e12"], 2, "above --max-requests"),
    (["--mode", "closed", "--users", "1000000000"], 2, "above --max-requests"),
    (["--devices", "1000000000", "--rates", "1"], 2, "--devices 1,000,000,000 is above"),
    (["--rates", "1", "--service", "1e400"], 2, "1e400 is not a finite number"),
    (["--rates", "1", "--service", "N(1e400,1)"], 2, "is not a finite number"),
    (["--mode", "closed", "--users", "2", "--think", "N(1,-1)"], 2, "--think 'N(1,-1)': N(m, sd) needs sd >= 0"),
    (["--mode", "closed", "--users", "2", "--think", "Q(1)"], 2, "--think 'Q(1)': unknown factor"),
    (["--rates", "1", "--json", "no/such/dir/r.json"], 2, "--json no/such/dir/r.json: directory no/such/dir does"),
    (["--rates", "1", "--jsonl", "no/such/dir/r.jsonl"], 2, "or pass --mkdir"),
    (["--rates", "1", "--max-requests", "0"], 2, "--max-requests"),
    # numbers that are not finite or are out of range
    (["--rates", "1", "--duration", "inf"], 2, "--duration must be a positive finite number, got inf"),
    (["--rates", "1", "--duration", "nan"], 2, "--duration must be a positive finite number, got nan"),
    (["--rates", "1", "--duration", "-1"], 2, "--duration must be a positive finite number, got -1"),
    (["--rates", "1", "--slo", "inf"], 2, "--slo must be a finite number of seconds > 0, got inf"),
    (["--rates", "1", "--slo", "nan"], 2, "--slo must be a finite number of seconds > 0, got nan"),
    (["--rates", "1", "--slo", "-1"], 2, "--slo must be a finite number of seconds > 0, got -1"),
    (["--rates", "inf"], 2, "--rates: rate inf is not a finite number of requests per second"),
    (["--rates", "nan"], 2, "--rates: rate nan is not a finite number"),
    (["--rates", "1", "--arrival", "gamma", "--burstiness", "inf"], 2, "--burstiness must be a positive finite"),
    (["--rates", "1", "--arrival", "gamma", "--burstiness", "nan"], 2, "--burstiness must be a positive finite"),
    (["--arrival", "ramp", "--ramp", "1:inf"], 2, "--ramp end rate must be a positive finite number, got inf"),
    (["--arrival", "ramp", "--ramp", "nan:2"], 2, "--ramp start rate must be a positive finite number, got nan"),
    (["--rates", "1", "--seed", "-1"], 2, "--seed must be >= 0"),
    (["--mode", "closed", "--users", "2", "--think", "nan"], 2, "--think 'nan': unknown factor"),
    # files (fresh-user trial): binary, missing, a directory, empty, malformed; created by _make_files
    (["--rates", "1", "--service-from", "a.png"], 2, "--service-from a.png is a binary file, not UTF-8 text; "
                                                     "expected a text file with latencies"),
    (["--rates", "1", "--service-from", "missing.jsonl"], 2, "--service-from missing.jsonl: file not found"),
    (["--rates", "1", "--service-from", "adir"], 2, "--service-from adir is a directory"),
    (["--rates", "1", "--service-from", "empty.txt"], 2, "--service-from empty.txt is empty"),
    (["--rates", "1", "--service-from", "bad.json"], 2, "--service-from bad.json: not valid JSON"),
    (["--rates", "1", "--service-from", "notes.txt"], 2, "--service-from notes.txt:1: 'hello' is not a number"),
    (["--arrival", "trace", "--trace", "a.png"], 2, "--trace a.png is a binary file, not UTF-8 text; expected "
                                                    "a text file with one timestamp per line"),
    (["--arrival", "trace", "--trace", "missing.txt"], 2, "--trace missing.txt: file not found"),
    (["--arrival", "trace", "--trace", "adir"], 2, "--trace adir is a directory"),
    (["--arrival", "trace", "--trace", "empty.txt"], 2, "--trace empty.txt is empty"),
    (["--arrival", "trace", "--trace", "notes.txt"], 2, "notes.txt:1: cannot read 'hello' as a timestamp"),
]


def _make_files(root) -> None:
    """The odd files the file rows name (a PNG signature with NUL bytes is what a real image starts with)."""
    (root / "a.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    (root / "adir").mkdir()
    (root / "empty.txt").write_text("")
    (root / "bad.json").write_text("{")
    (root / "notes.txt").write_text("hello\n")


@pytest.mark.parametrize("argv, code, fragment", ROWS, ids=[" ".join(r[0]) for r in ROWS])
def test_bad_input_is_a_clear_error(argv, code, fragment, capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _make_files(tmp_path)
    base = BASE + ([] if {"--service", "--service-from"} & set(argv) else ["--service", "1.0"])
    assert main(base + argv) == code
    err = capsys.readouterr().err
    assert fragment in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 4  # click usage errors take 4


def test_max_requests_can_be_raised_and_mkdir_creates_the_directory(tmp_path) -> None:
    out = tmp_path / "new" / "r.json"
    assert main(BASE + ["--service", "1", "--rates", "400", "--duration", "3000", "--max-requests", "1300000",
                        "--json", str(out), "--mkdir"]) == 0
    assert json.loads(out.read_text())["rates"][0]["n"] > 1_000_000


def test_negative_draws_are_counted_and_reported(tmp_path, capsys) -> None:
    # N(1, 1) is negative with probability Phi(-1) = 0.1587: those draws are clipped to 0 s and reported.
    out = tmp_path / "r.json"
    assert main(BASE + ["--service", "N(1,1)", "--rates", "0.5", "--duration", "4000", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    n = res["rates"][0]["n"]
    frac = float(res["conditions"]["service_clipped_fraction"])
    p = 0.5 * math.erfc(1 / math.sqrt(2))
    assert abs(frac - p) <= 4 * math.sqrt(p * (1 - p) / n)  # binomial noise of n draws
    assert any("clipped to 0 s" in w for w in res["warnings"])
    assert "clipped to 0 s" in capsys.readouterr().out
    assert main(BASE + ["--service", "N(1,0.02)", "--rates", "0.5", "--json", str(out)]) == 0
    assert "service_clipped_fraction" not in json.loads(out.read_text())["conditions"]


@pytest.mark.parametrize("service", [[], ["--service", "const:0.05"], ["--service", "0.05", "--think", "zz"]])
def test_a_rejected_service_leaves_no_jsonl(service, tmp_path, capsys) -> None:
    """The input is checked before any output is opened (was: an empty --jsonl file was left behind)."""
    out = tmp_path / "s.jsonl"
    mode = ["--mode", "closed", "--users", "2"] if "--think" in service else ["--rates", "5"]
    rc = main(["simulate", *mode, "--duration", "60", *service, "--jsonl", str(out)])
    assert rc == 2, capsys.readouterr().err
    assert not out.exists()
