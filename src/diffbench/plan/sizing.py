"""Queueing-aware capacity of one layout: the planning formula next to the smallest count meeting the p99.

- **formula**: ``instances = ⌈QPS × latency × headroom⌉`` (docs/guides/plan-a-deployment.md), on the *occupied* time of an
  instance (one request holds all its GPUs for its whole latency, so a multi-GPU layout's inefficiency is
  paid in GPUs: occupied GPU·s = latency × GPUs per instance);
- **queue**: :func:`diffbench.queueing.sizing.size_pool`, the smallest ``c`` whose simulated p99 latency
  (waiting + service, M/G/c FCFS, Poisson arrivals) meets the SLO.

The headline count is the larger of the two (the formula keeps its headroom; the queue may need more when
the service time is near the SLO). The service-time spread comes from a measured ``bench`` JSON rescaled
to the plan's mean (its coefficient of variation is kept), or from a normal distribution with a default
coefficient of variation :data:`DEFAULT_CV` (an estimate, flagged in the plan).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from diffbench.errors import InputError

if TYPE_CHECKING:  # numpy and the simulator load when a plan is sized, not when the CLI starts
    import numpy as np

    from diffbench.queueing.service_time import ServiceTime

DEFAULT_CV = 0.05
MAX_SIM_REQUESTS = 200_000
"""Simulated requests per candidate count are capped (size_pool's default is 200 × the formula's count): at
10,000 QPS the default would hold ~4.5 M requests per count (over 1 GB, ~30 s per plan). Past ~500 instances the
pool is large enough that arrivals average out and the formula's headroom, not the queue, sets the count."""
CV_SOURCE = ("estimate: one shape at fixed steps on a warm (compiled) pipeline varies by a few per cent; "
             "DiffusionRankStepSkew in monitoring/alerts.yaml fires at a per-rank compute spread over 10 % (and 2 ms); confirm with "
             "`diffbench bench --runs 30` and pass it as --service-from")


class LayoutSizing(BaseModel):
    """Capacity of one layout at a request rate (seconds, instances, GPUs)."""

    label: str
    gpus_per_instance: int
    latency_s: float
    service_p99_s: float
    formula_instances: int
    queue_instances: int | None
    instances: int
    total_gpus: int
    nodes: int
    p99_s: float
    meets_slo: bool
    spread: str


def load_bench_samples(path: str | Path) -> np.ndarray:
    """Per-request seconds of a measured run for ``--service-from`` (a ``bench`` JSON, or what
    :func:`~diffbench.queueing.service_time.load_service_samples` reads).

    Raises:
        InputError: unreadable, no latencies, or a JSON result of another kind (e.g. a plan or a ledger).
    """
    from diffbench.queueing.service_time import load_service_samples

    p = Path(path)
    if p.suffix == ".json" and p.is_file():
        try:
            kind = json.loads(p.read_text(encoding="utf-8")).get("kind")
        except (ValueError, AttributeError, OSError, UnicodeDecodeError):
            kind = None  # load_service_samples reports unreadable or invalid JSON with the line
        if isinstance(kind, str) and not kind.startswith("diffbench.bench"):
            raise InputError(f"--service-from {p}: a {kind} result, not a bench result; pass the --json of "
                             "`diffbench bench` (per-request latencies)")
    return load_service_samples(p).samples


MIN_SAMPLES = 30
MAX_CV = 0.25


def sample_warnings(samples: np.ndarray | None) -> list[str]:
    """What makes a ``--service-from`` spread doubtful: fewer than :data:`MIN_SAMPLES` runs, or a coefficient of
    variation above :data:`MAX_CV` (a warm single-shape bench at low load varies by a few per cent; more means
    mixed shapes, a loaded run with queueing in it, or a busy machine)."""
    if samples is None:
        return []
    out = []
    n = int(samples.size)
    if n < MIN_SAMPLES:
        out.append(f"--service-from: {n} latencies: the spread (and the p99 built on it) rests on too few runs; "
                   f"measure at least {MIN_SAMPLES} (diffbench bench --runs 30)")
    mean = float(samples.mean()) if n else 0.0
    cv = float(samples.std() / mean) if n and mean > 0 else 0.0
    if cv > MAX_CV:
        out.append(f"--service-from: coefficient of variation {cv:.2f} > {MAX_CV}: mixed shapes, a loaded run (its "
                   "latencies include queueing) or a busy machine? pass a warm single-shape bench at low load")
    return out


def source_warnings(path: str | Path, model_id: str, model_display: str, gpu_id: str) -> list[str]:
    """A bench JSON of another model or device than the plan's (its spread is still used, rescaled)."""
    from diffbench.ledger.calibrate import device_name, gpu_matches, model_matches

    p = Path(path)
    if p.suffix != ".json":
        return []
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (ValueError, OSError, UnicodeDecodeError):
        return []
    if not isinstance(data, dict) or not str(data.get("kind", "")).startswith("diffbench.bench"):
        return []
    out = []
    bench_model = str((data.get("conditions") or {}).get("model") or "?")
    if not model_matches(model_id, model_display, bench_model):
        out.append(f"--service-from {p.name}: measured {bench_model!r}, not {model_display}; its spread is used "
                   "rescaled to the plan's latency")
    device = device_name(data)
    if not gpu_matches(gpu_id, device):
        out.append(f"--service-from {p.name}: measured on {device!r}, not on {gpu_id}; its spread is used rescaled "
                   "to the plan's latency")
    return out


def service_for(mean_s: float, cv: float, samples: np.ndarray | None) -> tuple[ServiceTime, str]:
    """The service-time distribution of a layout whose mean latency is ``mean_s`` seconds.

    ``samples`` (seconds, a measured run) are rescaled to ``mean_s`` (shape and coefficient of variation
    kept); otherwise ``N(mean, cv × mean)`` (clipped at 0 s), or a constant when ``cv`` is 0.
    """
    import numpy as np

    from diffbench.queueing.service_time import EmpiricalService, parse_service

    if samples is not None and samples.size:
        scaled = np.asarray(samples, dtype=np.float64) * (mean_s / float(samples.mean()))
        cv_meas = float(scaled.std() / scaled.mean()) if scaled.mean() > 0 else 0.0
        return EmpiricalService(scaled, "bench, rescaled"), f"measured spread (CV {cv_meas:.3f}, n={samples.size})"
    if cv == 0:
        return parse_service(f"{mean_s:.12g}"), "constant service time (CV 0)"
    return parse_service(f"N({mean_s:.12g},{cv * mean_s:.12g})"), f"normal, CV {cv:g} (estimate)"


def size_layout(label: str, qps: float, latency_s: float, gpus_per_instance: int, slo_p99_s: float,
                headroom: float, gpus_per_node: int, cv: float = DEFAULT_CV,
                samples: np.ndarray | None = None) -> LayoutSizing:
    """Instances and GPUs of one layout: max(formula on occupied time, smallest count meeting the p99)."""
    from diffbench.queueing.sizing import formula_instances, size_pool

    service, spread = service_for(latency_s, cv, samples)
    n = min(max(40_000, 200 * formula_instances(qps, latency_s, headroom)), MAX_SIM_REQUESTS)
    pool = size_pool(qps, service, slo_p99_s, headroom, requests=n)
    formula = pool.formula_instances  # ⌈QPS × latency × headroom⌉: occupied time, one instance per request
    if pool.instances is None:
        inst, p99 = formula, pool.p99_at_formula_s
    elif pool.instances > formula:
        inst, p99 = pool.instances, pool.p99_s
    else:
        inst, p99 = formula, pool.p99_at_formula_s
    total = inst * gpus_per_instance
    return LayoutSizing(label=label, gpus_per_instance=gpus_per_instance, latency_s=latency_s,
                        service_p99_s=pool.service_p99_s, formula_instances=formula,
                        queue_instances=pool.instances, instances=inst, total_gpus=total,
                        nodes=math.ceil(total / gpus_per_node), p99_s=p99,
                        meets_slo=pool.instances is not None and p99 <= slo_p99_s, spread=spread)
