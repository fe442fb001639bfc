"""Pieces the three drills share beyond :mod:`.core`: the local Prometheus over the drill targets,
user traffic in a thread, calibration from a live service's own ``/metrics``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from diffbench.monitor.drills.core import DrillOptions, parse_scrape, sample_sum
from diffbench.monitor.drills.harness import DrillError, Reply, Service
from diffbench.monitor.promserver import PromServer, Target

SERVICE_JOB = "diffusion"
PROBE_JOB = "diffusion-probe"


def prometheus_for(opts: DrillOptions, rules: dict[str, Any], targets: list[Target]) -> PromServer:
    return PromServer(targets, rules=rules, scrape_s=opts.scrape_s, eval_s=opts.scrape_s)


class Traffic:
    """Sends ``make()`` requests one after another (a pause of ``gap_s`` between them) until stopped or
    ``max_requests`` sent; keeps every :class:`Reply`."""

    def __init__(self, make: Callable[[], Reply], *, gap_s: float = 0.3, max_requests: int = 2000) -> None:
        self.make = make
        self.gap_s = gap_s
        self.max_requests = max_requests
        self.replies: list[tuple[float, Reply]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drill-traffic", daemon=True)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)

    def _run(self) -> None:
        while not self._stop.is_set() and len(self.replies) < self.max_requests:
            try:
                self.replies.append((time.monotonic(), self.make()))
            except DrillError as exc:
                self.errors.append(str(exc))
                if len(self.errors) > 5:
                    return
            self._stop.wait(self.gap_s)


def baselines_between(before: str, after: str, size: str) -> dict[str, Any]:
    """The service's own means for shape ``size`` between two ``/metrics`` scrapes (text format).

    Returns ``{"step_s", "stages": {text_encode, denoise, vae_decode}, "cache_hit_ratio" (None without cache
    decisions), "cache_lookups", "cache_hits", "requests"}``: each mean is the growth of the family's
    ``_sum`` over the growth of its ``_count`` for the shape label, i.e. what the rules' ``rate(_sum) /
    rate(_count)`` compare.

    Raises:
        DrillError: no denoise step of the shape between the two scrapes.
    """
    b, a = parse_scrape(before), parse_scrape(after)

    def delta(name: str, **labels: str) -> float:
        return sample_sum(a, name, **labels) - sample_sum(b, name, **labels)

    count = delta("diffusion_denoise_step_duration_seconds_count", shape=size)
    if count <= 0:
        raise DrillError(f"the service exported no denoise steps for shape {size} between the two scrapes "
                         "(is it in --shapes?)")
    stages = {}
    for stage in ("text_encode", "denoise", "vae_decode"):
        c = delta("diffusion_stage_duration_seconds_count", shape=size, stage=stage)
        stages[stage] = delta("diffusion_stage_duration_seconds_sum", shape=size, stage=stage) / c if c else 0.0
    lookups = delta("diffusion_cache_lookups_total", shape=size)
    hits = delta("diffusion_cache_hits_total", shape=size)
    return {
        "step_s": delta("diffusion_denoise_step_duration_seconds_sum", shape=size) / count,
        "stages": stages,
        "cache_hit_ratio": hits / lookups if lookups else None,
        "cache_lookups": lookups,
        "cache_hits": hits,
        "requests": delta("diffusion_request_duration_seconds_count", shape=size, traffic="user"),
    }


def write_calibration(path: Path, svc: Service, *, size: str, steps: int, base: dict[str, Any],
                      slo_s: float, psnr_threshold_db: float | None = None, probe: str = "default",
                      sources: list[str] | None = None) -> Any:
    """Write a calibration file (:class:`diffbench.monitor.calibration.Calibration`) for the running
    service: its fingerprint from ``/v1/models``, the measured baselines of ``size``, the SLO, and the
    probe threshold. Returns the model."""
    from diffbench.core.jsonio import write_json_atomic
    from diffbench.monitor.calibration import Calibration, ShapeBaseline, StageBaselines, fingerprint_id

    card = svc.card()
    fp = card.get("fingerprint")
    if not isinstance(fp, dict):
        raise DrillError("GET /v1/models has no fingerprint: the service predates the monitor exporter")
    ratio = base.get("cache_hit_ratio")
    cal = Calibration(
        model=card["id"], fingerprint=fp, fingerprint_id=fingerprint_id(fp), slo_s=slo_s,
        shapes={size: ShapeBaseline(step_s=base["step_s"], steps=steps, stages=StageBaselines(**base["stages"]),
                                    cache_hit_ratio=ratio if ratio else None)},
        probes={} if psnr_threshold_db is None else {probe: {"psnr_threshold_db": psnr_threshold_db}},
        sources=sources or [f"diffbench drill: {base['requests']:g} user requests at {size}, {steps} steps, "
                            "read from the service's own /metrics"],
    )
    write_json_atomic(path, cal.model_dump(mode="json"))
    return cal


def client_p99(latencies: list[float]) -> float | None:
    """The 0.99 quantile of client latencies (numpy's linear interpolation), None when empty."""
    import numpy as np

    return float(np.quantile(np.asarray(latencies), 0.99)) if latencies else None
