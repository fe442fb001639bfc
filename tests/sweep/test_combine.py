"""Pooling per-device speed-ups of a distributed sweep (diffbench.sweep.combine), prompt shards and merged
per-image quality: pure code, no Ray."""

from __future__ import annotations

import numpy as np
import pytest

from diffbench.engines.config import EngineConfig
from diffbench.errors import UsageError
from diffbench.sweep.bootstrap import paired_speedup_ci
from diffbench.sweep.combine import (
    DeviceSamples,
    device_class,
    group_by_class,
    pooled_noise_floor,
    pooled_speedup_ci,
)
from diffbench.sweep.interleave import noise_floor_ci


def _device(rng: np.random.Generator, n: int, base_s: float, speedup: float, sd: float = 0.02) -> DeviceSamples:
    """n interleaved blocks: a shared per-block drift, then log-normal noise on each side."""
    drift = np.exp(rng.normal(0, 0.05, n))
    b = base_s * drift * np.exp(rng.normal(0, sd, n))
    c = base_s / speedup * drift * np.exp(rng.normal(0, sd, n))
    return DeviceSamples(baseline_s=b.tolist(), candidate_s=c.tolist())


def test_one_device_is_the_single_process_paired_bootstrap() -> None:
    d = _device(np.random.default_rng(1), 24, 0.05, 1.3)
    one = pooled_speedup_ci([d], resamples=500, seed=7)
    ref = paired_speedup_ci(d.baseline_s, d.candidate_s, resamples=500, seed=7)
    assert one.speedup == pytest.approx(ref.speedup, rel=1e-12)
    assert one.low == pytest.approx(ref.low, rel=1e-12)
    assert one.high == pytest.approx(ref.high, rel=1e-12)
    floor = pooled_noise_floor([d.baseline_s], resamples=500, seed=7)
    ref_floor = noise_floor_ci(d.baseline_s, 500, 7)
    assert floor is not None and ref_floor is not None
    assert (floor.speedup, floor.low, floor.high) == pytest.approx((ref_floor.speedup, ref_floor.low, ref_floor.high),
                                                                   rel=1e-12)


def test_pooled_ratio_is_the_block_weighted_geometric_mean_with_a_stratified_interval() -> None:
    rng = np.random.default_rng(2)
    # a fast and a slow device (4x apart in absolute time), 12 and 20 blocks, true speed-ups 1.2 and 1.5
    devs = [_device(rng, 12, 0.02, 1.2), _device(rng, 20, 0.08, 1.5)]
    got = pooled_speedup_ci(devs, resamples=400, seed=3)
    r = [np.median(d.baseline_s) / np.median(d.candidate_s) for d in devs]
    want = float(np.exp((12 * np.log(r[0]) + 20 * np.log(r[1])) / 32))
    assert got.speedup == pytest.approx(want, rel=1e-12)
    assert got.n_baseline == got.n_candidate == 32
    # the interval, recomputed replicate by replicate: blocks resampled within each device, devices in order
    gen = np.random.Generator(np.random.PCG64(3))
    idx = [gen.integers(0, len(d.baseline_s), size=(400, len(d.baseline_s))) for d in devs]
    reps = []
    for k in range(400):
        logs = 0.0
        for d, ix, n in zip(devs, idx, (12, 20), strict=True):
            b, c = np.asarray(d.baseline_s)[ix[k]], np.asarray(d.candidate_s)[ix[k]]
            logs += n / 32 * np.log(np.median(b) / np.median(c))
        reps.append(np.exp(logs))
    assert (got.low, got.high) == pytest.approx(tuple(np.percentile(reps, [2.5, 97.5])), rel=1e-12)
    assert got.low < want < got.high
    # the true pooled effect exp((12 log 1.2 + 20 log 1.5) / 32) = 1.380 lies inside at this noise level
    assert got.low < float(np.exp((12 * np.log(1.2) + 20 * np.log(1.5)) / 32)) < got.high


def test_the_absolute_speed_of_a_device_does_not_weigh() -> None:
    """A device 10x slower with the same relative effect moves the pooled ratio not at all."""
    d = _device(np.random.default_rng(4), 16, 0.05, 1.25)
    slow = DeviceSamples(baseline_s=[10 * x for x in d.baseline_s], candidate_s=[10 * x for x in d.candidate_s])
    pooled = pooled_speedup_ci([d, slow], resamples=300)
    assert pooled.speedup == pytest.approx(np.median(d.baseline_s) / np.median(d.candidate_s), rel=1e-12)


@pytest.mark.parametrize("bad", [
    [],
    [DeviceSamples(baseline_s=[1.0, 2.0], candidate_s=[1.0])],
    [DeviceSamples(baseline_s=[], candidate_s=[])],
    [DeviceSamples(baseline_s=[1.0, float("nan")], candidate_s=[1.0, 1.0])],
    [DeviceSamples(baseline_s=[1.0, 0.0], candidate_s=[1.0, 1.0])],
])
def test_bad_samples_are_refused(bad: list[DeviceSamples]) -> None:
    with pytest.raises(ValueError):
        pooled_speedup_ci(bad)


def test_pooled_floor_skips_devices_with_one_block() -> None:
    assert pooled_noise_floor([[0.1]]) is None
    one = pooled_noise_floor([[0.1], [0.1, 0.2, 0.1, 0.2]], resamples=200)
    assert one is not None and one.n_baseline == 2
    assert one.speedup == pytest.approx(0.5)


def test_device_classes_separate_gpus_and_drivers() -> None:
    h100 = device_class("cuda", ["NVIDIA H100 80GB HBM3"], "550.54", "Xeon")
    assert "H100" in h100 and "550.54" in h100
    assert device_class("cuda", ["NVIDIA H100 80GB HBM3"], "535.1", "Xeon") != h100
    assert device_class("cuda", ["NVIDIA A100"], "550.54", "Xeon") != h100
    assert device_class("cpu", ["NVIDIA H100 80GB HBM3"], "550.54", "Xeon") == "cpu: Xeon"
    assert group_by_class(["a", "b", "a", "c", "b"]) == {"a": [0, 2], "b": [1, 4], "c": [3]}


def _sim_opts(**kw: object):
    from diffbench.sweep.models import SweepOptions

    return SweepOptions(engine=EngineConfig(engine="sim", model="sim-flux"), axis="precision", values=["float16"],
                        height=64, width=64, steps=2, seeds=[0, 1], **kw)


def test_prompt_shards_partition_the_workload() -> None:
    from diffbench.engines.sim import SimEngine
    from diffbench.sweep.runner import requests_for

    info = SimEngine(EngineConfig(engine="sim", model="sim-flux")).start()
    full = requests_for(_sim_opts(num_prompts=5), info)
    parts = [requests_for(_sim_opts(num_prompts=5, shard=(i, 2)), info) for i in range(2)]
    keys = [[(r.prompt_id, r.seed) for r in p] for p in parts]
    assert sorted(keys[0] + keys[1]) == sorted((r.prompt_id, r.seed) for r in full)
    assert not set(keys[0]) & set(keys[1])
    prompts = list(dict.fromkeys(r.prompt_id for r in full))
    assert {pid for pid, _ in keys[0]} == set(prompts[0::2])  # prompt i -> shard i % 2, with every seed
    assert len(keys[0]) == 6 and len(keys[1]) == 4
    with pytest.raises(UsageError, match="--ray-actors 6"):
        requests_for(_sim_opts(num_prompts=5, shard=(5, 6)), info)


def test_merged_per_image_values_equal_one_comparison_over_all_images() -> None:
    from diffbench.sweep.pairs import compare_images, pair_values, quality_of

    rng = np.random.default_rng(5)
    base = {f"p{i:02d}_s0_i0": rng.integers(0, 256, (16, 16, 3), dtype=np.uint8) for i in range(6)}
    cand = {k: np.clip(v.astype(int) + rng.integers(-9, 10, v.shape), 0, 255).astype(np.uint8)
            for k, v in base.items()}
    cand["p03_s0_i0"] = base["p03_s0_i0"].copy()  # one identical pair (+inf PSNR)
    whole = compare_images(base, cand, "r")
    shards = [[k for i, k in enumerate(sorted(base)) if i % 2 == j] for j in range(2)]
    ps: dict[str, float] = {}
    ss: dict[str, float] = {}
    for keys in shards:
        p, s = pair_values({k: base[k] for k in keys}, {k: cand[k] for k in keys})
        ps.update(p)
        ss.update(s)
    assert quality_of(ps, ss, "r") == whole
    mse = np.mean((base["p00_s0_i0"].astype(float) - cand["p00_s0_i0"]) ** 2)
    assert ps["p00_s0_i0"] == pytest.approx(10 * np.log10(255.0 ** 2 / mse), rel=1e-9)


def test_the_shard_folder_is_one_per_sweep_and_shard_count() -> None:
    from diffbench.distributed.sweep import sweep_key

    a = _sim_opts(num_prompts=4)
    assert sweep_key(a, 2) == sweep_key(a.model_copy(update={"resume": False}), 2)  # --no-resume: same folder
    assert sweep_key(a, 2) == sweep_key(a.model_copy(update={"shard": (1, 2)}), 2)
    assert sweep_key(a, 2) != sweep_key(a, 3)
    assert sweep_key(a, 2) != sweep_key(_sim_opts(num_prompts=3), 2)
