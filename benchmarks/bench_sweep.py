"""Overhead of ``diffbench sweep`` versus the same generations as plain diffusers calls, in the same run.

Both sides use one started tiny pipeline. The sweep side runs :func:`diffbench.sweep.runner.run_sweep` (one
First-Block-Cache value): baseline (warmup + timed runs), noise floor (one pass over prompts × seeds) and the
point (warmup + timed runs), with everything the machinery adds: stage-timer hooks, device sync, the skip
probe, PNG outputs + manifests, PSNR/SSIM per image, the bootstrap and the SQLite store. The direct side
makes exactly the same ``pipe(**kwargs)`` calls in a loop (cache enabled with ``enable_cache`` for the point
part). The two alternate ``--repeats`` times; the median over repeats of the back-to-back ratio of total wall
time is printed (pairs cancel slow drifts in machine load).

Target: ratio <= 1.05.

    .venv/bin/python benchmarks/bench_sweep.py [--model tiny-flux] [--size 128] [--steps 20] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def _direct(engine: Any, reqs: list[Any], warmup: int, runs: int, threshold: float) -> float:
    import torch
    from diffusers.hooks import FirstBlockCacheConfig

    pipe = engine.pipe
    kwargs = [engine.pipeline_kwargs(r) for r in reqs]

    def calls(n: int) -> None:
        for i in range(n):
            kw = dict(kwargs[i % len(kwargs)])
            kw["generator"] = torch.Generator("cpu").manual_seed(reqs[i % len(reqs)].seed)
            pipe(**kw)

    t0 = time.perf_counter()
    with torch.inference_mode():
        calls(warmup + runs)  # baseline
        calls(len(reqs))  # noise floor
        pipe.transformer.enable_cache(FirstBlockCacheConfig(threshold=threshold))
        try:
            calls(warmup + runs)  # the point
        finally:
            pipe.transformer.disable_cache()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny-flux")
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    from diffbench.engines.diffusers_engine import DiffusersEngine
    from diffbench.engines.registry import EngineConfig
    from diffbench.store.runs import RunStore
    from diffbench.sweep.models import SweepOptions
    from diffbench.sweep.runner import requests_for, run_sweep

    cfg = EngineConfig(model=args.model)
    engine = DiffusersEngine(cfg)
    engine.start()

    class Kept:  # the started engine, kept alive across sweeps (stop() is a no-op)
        def __getattr__(self, name: str) -> Any:
            return getattr(engine, name)

        def start(self) -> Any:
            return engine.info()

        def stop(self) -> None:
            return None

    opts = SweepOptions(engine=cfg, axis="first-block", values=["0.1"], height=args.size, width=args.size,
                        steps=args.steps, num_prompts=args.prompts, warmup=args.warmup, runs=args.runs,
                        resume=False)
    reqs = requests_for(opts, engine.info())
    _direct(engine, reqs, 1, 0, 0.1)  # first-call costs out of the way for both sides
    sweep_s, direct_s = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            with RunStore.open(Path(tmp) / f"s{i}.sqlite") as st:
                t0 = time.perf_counter()
                run_sweep(opts, st, engine_factory=lambda _c: Kept())  # type: ignore[arg-type,return-value]
                sweep_s.append(time.perf_counter() - t0)
            direct_s.append(_direct(engine, reqs, args.warmup, args.runs, 0.1))
    s, d = statistics.median(sweep_s), statistics.median(direct_s)
    pair = statistics.median(a / b for a, b in zip(sweep_s, direct_s, strict=True))
    gens = 2 * (args.warmup + args.runs) + len(reqs)
    print(f"{args.model} {args.size}x{args.size} {args.steps} steps, {gens} generations per side, "
          f"{args.repeats} repeats")
    print(f"sweep machinery : {s:.3f} s (median; all {', '.join(f'{x:.3f}' for x in sweep_s)})")
    print(f"direct diffusers: {d:.3f} s (median; all {', '.join(f'{x:.3f}' for x in direct_s)})")
    print(f"ratio sweep/direct = {pair:.3f} (median of the {args.repeats} back-to-back pairs; ratio of medians "
          f"{s / d:.3f}; target <= 1.05)")


if __name__ == "__main__":
    main()
