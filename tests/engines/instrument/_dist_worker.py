"""Worker of test_ranks (a module, so torch.multiprocessing.spawn can import it in the child)."""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path

import torch

PLACEMENTS = ("before", "between", "after")
"""Where the slow rank spends its extra time in a denoiser forward: before its first collective, between
the all-to-all and the all-gather, or after the all-gather (the step's last collective)."""


class CollectiveDenoiser(torch.nn.Module):
    """A forward with two collectives, as a sequence-parallel attention has: ``dist.all_to_all_single``
    (blocking), then ``funcol.all_gather_single`` (an async tensor, waited with ``.wait()``). ``sleep`` maps
    a placement to the seconds this rank sleeps there."""

    def __init__(self, sleep: dict[str, float]) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8, bias=False)
        self.sleep = sleep

    def _pause(self, where: str) -> None:
        if self.sleep.get(where):
            time.sleep(self.sleep[where])

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist
        import torch.distributed._functional_collectives as funcol

        world = dist.get_world_size()
        self._pause("before")
        y = self.lin(hidden_states)
        out = torch.empty(world * y.shape[0], y.shape[1])
        dist.all_to_all_single(out, y.repeat(world, 1))
        self._pause("between")
        gather = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor  # the newer name
        gathered = gather(out, gather_dim=0, group=dist.group.WORLD)
        gathered = gathered.wait() if hasattr(gathered, "wait") else gathered
        self._pause("after")
        return y + 0.0 * gathered[: y.shape[0]]


def run(rank: int, world: int, outdir: str, cases: list[tuple[str, str | None, int, float, int]]) -> None:
    """Run one request of ``steps`` steps per case ``(name, placement, slow rank, seconds, steps)`` (placement
    None: equal ranks, both sleeping ``seconds`` between the collectives) after a warm-up, and write ``rank{rank}.json``: for each case the step times
    and the compute times this rank reported, and the ranks it reported them for."""
    import torch.distributed as dist

    from diffbench.engines.instrument.pipeline import attach

    from .toypipe import ToyPipe

    # A file store, not tcp://: with a TCP store rank 0 hosts the store and may tear it down while rank 1
    # is still inside destroy_process_group, which aborted rank 1 once on a loaded machine ("terminate
    # called without an active exception", SIGABRT).
    dist.init_process_group("gloo", init_method=Path(outdir, "pg_store").resolve().as_uri(), rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    try:
        warm = attach(ToyPipe(CollectiveDenoiser({})), device="cpu", flops=False)
        warm.run({"num_inference_steps": 2}, 1, traffic="warmup")  # first-call costs, as a server's warmup
        warm.detach()
        result = {}
        for name, placement, slow, seconds, steps in cases:
            if placement is None:
                sleep = {"between": seconds}
            else:
                sleep = {placement: seconds} if rank == slow else {}
            pipe = ToyPipe(CollectiveDenoiser(sleep))
            inst = attach(pipe, device="cpu", flops=False)
            dist.barrier()  # outside the request: not a step's collective; lines the ranks up
            _, st, _, sig = inst.run({"num_inference_steps": steps}, 1)
            inst.detach()
            result[name] = {"step_s": st.step_s, "compute_s": sig.rank_compute_s.get(rank),
                            "keys": list(sig.rank_compute_s)}
        Path(outdir, f"rank{rank}.json").write_text(json.dumps(result))
        dist.barrier()
    finally:
        dist.destroy_process_group()
