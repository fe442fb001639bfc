"""Benchmark: diffbench PSNR + SSIM vs scikit-image (matching arguments) on 1024² RGB pairs.

Prints images/s of both in the same run and their ratio (target >= 3x), the largest |difference|
between the two (must be < 1e-4), and the resident memory after 25/50/100 streamed pairs (must not grow
with the number of pairs: at most 2·workers pairs are in flight).

Pairs are synthetic: a seeded pool of smooth base images, each candidate = base + seeded Gaussian noise
(σ 2-10 levels), generated on the fly (never all held in memory).

Usage: python benchmarks/bench_quality.py [--pairs 100] [--ref-pairs 100] [--workers 2] [--size 1024]
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np


def _rss_mib() -> float:
    import psutil

    return psutil.Process(os.getpid()).memory_info().rss / 2**20


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def make_pool(size: int, n: int = 4, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size] / size
    pool = []
    for _ in range(n):
        f = rng.uniform(2, 12, 3)
        ph = rng.uniform(0, 6.3, 3)
        img = np.stack([127 + 100 * np.sin(f[c] * x * 6.3 + ph[c]) * np.cos(f[(c + 1) % 3] * y * 6.3) for c in range(3)],
                       -1)
        img += rng.normal(0, 6, img.shape)  # texture
        pool.append(np.clip(np.rint(img), 0, 255).astype(np.uint8))
    return pool


def pairs(pool: list[np.ndarray], n: int, seed: int = 1) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """n (base, candidate) pairs; candidate = base + one of 4 seeded int16 noise fields (σ 2-10 levels)."""
    rng = np.random.default_rng(seed)
    noises = [np.rint(rng.normal(0, s, pool[0].shape)).astype(np.int16) for s in (2.0, 4.0, 7.0, 10.0)]
    for i in range(n):
        a = pool[i % len(pool)]
        b = np.clip(a.astype(np.int16) + noises[(i // len(pool)) % len(noises)], 0, 255).astype(np.uint8)
        yield a, b


def ours(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    from diffbench.quality.kernels import psnr, ssim

    return psnr(a, b, 255.0), ssim(a, b, 255.0)


def ref(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    return (
        peak_signal_noise_ratio(a, b, data_range=255),
        structural_similarity(a, b, gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=255,
                              channel_axis=-1),
    )


def timed_serial(fn, it) -> tuple[float, list[tuple[float, float]]]:
    busy, out = 0.0, []
    for a, b in it:
        t = time.perf_counter()
        out.append(fn(a, b))
        busy += time.perf_counter() - t
    return busy, out


def streamed(it, workers: int, n: int) -> tuple[float, list[tuple[float, float]]]:
    """Bounded in-flight thread pool (as compare_dirs does); RSS printed at 25/50/100 pairs."""
    out: list[tuple[float, float]] = []
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        pending: list[Future] = []

        def take() -> None:
            out.append(pending.pop(0).result())
            if len(out) in (25, 50, 100, 200, 400):
                print(f"  after {len(out):4d} pairs: RSS {_rss_mib():8.1f} MiB, peak {_peak_mib():8.1f} MiB")

        for a, b in it:
            pending.append(ex.submit(ours, a, b))
            if len(pending) >= 2 * workers:
                take()
        while pending:
            take()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--ref-pairs", type=int, default=100)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--size", type=int, default=1024)
    args = ap.parse_args()
    pool = make_pool(args.size)
    print(f"PSNR + SSIM on {args.size}x{args.size} RGB uint8 pairs; cpus={os.cpu_count()}")
    ours(*next(pairs(pool, 1)))  # warm imports
    ref(*next(pairs(pool, 1)))
    m = min(args.ref_pairs, args.pairs)
    t_ref, r = timed_serial(ref, pairs(pool, m))
    t_one, o = timed_serial(ours, pairs(pool, m))
    dp = max(abs(x[0] - y[0]) for x, y in zip(o, r, strict=True))
    ds = max(abs(x[1] - y[1]) for x, y in zip(o, r, strict=True))
    print(f"scikit-image          : {m / t_ref:7.2f} images/s ({m} pairs, 1 thread)")
    print(f"diffbench, 1 thread   : {m / t_one:7.2f} images/s  ratio {t_ref / t_one:5.2f}x")
    print(f"max |diff| vs skimage : PSNR {dp:.2e} dB, SSIM {ds:.2e} (must be < 1e-4)")
    print(f"streamed, {args.workers} workers, {args.pairs} pairs (generation included in wall time):")
    t_str, _ = streamed(pairs(pool, args.pairs), args.workers, args.pairs)
    rate = args.pairs / t_str
    print(f"diffbench, {args.workers} workers  : {rate:7.2f} images/s  ratio {rate / (m / t_ref):5.2f}x "
          f"(target >= 3x)")


if __name__ == "__main__":
    main()
