"""Shape pools: one pool per shape class of a ``--workload`` mix, each planned at its own shape and share.

The planning rule (docs/guides/plan-a-deployment.md): a 1024² main pool, small pools for the rest — service times differ by orders of magnitude
between shapes, so a mixed pool's p99 is set by its slowest shape. A shape class is one distinct
(width, height, steps, frames) of the workload file that ``diffbench load`` takes (the CLI reads it with
``diffbench.load.client.workload.load_workload``; this package sees only the shapes, so ``plan`` does not
depend on the load tester); its rate is QPS × (its weight ÷ total weight).
Pools are sized independently; the total is the sum of their GPUs, and the node count is that of the
summed GPUs (pools share nodes; every instance still stays inside one node).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from diffbench.errors import ShapeError, UsageError
from diffbench.ledger.schema import Catalog
from diffbench.plan.models import PlanConfig, PlanResult, PoolRow, PoolsSummary

if TYPE_CHECKING:
    import numpy as np

Shape = tuple[int, int, int, "int | None", float]
"""(width px, height px, steps, frames or None, weight) of one workload entry."""


def shape_classes(shapes: Iterable[Shape]) -> list[Shape]:
    """(width, height, steps, frames, weight share) per distinct shape, largest share first; shares sum to 1.

    Raises:
        UsageError: no shape, or a weight that is not a finite number > 0.
    """
    shapes = list(shapes)
    if not shapes:
        raise UsageError("--workload: no shapes; give at least one entry under shapes")
    if any(not (math.isfinite(s[4]) and s[4] > 0) for s in shapes):
        raise UsageError("--workload: every shape weight must be a finite number > 0")
    total = sum(s[4] for s in shapes)
    acc: dict[tuple[int, int, int, int | None], float] = {}
    for w, h, st, fr, wt in shapes:
        key = (w, h, st, fr)
        acc[key] = acc.get(key, 0.0) + wt / total
    return sorted(((*k, share) for k, share in acc.items()), key=lambda x: -x[4])


def plan_pools(catalog: Catalog, cfg: PlanConfig, shapes: Iterable[Shape], workload: str | Path,
               service_samples: np.ndarray | None = None) -> PlanResult:
    """Plan every shape pool of ``shapes`` (:data:`Shape` rows of the workload file ``workload``) at its share
    of ``cfg.qps``; the result is the main (largest share) pool's plan with :attr:`PlanResult.pool_plan` holding
    every pool and the total.

    ``cfg``'s own width/height/steps/frames are replaced by each pool's shape.
    """
    from diffbench.plan.derive import plan

    rows: list[PoolRow] = []
    results: list[PlanResult] = []
    for width, height, steps, frames, share in shape_classes(shapes):
        pc = cfg.model_copy(update={"width": width, "height": height, "steps": steps, "frames": frames,
                                    "qps": cfg.qps * share})
        try:
            r = plan(catalog, pc, service_samples)
        except ShapeError as exc:
            label = f"{width}x{height}" + (f" frames {frames}" if frames else "") + f" steps {steps}"
            raise ShapeError(f"--workload {workload}: shape {label}: {exc}") from None
        results.append(r)
        shape = f"{width}x{height}" + (f"×{r.frames}f" if r.frames > 1 else "") + f", {steps} steps"
        rows.append(PoolRow(shape=shape, width=width, height=height, frames=r.frames, steps=steps,
                            weight_share=share, qps=pc.qps, latency_s=r.latency_s,
                            p99_s=r.sizing.p99_s if r.sizing is not None else None,
                            layout=r.parallel.label if r.parallel is not None else "1 GPU",
                            instances=r.instances, gpus_per_instance=r.gpus_per_instance, total_gpus=r.total_gpus,
                            slo_met=r.slo_met))
    total = sum(r.total_gpus for r in rows)
    summary = PoolsSummary(workload=str(workload), qps=cfg.qps, rows=rows, total_gpus=total,
                           nodes=math.ceil(total / cfg.gpus_per_node), all_slo_met=all(r.slo_met for r in rows))
    return results[0].model_copy(update={"pool_plan": summary})
