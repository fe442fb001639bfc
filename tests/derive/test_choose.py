"""Decisions of derive from constructed measurements: the statistics are computed here by the sweep's own
bootstrap (paired ratio of medians, noise floor) and PSNR by scikit-image on constructed images, never
written in by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from skimage.metrics import peak_signal_noise_ratio

from diffbench.derive.choose import (
    LossyOption,
    best_set,
    left_out_reason,
    lossless_decision,
    lossy_gate,
)
from diffbench.derive.models import LOSSLESS_DB, Measured
from diffbench.sweep.bootstrap import paired_speedup_ci
from diffbench.sweep.interleave import noise_floor_ci
from diffbench.sweep.working_point import speed_verdict


def _psnr_of_noise(sigma: float, seed: int = 0) -> float:
    """PSNR (dB) of a 64x64 RGB image against itself plus Gaussian noise of ``sigma`` (0-255 scale)."""
    rng = np.random.default_rng(seed)
    ref = rng.integers(40, 216, size=(64, 64, 3)).astype(np.float64)
    noisy = np.clip(ref + rng.normal(0, sigma, ref.shape), 0, 255)
    return float(peak_signal_noise_ratio(ref, noisy, data_range=255))


def _measured(factor: float, psnr: float | None, *, n: int = 40, jitter: float = 0.03, seed: int = 0) -> Measured:
    """Interleaved samples of a baseline (~1 s, log-normal jitter) and a candidate ``factor`` times faster,
    judged by the sweep's bootstrap and verdict; ``psnr`` None means bitwise identical outputs."""
    rng = np.random.default_rng(seed)
    base = np.exp(rng.normal(0, jitter, n))
    cand = np.exp(rng.normal(0, jitter, n)) / factor
    sp = paired_speedup_ci(base.tolist(), cand.tolist(), seed=0)
    floor = noise_floor_ci(base.tolist(), seed=0)
    fast, verdict = speed_verdict(sp, floor, None)
    p = math.inf if psnr is None else psnr
    return Measured(sweep_id="s", run_id="r", baseline_run_id="b", speedup=sp.speedup, ci=(sp.low, sp.high),
                    noise_floor=(floor.low, floor.high) if floor else None, measurably_faster=fast, verdict=verdict,
                    latency_s=float(np.median(cand)), baseline_latency_s=float(np.median(base)),
                    samples_s=cand.tolist(), psnr_p50=p, psnr_p10=p, psnr_worst=p, identical=psnr is None)


def test_a_null_effect_option_is_rejected_because_its_ci_overlaps_the_floor() -> None:
    m = _measured(1.0, None, seed=3)
    assert not m.measurably_faster
    decision, why = lossless_decision(m)
    assert decision == "rejected"
    assert "not measurably faster" in why or "slower" in why


def test_a_real_lossless_speedup_is_kept() -> None:
    m = _measured(1.5, None)
    assert m.measurably_faster and m.ci[0] > 1.3
    assert lossless_decision(m)[0] == "kept"


def test_a_lossless_option_that_perturbs_pixels_is_reclassified_even_when_faster() -> None:
    psnr = _psnr_of_noise(6.0)  # ~32.6 dB: visible
    assert psnr < LOSSLESS_DB
    m = _measured(1.5, psnr)
    decision, why = lossless_decision(m)
    assert decision == "reclassified"
    assert f"{psnr:.1f}" in why and "lossy I" in why


def test_float_rounding_differences_stay_lossless() -> None:
    psnr = _psnr_of_noise(0.3)  # ~58 dB
    assert psnr >= LOSSLESS_DB
    assert lossless_decision(_measured(1.5, psnr))[0] == "kept"


def test_a_lossy_i_option_below_35_db_fails_its_gate() -> None:
    ok, why = lossy_gate(_measured(1.4, _psnr_of_noise(6.0)), 35.0, 3)
    assert not ok and "quality gate" in why


def test_an_option_that_fits_alone_but_not_with_an_earlier_one_is_not_combined() -> None:
    budget = 30.0
    a_db, b_db = _psnr_of_noise(4.0), _psnr_of_noise(5.5)  # ~36.1 dB and ~33.4 dB
    combined = -10 * math.log10(10 ** (-a_db / 10) + 10 ** (-b_db / 10))  # independent errors add in MSE
    assert a_db > 35 and b_db > budget and combined < budget + 3.0
    budget = (combined + min(a_db, b_db)) / 2  # each fits alone, together they do not
    a = LossyOption("int8 linear", "numerics", _measured(1.2, a_db))
    b = LossyOption("first-block=0.2", "step cache", _measured(1.6, b_db, seed=1))
    assert lossy_gate(a.measured, 35.0, 3)[0] and lossy_gate(b.measured, budget, 4)[0]
    chosen = best_set([a, b], budget)
    assert chosen.names == ("first-block=0.2",)  # the faster one alone
    why = left_out_reason(a, chosen, [a, b], budget)
    assert f"{combined:.1f} dB" in why and "first-block=0.2" in why


def test_options_that_fit_together_are_combined_and_the_speedups_multiply() -> None:
    a = LossyOption("int8 linear", "numerics", _measured(1.2, 45.0))
    b = LossyOption("first-block=0.1", "step cache", _measured(1.5, 40.0, seed=1))
    chosen = best_set([a, b], 30.0)
    assert set(chosen.names) == {"int8 linear", "first-block=0.1"}
    assert chosen.speedup == pytest.approx(a.measured.speedup * b.measured.speedup)
    assert chosen.psnr_db == pytest.approx(-10 * math.log10(10 ** -4.5 + 10 ** -4.0))


def test_one_option_per_group() -> None:
    c1 = LossyOption("first-block=0.1", "step cache", _measured(1.3, 40.0))
    c2 = LossyOption("first-block=0.2", "step cache", _measured(1.6, 38.0, seed=1))
    assert best_set([c1, c2], 30.0).names == ("first-block=0.2",)
