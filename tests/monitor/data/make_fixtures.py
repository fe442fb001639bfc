"""How the calibration fixtures were made (run from the repository root; ~1 min on 2 CPU cores).

- ``sweep_first_block.json``: ``diffbench sweep --cache first-block --values 0.2 --height 64 --width 64
  --steps 8 --num-prompts 2 --runs 4 --warmup 1 --max-warmup 3 --threads 1 --no-ssim --budget 10 --json ...``
  (tiny-flux on the CPU; on a busy machine no point is measurably faster, so it has no working point).
- ``bench_first_block.json``: bench of the same deployment with the cache on (bench has no ``--cache``
  flag, so the sweep's CachedEngine wraps the engine, as ``sweep`` does; its EngineInfo.cache enters the
  fingerprint exactly as the sweep's points record it).
- ``bench_tiny_flux.json``: the same bench without the cache (another deployment: cache differs).
- ``bench_sim.json``: ``diffbench bench --engine sim --shapes 256x256,512x512 --runs 20 --warmup 1``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from diffbench.bench.protocol import BenchConfig
from diffbench.bench.session import BenchOptions, Shape, run_session
from diffbench.engines.registry import EngineConfig, create_engine
from diffbench.sweep.engine import CachedEngine

out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/monitor/data")
cfg = EngineConfig(engine="diffusers", model="tiny-flux", threads=1)
for name, cached in (("bench_first_block.json", True), ("bench_tiny_flux.json", False)):
    inner = create_engine(cfg)
    inner.start()
    engine = CachedEngine(inner)
    if cached:
        engine.set_cache("first-block", "0.2", 8)
    opts = BenchOptions(engine=cfg, shapes=[Shape(height=64, width=64)], steps=8, num_prompts=2,
                        protocol=BenchConfig(warmup=1, runs=6, repro=False), json_path=out / name)
    run_session(opts, engine=engine)
    engine.stop()
