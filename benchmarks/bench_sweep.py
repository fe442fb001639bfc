"""Overhead of ``diffbench sweep`` versus the same generations as plain diffusers calls, in the same run.

Both sides use one started tiny pipeline. The sweep side runs :func:`diffbench.sweep.runner.run_sweep` (one
First-Block-Cache value by default): baseline outputs, the quality noise floor, warmup until stable for the
baseline and the value, then the interleaved timed blocks (the cache switched on and off between runs), with
everything the machinery adds: stage-timer hooks, device sync, cache-state resets, the skip probe, PNG
outputs + manifests, PSNR/SSIM per image, the bootstraps and the SQLite store. While it runs, every
generation is logged as (request, cache on/off). The direct side then **replays exactly that sequence** as
``pipe(**kwargs)`` calls (``enable_cache`` / ``disable_cache`` where the sweep switched), so both sides make
the same diffusers calls, whatever the adaptive warmup decided. The two alternate ``--repeats`` times; the
median over repeats of the back-to-back ratio of total wall time is printed (pairs cancel slow drifts in
machine load).

Target: ratio <= 1.05. Prompt-truncation warnings are printed once per kind (diffbench.engines.logonce).

    .venv/bin/python benchmarks/bench_sweep.py [--model tiny-flux] [--size 128] [--steps 20] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def _direct(engine: Any, calls: list[tuple[Any, bool]], threshold: float) -> float:
    """Replay ``calls`` ((request, cache on?) in the sweep's order) as plain pipeline calls; seconds."""
    import torch
    from diffusers.hooks import FirstBlockCacheConfig

    pipe = engine.pipe
    on = False
    t0 = time.perf_counter()
    with torch.inference_mode():
        try:
            for req, cached in calls:
                if cached != on:
                    if cached:
                        pipe.transformer.enable_cache(FirstBlockCacheConfig(threshold=threshold))
                    else:
                        pipe.transformer.disable_cache()
                    on = cached
                kw = dict(engine.pipeline_kwargs(req))
                kw["generator"] = torch.Generator("cpu").manual_seed(req.seed)
                pipe(**kw)
        finally:
            if on:
                pipe.transformer.disable_cache()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny-flux")
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--runs", type=int, default=24)
    ap.add_argument("--threshold", type=float, default=0.1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (both sides)")
    args = ap.parse_args()

    from diffbench.engines.diffusers_engine import DiffusersEngine
    from diffbench.engines.registry import EngineConfig
    from diffbench.store.runs import RunStore
    from diffbench.sweep.models import SweepOptions
    from diffbench.sweep.runner import run_sweep

    cfg = EngineConfig(model=args.model, threads=args.threads)
    engine = DiffusersEngine(cfg)
    engine.start()
    log: list[tuple[Any, bool]] = []

    class Kept:  # the started engine, kept alive across sweeps (stop() is a no-op); logs every generation
        def __getattr__(self, name: str) -> Any:
            return getattr(engine, name)

        def start(self) -> Any:
            return engine.info()

        def generate(self, request: Any) -> Any:
            log.append((request, bool(getattr(engine.pipe.transformer, "is_cache_enabled", False))))
            return engine.generate(request)

        def stop(self) -> None:
            return None

    opts = SweepOptions(engine=cfg, axis="first-block", values=[format(args.threshold, "g")], height=args.size,
                        width=args.size, steps=args.steps, num_prompts=args.prompts, warmup=args.warmup,
                        runs=args.runs, resume=False)
    sweep_s, direct_s, gens = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        with RunStore.open(Path(tmp) / "first.sqlite") as st:  # first-call costs out of the way for both sides
            run_sweep(opts, st, engine_factory=lambda _c: Kept())  # type: ignore[arg-type,return-value]
        _direct(engine, log, args.threshold)
        for i in range(args.repeats):
            log.clear()
            with RunStore.open(Path(tmp) / f"s{i}.sqlite") as st:
                t0 = time.perf_counter()
                res = run_sweep(opts, st, engine_factory=lambda _c: Kept())  # type: ignore[arg-type,return-value]
                sweep_s.append(time.perf_counter() - t0)
            gens.append(len(log))
            direct_s.append(_direct(engine, list(log), args.threshold))
    s, d = statistics.median(sweep_s), statistics.median(direct_s)
    pair = statistics.median(a / b for a, b in zip(sweep_s, direct_s, strict=True))
    warm = ", ".join(f"{k} {len(v)}" for k, v in res.warmup_s.items())
    print(f"{args.model} {args.size}x{args.size} {args.steps} steps, {args.runs} interleaved blocks, generations "
          f"per side {gens} (warmup runs in the last: {warm}), {args.repeats} repeats")
    print(f"sweep machinery : {s:.3f} s (median; all {', '.join(f'{x:.3f}' for x in sweep_s)})")
    print(f"direct diffusers: {d:.3f} s (median; all {', '.join(f'{x:.3f}' for x in direct_s)})")
    print(f"ratio sweep/direct = {pair:.3f} (median of the {args.repeats} back-to-back pairs; ratio of medians "
          f"{s / d:.3f}; target <= 1.05)")


if __name__ == "__main__":
    main()
