"""Benchmark of ``bench --save-outputs DIR --ray``: outputs per second of one process against Ray engine actors,
measured in the same run on the same workload (prints ratios; compare within one run, never across machines).

Figures printed, each the median of ``--repeats`` interleaved repeats (order rotated every repeat):

1. ``one process``: ``diffbench bench`` in one process with ``--threads C`` (C = the machine's CPUs);
2. ``ray 1 actor``: ``--ray local --ray-actors 1 --threads C`` (the cost of Ray: cluster start, actor start,
   task dispatch, per-task records);
3. ``ray N actors``: ``--ray local --ray-actors C --threads 1`` (one engine per core).

For each: the command's wall time (cluster and model start included) and the outputs per second of the
generation itself (outputs ÷ the sum of timed-run seconds ÷ actors: a lower bound of the steady rate), with the
ratio to the one-process figure. On one machine, N CPU actors compete for the same cores as one process with N
threads: expect ratios near 1 for the generation rate; the gain of Ray is on several GPUs or machines, which this
machine does not have.

Usage: python benchmarks/bench_ray_bench.py [--images 32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(args: list[str], out: Path) -> tuple[float, float]:
    """(wall seconds, outputs per second of the timed runs) of one bench command."""
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "diffbench.cli.main", "bench", *args, "--save-outputs", str(out / "o"),
                    "--json", str(out / "r.json"), "--mkdir", "-q"], check=True, capture_output=True)
    wall = time.perf_counter() - t0
    r = json.loads((out / "r.json").read_text())
    samples = r["shapes"][0]["samples_s"]
    actors = len(r["distributed"]["actors"]) if r.get("distributed") else 1
    return wall, len(samples) / (sum(samples) / actors)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    cpus = os.cpu_count() or 1
    base = ["--model", "tiny-flux", "--height", "128", "--width", "128", "--steps", "4", "--warmup", "1",
            "--runs", str(a.images), "--num-prompts", str(a.images), "--no-repro"]
    arms = {
        "one process": [*base, "--threads", str(cpus)],
        "ray 1 actor": [*base, "--threads", str(cpus), "--ray", "local", "--ray-actors", "1"],
        f"ray {cpus} actors": [*base, "--threads", "1", "--ray", "local", "--ray-actors", str(cpus)],
    }
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in arms}
    names = list(arms)
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(a.repeats):
            for name in names[rep % len(names):] + names[:rep % len(names)]:
                got[name].append(run(arms[name], Path(tmp) / name.replace(" ", "_")))
    ref_wall = statistics.median(w for w, _ in got["one process"])
    ref_rate = statistics.median(r for _, r in got["one process"])
    print(f"{a.images} outputs of tiny-flux 128x128, 4 steps, {cpus} CPUs, median of {a.repeats} interleaved repeats")
    print(f"{'arm':<16} {'wall s':>8} {'x one':>7} {'outputs/s':>10} {'x one':>7}")
    for name, rows in got.items():
        wall = statistics.median(w for w, _ in rows)
        rate = statistics.median(r for _, r in rows)
        print(f"{name:<16} {wall:8.2f} {wall / ref_wall:7.2f} {rate:10.2f} {rate / ref_rate:7.2f}")


if __name__ == "__main__":
    main()
