"""Benchmarks for `diffbench bench` (prints figures; compare within one run, never across machines).

1. Instrumentation overhead: tiny-flux at 256², bench's stage/step hooks (``StageTimer``, i.e.
   ``diffbench.monitor``'s instrumentation: CUDA events or host clock, VmHWM at stage boundaries, no sampling
   thread) vs a bare pipeline call, interleaved in one process with a bare-vs-bare noise floor. Target:
   median paired ratio <= 1.02.
2. Start-up: `diffbench --help` and `diffbench bench --engine sim` against `python -c pass`
   (no torch import on those paths).

Usage: python benchmarks/bench_bench.py [--runs N] [--threads T]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def overhead(runs: int, threads: int) -> None:
    import torch

    from diffbench.engines.base import GenerationRequest
    from diffbench.engines.registry import EngineConfig, create_engine
    from diffbench.engines.stage_timer import StageTimer

    engine = create_engine(EngineConfig(model="tiny-flux", threads=threads))
    engine.start()
    engine.instrumentation.detach()
    req = GenerationRequest(prompt="a lighthouse at dusk", height=256, width=256, steps=8)
    pipe = engine.pipe

    def bare() -> float:
        kw = engine.pipeline_kwargs(req)
        t0 = time.perf_counter_ns()
        with torch.inference_mode():
            pipe(**kw)  # no hooks at all
        return (time.perf_counter_ns() - t0) / 1e9

    def hooked() -> float:
        timer = StageTimer(pipe, "cpu")  # bench's hooks: diffbench.monitor's instrumentation (no FLOPs)
        kw = engine.pipeline_kwargs(req)
        t0 = time.perf_counter_ns()
        with torch.inference_mode():
            timer.run(kw, 1)
        t = (time.perf_counter_ns() - t0) / 1e9
        timer.detach()  # attach and detach stay outside the timed call
        return t

    arms = {"bare": bare, "bare2": bare, "hooked": hooked}
    for _ in range(3):  # warm up every arm
        for fn in arms.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in arms}
    names = list(arms)
    for i in range(runs):
        for name in names[i % 3:] + names[: i % 3]:  # interleaved, order rotated every round
            times[name].append(arms[name]())

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))

    load = os.getloadavg()
    print("== instrumentation overhead (tiny-flux 256x256, 8 steps, CPU) ==")
    print(f"load average        : {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    print(f"runs per mode       : {runs} (interleaved, rotated); torch threads {torch.get_num_threads()}")
    print(f"bare median         : {statistics.median(times['bare']) * 1e3:.2f} ms")
    print(f"hooked median       : {statistics.median(times['hooked']) * 1e3:.2f} ms")
    print(f"noise floor         : {ratio('bare2', 'bare'):.4f}  (median paired ratio bare2/bare)")
    print(f"median paired ratio : {ratio('hooked', 'bare'):.4f}  (hooked/bare, target <= 1.02)")


def _wall(cmd: list[str], reps: int = 5) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def startup() -> None:
    py = sys.executable
    base = _wall([py, "-c", "pass"])
    help_t = _wall([py, "-m", "diffbench.cli.main", "--help"])
    sim_t = _wall(
        [py, "-m", "diffbench.cli.main", "bench", "--engine", "sim", "--runs", "5", "--warmup", "1"]
    )
    probe = (
        "import sys\nfrom diffbench.cli.main import main\n"
        "main(['bench', '--engine', 'sim', '--runs', '5', '--warmup', '1'])\n"
        "print('torch imported:', 'torch' in sys.modules, file=sys.stderr)"
    )
    torch_line = (
        subprocess.run([py, "-c", probe], capture_output=True, text=True).stderr.strip().splitlines()[-1]
    )
    print("== start-up (median of 5) ==")
    print(f"python -c pass                 : {base * 1e3:.0f} ms")
    print(f"diffbench --help               : {help_t * 1e3:.0f} ms  ({help_t / base:.1f}x python -c pass)")
    print(f"diffbench bench --engine sim   : {sim_t * 1e3:.0f} ms  ({sim_t / base:.1f}x python -c pass)")
    print(f"bench --engine sim -> {torch_line}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: least contention)")
    args = ap.parse_args()
    startup()
    overhead(args.runs, args.threads)
