"""``plan --max-batch B``: the batch limit that maximises throughput per GPU under the p99 SLO with queueing.

For each limit b = 1..B (stopping at the first that does not fit one GPU's memory): the ledger gives the time
S(k) of a batch of k = 1..b requests (GEMMs batched, attention, text encode and VAE decode per sample;
:mod:`diffbench.ledger.timing`), and :func:`diffbench.queueing.batching.size_batched_pool` the smallest GPU
count whose simulated p99 latency meets the SLO when each GPU serves up to b queued requests per batch
(greedy: a free GPU takes whatever is queued, up to b; it never waits to fill a batch). The headline count
of a limit is max(formula ⌈QPS × S(b)/b × headroom⌉, queue count), as for one request per GPU
(:mod:`diffbench.plan.sizing`).

Choice: among the limits meeting the SLO, the fewest GPUs (the most throughput per GPU at this rate), then
the smaller limit (lower latency at low load). Batching is planned for one-GPU instances only.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from diffbench.ledger.account import LedgerConfig, evaluate
from diffbench.ledger.schema import Catalog
from diffbench.plan.models import BatchPlan, BatchRow, PlanConfig
from diffbench.plan.sizing import MAX_SIM_REQUESTS, LayoutSizing, service_for

if TYPE_CHECKING:
    import numpy as np

    from diffbench.queueing.batching import BatchedSizing

POLICY = ("greedy batching: requests queue FCFS; a GPU that frees (or is idle when a request arrives) serves "
          "whatever is queued, up to the batch limit, as one batch; it never waits to fill a batch")


def plan_batch(catalog: Catalog, cfg: PlanConfig, lc: LedgerConfig, samples: np.ndarray | None,
               ) -> tuple[BatchPlan, LayoutSizing | None]:
    """Batch limits 1..``cfg.max_batch`` for the plan's one-GPU configuration ``lc``.

    Returns (the table with the chosen limit, the chosen limit's sizing; None when no limit meets the SLO).
    ``samples``: a measured run whose spread (rescaled to a mean of 1) multiplies each batch's time; None:
    normal with ``cfg.service_cv``.
    """
    from diffbench.queueing.batching import max_rate_one_worker, size_batched_pool

    factor, spread = service_for(1.0, cfg.service_cv, samples)
    batch_s: list[float] = []
    rows: list[BatchRow] = []
    sized: dict[int, tuple[int, BatchedSizing]] = {}  # batch -> (GPUs, its queue sizing)
    for b in range(1, cfg.max_batch + 1):
        r = evaluate(catalog, lc.model_copy(update={"batch": b}))
        row = BatchRow(batch=b, batch_s=r.total_time_s, saturation_per_gpu=b / r.total_time_s, fits=r.fits,
                       peak_memory_bytes=r.peak_memory_bytes)
        if not r.fits:
            rows.append(row)
            break
        batch_s.append(r.total_time_s)
        n = min(max(40_000, 200 * math.ceil(cfg.qps * r.total_time_s / b)), MAX_SIM_REQUESTS)
        z = size_batched_pool(cfg.qps, batch_s, factor, cfg.slo_p99_s, cfg.headroom, requests=n)
        inst = max(z.formula_instances, z.instances) if z.instances is not None else z.formula_instances
        row = row.model_copy(update={"instances": inst, "total_gpus": inst, "p99_s": z.p99_s,
                                     "mean_batch": z.mean_batch, "throughput_per_gpu": cfg.qps / inst,
                                     "meets_slo": z.meets_slo})
        rows.append(row)
        if z.meets_slo:
            sized[b] = (inst, z)
    if not sized:
        return BatchPlan(max_batch=cfg.max_batch, chosen_batch=1, rows=rows, max_qps_per_gpu=0.0,
                         policy=POLICY), None
    best = min(sized, key=lambda b: (sized[b][0], b))
    rows = [row.model_copy(update={"chosen": row.batch == best}) for row in rows]
    gpus, z = sized[best]
    sizing = LayoutSizing(label=f"1 GPU, batch ≤ {best}", gpus_per_instance=1, latency_s=batch_s[0],
                          service_p99_s=z.service_p99_s, formula_instances=z.formula_instances,
                          queue_instances=z.instances, instances=gpus, total_gpus=gpus,
                          nodes=math.ceil(gpus / cfg.gpus_per_node), p99_s=z.p99_s, meets_slo=True,
                          spread=f"{spread}; batches of up to {best}")
    peak = max_rate_one_worker(batch_s[:best], factor, cfg.slo_p99_s)
    return BatchPlan(max_batch=cfg.max_batch, chosen_batch=best, rows=rows, max_qps_per_gpu=peak,
                     policy=POLICY), sizing
