"""Every bad input of ``diffbench load``: one row each (arguments -> exit code -> message fragment).

All of them must fail before a request is sent (the URL is a closed port: a row that reached the network
would fail differently) with a one-line ``error:`` that names the option — never a traceback, pydantic's
multi-line dump, or an out-of-memory kill (``--rates 1e9`` once tried to allocate tens of TiB).
"""

from __future__ import annotations

import json

import pytest

from diffbench.cli.main import main

URL = ["load", "--url", "http://127.0.0.1:9"]

ROWS = [
    # issue 10 (fresh-user trial): bad URLs and clashing outputs fail before the run
    (["--url", "http://127.0.0.1:99999", "--rates", "1"], 2, "has an invalid port (give 1-65535)"),
    (["--url", "", "--rates", "1"], 2, "--url is empty"),
    (["--rates", "inf"], 2, "use --request-rate inf --num-requests N"),
    (["--request-rate", "abc"], 2, "--request-rate: 'abc' is not a number; use e.g. --request-rate 2 (req/s)"),
    (["--rates", "1", "--goodput", "ttft:0.5"], 2, "(vLLM's ttft: here ttfb"),
    (["--url", "http://:8000", "--rates", "1"], 2, "--url: URL 'http://:8000' has no host"),
    (["--rates", "1", "--json", "same.out", "--csv", "same.out"], 2, "--json and --csv name the same file"),
    (["--rates", "1", "--csv", "/proc/diffbench.csv"], 2, "--csv /proc/diffbench.csv: cannot create a file in /proc"),
    (["--rates", "1,0"], 2, "--rates: rate must be > 0, got 0"),
    (["--rates", "1", "--duration", "-1"], 2, "--duration must be > 0"),
    (["--rates", "x"], 2, "--rates: 'x' is not a number"),
    (["--mode", "sideways"], 2, "--mode must be open or closed"),
    (["--dialect", "grpc"], 2, "--dialect must be one of openai, vllm-omni, vllm-omni-chat, sglang"),
    (["--rates", "1", "--max-inflight", "0"], 2, "--max-inflight must be >= 1"),
    (["--mode", "closed", "--users", "0"], 2, "--users: must be >= 1"),
    (["--rates", "1", "--header", "nocolon"], 2, "--header 'nocolon' must look like 'Name: value'"),
    (["--rates", "1", "--timeout", "0"], 2, "--timeout must be > 0"),
    # issue 9 §4
    (["--rates", "1e9"], 2, "--rates 1e+09 x --duration 30 s schedules ~3e+10 requests, above --max-requests"),
    (["--rates", "100", "--duration", "1e9"], 2, "above --max-requests 200,000"),
    (["--rates", "1", "--max-requests", "0"], 2, "--max-requests must be >= 1"),
    (["--mode", "closed", "--users", "1000000000"], 2, "--users 1,000,000,000 is above --max-requests"),
    (["--rates", "1", "--size", "0x0"], 2, "--size 0x0: width input should be greater than 0"),
    (["--rates", "1", "--size", "64x99999"], 2, "--size 64x99999: height input should be less than or equal"),
    (["--rates", "1", "--size", "big"], 2, "--size: size must look like WIDTHxHEIGHT"),
    (["--rates", "1", "--steps", "0"], 2, "--steps 0: steps input should be greater than 0"),
    (["--rates", "1", "--frames", "0"], 2, "--frames 0: frames input should be greater than 0"),
    (["--rates", "1", "--json", "no/such/dir/r.json"], 2, "--json no/such/dir/r.json: directory no/such/dir does "
                                                          "not exist; create it first or pass --mkdir"),
    (["--rates", "1", "--jsonl", "no/such/dir/r.jsonl"], 2, "--jsonl no/such/dir/r.jsonl: directory"),
    (["--rates", "1", "--json", "."], 2, "--json . is a directory"),
    (["--rates", "1", "--url", "ftp://x"], 2, "--url: "),
    # numbers that are not finite or are out of range (fresh-user trial: --duration inf said "~inf requests")
    (["--rates", "1", "--duration", "inf"], 2, "--duration must be a finite number of seconds, got inf"),
    (["--rates", "1", "--duration", "nan"], 2, "--duration must be a finite number of seconds, got nan"),
    (["--rates", "1", "--timeout", "inf"], 2, "--timeout must be a finite number of seconds, got inf"),
    (["--rates", "1", "--timeout", "nan"], 2, "--timeout must be a finite number of seconds, got nan"),
    (["--rates", "1", "--timeout", "-2"], 2, "--timeout must be > 0 seconds, got -2"),
    (["--rates", "1", "--slo", "inf"], 2, "--slo must be a finite number of seconds, got inf"),
    (["--rates", "1", "--slo", "nan"], 2, "--slo must be a finite number of seconds, got nan"),
    (["--rates", "1", "--slo", "-1"], 2, "--slo must be > 0 seconds, got -1"),
    (["--rates", "1", "--poll-interval", "inf"], 2, "--poll-interval must be a finite number of seconds"),
    (["--rates", "1", "--poll-interval", "0"], 2, "--poll-interval must be > 0 seconds, got 0"),
    (["--rates", "1", "--drain", "inf"], 2, "--drain must be a finite number of seconds, got inf"),
    (["--rates", "1", "--drain", "nan"], 2, "--drain must be a finite number of seconds, got nan"),
    (["--rates", "1", "--drain", "-1"], 2, "--drain must be >= 0 seconds, got -1"),
    (["--mode", "closed", "--think-time", "inf"], 2, "--think-time must be a finite number of seconds, got inf"),
    (["--mode", "closed", "--think-time", "nan"], 2, "--think-time must be a finite number of seconds"),
    (["--mode", "closed", "--think-time", "-1"], 2, "--think-time must be >= 0 seconds, got -1"),
    (["--rates", "1", "--warmup", "-1"], 2, "--warmup must be >= 0 requests per shape, got -1"),
    (["--rates", "1", "--seed", "-1"], 2, "--seed must be >= 0"),
    (["--rates", "inf"], 2, "--rates: rate inf is not a finite number of requests per second"),
    (["--rates", "1,nan"], 2, "--rates: rate nan is not a finite number"),
    (["--rates", "1", "--arrival", "gamma", "--burstiness", "inf"], 2, "--burstiness must be a positive finite"),
    (["--rates", "1", "--arrival", "gamma", "--burstiness", "nan"], 2, "--burstiness must be a positive finite"),
    (["--rates", "1", "--arrival", "gamma", "--burstiness", "-1"], 2, "--burstiness must be a positive finite"),
    # files (fresh-user trial): binary, missing, a directory, empty, malformed; created by _make_files
    (["--rates", "1", "--workload", "a.png"], 2, "--workload a.png is a binary file, not UTF-8 text; expected a "
                                                 "text file with a YAML or JSON mapping"),
    (["--rates", "1", "--workload", "missing.yaml"], 2, "--workload missing.yaml: file not found"),
    (["--rates", "1", "--workload", "adir"], 2, "--workload adir is a directory"),
    (["--rates", "1", "--workload", "empty.txt"], 2, "--workload empty.txt is empty"),
    (["--rates", "1", "--workload", "bad.json"], 2, "--workload bad.json is not valid JSON"),
    (["--rates", "1", "--workload", "bad.yaml"], 2, "--workload bad.yaml is not valid YAML: "),
    (["--rates", "1", "--workload", "list.yaml"], 2, "--workload list.yaml must hold a mapping"),
    (["--rates", "1", "--prompts", "a.png"], 2, "--prompts a.png is a binary file, not UTF-8 text; expected a "
                                                "text file with one prompt per line"),
    (["--rates", "1", "--prompts", "missing.txt"], 2, "--prompts missing.txt: file not found"),
    (["--rates", "1", "--prompts", "adir"], 2, "--prompts adir is a directory"),
    (["--rates", "1", "--prompts", "empty.txt"], 2, "--prompts empty.txt is empty"),
    # issue 10: stops, vllm bench serve names, goodput, CSV, workers
    (["--rates", "1", "--num-requests", "0"], 2, "--num-requests must be >= 1 requests, got 0"),
    (["--rates", "1", "--num-prompts", "-1"], 2, "--num-prompts must be >= 1 requests, got -1"),
    (["--rates", "1", "--num-requests", "5", "--num-prompts", "6"], 2,
     "--num-requests 5 and --num-prompts 6 disagree (--num-prompts is an alias of --num-requests); give one"),
    (["--mode", "closed", "--num-requests", "5"], 2, "--num-requests applies to the open loop"),
    (["--rates", "100", "--num-requests", "1000000", "--duration", "1e5"], 2,
     "--num-requests 1000000 schedules ~1e+06 requests, above --max-requests 200,000"),
    (["--rates", "1", "--request-rate", "2"], 2, "--rates 1 and --request-rate 2 both set the rate; give one"),
    (["--request-rate", "inf"], 2, "--request-rate inf sends every request at once and needs --num-requests N"),
    (["--request-rate", "x"], 2, "--request-rate: 'x' is not a number"),
    (["--request-rate", "-1"], 2, "--request-rate: rate must be > 0, got -1"),
    (["--request-rate", "nan"], 2, "--request-rate: rate nan is not a finite number"),
    (["--request-rate", "1,2"], 2, "--request-rate takes one rate, got '1,2'; use --rates for a list"),
    (["--mode", "closed", "--request-rate", "1"], 2, "--request-rate applies to the open loop"),
    (["--rates", "1", "--max-concurrency", "0"], 2, "--max-concurrency must be >= 1, got 0"),
    (["--rates", "1", "--max-inflight", "2", "--max-concurrency", "3"], 2,
     "--max-inflight 2 and --max-concurrency 3 disagree (--max-concurrency is an alias of --max-inflight)"),
    (["--mode", "closed", "--max-concurrency", "2"], 2, "--max-concurrency applies to the open loop"),
    (["--rates", "1", "--goodput", ""], 2, "--goodput: empty"),
    (["--rates", "1", "--goodput", "speed:3"], 2, "--goodput: unknown constraint 'speed:3'"),
    (["--rates", "1", "--goodput", "latency"], 2, "--goodput: 'latency' must look like name:seconds"),
    (["--rates", "1", "--goodput", "latency:0"], 2, "--goodput: 'latency:0': the limit must be a positive finite"),
    (["--rates", "1", "--goodput", "lag:inf"], 2, "--goodput: 'lag:inf': the limit must be a positive finite"),
    (["--rates", "1", "--goodput", "ttfb:x"], 2, "--goodput: 'ttfb:x': 'x' is not a number of seconds"),
    (["--rates", "1", "--goodput", "latency:1 latency:2"], 2, "--goodput: latency is given twice"),
    (["--rates", "1", "--goodput", "latency:5", "--slo", "4"], 2,
     "--slo 4 and --goodput latency:5 disagree; give the latency objective once"),
    (["--rates", "1", "--csv", "no/such/dir/r.csv"], 2, "--csv no/such/dir/r.csv: directory no/such/dir does not "
                                                        "exist; create it first or pass --mkdir"),
    (["--rates", "1", "--csv", "."], 2, "--csv . is a directory"),
    (["--rates", "1", "--workers", "0"], 2, "--workers must be >= 1 load processes, got 0"),
    # issue 15: the Ray address is checked before anything starts
    (["--rates", "1", "--workers", "2", "--ray", "bogus"], 2, "--ray 'bogus': expected 'local'"),
    (["--rates", "1", "--ray", "http://head:6379"], 2, "--ray 'http://head:6379': expected 'local'"),
    (["--rates", "1", "--ray", "local", "--workers", "0"], 2, "--workers must be >= 1 load processes, got 0"),
    # issue 14: traces, per-request SLOs, AIPerf prompt files
    (["--trace", "nots.csv"], 2, "nots.csv:1 (header): no timestamp column"),
    (["--trace", "half.csv"], 2, "half.csv:1 (header): column height is missing"),
    (["--trace", "unknown.csv"], 2, "unknown column 'widht'"),
    (["--trace", "desc.csv"], 2, "timestamps must not decrease: row 3 is at 0.5 s, after row 2 at 1 s"),
    (["--trace", "neg.txt"], 2, "neg.txt:2: timestamp -1 is negative"),
    (["--trace", "steps0.jsonl"], 2, "steps0.jsonl:1: steps input should be greater than 0"),
    (["--trace", "cells.csv"], 2, "cells.csv:2: 2 cells, the header has 3 columns"),
    (["--trace", "nosuch.csv"], 2, "--trace nosuch.csv"),
    (["--trace", "ok.txt", "--trace-speed", "0"], 2, "--trace-speed must be a finite number > 0"),
    (["--trace", "ok.txt", "--rates", "1"], 2, "--trace sets the arrivals; drop --rates / --request-rate"),
    (["--trace", "ok.txt", "--mode", "closed"], 2, "cannot be combined with --mode closed"),
    (["--trace", "ok.txt", "--num-requests", "3"], 2, "--trace replays every row; drop --num-requests"),
    (["--trace", "ok.txt", "--arrival", "constant"], 2, "--trace sets the arrivals; drop --arrival"),
    (["--rates", "1", "--trace-speed", "2"], 2, "--trace-speed applies to --trace FILE"),
    (["--rates", "1", "--slo-scale", "0"], 2, "--slo-scale must be a finite number > 0"),
    (["--rates", "1", "--slo-scale", "nan"], 2, "--slo-scale must be a finite number > 0"),
    (["--rates", "1", "--slo-scale", "3", "--dialect", "openai"], 2, "--dialect openai sends neither steps"),
    (["--rates", "1", "--slo-scale", "3", "--warmup", "0"], 2, "it needs --warmup >= 1"),
    (["--rates", "1", "--prompts", "notext.jsonl"], 2, 'notext.jsonl:1: a JSON row needs a string "text" field'),
    # fresh-user trial: a 1e12 s timestamp (or --trace-speed 1e-12) overflowed the send times into negative
    # latencies with exit 0
    (["--trace", "huge.csv"], 2, "the replay would last 1e+12 s"),
    (["--trace", "ok.txt", "--trace-speed", "1e-12"], 2, "at most 604,800 s (7 days)"),
    # issue 14 item 2: edit workloads (kind: edit, images: DIR, masks: DIR, strength)
    (["--rates", "1", "--workload", "edit_empty.yaml"], 2, "--workload images: emptydir holds no .png/.jpg/.jpeg/.webp"),
    (["--rates", "1", "--workload", "edit_nodir.yaml"], 2, "--workload images: nodir is not a folder"),
    (["--rates", "1", "--workload", "edit_badimg.yaml"], 2, "badimgs/x.png does not decode as an image"),
    (["--rates", "1", "--workload", "edit_maskcount.yaml"], 2, "holds 1 masks for 2 images"),
    (["--rates", "1", "--workload", "edit_masksize.yaml"], 2, "is 16x16 but its image"),
    (["--rates", "1", "--workload", "edit_noimages.yaml"], 2, "a kind edit workload needs images: DIR"),
    (["--rates", "1", "--workload", "image_images.yaml"], 2, "images: only a kind edit workload takes input images"),
    (["--rates", "1", "--workload", "edit_frames.yaml"], 2, "shapes[0]: an edit makes images; drop frames"),
    (["--rates", "1", "--workload", "edit_strength.yaml"], 2, "strength: Input should be less than or equal to 1"),
    (["--rates", "1", "--workload", "edit_masks.yaml", "--dialect", "vllm-omni-chat"], 2,
     "has no place for a mask"),
    (["--workload", "edit_ok.yaml", "--trace", "ok.txt"], 2, "an edit workload (kind: edit) is not replayed"),
]


def _make_files(root) -> None:
    """The odd files the file rows name (a PNG signature with NUL bytes is what a real image starts with)."""
    (root / "a.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    (root / "adir").mkdir()
    (root / "empty.txt").write_text("")
    (root / "bad.json").write_text("{")
    (root / "list.yaml").write_text("- 1\n- 2\n")
    (root / "bad.yaml").write_text("shapes: [\n  {size: 64x64\n")
    (root / "nots.csv").write_text("width,height\n64,64\n")
    (root / "half.csv").write_text("timestamp,width\n0,64\n")
    (root / "unknown.csv").write_text("timestamp,widht\n0,64\n")
    (root / "desc.csv").write_text("timestamp\n0\n1\n0.5\n")
    (root / "neg.txt").write_text("0\n-1\n")
    (root / "steps0.jsonl").write_text('{"t": 0, "steps": 0}\n')
    (root / "cells.csv").write_text("timestamp,width,height\n0,64\n")
    (root / "ok.txt").write_text("0\n0.5\n")
    (root / "notext.jsonl").write_text('{"prompt": "x"}\n')
    (root / "huge.csv").write_text("timestamp,size\n0,64x64\n1e12,64x64\n")
    _edit_files(root)


def _edit_files(root) -> None:
    """Folders of input pictures and masks, and the edit workloads of the issue-14 rows."""
    import numpy as np
    from PIL import Image

    for folder, names, side in (("imgs", ("a", "b"), 32), ("masks", ("a", "b"), 32), ("onemask", ("a",), 32),
                                ("smallmasks", ("a", "b"), 16)):
        (root / folder).mkdir()
        for n in names:
            Image.fromarray(np.zeros((side, side, 3), np.uint8)).save(root / folder / f"{n}.png")
    (root / "emptydir").mkdir()
    (root / "emptydir" / "notes.txt").write_text("not a picture")
    (root / "badimgs").mkdir()
    (root / "badimgs" / "x.png").write_bytes(b"not a png")
    shape = "shapes: [{size: 32x32, steps: 2}]\n"
    for name, head in (("edit_empty", "kind: edit\nimages: emptydir\n"), ("edit_nodir", "kind: edit\nimages: nodir\n"),
                       ("edit_badimg", "kind: edit\nimages: badimgs\n"),
                       ("edit_maskcount", "kind: edit\nimages: imgs\nmasks: onemask\n"),
                       ("edit_masksize", "kind: edit\nimages: imgs\nmasks: smallmasks\n"),
                       ("edit_noimages", "kind: edit\n"), ("image_images", "kind: image\nimages: imgs\n"),
                       ("edit_strength", "kind: edit\nimages: imgs\nstrength: 1.5\n"),
                       ("edit_masks", "kind: edit\nimages: imgs\nmasks: masks\n"),
                       ("edit_ok", "kind: edit\nimages: imgs\n")):
        (root / f"{name}.yaml").write_text(head + shape)
    (root / "edit_frames.yaml").write_text("kind: edit\nimages: imgs\nshapes: [{size: 32x32, steps: 2, frames: 5}]\n")


@pytest.mark.parametrize("argv, code, fragment", ROWS, ids=[" ".join(r[0]) for r in ROWS])
def test_bad_input_is_a_clear_error(argv, code, fragment, capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _make_files(tmp_path)
    assert main(URL + argv) == code
    err = capsys.readouterr().err
    assert fragment in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "no").exists()  # a mistyped directory is never created


def test_workload_unknown_field(tmp_path, capsys) -> None:
    wl = tmp_path / "w.yaml"
    wl.write_text("shapes: [{size: 64x64, steps: 2, stpes: 3}]\n")
    assert main(URL + ["--rates", "1", "--workload", str(wl)]) == 2
    assert "shapes.0.stpes: unknown field" in capsys.readouterr().err


@pytest.mark.slow
def test_mkdir_creates_the_parent_directories(fake, tmp_path) -> None:
    out, jl = tmp_path / "a" / "r.json", tmp_path / "b" / "c" / "r.jsonl"
    assert main(["load", "--url", fake.url("ok"), "--rates", "4", "--duration", "0.5", "--warmup", "0",
                 "--timeout", "5", "--size", "64x64", "--json", str(out), "--jsonl", str(jl), "--mkdir"]) == 0
    assert json.loads(out.read_text())["n_ok"] == len(jl.read_text().splitlines()) >= 1


def test_an_edit_input_too_large_to_decode_is_a_clear_error(capsys, tmp_path, monkeypatch) -> None:
    """Fresh-user trial: a 14000x14000 input picture raised Pillow's DecompressionBombError as a traceback. The
    limit is lowered here (Pillow raises above twice ``MAX_IMAGE_PIXELS``) so a 64x64 picture stands for it."""
    import numpy as np
    from PIL import Image

    (tmp_path / "big").mkdir()
    Image.fromarray(np.zeros((64, 64), np.uint8)).save(tmp_path / "big" / "b.png")
    (tmp_path / "w.yaml").write_text("kind: edit\nimages: big\nshapes: [{size: 32x32, steps: 2}]\n")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    monkeypatch.chdir(tmp_path)
    assert main([*URL, "--rates", "1", "--workload", "w.yaml"]) == 2
    err = capsys.readouterr().err
    assert "is too large a picture to decode" in err and "b.png" in err and "Traceback" not in err


def test_a_rate_whose_schedule_draws_no_arrival_says_so(fake, tmp_path, capsys) -> None:
    """Issue 24 item 9: ``--rate 0.001 --duration 1`` (expected 0.001 x 1 = 0.001 arrivals) drew no arrival
    and said "interrupted before any request finished", exit 130, although nothing was interrupted. It is a
    bad combination of rate and duration: exit 2, naming the expected count and the fix; no file written."""
    out = tmp_path / "r.json"
    rate, duration = 0.001, 1.0
    code = main(["load", "--url", fake.url("ok"), "--rates", str(rate), "--duration", str(duration),
                 "--warmup", "0", "--timeout", "5", "--size", "64x64", "--json", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "interrupted" not in err
    assert "drew no arrival" in err and f"{rate * duration:.3g} arrivals" in err
    assert "longer --duration or a higher rate" in err
    assert not out.exists()
