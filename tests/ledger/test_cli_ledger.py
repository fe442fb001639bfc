"""``diffbench ledger`` end to end through diffbench.cli.main.main, and the no-torch import rule."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from diffbench.cli.main import main

ARGS = ["ledger", "--model", "flux.1-dev", "--size", "1024x1024", "--steps", "28", "--gpu", "h100-sxm"]


def test_acceptance_ledger(tmp_path, capsys):
    out = tmp_path / "l.json"
    assert main([*ARGS, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    for word in ("text_encode", "denoise", "vae_decode", "fits = yes"):
        assert word in text
    data = json.loads(out.read_text())
    assert [s["name"] for s in data["stages"]] == ["text_encode", "denoise", "vae_decode"]
    for s in data["stages"]:
        assert s["flops"] > 0 and s["time_s"] > 0 and s["memory_bytes"] > 0
    assert data["fits"] is True
    assert data["weights_bytes"] / 2**30 == pytest.approx(31.4, abs=0.2)
    assert data["peak_memory_bytes"] > data["weights_bytes"]
    assert data["total_time_s"] == pytest.approx(sum(s["time_s"] for s in data["stages"]), rel=1e-9)
    layouts = {p["label"]: p for p in data["parallel"]}
    assert layouts["Ulysses-4"]["valid"] and layouts["Ulysses-4"]["latency_s"] < data["total_time_s"]
    assert not layouts["cfg-2"]["valid"]  # FLUX.1-dev runs one forward per step


def test_measured_mfu(tmp_path, capsys):
    out = tmp_path / "m.json"
    assert main([*ARGS, "--measured-s", "4.3", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["measured_mfu"] == pytest.approx(data["total_flops"] / (4.3 * 989e12), rel=1e-9)
    assert "MFU" in capsys.readouterr().out


def test_does_not_fit_prints_what_would(capsys):
    assert main(["ledger", "--model", "flux.1-dev", "--size", "1024x1024", "--gpu", "l4"]) == 0
    text = capsys.readouterr().out
    assert "fits = no" in text and "would fit with" in text and "--offload" in text


@pytest.mark.parametrize(
    ("argv", "pattern"),
    [
        (["--model", "flux-dev", "--size", "1024x1024", "--gpu", "h100-sxm"], "did you mean 'flux.1-dev'"),
        (["--model", "flux.1-dev", "--size", "1024x1024", "--gpu", "h100"], "unknown GPU 'h100'"),
        (["--model", "flux.1-dev", "--size", "1000x1024", "--gpu", "h100-sxm"], "--size 1000x1024: width 1000 is not a multiple of 16"),
        (["--model", "flux.1-dev", "--size", "1024", "--gpu", "h100-sxm"], "expected WIDTHxHEIGHT"),
        (["--model", "wan2.1-14b", "--size", "1280x720", "--frames", "80", "--gpu", "h100-sxm"],
         "--frames: frames 80: .*needs 4k\\+1 frames.*nearest valid 77 or 81"),
        (["--model", "flux.1-dev", "--size", "1024x1024", "--gpu", "a100-sxm-80gb", "--attention", "fa3"],
         "needs a hopper GPU"),
        (["--model", "flux.1-dev", "--size", "1024x1024", "--gpu", "h100-sxm", "--precision", "fp4"], "--precision"),
        (["--model", "flux.1-dev", "--size", "1024x1024", "--gpu", "h100-sxm", "--measured-s", "0"], "must be > 0"),
        (["--model", "hunyuanvideo", "--size", "3840x3840", "--frames", "257", "--gpu", "rtx-4090"],
         "fits no single GPU"),
    ],
)
def test_bad_inputs(argv, pattern, capsys):
    rc = main(["ledger", *argv])
    err = capsys.readouterr().err
    assert rc == 2
    lines = [ln for ln in err.strip().splitlines() if ln]
    assert len(lines) == 1 and lines[0].startswith("error: ")
    import re

    assert re.search(pattern, err), err


def test_invalid_catalog_via_cli(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_text("gpus:\n  h100-sxm:\n    memory_gib: -3\n")
    assert main([*ARGS, "--catalog", str(f)]) == 2
    err = capsys.readouterr().err
    assert f"{f}:3" in err and "memory_gib" in err


@pytest.mark.e2e  # runs a subprocess
def test_imports_do_not_pull_torch():
    code = ("import sys, diffbench.ledger, diffbench.plan, diffbench.ledger.render, diffbench.plan.render\n"
            "from diffbench.ledger import load_catalog; load_catalog()\n"
            "bad = [m for m in ('torch', 'diffusers', 'httpx') if m in sys.modules]\n"
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
