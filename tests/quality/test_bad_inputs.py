"""``diffbench quality``: every bad input → exit code → message fragment (one row per bad input).

Output-path and argument errors must come before any pair is decoded: the summary table never
appears, and no traceback ever does.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from diffbench.cli.main import main
from diffbench.core.manifest import Manifest, ManifestEntry, write_manifest


def _run_dir(root: Path, size: tuple[int, int] = (32, 48)) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    img = np.random.default_rng(0).integers(0, 256, (*size, 3), dtype=np.uint8)
    Image.fromarray(img).save(root / "x.png")
    return root


def _setup(tmp: Path) -> dict[str, str]:
    a, b = _run_dir(tmp / "A"), _run_dir(tmp / "B")
    _run_dir(tmp / "B2", size=(32, 40))  # same file name, other size
    (tmp / "empty").mkdir()
    (tmp / "file.txt").write_text("not a directory")
    (tmp / "adir").mkdir()
    bad = _run_dir(tmp / "badman")
    (bad / "manifest.json").write_text("{not json")
    m = _run_dir(tmp / "M")
    e = ManifestEntry(prompt_id="p", seed=0, height=32, width=48, file="x.png",
                      sha256=hashlib.sha256((m / "x.png").read_bytes()).hexdigest())
    write_manifest(m, Manifest(entries=[e]))
    tr = _run_dir(tmp / "TR")
    (tr / "x.png").write_bytes((tr / "x.png").read_bytes()[:-12])  # IEND cut off: pixels still decode
    ro = tmp / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    return {"A": str(a), "B": str(b), "B2": str(tmp / "B2"), "EMPTY": str(tmp / "empty"),
            "FILE": str(tmp / "file.txt"), "MISSING": str(tmp / "nope"), "ADIR": str(tmp / "adir"),
            "BADMAN": str(bad), "M": str(m), "RO": str(ro), "T": str(tmp), "TR": str(tr)}


# (id, argv after "quality" with {PLACEHOLDERS}, exit code, fragment of stderr)
CASES = [
    ("missing-baseline", ["{MISSING}", "{B}"], 2, "BASELINE {MISSING} does not exist"),
    ("missing-candidate", ["{A}", "{MISSING}"], 2, "CANDIDATE {MISSING} does not exist"),
    ("baseline-is-a-file", ["{FILE}", "{B}"], 2, "is not a directory"),
    ("empty-candidate", ["{A}", "{EMPTY}"], 2, "no images, arrays or videos found"),
    ("bad-gate-syntax", ["{A}", "{B}", "--gate", "psnr.p10=>3"], 2, "expected METRIC.STAT OP NUMBER"),
    ("gate-without-stat", ["{A}", "{B}", "--gate", "psnr>=30"], 2, "expected METRIC.STAT OP NUMBER"),
    ("unknown-gate-metric", ["{A}", "{B}", "--gate", "psnrr.min>=30"], 2,
     "unknown metric 'psnrr'; use one of clip_baseline"),
    ("unknown-gate-stat", ["{A}", "{B}", "--gate", "psnr.p11>=30"], 2, "unknown statistic 'p11'"),
    ("gate-not-a-number", ["{A}", "{B}", "--gate", "psnr.p10>=1e"], 2, "'1e' is not a number"),
    ("unknown-preset", ["{A}", "{B}", "--preset", "strict"], 2, "unknown preset 'strict'"),
    ("bad-alpha", ["{A}", "{B}", "--alpha", "keep"], 2, "--alpha 'keep'"),
    ("zero-workers", ["{A}", "{B}", "--workers", "0"], 2, "--workers must be >= 1"),
    ("negative-worst", ["{A}", "{B}", "--worst", "-1"], 2, "--worst >= 0"),
    ("json-missing-parent", ["{A}", "{B}", "--json", "{T}/no/such/q.json"], 2, "pass --mkdir"),
    ("csv-missing-parent", ["{A}", "{B}", "--csv", "{T}/no/such/q.csv"], 2, "--csv {T}/no/such/q.csv"),
    ("json-is-a-directory", ["{A}", "{B}", "--json", "{ADIR}"], 2, "is a directory"),
    ("csv-unwritable-dir", ["{A}", "{B}", "--csv", "{RO}/q.csv"], 2, "is not writable"),
    ("csv-parent-is-a-file", ["{A}", "{B}", "--csv", "{FILE}/q.csv"], 2, "{FILE} is not a directory"),
    ("json-and-csv-same-file", ["{A}", "{B}", "--json", "{T}/q.out", "--csv", "{T}/q.out"], 2,
     "--json and --csv both name"),
    ("clip-without-manifest", ["{A}", "{B}", "--clip", "{ADIR}"], 2, "--clip needs prompts"),
    ("pickscore-without-manifest", ["{A}", "{B}", "--pickscore", "{ADIR}"], 2, "--pickscore needs prompts"),
    ("pickscore-missing-weights", ["{M}", "{M}", "--pickscore", "{ADIR}"], 3,
     "PickScore weights not found in {ADIR}: missing config.json"),
    ("clip-iqa-missing-weights", ["{A}", "{B}", "--clip-iqa", "{MISSING}"], 3, "CLIP-IQA weights not found in {MISSING}"),
    ("corrupt-manifest", ["{BADMAN}", "{M}"], 2, "cannot read manifest"),
    ("truncated-png-iend", ["{A}", "{TR}"], 2, "{TR}/x.png: cannot decode image: truncated PNG"),
    ("pair-size-mismatch", ["{A}", "{B2}"], 2, "x.png: size mismatch: baseline 48x32, candidate 40x32"),
    ("ray-bad-address", ["{A}", "{B}", "--ray", "10.0.0.1"], 2, "--ray '10.0.0.1': expected 'local'"),
    ("ray-with-workers", ["{A}", "{B}", "--ray", "local", "--workers", "2"], 2,
     "--workers sets the threads of the single-process run and cannot be distributed"),
    ("ray-actors-without-ray", ["{A}", "{B}", "--ray-actors", "2"], 2, "--ray-actors needs --ray ADDRESS"),
    ("ray-threads-without-ray", ["{A}", "{B}", "--ray-threads", "2"], 2, "--ray-threads needs --ray ADDRESS"),
    ("ray-zero-actors", ["{A}", "{B}", "--ray", "local", "--ray-actors", "0"], 2, "--ray-actors must be >= 1"),
    ("ray-state-without-ray", ["{A}", "{B}", "--ray-state", "{A}"], 2, "--ray-state needs --ray ADDRESS"),
    ("ray-state-is-a-file", ["{A}", "{B}", "--ray", "local", "--ray-state", "{A}/x.png"], 2,
     "exists and is not a directory"),
]
BEFORE_WORK = {"bad-gate-syntax", "unknown-gate-metric", "unknown-gate-stat", "gate-not-a-number", "unknown-preset",
               "bad-alpha", "zero-workers", "negative-worst", "json-missing-parent", "csv-missing-parent",
               "json-is-a-directory", "csv-unwritable-dir", "csv-parent-is-a-file", "json-and-csv-same-file", "missing-baseline",
               "missing-candidate", "baseline-is-a-file", "ray-bad-address", "ray-with-workers",
               "ray-actors-without-ray", "ray-threads-without-ray", "ray-zero-actors", "ray-state-without-ray",
               "ray-state-is-a-file"}


@pytest.mark.parametrize(("case", "argv", "code", "fragment"), CASES, ids=[c[0] for c in CASES])
def test_bad_input(tmp_path: Path, capsys, case: str, argv: list[str], code: int, fragment: str) -> None:
    if case == "csv-unwritable-dir" and os.geteuid() == 0:
        pytest.skip("root can write to a read-only directory")
    ph = _setup(tmp_path)
    rc = main(["quality", *[a.format(**ph) for a in argv], "--no-ms-ssim"])
    cap = capsys.readouterr()
    assert rc == code, cap.err
    assert fragment.format(**ph) in " ".join(cap.err.split()), cap.err
    assert "Traceback" not in cap.err + cap.out
    if case in BEFORE_WORK:
        assert "per-pair metrics" not in cap.out  # refused before any pair was scored
    assert not (tmp_path / "no").exists()  # nothing created without --mkdir


def test_mkdir_creates_the_parents_of_json_and_csv(tmp_path: Path) -> None:
    ph = _setup(tmp_path)
    qj, qc = tmp_path / "out" / "j" / "q.json", tmp_path / "out" / "c" / "q.csv"
    assert main(["quality", ph["A"], ph["B"], "--json", str(qj), "--csv", str(qc), "--mkdir", "--no-ms-ssim"]) == 0
    assert qj.is_file() and qc.is_file()


def test_sweep_gate_grammar_unchanged_for_known_metrics() -> None:
    # gates.py is shared with `sweep --gate`: known metrics still parse, unknown ones are refused at parse time
    from diffbench.errors import UsageError
    from diffbench.quality.gates import parse_gate

    assert parse_gate("psnr.p10>=30").metric == "psnr" and parse_gate("ssim.worst>=0.9").stat == "worst"
    with pytest.raises(UsageError, match="unknown metric 'psnr_db'"):
        parse_gate("psnr_db.p10>=30")
