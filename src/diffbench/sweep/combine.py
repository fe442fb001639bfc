"""Combining the per-device results of a distributed sweep (``diffbench sweep --ray``).

Each device (a Ray actor) ran the whole single-process protocol (:mod:`diffbench.sweep.interleave`) on its
shard of the prompts: the baseline and every value warm and interleaved *on that device*, so every ratio is
measured on one device. Here the per-device ratios of one **device class** (the same GPU names and driver, or
the same CPU model; :func:`device_class`) are pooled; devices of different classes are never pooled into one
ratio (:func:`group_by_class`).

Pooled speed-up of a value over devices d = 1..D with n_d paired blocks each and per-device ratio of medians
r_d = median(baseline_d) / median(candidate_d) (:func:`~diffbench.sweep.bootstrap.paired_speedup_ci`):

    r = exp( sum_d n_d log r_d / sum_d n_d )

the block-weighted geometric mean (a log-ratio is additive, so devices of different speed each contribute
their relative effect, and a device with more blocks weighs more). Interval: the **stratified** paired
percentile bootstrap (Efron & Tibshirani 1993, ch. 13 and §6.9 on stratified samples): each replicate
resamples blocks with replacement *within* every device (a block pairs its baseline and candidate samples),
recomputes every r_d and pools them as above; the 95 % interval is the 2.5th and 97.5th percentile. The
replicates of device d are drawn from one ``numpy.random.Generator(PCG64(seed))`` in device order, so with
one device the interval equals :func:`~diffbench.sweep.bootstrap.paired_speedup_ci` with the same seed.

Pooled noise floor: the same statistic on every device's baseline against itself (even vs odd interleaved
blocks, :func:`~diffbench.sweep.interleave.noise_floor_ci`), pooled the same way; the verdict
(:func:`~diffbench.sweep.working_point.speed_verdict`) compares the pooled interval with the pooled floor.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel

from diffbench.sweep.bootstrap import DEFAULT_RESAMPLES, SpeedupCI

POOLED = "block-weighted geometric mean of per-device ratios of medians, stratified paired bootstrap"


class DeviceSamples(BaseModel):
    """One device's interleaved samples of one value: element i of both lists comes from block i (seconds)."""

    baseline_s: list[float]
    candidate_s: list[float]


def device_class(device: str, gpus: Sequence[str], driver: str | None, cpu: str) -> str:
    """The class of a device that may share a pooled ratio: ``"<GPU names> / driver <driver>"`` for a CUDA
    device, ``"cpu: <CPU model>"`` otherwise."""
    if device.startswith("cuda"):
        return f"{', '.join(gpus) or 'unknown GPU'} / driver {driver or 'unknown'}"
    return f"cpu: {cpu}"


def group_by_class(classes: Sequence[str]) -> dict[str, list[int]]:
    """Device class → the indices (in input order) of the devices of that class, classes in first-seen order."""
    out: dict[str, list[int]] = {}
    for i, c in enumerate(classes):
        out.setdefault(c, []).append(i)
    return out


def _check(devices: Sequence[DeviceSamples]) -> list[tuple[np.ndarray, np.ndarray]]:
    if not devices:
        raise ValueError("pooling needs at least one device")
    out = []
    for d in devices:
        b = np.asarray(d.baseline_s, dtype=np.float64)
        c = np.asarray(d.candidate_s, dtype=np.float64)
        if b.size == 0 or b.size != c.size:
            raise ValueError(f"paired samples need equal non-zero lengths, got {b.size} and {c.size}")
        if not (np.all(np.isfinite(b)) and np.all(np.isfinite(c)) and (b > 0).all() and (c > 0).all()):
            raise ValueError("latency samples must be finite and > 0 seconds")
        out.append((b, c))
    return out


def pooled_speedup_ci(devices: Sequence[DeviceSamples], confidence: float = 0.95,
                      resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                      statistic: str = POOLED) -> SpeedupCI:
    """Pooled speed-up over devices of one class with its stratified paired bootstrap interval (module doc).

    Args:
        devices: per device, its paired baseline and candidate samples (seconds).
        confidence: interval coverage in (0, 1).
        resamples: bootstrap replicates.
        seed: seed of the numpy Generator.

    Returns:
        ``speedup`` the pooled ratio, ``low``/``high`` the interval, ``n_baseline``/``n_candidate`` the blocks
        over all devices.

    Raises:
        ValueError: no device, unequal or empty samples, a non-positive or non-finite latency, or confidence
            outside (0, 1).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    pairs = _check(devices)
    w = np.array([b.size for b, _ in pairs], dtype=np.float64)
    w /= w.sum()
    rng = np.random.Generator(np.random.PCG64(seed))
    logs = np.zeros(resamples)
    point = 0.0
    for wi, (b, c) in zip(w, pairs, strict=True):
        idx = rng.integers(0, b.size, size=(resamples, b.size))
        logs += wi * np.log(np.median(b[idx], axis=1) / np.median(c[idx], axis=1))
        point += wi * float(np.log(np.median(b) / np.median(c)))
    alpha = (1.0 - confidence) / 2.0
    low, high = np.percentile(np.exp(logs), [100 * alpha, 100 * (1 - alpha)])
    n = int(sum(b.size for b, _ in pairs))
    return SpeedupCI(speedup=float(np.exp(point)), low=float(low), high=float(high), confidence=confidence,
                     resamples=resamples, n_baseline=n, n_candidate=n, statistic=statistic)


def pooled_noise_floor(baselines: Sequence[Sequence[float]], resamples: int = DEFAULT_RESAMPLES,
                       seed: int = 0) -> SpeedupCI | None:
    """Every device's baseline against itself (even vs odd blocks), pooled like :func:`pooled_speedup_ci`;
    devices with fewer than 2 blocks are left out (None when none has 2)."""
    halves = []
    for s in baselines:
        n = len(s) // 2
        if n >= 1:
            halves.append(DeviceSamples(baseline_s=[s[2 * i] for i in range(n)],
                                        candidate_s=[s[2 * i + 1] for i in range(n)]))
    if not halves:
        return None
    return pooled_speedup_ci(halves, resamples=resamples, seed=seed,
                             statistic="baseline vs itself (even / odd interleaved blocks) per device, " + POOLED)
