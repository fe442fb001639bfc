"""INT4 (SVDQuant W4A4 + 16-bit low-rank branch) makes FLUX.1-dev fit a 24 GB card where BF16
does not; the byte arithmetic is recomputed here from the catalog's parameter counts."""

from __future__ import annotations

import pytest

from diffbench.ledger import load_catalog
from diffbench.ledger.account import LedgerConfig, evaluate
from diffbench.plan import PlanConfig, plan

GIB = 2**30


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def _peak_by_hand(cat, precision: str, width: int = 1024) -> float:
    """Resident weights + max(one block's activations, VAE decode) + runtime overhead, in bytes."""
    m = cat.models["flux.1-dev"]
    den_params = m.denoiser.params
    if precision == "int4":
        den = den_params * 0.5 + den_params * 0.0625  # 4-bit codes + a 16-bit scale and zero per 64 weights
        den += 2 * den_params * cat.optimizations.int4_linear.lowrank_overhead  # 16-bit low-rank branch
    else:
        den = 2 * den_params
    enc = sum(2 * e.params for e in m.text_encoders)
    vae = 2 * m.vae.params
    seq = (width // 16) ** 2 + m.text_tokens_joint  # 2×2 patches of the 8× latent, plus the joint T5 tokens
    d = m.denoiser.hidden
    act = (2 * d * 6 + 2 * (m.denoiser.ffn or 4 * d)) * seq * cat.memory.activation_fp32_factor
    vae_peak = m.vae.act_bytes_per_px * width * width
    return den + enc + vae + max(act, vae_peak) + cat.memory.runtime_overhead_gib * GIB


@pytest.mark.parametrize("gpu", ["rtx-4090", "l4"])
def test_int4_fits_24gb_where_bf16_does_not(cat, gpu):
    usable = cat.gpus[gpu].memory_gib * GIB * (1 - cat.memory.margin)
    assert cat.gpus[gpu].memory_gib == 24
    bf16_hand, int4_hand = _peak_by_hand(cat, "bf16"), _peak_by_hand(cat, "int4")
    assert bf16_hand > usable >= int4_hand  # the claim, from the parameter counts alone
    # BF16 weights / INT4 weights ≈ 3.3× (SVDQuant reports 3.6× for its checkpoint)
    m = cat.models["flux.1-dev"]
    assert 2 / (0.5625 + 2 * cat.optimizations.int4_linear.lowrank_overhead) == pytest.approx(3.3, abs=0.1)
    for precision, hand, fits in (("bf16", bf16_hand, False), ("int4", int4_hand, True)):
        r = evaluate(cat, LedgerConfig(model="flux.1-dev", width=1024, height=1024, gpu=gpu, precision=precision))
        assert r.peak_memory_bytes == pytest.approx(hand, rel=1e-6)
        assert r.fits is fits
    den = next(w for w in evaluate(cat, LedgerConfig(model="flux.1-dev", width=1024, height=1024, gpu=gpu,
                                                     precision="int4")).weights if w.component == "denoiser")
    assert den.bytes == pytest.approx(m.denoiser.params * (0.5625 + 2 * 0.021), rel=1e-6)


def test_int4_takes_the_24gb_card_off_offload(cat):
    """Planned on a 4090 with a budget INT4 meets: BF16 needs offload (②), the INT4 set runs without it."""
    budget = cat.optimizations.int4_linear.psnr_db - 2
    p = plan(cat, PlanConfig(model="flux.1-dev", width=1024, height=1024, steps=28, gpu="rtx-4090",
                             slo_p99_s=60, qps=0.1, quality_budget_db=budget))
    mem = next(s for s in p.steps if s.name == "memory")
    assert mem.applied and "offload" in mem.reason
    step = next(s for s in p.steps if s.name == "int4 linear")
    assert step.applied and "without offload" in step.reason
    assert "int4" in p.lossy_sets[0].options
