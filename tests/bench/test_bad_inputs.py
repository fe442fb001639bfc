"""Every bad input of ``diffbench bench`` in one table: args → exit code → message fragments.

Each row is a reproduction (issue 9 §4/§5 and earlier): a one-line ``error:`` naming the option and the
fix, never a traceback. Rows use the sim engine or tiny shapes, and all of them must fail before any model
is built (checked: no pipeline is constructed), so the table stays fast. The next bad input is one row.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from diffbench.cli.main import main


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


SIM = ["--engine", "sim", "--runs", "1", "--warmup", "0", "--no-repro"]
TINY = ["--model", "tiny-flux", "--runs", "1", "--warmup", "0", "--no-repro"]
WAN = ["--model", "tiny-wan", "--runs", "1", "--warmup", "0", "--no-repro"]
HTTP = ["--engine", "http", "--runs", "1", "--warmup", "0", "--no-repro"]

# (args, exit code, fragments that must all appear in the one-line error). "{tmp}" is replaced by tmp_path.
ROWS: list[tuple[list[str], int, list[str]]] = [
    # --ray (issue 15): refused before Ray starts or a model loads
    ([*SIM, "--ray", "local"], 2, ["--ray distributes the outputs", "--save-outputs DIR"]),
    ([*SIM, "--ray", "10.0.0.1", "--save-outputs", "{tmp}/o"], 2, ["--ray '10.0.0.1'", "HOST:PORT", "local"]),
    ([*SIM, "--ray-actors", "2"], 2, ["--ray-actors 2", "add --ray ADDRESS"]),
    ([*HTTP, "--url", "http://127.0.0.1:9", "--ray", "local", "--save-outputs", "{tmp}/o"], 2,
     ["--ray with --engine http", "load --workers N --ray"]),
    # --cache (issue 11: bench the deployment as it serves, for monitor calibrate)
    ([*TINY, "--cache", "bogus"], 2, ["--cache 'bogus'", "AXIS=VALUE", "first-block"]),
    ([*TINY, "--cache", "teacache=0.1"], 2, ["unknown cache 'teacache'", "first-block"]),
    ([*TINY, "--cache", "first-block=-1"], 2, ["--cache 'first-block=-1'", ">= 0"]),
    ([*SIM, "--cache", "first-block=0.1"], 2, ["the sim engine has no step cache", "--engine diffusers"]),
    # --device: a clear list of valid devices instead of torch's RuntimeError traceback
    ([*TINY, "--device", "tpu"], 2, ["--device tpu", "cpu, cuda, cuda:N, mps"]),
    ([*SIM, "--device", "cuda:x"], 2, ["--device cuda:x", "cpu, cuda, cuda:N, mps"]),
    ([*TINY, "--device", "cuda:-1"], 2, ["--device cuda:-1", "cuda:N"]),
    # output paths are checked before the run, and nothing is created without --mkdir
    ([*SIM, "--markdown", "{tmp}/typo/r.md"], 2, ["--markdown", "does not exist", "--mkdir"]),
    ([*SIM, "--json", "{tmp}/typo/r.json"], 2, ["--json", "does not exist", "--mkdir"]),
    ([*SIM, "--save-outputs", "{tmp}/typo/out"], 2, ["--save-outputs", "does not exist", "--mkdir"]),
    ([*SIM, "--json", "{tmp}/afile/r.json"], 2, ["--json", "not a directory"]),
    ([*SIM, "--markdown", "{tmp}"], 2, ["--markdown", "is a directory"]),
    # a parent that exists but cannot hold files (/proc): refused before the run, naming the option
    ([*SIM, "--json", "/proc/x.json"], 2, ["--json /proc/x.json", "cannot create a file"]),
    ([*SIM, "--markdown", "/proc/x.md"], 2, ["--markdown /proc/x.md", "cannot create a file"]),
    ([*SIM, "--warmup", "soon"], 2, ["--warmup 'soon'", "'auto'"]),
    ([*SIM, "--warmup", "-1"], 2, ["--warmup '-1'", "[0, 10000]"]),
    # sizes no deployment uses: refused at once with the limit and the override flag
    ([*SIM, "--steps", "1000000"], 2, ["--steps 1000000", "1000", "--allow-large"]),
    ([*WAN, "--frames", "4097", "--height", "64", "--width", "64"], 2, ["--frames 4097", "1025", "--allow-large"]),
    ([*SIM, "--batch", "65"], 2, ["--batch 65", "64", "--allow-large"]),
    ([*SIM, "--height", "8192", "--width", "8192"], 2, ["--width 8192 --height 8192", "4096", "--allow-large"]),
    ([*SIM, "--shapes", "100000x100000"], 2, ["--shapes 100000x100000", "4096", "--allow-large"]),
    ([*SIM, "--shapes", "64x64,64x64x2000"], 2, ["--shapes 64x64x2000", "1025", "--allow-large"]),
    # --shapes is WIDTHxHEIGHT (like --size everywhere); engine shape messages name the caller's option
    ([*TINY, "--shapes", "100x64"], 2, ["--shapes", "width 100 is not a multiple of 16", "96 or 112"]),
    ([*TINY, "--shapes", "64x40"], 2, ["--shapes", "height 40 is not a multiple of 16", "32 or 48"]),
    ([*TINY, "--width", "100", "--height", "64"], 2, ["--width", "width 100 is not a multiple of 16"]),
    ([*TINY, "--height", "100", "--width", "64"], 2, ["--height", "height 100 is not a multiple of 16"]),
    ([*WAN, "--frames", "10", "--height", "64", "--width", "64"], 2, ["--frames", "4k+1", "9 or 13"]),
    ([*WAN, "--shapes", "64x64x10"], 2, ["--shapes", "4k+1", "9 or 13"]),
    ([*TINY, "--frames", "9"], 2, ["--frames", "image model"]),
    ([*SIM, "--shapes", "64by64"], 2, ["--shapes", "WIDTHxHEIGHT"]),
    ([*SIM, "--shapes", "0x64"], 2, ["--shapes", "WIDTHxHEIGHT"]),
    # every float option: finite and in range (nan slipped through click's min=/max=, inf overflowed)
    ([*SIM, "--guidance", "nan"], 2, ["--guidance nan", "finite", "[0, 50]"]),
    ([*SIM, "--guidance", "-1"], 2, ["--guidance -1", "[0, 50]"]),
    ([*SIM, "--fps", "nan"], 2, ["--fps nan", "(0, 1000]"]),
    ([*SIM, "--fps", "0"], 2, ["--fps 0", "(0, 1000]"]),
    ([*SIM, "--gpus", "0"], 2, ["--gpus must be >= 1 GPUs, got 0"]),
    ([*SIM, "--gpu-hour-price", "-1"], 2, ["--gpu-hour-price must be >= 0"]),
    ([*SIM, "--gpu-hour-price", "nan"], 2, ["--gpu-hour-price must be a finite price per GPU-hour"]),
    ([*SIM, "--sim-step-s", "nan"], 2, ["--sim-step-s nan", "finite"]),
    ([*SIM, "--sim-jitter", "inf"], 2, ["--sim-jitter inf", "finite"]),
    ([*SIM, "--sim-compile-s", "inf"], 2, ["--sim-compile-s inf", "finite"]),
    ([*SIM, "--sim-tail-prob", "nan"], 2, ["--sim-tail-prob nan", "[0, 1]"]),
    ([*SIM, "--sim-tail-s", "-1"], 2, ["--sim-tail-s -1", "[0, 3600]"]),
    # --engine http (issue 14): refused before anything connects, or one line naming the URL
    ([*HTTP], 2, ["--engine http needs --url URL", "http://127.0.0.1:8000"]),
    ([*HTTP, "--url", "localhost:8000"], 2, ["--url 'localhost:8000'", "http://", "base URL"]),
    ([*HTTP, "--url", "http://127.0.0.1:99999"], 2, ["--url 'http://127.0.0.1:99999'", "invalid port"]),
    ([*HTTP, "--url", "http://127.0.0.1:8000/v1?x=1"], 2, ["without ?query"]),
    ([*HTTP, "--url", "http://127.0.0.1:8000", "--dialect", "tgi"], 2, ["--dialect 'tgi'", "vllm-omni"]),
    # fresh-user trial: the chat dialect passed the check and then crashed in HttpParams with a traceback
    ([*HTTP, "--url", "http://127.0.0.1:8000", "--dialect", "vllm-omni-chat"], 2,
     ["--dialect vllm-omni-chat", "speaks openai, vllm-omni, sglang", "diffbench load --dialect vllm-omni-chat"]),
    ([*HTTP, "--url", "http://127.0.0.1:8000", "--timeout", "0"], 2, ["--timeout 0", "(0, 86400]"]),
    ([*HTTP, "--url", "http://127.0.0.1:8000", "--dtype", "bfloat16"], 2, ["--dtype", "launch flags"]),
    ([*HTTP, "--url", "http://127.0.0.1:8000", "--frames", "9"], 2, ["--frames", "image services only"]),
    ([*SIM, "--url", "http://127.0.0.1:8000"], 2, ["--url", "add --engine http"]),
    ([*HTTP, "--url", "http://127.0.0.1:8000", "--dialect", "openai", "--save-outputs", "{tmp}/o"], 2,
     ["--dialect openai", "sends no seed", "vllm-omni"]),
    ([*HTTP, "--url", "{dead}"], 2, ["--url http://127.0.0.1:", "no service answers", "ConnectionRefusedError"]),
    ([*HTTP, "--url", "{silent}", "--timeout", "0.5"], 2, ["no service answers (timeout)", "within 0.5 s"]),
    # --input-images / --strength / --masks (issue 14 item 2): checked before any model is built
    ([*SIM, "--input-images", "{tmp}/empty"], 2, ["--input-images", "holds no files", "PNG, JPEG or WebP"]),
    ([*SIM, "--input-images", "{tmp}/nothere"], 2, ["--input-images", "does not exist"]),
    ([*SIM, "--input-images", "{tmp}/afile"], 2, ["--input-images", "is not a directory"]),
    ([*TINY, "--input-images", "{tmp}/mixed"], 2, ["--input-images", "notes.txt", "not a decodable image",
                                                     "PNG, JPEG or WebP"]),
    ([*TINY, "--input-images", "{tmp}/gif"], 2, ["--input-images", "x.gif", "GIF images are not accepted"]),
    ([*SIM, "--input-images", "{tmp}/imgs", "--strength", "0"], 2, ["--strength 0", "(0, 1]"]),
    ([*SIM, "--input-images", "{tmp}/imgs", "--strength", "1.5"], 2, ["--strength 1.5", "(0, 1]"]),
    ([*SIM, "--input-images", "{tmp}/imgs", "--strength", "nan"], 2, ["--strength nan", "(0, 1]"]),
    ([*SIM, "--input-images", "{tmp}/imgs", "--masks", "{tmp}/masks1"], 2,
     ["--masks", "1 mask(s) for 2 input image(s)", "one mask per input image"]),
    ([*SIM, "--input-images", "{tmp}/imgs", "--masks", "{tmp}/masks_other"], 2, ["--masks", "by file stem"]),
    ([*SIM, "--input-images", "{tmp}/imgs", "--masks", "{tmp}/masks_small"], 2,
     ["--masks", "a.png: 8x8 but its input image a.png is 16x16"]),
    ([*SIM, "--strength", "0.5"], 2, ["--strength", "edits only", "--input-images"]),
    ([*SIM, "--masks", "{tmp}/masks1"], 2, ["--masks", "edits only", "--input-images"]),
    ([*HTTP, "--url", "http://127.0.0.1:8000", "--input-images", "{tmp}/imgs"], 2,
     ["--input-images with --engine http", "--engine diffusers"]),
    ([*WAN, "--input-images", "{tmp}/imgs", "--height", "64", "--width", "64"], 2,
     ["Wan has no image-to-image pipeline", "Flux"]),
    ([*SIM, "--input-images", "{tmp}/imgs", "--steps", "4", "--strength", "0.2"], 2,
     ["strength 0.2 x 4 steps leaves 0 denoising steps", "raise the strength"]),
]
if not _has_cuda():
    ROWS.append(([*TINY, "--device", "cuda"], 2, ["--device cuda", "CUDA is not available", "cpu"]))
    ROWS.append(([*TINY, "--device", "cuda:1"], 2, ["--device cuda:1", "CUDA is not available"]))


def _has_mps() -> bool:
    import torch

    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


if not _has_mps():
    ROWS.append(([*TINY, "--device", "mps"], 2, ["--device mps", "MPS (Apple GPU) is not available"]))


@pytest.fixture
def no_model_build(monkeypatch):
    """Fail the test if a pipeline is built or loaded: bad input must be refused before that."""
    import diffbench.engines.diffusers_engine as de

    def refuse(self):  # pragma: no cover - only reached on a regression
        raise AssertionError("a model was loaded before the bad input was refused")

    monkeypatch.setattr(de.DiffusersEngine, "_load", refuse)


@pytest.fixture
def endpoints():
    """``{dead}``: a loopback port nothing listens on; ``{silent}``: one that accepts connections (the kernel's
    backlog) and never answers."""
    import socket

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    dead = probe.getsockname()[1]
    probe.close()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    yield {"{dead}": f"http://127.0.0.1:{dead}", "{silent}": f"http://127.0.0.1:{silent.getsockname()[1]}"}
    silent.close()


def _edit_folders(tmp: Path) -> None:
    """Folders of the --input-images rows: empty, two PNGs, a PNG beside a text file, a GIF, masks."""
    from PIL import Image

    def png(path: Path, value: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (16, 16), (value, 0, 0)).save(path)

    (tmp / "empty").mkdir()
    png(tmp / "imgs" / "a.png", 10)
    png(tmp / "imgs" / "b.png", 20)
    png(tmp / "mixed" / "a.png", 10)
    (tmp / "mixed" / "notes.txt").write_text("not an image")
    (tmp / "gif").mkdir()
    Image.new("RGB", (16, 16)).save(tmp / "gif" / "x.gif")
    png(tmp / "masks1" / "a.png", 255)
    png(tmp / "masks_other" / "a.png", 255)
    png(tmp / "masks_other" / "c.png", 255)
    for n in ("a", "b"):  # fresh-user trial: masks of another size were resized silently (load and serve refuse)
        p = tmp / "masks_small" / f"{n}.png"
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (255, 255, 255)).save(p)


@pytest.mark.parametrize(("args", "code", "fragments"), ROWS, ids=[" ".join(r[0][7:]) for r in ROWS])
def test_bad_input(args, code, fragments, tmp_path: Path, capsys, no_model_build, one_line_error,
                   endpoints) -> None:
    (tmp_path / "afile").write_text("x")
    _edit_folders(tmp_path)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    argv = [endpoints.get(a, a) for a in argv]
    rc = main(["bench", *argv])
    err = capsys.readouterr().err
    one_line_error(rc, err, code, fragments)
    assert not (tmp_path / "typo").exists()  # nothing created by a refused command


def test_mkdir_creates_the_missing_parents(tmp_path: Path) -> None:
    out, md, d = tmp_path / "a" / "r.json", tmp_path / "b" / "r.md", tmp_path / "c" / "outs"
    rc = main(["bench", *SIM, "--json", str(out), "--markdown", str(md), "--save-outputs", str(d), "--mkdir"])
    assert rc == 0
    assert out.is_file() and md.is_file() and (d / "manifest.json").is_file()


def test_allow_large_lifts_the_limit(tmp_path: Path) -> None:
    """The override exists: the sim engine takes 1001 steps (instant on its virtual clock)."""
    out = tmp_path / "r.json"
    assert main(["bench", *SIM, "--shapes", "64x64", "--steps", "1001", "--allow-large", "--json", str(out)]) == 0
    import json

    assert json.loads(out.read_text())["conditions"]["steps"] == 1001
