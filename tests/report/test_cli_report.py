"""`diffbench report` on bad input: every row exits 2 with a message naming the input (fresh-user findings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diffbench.cli.main import main
from diffbench.report.build import build_document
from diffbench.report.kinds import ReportOptions


@pytest.fixture(scope="module")
def ledger_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("ledger")
    out = d / "l.json"
    assert main(["ledger", "--model", "flux.1-dev", "--size", "1024x1024", "--gpu", "h100-sxm",
                 "--json", str(out)]) == 0
    return out


def _write(p: Path, text: str) -> Path:
    p.write_text(text, encoding="utf-8")
    return p


@pytest.mark.parametrize("case, fragment", [
    ("output_is_input", "is also an input"),
    ("given_twice", "is given twice"),
    ("md_suffix_html_format", "the suffix says the other format"),
    ("html_suffix_md_format", "the suffix says the other format"),
    ("amplify_inf", "--amplify inf"),
    ("empty_file", "is empty"),
    ("directory", "is a directory"),
    ("truncated", "line 1, column"),
    ("string_schema_version", "schema_version '1'"),
    ("zero_schema_version", "schema_version 0"),
])
def test_bad_report_inputs(case: str, fragment: str, ledger_json: Path, tmp_path: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.html"
    data = json.loads(ledger_json.read_text())
    args = {
        "output_is_input": [str(ledger_json), "-o", str(ledger_json)],
        "given_twice": [str(ledger_json), str(ledger_json.parent / ".." / ledger_json.parent.name / "l.json"),
                        "-o", str(out)],
        "md_suffix_html_format": [str(ledger_json), "-o", str(tmp_path / "r.md")],
        "html_suffix_md_format": [str(ledger_json), "-o", str(out), "--format", "markdown"],
        "amplify_inf": [str(ledger_json), "-o", str(out), "--amplify", "inf"],
        "empty_file": [str(_write(tmp_path / "e.json", "")), "-o", str(out)],
        "directory": [str(tmp_path), "-o", str(out)],
        "truncated": [str(_write(tmp_path / "t.json", '{"kind": "diffbench.ledger", "a')), "-o", str(out)],
        "string_schema_version": [str(_write(tmp_path / "s.json", json.dumps({**data, "schema_version": "1"}))),
                                  "-o", str(out)],
        "zero_schema_version": [str(_write(tmp_path / "z.json", json.dumps({**data, "schema_version": 0}))),
                                "-o", str(out)],
    }[case]
    before = ledger_json.read_bytes()
    assert main(["report", *args, "-q"]) == 2
    err = capsys.readouterr().err
    assert fragment in err, err
    assert "at at" not in err
    assert ledger_json.read_bytes() == before  # the input is untouched
    assert not out.exists()


def test_bogus_progress_setting_is_an_error(ledger_json: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DIFFBENCH_PROGRESS", "bogus")
    assert main(["report", str(ledger_json), "-o", str(tmp_path / "r.html")]) == 2
    assert "DIFFBENCH_PROGRESS='bogus'" in capsys.readouterr().err


def test_same_file_names_are_labelled_with_their_folders(ledger_json: Path, tmp_path: Path) -> None:
    copies = []
    for sub in ("r1", "r2"):
        (tmp_path / sub).mkdir()
        copies.append(tmp_path / sub / "l.json")
        copies[-1].write_bytes(ledger_json.read_bytes())
    doc = build_document(copies, ReportOptions())
    assert "r1/l" in doc.title and "r2/l" in doc.title


def test_title_names_simulate(tmp_path: Path) -> None:
    sim = tmp_path / "sim.json"
    assert main(["simulate", "--devices", "1", "--service", "exp(1)", "--rates", "0.5", "--duration", "20",
                 "--json", str(sim), "-q"]) == 0
    assert "simulate" in build_document([sim], ReportOptions()).title


def test_svg_carries_no_metadata_urls(ledger_json: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    assert main(["report", str(ledger_json), "-o", str(out), "-q"]) == 0
    text = out.read_text()
    assert "<metadata>" not in text and "creativecommons" not in text and "purl.org" not in text


def test_bench_overlay_names_environment_differences_even_without_a_shared_shape(tmp_path: Path) -> None:
    """Fresh-user finding: 2 threads against 1 showed a 41x speed-up and no 'conditions that differ' table,
    because only ``conditions`` were compared (threads live in ``env``), and no shared shape dropped it."""
    from diffbench.report.document import Table

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["bench", "--engine", "sim", "--warmup", "1", "--runs", "4", "--json", str(a), "-q"]) == 0
    data = json.loads(a.read_text())
    threads, cpu = data["env"]["torch_threads"], data["env"]["cpu"]
    other = (threads or 1) + 1  # whatever this process's thread count is, the copy says another one
    data["env"]["torch_threads"], data["env"]["cpu"] = other, "another cpu"
    b.write_text(json.dumps(data))
    doc = build_document([a, b], ReportOptions())
    diff = {blk.id: blk for s in doc.sections for blk in s.blocks}["bench-conditions-diff"]
    assert isinstance(diff, Table)
    assert {r[0]: r[1:] for r in diff.rows} == {"env.torch_threads": [str(threads), str(other)],
                                                  "env.cpu": [cpu, "another cpu"]}
    for shape in data["shapes"]:
        shape["shape"] = "999x999 s1 b1"
    b.write_text(json.dumps(data))
    ids = {blk.id for s in build_document([a, b], ReportOptions()).sections for blk in s.blocks}
    assert {"bench-compare-none", "bench-conditions-diff"} <= ids
