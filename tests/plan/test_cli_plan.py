"""``diffbench plan`` through diffbench.cli.main.main: acceptance, JSON, and bad inputs."""

from __future__ import annotations

import json
import re

import pytest

from diffbench.cli.main import main

ARGS = ["plan", "--model", "flux.1-dev", "--size", "1024x1024", "--steps", "28", "--gpu", "h100-sxm",
        "--gpus-per-node", "8", "--slo-p99", "3", "--qps", "100", "--quality-budget", "30"]


def test_acceptance_plan(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main([*ARGS, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    for mark in "①②③④⑤⑥⑦⑧":
        assert mark in text
    data = json.loads(out.read_text())
    assert any(s["command"].startswith("diffbench sweep") and "--cache first-block" in s["command"]
               for s in data["steps"])
    for s in data["steps"]:
        assert {"name", "latency_s", "applied", "reason"} <= set(s)
    assert data["total_gpus"] == pytest.approx(230, rel=0.15)
    assert data["nodes"] == pytest.approx(29, rel=0.15)
    assert data["per_request_gpu_s"] == pytest.approx(1.8, rel=0.15)
    assert f"{data['total_gpus']} GPUs" in text


def test_unmeetable_slo_exits_one_and_says_where(capsys):
    assert main([*ARGS[:-6], "--slo-p99", "0.05", "--qps", "100", "--quality-budget", "30"]) == 1  # gate failed
    cap = capsys.readouterr()
    assert "MISSES" in cap.out and "misses --slo-p99 0.05" in cap.err


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        ({"--model": "flux1-dev"}, "did you mean 'flux.1-dev'"),
        ({"--gpu": "h10-sxm"}, "did you mean 'h100-sxm'"),
        ({"--size": "1020x1024"}, "--size 1020x1024: width 1020 is not a multiple of 16.*nearest valid 1008 or 1024"),
        ({"--qps": "0"}, "--qps"),
        ({"--slo-p99": "-1"}, "--slo-p99"),
    ],
)
def test_bad_inputs(change, pattern, capsys):
    argv = list(ARGS)
    for k, v in change.items():
        argv[argv.index(k) + 1] = v
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    assert re.search(pattern, err), err


def test_video_frames_and_fits_nowhere(capsys):
    base = ["plan", "--model", "wan2.1-14b", "--size", "1280x720", "--gpu", "h100-sxm", "--slo-p99", "600",
            "--qps", "0.1"]
    assert main([*base, "--frames", "82"]) == 2
    assert "4k+1" in capsys.readouterr().err
    nowhere = ["plan", "--model", "hunyuanvideo", "--size", "2560x2560", "--frames", "257", "--gpu", "rtx-4090",
               "--gpus-per-node", "1", "--slo-p99", "600", "--qps", "0.1"]
    assert main(nowhere) == 2
    err = capsys.readouterr().err
    assert "fits nowhere" in err and "would fit with" in err


def test_invalid_catalog(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_text("optimizations:\n  fp8_linear:\n    gemm_retention: 2.0\n")
    assert main([*ARGS, "--catalog", str(f)]) == 2
    err = capsys.readouterr().err
    assert f"{f}:3" in err and "optimizations.fp8_linear.gemm_retention" in err


def test_cli_prints_lossy_sets_and_capacity(capsys):
    assert main(ARGS) == 0
    text = capsys.readouterr().out
    assert "lossy sets within the budget" in text and "chosen" in text
    assert re.search(r"capacity: max\(formula \d+, queue \d+\) = \d+ instances", text)


def test_cli_workload_pools(tmp_path, capsys):
    wl = tmp_path / "mix.yaml"
    wl.write_text("kind: image\nshapes:\n  - {width: 1024, height: 1024, steps: 28, weight: 3}\n"
                  "  - {size: 512x512, steps: 28, weight: 1}\n")
    out = tmp_path / "p.json"
    argv = [a for a in ARGS if a not in ("--size", "1024x1024")]
    argv = [a for i, a in enumerate(argv) if a != "--steps" and (i == 0 or argv[i - 1] != "--steps")]  # from the file
    assert main([*argv, "--workload", str(wl), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    pp = json.loads(out.read_text())["pool_plan"]
    assert [r["qps"] for r in pp["rows"]] == pytest.approx([75, 25])
    assert pp["total_gpus"] == sum(r["total_gpus"] for r in pp["rows"])
    assert "shape pools" in text and f"pools: {pp['total_gpus']} GPUs" in text


@pytest.mark.slow
def test_cli_assume_fp8_on_ada(tmp_path):
    out = tmp_path / "p.json"
    base = [a if a != "h100-sxm" else "l40s" for a in ARGS]
    for extra, applied in (([], False), (["--assume-fp8"], True)):
        assert main([*base, *extra, "--json", str(out)]) == 0
        step = next(s for s in json.loads(out.read_text())["steps"] if s["name"] == "fp8 linear")
        assert step["applied"] is applied
        if not applied:
            assert "--assume-fp8" in step["reason"]
