"""Worker of test_instrument_ranks (a module, so torch.multiprocessing.spawn can import it in the child)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path


def run(rank: int, world: int, port: int, outdir: str, sleep_s: float, steps: int) -> None:
    import torch.distributed as dist

    from diffbench.engines.instrument.pipeline import attach

    from .toypipe import ToyDenoiser, ToyPipe

    # A file store, not tcp://: with a TCP store rank 0 hosts the store and may tear it down while rank 1
    # is still inside destroy_process_group, which aborted rank 1 once on a loaded machine ("terminate
    # called without an active exception", SIGABRT). ``port`` is kept for the caller's signature.
    del port
    dist.init_process_group("gloo", init_method=Path(outdir, "pg_store").resolve().as_uri(), rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    try:
        pipe = ToyPipe(ToyDenoiser(gather_after_s=sleep_s if rank == 1 else 0.0))
        inst = attach(pipe, device="cpu", flops=False)
        dist.barrier()  # outside the request: not a step's collective; lines the ranks up
        _, st, _, sig = inst.run({"num_inference_steps": steps}, 1)
        inst.detach()
        Path(outdir, f"rank{rank}.json").write_text(json.dumps(
            {"step_s": st.step_s, "compute_s": sig.rank_compute_s.get(rank), "keys": list(sig.rank_compute_s)}))
        dist.barrier()
    finally:
        dist.destroy_process_group()
