"""Benchmarks for `diffbench bench` (prints figures; compare within one run, never across machines).

1. Instrumentation overhead: tiny-flux at 256², stage/step hooks + RSS sampler on vs a bare pipeline
   call, interleaved in one process. Target: median ratio <= 1.02.
2. Start-up: `diffbench --help` and `diffbench bench --engine sim` against `python -c pass`
   (no torch import on those paths).

Usage: python benchmarks/bench_bench.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def overhead(runs: int) -> None:
    import torch

    from diffbench.engines.base import GenerationRequest
    from diffbench.engines.registry import EngineConfig, create_engine
    from diffbench.engines.stage_timer import StageTimer

    engine = create_engine(EngineConfig(model="tiny-flux"))
    engine.start()
    engine.timer.detach()
    req = GenerationRequest(prompt="a lighthouse at dusk", height=256, width=256, steps=8)
    kwargs = engine.pipeline_kwargs(req)
    pipe = engine.pipe

    def bare() -> float:
        kw = engine.pipeline_kwargs(req)
        t0 = time.perf_counter_ns()
        with torch.inference_mode():
            pipe(**kw)
        return (time.perf_counter_ns() - t0) / 1e9

    def hooked() -> float:
        timer = StageTimer(pipe, "cpu")
        kw = engine.pipeline_kwargs(req)
        t0 = time.perf_counter_ns()
        with torch.inference_mode():
            timer.run(kw, 1)
        t = (time.perf_counter_ns() - t0) / 1e9
        timer.detach()
        return t

    for _ in range(3):  # warm up both paths
        bare()
        hooked()
    on, off = [], []
    for i in range(runs):
        if i % 2:
            on.append(hooked())
            off.append(bare())
        else:
            off.append(bare())
            on.append(hooked())
    ratios = [a / b for a, b in zip(on, off, strict=True)]
    del kwargs
    print("== instrumentation overhead (tiny-flux 256x256, 8 steps, CPU) ==")
    print(f"runs per mode       : {runs} (interleaved)")
    print(f"bare median         : {statistics.median(off) * 1e3:.2f} ms")
    print(f"hooked median       : {statistics.median(on) * 1e3:.2f} ms")
    print(f"ratio of medians    : {statistics.median(on) / statistics.median(off):.4f}  (target <= 1.02)")
    print(f"median paired ratio : {statistics.median(ratios):.4f}")


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
    args = ap.parse_args()
    startup()
    overhead(args.runs)
