"""Every bad input of ``diffbench ledger`` in one table: args → exit code → message fragments.

Every numeric option is tried with nan, inf and a negative or out-of-range value (``--cfg -1`` and
``--cfg nan`` were once accepted). Each must give one ``error:`` line naming the real flag and the range.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from diffbench.cli.main import main

BASE = ["--model", "flux.1-dev", "--size", "1024x1024", "--gpu", "h100-sxm"]
WAN = ["--model", "wan2.1-14b", "--size", "1280x720", "--gpu", "h100-sxm"]

ROWS: list[tuple[list[str], int, list[str]]] = [
    ([*BASE, "--cfg", "-1"], 2, ["--cfg -1", "[0, 50]"]),
    ([*BASE, "--cfg", "nan"], 2, ["--cfg nan", "finite"]),
    ([*BASE, "--cfg", "inf"], 2, ["--cfg inf", "finite"]),
    ([*BASE, "--cfg", "51"], 2, ["--cfg 51", "[0, 50]"]),
    ([*BASE, "--steps", "-1"], 2, ["--steps -1", "[1, 1000]"]),
    ([*BASE, "--steps", "0"], 2, ["--steps 0", "[1, 1000]"]),
    ([*BASE, "--steps", "100000000000"], 2, ["--steps 100000000000", "[1, 1000]"]),
    ([*WAN, "--frames", "-1"], 2, ["--frames -1", "[1, 1025]"]),
    ([*WAN, "--frames", "4097"], 2, ["--frames 4097", "[1, 1025]"]),
    ([*BASE, "--text-tokens", "0"], 2, ["--text-tokens 0", "[1, 8192]"]),
    ([*BASE, "--text-tokens", "-5"], 2, ["--text-tokens -5", "[1, 8192]"]),
    ([*BASE, "--eta-gemm", "nan"], 2, ["--eta-gemm nan", "(0, 1]"]),
    ([*BASE, "--eta-gemm", "2"], 2, ["--eta-gemm 2", "(0, 1]"]),
    ([*BASE, "--eta-attn", "-0.5"], 2, ["--eta-attn -0.5", "(0, 1]"]),
    ([*BASE, "--eta-vae", "inf"], 2, ["--eta-vae inf", "(0, 1]"]),
    ([*BASE, "--margin", "nan"], 2, ["--margin nan", "[0, 1)"]),
    ([*BASE, "--margin", "-0.1"], 2, ["--margin -0.1", "[0, 1)"]),
    ([*BASE, "--margin", "1"], 2, ["--margin 1", "[0, 1)"]),
    ([*BASE, "--measured-s", "nan"], 2, ["--measured-s nan", "finite"]),
    ([*BASE, "--measured-s", "inf"], 2, ["--measured-s inf", "finite"]),
    ([*BASE, "--measured-s", "-1"], 2, ["--measured-s -1", "> 0"]),
    ([*BASE, "--measured-s", "0"], 2, ["--measured-s 0", "> 0"]),
    ([*BASE, "--gpus-per-node", "0"], 2, ["--gpus-per-node 0", "[1, 72]"]),
    ([*BASE, "--gpus-per-node", "1000000"], 2, ["--gpus-per-node 1000000", "[1, 72]"]),
    (["--model", "flux.1-dev", "--size", "100000x100000", "--gpu", "h100-sxm"], 2, ["--size 100000x100000", "16384"]),
    (["--model", "flux.1-dev", "--size", "0x1024", "--gpu", "h100-sxm"], 2, ["--size", "WIDTHxHEIGHT"]),
    (["--model", "flux.1-dev", "--size", "1000x1024", "--gpu", "h100-sxm"], 2, ["--size", "width 1000"]),
    ([*BASE, "--json", "{tmp}/typo/l.json"], 2, ["--json", "does not exist", "--mkdir"]),
    ([*BASE, "--catalog", "{tmp}/nope.yaml"], 2, ["--catalog", "file not found"]),
    ([*BASE, "--catalog", "{tmp}"], 2, ["--catalog", "is a directory", "pass a YAML file"]),
    # a partial override (denoiser.blocks only) with a bad value: the user's file and line, not the built-in
    ([*BASE, "--catalog", "{tmp}/partial_bad.yaml"], 2, ["partial_bad.yaml:5", "denoiser.blocks.0.count"]),
    ([*BASE, "--catalog", "{tmp}/partial_missing.yaml"], 2, ["partial_missing.yaml:5", "blocks.0.weights_d2"]),
    # --validate / --calibrate
    (["--model", "flux.1-dev"], 2, ["missing --size, --gpu", "--validate"]),
    (["--validate", "--json", "{tmp}/typo/v.json"], 2, ["--json", "does not exist", "--mkdir"]),
    (["--validate", "--catalog", "{tmp}/off_anchor.yaml"], 1, ["leave-one-out ratio outside 0.8-1.25",
                                                               "xdit-flux-h100-eager", "outlier"]),
    ([*BASE, "--calibrate", "{tmp}/missing.json"], 2, ["--calibrate", "file not found", "bench"]),
    ([*BASE, "--calibrate", "{tmp}/partial_ok.yaml"], 2, ["--calibrate", "not a readable JSON"]),
    ([*BASE, "--calibrate", "{tmp}/not_bench.json"], 2, ["not a diffbench bench result", "diffbench.calibration"]),
    (["--validate", "--catalog", "{tmp}/all_outliers.yaml", "--replace-anchors"], 2,
     ["at least one anchor that is not an outlier"]),
    ([*BASE, "--calibrate", "{tmp}/no_steps.json", "--calibrate-force"], 2, ["no shape with step timings"]),
    ([*BASE, "--calibrate", "{fixture}"], 2, ["ran on 'cpu", "--gpu h100-sxm", "--calibrate-force"]),
    ([*BASE, "--calibrate", "{fixture}", "--calibrate-force"], 2, ["precision 'float32'", "bfloat16"]),
    # GPU peaks that drive a time to 0 (a math domain error in the fit), or infinite peaks: the user's file and line
    ([*BASE, "--catalog", "{tmp}/huge_peaks.yaml"], 2, ["huge_peaks.yaml:3", "gpus.h100-sxm.bf16_tflops",
                                                          "[1, 20000]"]),
    (["--validate", "--catalog", "{tmp}/huge_peaks.yaml"], 2, ["huge_peaks.yaml:3", "gpus.h100-sxm.bf16_tflops"]),
    ([*BASE, "--catalog", "{tmp}/tiny_bw.yaml"], 2, ["tiny_bw.yaml:8", "gpus.toy.mem_bw_gbps", "[10, 100000]"]),
    ([*BASE, "--catalog", "{tmp}/inf_peak.yaml"], 2, ["inf_peak.yaml:3", "gpus.h100-sxm.bf16_tflops", "finite"]),
    ([*BASE, "--catalog", "{tmp}/bpp_zero.yaml"], 2, ["bpp_zero.yaml:2", "memory.bytes_per_param", "bf16",
                                                        "at least 2"]),
    ([*BASE, "--catalog", "{tmp}/dup_key.yaml"], 2, ["dup_key.yaml:4", "duplicate key 'bf16_tflops'", "first at line 3"]),
    (["--validate", "--catalog", "{tmp}/one_anchor.yaml", "--replace-anchors"], 2,
     ["one_anchor.yaml", "anchors", "at least two", "--replace-anchors"]),
    ([*BASE, "--replace-anchors"], 2, ["--replace-anchors", "--catalog"]),
    # a bad value in an anchor that is added to the built-in ones: the user's file, line and index
    ([*BASE, "--catalog", "{tmp}/bad_anchor.yaml"], 2, ["bad_anchor.yaml:3", "anchors.1.measured_s"]),
    # a board power in mW (a unit slip) or a power prior of 0: the user's file, line and key
    ([*BASE, "--catalog", "{tmp}/mw_power.yaml"], 2, ["mw_power.yaml:3", "gpus.l40s.board_power_w", "[10, 10000] W"]),
    ([*BASE, "--catalog", "{tmp}/zero_power_prior.yaml"], 2, ["zero_power_prior.yaml:2",
                                                                "efficiency.tflops_per_watt_prior", "0.01"]),
    ([*BASE, "--measured-s", "1e-9"], 2, ["--measured-s 1e-09", "MFU", "faster than the peak"]),
    ([*BASE, "--text-tokens", "8192"], 2, ["--text-tokens 8192", "FLUX.1-dev", "at most 512",
                                           "models.flux.1-dev"]),
    ([*WAN, "--text-tokens", "513"], 2, ["--text-tokens 513", "at most 512"]),
]

BLOCKS = "models:\n  flux.1-dev:\n    denoiser:\n      blocks:\n"
CATALOGS = {
    "partial_bad.yaml": BLOCKS + "        - {name: double-stream, count: -1, tok_params_d2: 12, weights_d2: 36}\n",
    "partial_missing.yaml": BLOCKS + "        - {name: double-stream, count: 19, tok_params_d2: 12}\n",
    "partial_ok.yaml": BLOCKS + "        - {name: double-stream, count: 19, tok_params_d2: 12, weights_d2: 36}\n",
    # the xDiT H100 eager anchor at twice its published time: its leave-one-out ratio drops to ≈0.5
    "off_anchor.yaml": "anchors:\n" + "".join(
        f"  - {{id: {i}, model: flux.1-dev, gpu: {g}, width: 1024, height: 1024, steps: 28, compile: {c}, "
        f"measured_s: {t}, covers: denoise, source: test}}\n"
        for i, g, c, t in [("xdit-flux-h100-eager", "h100-sxm", "false", 13.42), ("h100-c", "h100-sxm", "true", 4.30),
                           ("a100-e", "a100-sxm-80gb", "false", 13.6), ("a100-c", "a100-sxm-80gb", "true", 9.8),
                           ("l20-e", "l20", "false", 26.0)]),
    "not_bench.json": '{"kind": "diffbench.calibration"}',
    "huge_peaks.yaml": "gpus:\n  h100-sxm:\n    bf16_tflops: 1.0e+300\n    fp8_tflops: 1.0e+300\n"
                       "    mem_bw_gbps: 1.0e+300\n",
    "tiny_bw.yaml": "gpus:\n  toy:\n    display_name: Toy\n    arch: ada\n    bf16_tflops: 100\n    memory_gib: 24\n"
                    "    pcie_gbps: 25\n    mem_bw_gbps: 1.0e-300\n    source: test\n",
    "inf_peak.yaml": "gpus:\n  h100-sxm:\n    bf16_tflops: .inf\n",
    "bpp_zero.yaml": "memory:\n  bytes_per_param: {bf16: 0}\n",
    "mw_power.yaml": "gpus:\n  l40s:\n    board_power_w: 350000\n",
    "zero_power_prior.yaml": "efficiency:\n  tflops_per_watt_prior: 0\n",
    "dup_key.yaml": "gpus:\n  h100-sxm:\n    bf16_tflops: 900\n    bf16_tflops: 100\n",
    "bad_anchor.yaml": "anchors:\n  - {id: a1, model: flux.1-dev, gpu: h100-sxm, width: 1024, height: 1024, steps: 28, "
                       "measured_s: 6.7, covers: denoise, source: test}\n  - {id: a2, model: flux.1-dev, gpu: h100-sxm, "
                       "width: 1024, height: 1024, steps: 28, measured_s: -1, covers: denoise, source: test}\n",
    "one_anchor.yaml": "anchors:\n  - {id: mine, model: flux.1-dev, gpu: h100-sxm, width: 1024, height: 1024, "
                       "steps: 28, measured_s: 6.71, covers: denoise, source: test}\n",
    "all_outliers.yaml": "anchors:\n  - {id: a, model: flux.1-dev, gpu: h100-sxm, width: 1024, height: 1024, steps: 28, "
                         "measured_s: 6.71, covers: denoise, outlier: test, source: test}\n",
    "no_steps.json": '{"kind": "diffbench.bench", "conditions": {"precision": "bfloat16"}, "shapes": '
                     '[{"shape": "1024x1024", "width": 1024, "height": 1024, "error": "CUDA out of memory"}]}',
}
FIXTURE = str(Path(__file__).parents[1] / "monitor" / "data" / "bench_tiny_flux.json")


@pytest.mark.parametrize(("args", "code", "fragments"), ROWS, ids=[" ".join(r[0][6:]) or " ".join(r[0]) for r in ROWS])
def test_bad_input(args, code, fragments, tmp_path, capsys, one_line_error) -> None:
    for name, text in CATALOGS.items():
        (tmp_path / name).write_text(text)
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{fixture}", FIXTURE) for a in args]
    rc = main(["ledger", *argv])
    err = capsys.readouterr().err
    one_line_error(rc, err, code, fragments)
    assert "catalog.yaml:" not in err  # never blames the built-in file for a user's value
    assert not (tmp_path / "typo").exists()


def test_mkdir_creates_the_json_parent(tmp_path) -> None:
    out = tmp_path / "new" / "l.json"
    assert main(["ledger", *BASE, "--json", str(out), "--mkdir"]) == 0
    assert out.is_file()


@pytest.mark.parametrize("value", ["0", "1", "3.5", "50"])
def test_cfg_in_range_is_accepted(value, capsys) -> None:
    assert main(["ledger", *BASE, "--cfg", value]) == 0


def test_one_gpu_per_node_says_why_there_is_no_multi_gpu_table(capsys) -> None:
    assert main(["ledger", *BASE, "--gpus-per-node", "1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "none with --gpus-per-node 1" in out and "no second GPU" in out


def test_partial_override_via_cli_runs(tmp_path, capsys) -> None:
    """The reproduction itself: `--catalog` with only denoiser.blocks for flux.1-dev now works."""
    f = tmp_path / "partial_ok.yaml"
    f.write_text(CATALOGS["partial_ok.yaml"])
    assert main(["ledger", *BASE, "--catalog", str(f)]) == 0
    assert "FLUX.1-dev" in capsys.readouterr().out


def test_a_user_anchor_adds_to_the_builtin_ones(tmp_path, capsys) -> None:
    """One anchor in a user file once replaced the built-in set (and --validate printed a nan ratio)."""
    import json
    import math

    from diffbench.ledger.catalog import load_catalog

    builtin = [a.id for a in load_catalog().anchors]
    f = tmp_path / "one_anchor.yaml"
    f.write_text(CATALOGS["one_anchor.yaml"])
    out = tmp_path / "v.json"
    assert main(["ledger", "--validate", "--catalog", str(f), "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["id"] for r in rows] == [*builtin, "mine"]
    assert all(math.isfinite(r["ratio"]) for r in rows)
    assert "nan" not in capsys.readouterr().out
    # the same id replaces the built-in anchor of that id, in place
    f.write_text(CATALOGS["one_anchor.yaml"].replace("id: mine", f"id: {builtin[0]}").replace("6.71", "7.5"))
    cat = load_catalog(f)
    assert [a.id for a in cat.anchors] == builtin and cat.anchors[0].measured_s == 7.5
    assert [a.id for a in load_catalog(f, replace_anchors=True).anchors] == [builtin[0]]


def test_default_steps_are_the_pipeline_default(tmp_path) -> None:
    """Without --steps FLUX.1-dev ran the reference CLI's 50 steps; diffusers' FluxPipeline runs 28."""
    import json

    out = tmp_path / "l.json"
    assert main(["ledger", *BASE, "--json", str(out)]) == 0
    assert json.loads(out.read_text())["config"]["steps"] is None
    assert json.loads(out.read_text())["steps"] == 28
