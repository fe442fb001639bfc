"""Bad input to ``diffbench sweep`` and ``diffbench runs``: exit code and a message naming the input and the fix.

One row per bad input: (args, exit code, fragments of stderr). ``{tmp}`` is a fresh directory, ``{store}`` an
existing empty store in it, ``{junk}`` a file that is not a database. Every row must fail before any model
loads (checked: no output directory or store is created by a rejected sweep).
"""

from __future__ import annotations

import pytest

from diffbench.cli.main import main
from diffbench.store.runs import RunStore

SWEEP = ["sweep", "--cache", "first-block", "--values", "0.1", "--store", "{tmp}/s.sqlite"]
HTTP_SWEEP = ["sweep", "--engine", "http", "--option", "precision", "--values", "bfloat16,float16", "--store",
              "{tmp}/s.sqlite"]

ROWS = [
    # sweep: axis and values
    (["sweep", "--values", "0.1", "--store", "{tmp}/s.sqlite"], 2, ["exactly one of --cache"]),
    (["sweep", "--cache", "first-block", "--option", "precision", "--values", "0.1"], 2, ["exactly one"]),
    (["sweep", "--cache", "deepcache", "--values", "0.1"], 2, ["--cache 'deepcache'", "first-block"]),
    (["sweep", "--option", "dtype", "--values", "float16"], 2, ["--option 'dtype'", "precision"]),
    (["sweep", "--cache", "first-block", "--values", ""], 2, ["--values is empty"]),
    (["sweep", "--cache", "first-block", "--values", "0.1,0.1"], 2, ["duplicate values 0.1"]),
    (["sweep", "--cache", "first-block", "--values", "-1"], 2, ["threshold", ">= 0"]),
    (["sweep", "--cache", "first-block", "--values", "nan"], 2, ["finite number"]),
    (["sweep", "--cache", "taylorseer", "--values", "0"], 2, ["cache_interval", ">= 1"]),
    (["sweep", "--option", "precision", "--values", "float8"], 2, ["precision must be one of"]),
    (["sweep", "--option", "compile", "--values", "maybe"], 2, ["compile takes on or off"]),
    ([*SWEEP, "--engine", "tgi"], 2, ["--engine 'tgi'", "http"]),
    # --engine http (issue 14): one service per value; refused before anything connects or is stored
    ([*HTTP_SWEEP], 2, ["--engine http needs --url URL"]),
    ([*HTTP_SWEEP, "--url", "{dead}"], 2, ["--url-per-value URL_1,...,URL_2", "launch flags"]),
    ([*HTTP_SWEEP, "--url", "{dead}", "--url-per-value", "http://127.0.0.1:1"], 2,
     ["--url-per-value gives 1 URL for 2 --values", "one service URL per value"]),
    ([*HTTP_SWEEP, "--url", "{dead}", "--url-per-value", "http://127.0.0.1:1,http://127.0.0.1:2,http://127.0.0.1:3"], 2,
     ["--url-per-value gives 3 URLs for 2 --values"]),
    ([*HTTP_SWEEP, "--url", "{dead}", "--url-per-value", "http://127.0.0.1:1,127.0.0.1:2"], 2,
     ["--url-per-value '127.0.0.1:2'", "http://"]),
    ([*HTTP_SWEEP, "--url", "{dead}", "--url-per-value", "http://127.0.0.1:1,http://127.0.0.1:1/"], 2,
     ["--url-per-value http://127.0.0.1:1: already given"]),
    ([*HTTP_SWEEP, "--url", "{dead}", "--url-per-value", "{dead},http://127.0.0.1:1"], 2, ["already given as --url"]),
    ([*HTTP_SWEEP, "--url", "localhost", "--url-per-value", "http://127.0.0.1:1,http://127.0.0.1:2"], 2,
     ["--url 'localhost'", "http://"]),
    ([*HTTP_SWEEP, "--url", "{dead}", "--url-per-value", "http://127.0.0.1:1,http://127.0.0.1:2", "--dtype",
      "float16"], 2, ["--dtype", "launch flags"]),
    ([*HTTP_SWEEP, "--url", "{dead}", "--url-per-value", "http://127.0.0.1:1,http://127.0.0.1:2", "--dialect",
      "x"], 2, ["--dialect 'x'"]),
    ([*HTTP_SWEEP, "--url", "{dead}", "--url-per-value", "http://127.0.0.1:1,http://127.0.0.1:2", "--dialect",
      "vllm-omni-chat"], 2, ["--dialect vllm-omni-chat", "diffbench load"]),
    (["sweep", "--engine", "http", "--option", "Bad Name", "--values", "a", "--url", "{dead}", "--url-per-value",
      "http://127.0.0.1:1", "--store", "{tmp}/s.sqlite"], 2, ["--option 'Bad Name'", "lower case"]),
    ([*SWEEP, "--url-per-value", "http://127.0.0.1:1"], 2, ["--url-per-value", "add --engine http"]),
    ([*HTTP_SWEEP, "--url", "{dead}", "--url-per-value", "http://127.0.0.1:1,http://127.0.0.1:2"], 2,
     ["--url http://127.0.0.1:", "no service answers", "ConnectionRefusedError"]),
    ([*SWEEP, "--gate", "psnr.p10>>30"], 2, ["psnr.p10>>30"]),
    # sweep: every number checked before anything loads (a nan budget once ran the whole sweep first, then
    # failed on a gate the user never typed, and left the sweep 'running' in the store)
    ([*SWEEP, "--budget", "nan"], 2, ["--budget nan", "(0, 100]"]),
    ([*SWEEP, "--budget", "inf"], 2, ["--budget inf", "(0, 100]"]),
    ([*SWEEP, "--budget", "0"], 2, ["--budget 0", "(0, 100]"]),
    ([*SWEEP, "--budget", "-5"], 2, ["--budget -5", "(0, 100]"]),
    ([*SWEEP, "--budget", "101"], 2, ["--budget 101", "(0, 100]"]),
    ([*SWEEP, "--guidance", "nan"], 2, ["--guidance nan", "finite"]),
    ([*SWEEP, "--guidance", "-1"], 2, ["--guidance -1"]),
    ([*SWEEP, "--gate", "psnr.p10>=nan"], 2, ["bad gate 'psnr.p10>=nan'"]),
    ([*SWEEP, "--gate", "psnr.p99>=30"], 2, ["unknown statistic 'p99'"]),
    ([*SWEEP, "--device", "tpu"], 2, ["--device tpu: unknown device"]),
    ([*SWEEP, "--steps", "1000000"], 2, ["--steps 1000000", "--allow-large"]),
    ([*SWEEP, "--width", "100000", "--height", "100000"], 2, ["--width 100000 --height 100000", "--allow-large"]),
    # sweep: the shape, checked against the pipeline before it loads; the message names the option
    ([*SWEEP, "--width", "100"], 2, ["--width: width 100 is not a multiple of 16", "96 or 112"]),
    ([*SWEEP, "--height", "70"], 2, ["--height: height 70 is not a multiple of 16"]),
    ([*SWEEP, "--frames", "9"], 2, ["--frames: frames 9", "image model"]),
    # sweep: protocol bounds (typer)
    ([*SWEEP, "--runs", "1"], 2, ["--runs"]),
    ([*SWEEP, "--max-warmup", "0"], 2, ["--max-warmup"]),
    ([*SWEEP, "--stable-window", "3"], 2, ["--stable-window"]),
    # sweep: output paths, checked before anything runs; a missing directory is never created silently
    ([*SWEEP, "--json", "{tmp}/missing/c.json"], 2, ["--json", "does not exist", "--mkdir"]),
    ([*SWEEP, "--csv", "{tmp}/missing/c.csv"], 2, ["--csv", "does not exist", "--mkdir"]),
    ([*SWEEP, "--json", "{tmp}"], 2, ["--json", "is a directory"]),
    ([*SWEEP, "--outputs", "{tmp}/missing/deeper"], 2, ["--outputs", "--mkdir"]),
    (["sweep", "--cache", "first-block", "--values", "0.1", "--store", "{tmp}/typo/s.sqlite"], 2,
     ["--store", "does not exist", "--mkdir"]),
    (["sweep", "--cache", "first-block", "--values", "0.1", "--store", "{tmp}"], 2, ["--store", "is a directory"]),
    # runs
    # sweep --ray (issue 15): refused before Ray is imported or anything is stored
    ([*SWEEP, "--ray", "somewhere"], 2, ["--ray 'somewhere'", "local", "HOST:PORT"]),
    ([*SWEEP, "--ray", ""], 2, ["--ray ''", "local"]),
    ([*SWEEP, "--ray-actors", "2"], 2, ["--ray-actors", "only with --ray"]),
    ([*SWEEP, "--ray", "local", "--ray-actors", "0"], 2, ["--ray-actors"]),
    ([*SWEEP, "--ray", "local", "--baseline", "abc"], 2, ["--ray with --baseline", "drop --baseline"]),
    ([*SWEEP, "--ray", "local", "--device", "cuda:1"], 2, ["--device cuda:1 with --ray", "--device cuda"]),
    ([*HTTP_SWEEP, "--url", "{dead}", "--url-per-value", "http://127.0.0.1:1,http://127.0.0.1:2", "--ray", "local"],
     2, ["--ray with --engine http"]),
    (["runs", "--store", "{tmp}/nothing.sqlite"], 2, ["--store", "no store there"]),
    (["runs", "--store", "{tmp}/typo/s.sqlite"], 2, ["no store there"]),
    (["runs", "--store", "{junk}"], 4, ["not a diffbench SQLite database"]),
    (["runs", "--store", "{store}", "--limit", "0"], 2, ["--limit"]),
    (["runs", "show", "nosuchrun", "--store", "{store}"], 2, ["no run 'nosuchrun'", "diffbench runs"]),
    (["runs", "show", "x", "--store", "{tmp}/nothing.sqlite"], 2, ["no store there"]),
    (["runs", "compare", "aaa", "bbb", "--store", "{store}"], 2, ["no run 'aaa'"]),
]


@pytest.mark.parametrize(("args", "code", "fragments"), ROWS, ids=[" ".join(r[0][7:] if r[0][:7] == SWEEP else r[0])[:60] for r in ROWS])
def test_bad_input(tmp_path, capsys, args, code, fragments):
    store = tmp_path / "existing.sqlite"
    RunStore.open(store).close()
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database " * 64)
    before = set(tmp_path.rglob("*"))
    import socket

    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    argv = [a.format(tmp=tmp_path, store=store, junk=junk, dead=dead) for a in args]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == code, err
    flat = " ".join(err.split())
    for f in fragments:
        assert f in flat, (f, err)
    assert "Traceback" not in err
    if args[0] == "sweep":  # rejected before any work: nothing created (no store, no outputs)
        assert set(tmp_path.rglob("*")) == before


def test_mkdir_creates_the_missing_directories(tmp_path):
    from diffbench.core.outpath import check_output_file

    with RunStore.open(tmp_path / "new" / "dir" / "s.sqlite", mkdir=True) as st:
        assert st.path.exists()
    assert check_output_file(tmp_path / "a" / "c.json", "--json", mkdir=True).parent.is_dir()
