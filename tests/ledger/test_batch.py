"""The ledger at batch B, each figure recomputed from the batch-1 account: GEMM FLOPs scale with B while the
weights are read once per launch (roofline max), attention, elementwise work, text encode and VAE decode
scale with B, the launch overhead does not; activations scale with B, the VAE decode peak (one sample at a
time) does not."""

from __future__ import annotations

import json

import pytest

from diffbench.cli.main import main
from diffbench.ledger import LedgerConfig, evaluate, load_catalog

CAT = load_catalog()


def _pair(b: int, **kw: object):
    base = dict(model="sdxl-base", width=1024, height=1024, steps=20, cfg=8.0, gpu="h100-sxm")
    base.update(kw)
    return evaluate(CAT, LedgerConfig(**base)), evaluate(CAT, LedgerConfig(**base, batch=b))


def test_batch_one_is_the_default_account():
    one, same = _pair(1)
    assert same.model_dump(exclude={"config"}) == one.model_dump(exclude={"config"})
    assert one.batch == 1 and one.throughput_per_s == pytest.approx(1 / one.total_time_s)


@pytest.mark.parametrize("b", [2, 8])
def test_compute_bound_batch_scales_every_class_but_launches(b):
    one, many = _pair(b)
    assert one.denoise_memory_bound_s == 0  # SDXL at 1024² on an H100: the GEMMs are compute-bound
    stages1 = {s.name: s for s in one.stages}
    stagesb = {s.name: s for s in many.stages}
    for name in ("text_encode", "denoise", "vae_decode"):
        assert stagesb[name].flops == pytest.approx(b * stages1[name].flops, rel=1e-12)
    assert many.denoise_linear_s == pytest.approx(b * one.denoise_linear_s, rel=1e-12)
    assert many.denoise_attention_s == pytest.approx(b * one.denoise_attention_s, rel=1e-12)
    assert many.denoise_elementwise_s == pytest.approx(b * one.denoise_elementwise_s, rel=1e-12)
    assert many.denoise_overhead_s == pytest.approx(one.denoise_overhead_s, rel=1e-12)
    assert stagesb["text_encode"].time_s == pytest.approx(b * stages1["text_encode"].time_s, rel=1e-12)
    assert stagesb["vae_decode"].time_s == pytest.approx(b * stages1["vae_decode"].time_s, rel=1e-12)
    assert many.activation_bytes == pytest.approx(b * one.activation_bytes, abs=b)
    assert many.vae_decode_peak_bytes == one.vae_decode_peak_bytes
    assert many.weights_bytes == one.weights_bytes
    assert many.throughput_per_s == pytest.approx(b / many.total_time_s, rel=1e-12)
    assert any(n.startswith(f"batch {b}:") for n in many.notes)


def test_weight_bound_gemms_gain_from_batching():
    """SDXL at 256² reads its weights slower than it multiplies them: at batch B the GEMM time is
    max(B × compute time, weight-read time), so throughput per second rises with B until compute-bound."""
    one, four = _pair(4, width=256, height=256, steps=30, cfg=None)
    assert one.denoise_memory_bound_s > 0
    compute1 = one.denoise_linear_s - one.denoise_memory_bound_s
    weights = one.denoise_linear_s  # weight-bound: the linear time is the weight read
    assert four.denoise_linear_s == pytest.approx(max(4 * compute1, weights), rel=1e-12)
    assert four.throughput_per_s > one.throughput_per_s
    # compute-bound from here on: throughput stops rising
    _, sixteen = _pair(16, width=256, height=256, steps=30, cfg=None)
    assert four.denoise_memory_bound_s == 0
    assert sixteen.throughput_per_s == pytest.approx(four.throughput_per_s, rel=1e-3)  # launches amortised


def test_activation_memory_can_stop_a_batch_fitting():
    one, many = _pair(256, model="flux.1-dev", steps=28, cfg=None)
    assert one.fits and not many.fits
    assert many.peak_memory_bytes > one.peak_memory_bytes


def test_cli_batch_option(tmp_path, capsys):
    out = tmp_path / "b.json"
    argv = ["ledger", "--model", "sdxl-base", "--size", "1024x1024", "--gpu", "h100-sxm", "--steps", "20"]
    assert main([*argv, "--batch", "4", "--json", str(out)]) == 0
    assert "batch 4:" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["batch"] == 4 and data["config"]["batch"] == 4
    assert data["throughput_per_s"] == pytest.approx(4 / data["total_time_s"], rel=1e-12)
    for bad in ("0", "257"):
        assert main([*argv, "--batch", bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --batch") and "[1, 256]" in err
