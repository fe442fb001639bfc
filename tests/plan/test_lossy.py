"""The best lossy *set* within the budget (not a greedy walk), FP8 per architecture, INT4.

The constructed catalog makes the old greedy rule fail: 8-bit attention (33 dB, a small win) is tried first
and spends the 30 dB budget, so the step cache (31 dB, 1.91× on the denoise loop) no longer fits; the subset
search takes the cache alone, which is faster. The expected set is found here by brute force over the ledger.
"""

from __future__ import annotations

import itertools
import math

import pytest

from diffbench.ledger import load_catalog
from diffbench.ledger.account import LedgerConfig, evaluate
from diffbench.plan import PlanConfig, combine_psnr, plan

OVERRIDE = """
optimizations:
  attention_backends:
    sage8: {eta: 0.735, lossless: false, psnr_db: 33.0, source: "test: a small win with a large quality cost"}
  int4_linear: {method: "test int4", requires_arch: [blackwell], gemm_speedup: 3.0, psnr_db: 22.0,
                source: "test"}
  step_cache:
    method: first-block
    source: "test: one threshold"
    thresholds:
      - {threshold: 0.12, denoise_speedup: 1.91, psnr_db: 31.0}
"""


@pytest.fixture(scope="module")
def constructed(tmp_path_factory):
    p = tmp_path_factory.mktemp("cat") / "over.yaml"
    p.write_text(OVERRIDE)
    return load_catalog(p)


def _step(p, name):
    return next(s for s in p.steps if s.name == name)


def _cfg(**kw):
    base = {"model": "flux.1-dev", "width": 1024, "height": 1024, "steps": 28, "gpu": "a100-sxm-80gb",
            "slo_p99_s": 30.0, "qps": 1.0, "quality_budget_db": 30.0}
    return PlanConfig(**{**base, **kw})


def _lossless_lc():
    # ② on an A100: FLUX fits, sdpa is the fastest lossless kernel off Hopper, compile on
    return LedgerConfig(model="flux.1-dev", width=1024, height=1024, steps=28, gpu="a100-sxm-80gb", compile=True)


def _greedy(budget):
    """The pre-issue-13 rule: walk fp8 → 8-bit attention → step cache, keep each that stays in budget."""
    taken = []
    for name, psnr in (("sage8", 33.0), ("cache", 31.0)):  # no FP8 tensor cores on an A100
        trial = [*(p for _, p in taken), psnr]
        if combine_psnr(trial) >= budget:
            taken.append((name, psnr))
    return [n for n, _ in taken]


def _time(cat, names):
    upd = {}
    if "sage8" in names:
        upd["attention"] = "sage8"
    if "cache" in names:
        upd["cache_speedup"] = 1.91
    return evaluate(cat, _lossless_lc().model_copy(update=upd)).total_time_s


def test_subset_beats_greedy(constructed):
    greedy = _greedy(30.0)
    assert greedy == ["sage8"]  # the regression: the cache is blocked by the budget the small win spent
    # brute force over every subset within the budget, on the ledger directly
    cands = []
    for k in range(3):
        for combo in itertools.combinations(["sage8", "cache"], k):
            psnr = combine_psnr([{"sage8": 33.0, "cache": 31.0}[n] for n in combo])
            if psnr is None or psnr >= 30.0:
                cands.append((_time(constructed, combo), combo))
    best_t, best = min(cands)
    assert best == ("cache",)
    assert best_t < _time(constructed, greedy)  # the subset search is strictly faster than greedy

    p = plan(constructed, _cfg())
    assert _step(p, "step cache").applied and not _step(p, "8-bit attention").applied
    assert "fastest set" in _step(p, "8-bit attention").reason
    assert p.latency_s == pytest.approx(best_t, rel=1e-9)
    assert p.psnr_db == pytest.approx(31.0)
    # the table/JSON lists the runners-up: chosen first, ranked by GPU-seconds, all within the budget
    assert p.lossy_sets[0].options == ["cache 0.12"]
    assert [s.options for s in p.lossy_sets] == [["cache 0.12"], ["sage8"], []]
    assert [s.gpu_s for s in p.lossy_sets] == sorted(s.gpu_s for s in p.lossy_sets)
    assert p.lossy_sets[-1].speedup == pytest.approx(1.0)
    assert p.lossy_sets[0].speedup == pytest.approx(_time(constructed, ()) / best_t)


def test_loose_budget_takes_both(constructed):
    """With room for both, both are taken (no rule keeps a possible win out)."""
    p = plan(constructed, _cfg(quality_budget_db=25.0))
    assert _step(p, "step cache").applied and _step(p, "8-bit attention").applied
    assert p.psnr_db == pytest.approx(-10 * math.log10(10 ** -3.3 + 10 ** -3.1))


def test_ties_go_to_higher_psnr(tmp_path):
    """Two cache thresholds with the same speed-up: the one with the higher PSNR is taken."""
    p = tmp_path / "tie.yaml"
    p.write_text(OVERRIDE.replace("psnr_db: 33.0", "psnr_db: 20.0").replace(  # 8-bit attention out of budget
        "      - {threshold: 0.12, denoise_speedup: 1.91, psnr_db: 31.0}",
        "      - {threshold: 0.10, denoise_speedup: 1.91, psnr_db: 36.0}\n"
        "      - {threshold: 0.12, denoise_speedup: 1.91, psnr_db: 31.0}"))
    res = plan(load_catalog(p), _cfg())
    assert res.lossy_sets[0].options == ["cache 0.1"] and res.psnr_db == pytest.approx(36.0)
    assert res.lossy_sets[1].options == ["cache 0.12"]
    assert res.lossy_sets[0].gpu_s == pytest.approx(res.lossy_sets[1].gpu_s)


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


@pytest.mark.parametrize("gpu", ["rtx-4090", "l40s", "l4"])
def test_fp8_skipped_on_ada_with_reason(cat, gpu):
    archs = cat.optimizations.fp8_linear.archs
    assert cat.gpus[gpu].arch == "ada" and "ada" not in archs and cat.gpus[gpu].fp8_tflops is not None
    p = plan(cat, _cfg(gpu=gpu, quality_budget_db=25.0))
    step = _step(p, "fp8 linear")
    assert not step.applied
    assert "fp8_linear.archs" in step.reason and "--assume-fp8" in step.reason and "_scaled_mm" in step.reason
    forced = plan(cat, _cfg(gpu=gpu, quality_budget_db=25.0, assume_fp8=True))
    assert _step(forced, "fp8 linear").applied  # FP8 tensor cores exist on Ada: taken when assumed
    assert "fp8" in forced.lossy_sets[0].options


def test_no_fp8_on_ampere_even_assumed(cat):
    p = plan(cat, _cfg(assume_fp8=True, quality_budget_db=25.0))
    step = _step(p, "fp8 linear")
    assert not step.applied and "FP8 tensor cores" in step.reason


def test_fp8_taken_on_hopper(cat):
    p = plan(cat, _cfg(gpu="h100-sxm", quality_budget_db=30.0))
    assert _step(p, "fp8 linear").applied
    assert "int4" not in " ".join(o for s in p.lossy_sets for o in s.options)  # no INT4 kernels on Hopper
    assert "hopper" in _step(p, "int4 linear").reason


def test_int4_offered_only_on_its_archs(cat):
    i4 = cat.optimizations.int4_linear
    assert "hopper" not in i4.requires_arch
    for gpu in ("rtx-4090", "a100-sxm-80gb"):
        assert cat.gpus[gpu].arch in i4.requires_arch
        p = plan(cat, _cfg(gpu=gpu, quality_budget_db=i4.psnr_db - 1))
        assert any("int4" in s.options for s in p.lossy_sets)
        tight = plan(cat, _cfg(gpu=gpu, quality_budget_db=i4.psnr_db + 1))
        assert not any("int4" in s.options for s in tight.lossy_sets)  # over the budget on its own
