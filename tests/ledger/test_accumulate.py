"""``--accumulate fp16``: GEMMs on the FP16-accumulate rate of a GeForce card (NVIDIA Ada whitepaper appendix: the
RTX 4090 runs FP16 at 330.3 TF with FP16 accumulation, 165.2 TF with FP32; FP8 660.6 against 330.3), held to the
same sustained TF per board watt as the FP32-accumulate rate; no effect on data-centre parts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from diffbench.cli.main import main
from diffbench.ledger import LedgerConfig, evaluate, load_catalog
from diffbench.ledger.fit import anchor_case, fit_cases, fitted_params, predict
from diffbench.ledger.flops import forward_flops
from diffbench.ledger.schema import Anchor
from diffbench.ledger.tokens import count_tokens

KW = dict(model="flux.1-dev", width=1024, height=1024, steps=28)


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def _linear_flops(cat) -> float:
    model = cat.models["flux.1-dev"]
    return forward_flops(model, count_tokens(model, 1024, 1024, 1), 1024, 1024).linear * 28


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_fp16_accumulation_on_the_4090_closed_form(cat, precision):
    fr = fitted_params(cat)
    k = fr.tflops_per_watt["ada"]
    eta = min(fr.eta_gemm * fr.gemm_arch["ada"], 1.0)
    fp32 = evaluate(cat, LedgerConfig(**KW, gpu="rtx-4090", precision=precision))
    fp16 = evaluate(cat, LedgerConfig(**KW, gpu="rtx-4090", precision=precision, accumulate="fp16"))
    rate = 330.3e12 if precision == "bf16" else 330e12 * 330.3 / 165   # FP8: 660.6 TF, the whitepaper figure
    retention = 1.0 if precision == "bf16" else cat.optimizations.fp8_linear.gemm_retention
    power = min(1.0, k / (330.3 / 450))                       # 330.3 TF in 450 W is above the fitted k: capped
    assert power < 1.0
    assert fp16.denoise_linear_s == pytest.approx(_linear_flops(cat) / (rate * eta * retention * power), rel=1e-9)
    # the FP32-accumulate rate stays under the power cap (165 TF in 450 W) and attention accumulates in FP32
    base_rate = 165e12 if precision == "bf16" else 330e12
    assert fp32.denoise_linear_s == pytest.approx(_linear_flops(cat) / (base_rate * eta * retention), rel=1e-9)
    assert fp16.denoise_attention_s == pytest.approx(fp32.denoise_attention_s, rel=1e-12)
    # the note gives the rate and what the board power leaves of it (the GEMM seconds above: 2.00 × 88 % = 1.75×)
    note = next(n for n in fp16.notes if "FP16 accumulation" in n)
    speed = fp32.denoise_linear_s / fp16.denoise_linear_s
    assert f"{330.3 / 165:.2f}× the FP32-accumulate rate" in note and f"{power:.0%} of that rate" in note
    assert f"{speed:.2f}× in all" in note and speed == pytest.approx(330.3 / 165 * power, rel=1e-9)


@pytest.mark.parametrize("gpu, precision, says", [("h100-sxm", "bf16", "no FP16-accumulate rate"),
                                                  ("l40s", "fp8", "no FP16-accumulate rate"),
                                                  ("l20", "bf16", "no FP16-accumulate rate"),
                                                  ("rtx-4090", "nf4", "bf16 and fp8 GEMMs only")])
def test_fp16_accumulation_changes_nothing_where_it_does_not_apply(cat, gpu, precision, says):
    a = evaluate(cat, LedgerConfig(**KW, gpu=gpu, precision=precision))
    b = evaluate(cat, LedgerConfig(**KW, gpu=gpu, precision=precision, accumulate="fp16"))
    assert b.total_time_s == a.total_time_s
    assert any(says in n for n in b.notes)


def test_an_fp16_accumulate_anchor_is_fitted_as_evaluated(cat):
    """An anchor that states ``accumulate: fp16`` is predicted by the fit exactly as ``evaluate`` accounts for it, and
    anchors generated with k = 0.5 TF/W, one of them FP16-accumulate (its GEMMs capped against 330 TF in 450 W, its
    attention not), give back k = 0.5 (the split power term's residual and Jacobian agree)."""
    a = Anchor(id="fp16acc", **KW, gpu="rtx-4090", precision="fp8", compile=True, accumulate="fp16",
               measured_s=8.0, covers="denoise", source="synthetic")
    base = fitted_params(cat)
    c = anchor_case(cat, a)
    res = evaluate(cat, LedgerConfig(**KW, gpu="rtx-4090", precision="fp8", compile=True, accumulate="fp16"))
    assert predict(c, base) == pytest.approx(next(s.time_s for s in res.stages if s.name == "denoise"), rel=1e-9)
    from diffbench.ledger.fit import catalog_cases

    truth = replace(base, tflops_per_watt={"ada": 0.5})
    cases = [x for x in catalog_cases(cat) if x.anchor.outlier is None] + [c]
    synth = [replace(x, anchor=x.anchor.model_copy(update={"measured_s": predict(x, truth)})) for x in cases]
    fr = fit_cases(cat, synth, {}, free_only={"tflops_per_watt[ada]"}, base=base)
    assert fr.tflops_per_watt["ada"] == pytest.approx(0.5, rel=1e-6)
    assert max(abs(predict(x, fr) / x.anchor.measured_s - 1) for x in synth) < 1e-9


def test_cli_accumulate(capsys):
    assert main(["ledger", "--model", "flux.1-dev", "--size", "1024x1024", "--gpu", "rtx-4090",
                 "--accumulate", "fp16"]) == 0
    assert "FP16 accumulation" in capsys.readouterr().out
    assert main(["ledger", "--model", "flux.1-dev", "--size", "1024x1024", "--gpu", "rtx-4090",
                 "--accumulate", "fp61"]) == 2
    err = capsys.readouterr().err
    assert "--accumulate" in err and "fp16" in err


def test_validate_refuses_the_options_it_would_ignore(capsys):
    """``--validate --accumulate FP16`` (or any accounting option) once exited 0, the option silently unused."""
    for extra in (["--accumulate", "FP16"], ["--precision", "fp8"], ["--model", "flux.1-dev", "--gpu", "h100-sxm"]):
        assert main(["ledger", "--validate", *extra]) == 2, extra
        err = capsys.readouterr().err
        assert err.startswith("error: --validate") and extra[0] in err and "drop" in err


def test_a_catalog_fp16_accumulate_rate_below_the_bf16_peak_is_refused(tmp_path, capsys):
    """A GPU entry whose FP16-accumulate rate is below its BF16 peak was taken, and the note then said the GPU ran
    FP32 accumulation at its full rate."""
    f = tmp_path / "c.yaml"
    f.write_text("gpus:\n  rtx-4090:\n    fp16_acc_tflops: 100\n")
    assert main(["ledger", "--model", "flux.1-dev", "--size", "1024x1024", "--gpu", "rtx-4090",
                 "--catalog", str(f)]) == 2
    err = capsys.readouterr().err
    assert "c.yaml:2" in err and "gpus.rtx-4090" in err and "fp16_acc_tflops 100 is below bf16_tflops 165" in err


def test_fit_suggestions_name_only_what_changes(cat):
    """FLUX.1-dev in fp8 on a 4090 does not fit: "--precision fp8 --offload group" was suggested to a run already
    in fp8 (the same as "--offload group")."""
    from diffbench.ledger.account import fit_suggestions

    out = fit_suggestions(cat, LedgerConfig(**KW, gpu="rtx-4090", precision="fp8"))
    assert not any("--precision fp8" in s for s in out)
    assert any(s.startswith("--offload group") for s in out)
    bf16 = fit_suggestions(cat, LedgerConfig(**KW, gpu="rtx-4090"))
    assert any(s.startswith("--precision fp8 --offload group") for s in bf16)
