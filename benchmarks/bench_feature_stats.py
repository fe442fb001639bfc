"""Benchmark: the cost of FID's compensated float64 statistics (``FeatureStats.update``, one row at a time, TwoSum)
against the plain float64 sums they replaced (``sum += x; outer += x xᵀ``), per image row at d = 2048.

Interleaved in one process after a warm-up: rounds alternate compensated / plain / plain, and the plain-vs-plain
ratio is the noise floor printed beside the compensated-vs-plain ratio (median of per-round ratios).

Usage: python benchmarks/bench_feature_stats.py [--dim 2048] [--rows 20] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main() -> None:
    from diffbench.quality.distribution import FeatureStats

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=2048)
    ap.add_argument("--rows", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    rows = np.random.default_rng(0).random((a.rows, a.dim)).astype(np.float32).astype(np.float64)
    st = FeatureStats(a.dim, keep=False)
    s, o = np.zeros(a.dim), np.zeros((a.dim, a.dim))

    def compensated() -> float:
        t0 = time.perf_counter()
        for r in rows:
            st.update(r[None])
        return (time.perf_counter() - t0) / a.rows

    def plain() -> float:
        t0 = time.perf_counter()
        for r in rows:
            s.__iadd__(r)
            o.__iadd__(np.outer(r, r))
        return (time.perf_counter() - t0) / a.rows

    compensated(), plain()  # warm-up
    ratio, floor, comp_ms, plain_ms = [], [], [], []
    for _ in range(a.rounds):
        c, p1, p2 = compensated(), plain(), plain()
        ratio.append(c / p1)
        floor.append(p2 / p1)
        comp_ms.append(c * 1e3)
        plain_ms.append(p1 * 1e3)
    print(f"d={a.dim}: compensated {statistics.median(comp_ms):.1f} ms/row, plain {statistics.median(plain_ms):.1f} "
          f"ms/row; ratio {statistics.median(ratio):.2f}x (noise floor plain/plain {statistics.median(floor):.2f}x, "
          f"{a.rounds} rounds x {a.rows} rows)")


if __name__ == "__main__":
    main()
