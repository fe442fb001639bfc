"""Per-request latency objectives (SLOs) and their attainment, as vLLM-Omni's diffusion benchmark defines them.

Rule (vllm-project/vllm-omni ``benchmarks/diffusion/diffusion_benchmark_serving.py``@0010aacf,
``_infer_slo_base_time_ms_from_warmups`` / ``_compute_expected_latency_ms_from_base`` /
``_populate_slo_ms_from_warmups``): a request's own ``slo_ms`` from the trace is kept; otherwise

- work units of a shape ``u = max(width x height / 16², 1) x frames x steps`` (frames 1 for an image);
- base unit time ``b = median over the successful warm-up requests of latency / u`` (seconds; here over the
  *last* ok warm-up request of each shape, :func:`last_per_shape`: the first of a shape may pay compilation
  and one-off costs, so ``--warmup 2`` gives a base free of them);
- ``slo = b x u x slo_scale`` (vLLM-Omni's ``--slo-scale``, default 3 there; here required to turn it on).

Attainment of a row: requests that have an SLO, and among them those that succeeded within it; vLLM-Omni's
``slo_attainment_rate`` is ``met / defined``, failures counted as not met. Here the latency compared is the
latency **from the intended arrival** (``done - intended``: client queueing and send lag included); vLLM-Omni
measures from its own request function's start. Its warm-up runs at 2 steps (and 1 frame for t2v); here
the warm-up runs each workload shape as measured, so the base is fitted on the real shapes (see docs/concepts/measurement-protocol.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from diffbench.core.records import RequestRecord
from diffbench.errors import UsageError
from diffbench.load.client.workload import ShapeMix

AREA_UNIT_PX = 16 * 16


def work_units(shape: ShapeMix) -> float:
    """``max(width x height / 256, 1) x frames x steps`` (frames 1 when None): vLLM-Omni's scaling units."""
    area = max(shape.width * shape.height / AREA_UNIT_PX, 1.0)
    return area * (shape.frames or 1) * shape.steps


def base_unit_s(samples: Iterable[tuple[ShapeMix, float]]) -> float | None:
    """Median of ``latency_s / work_units(shape)`` over (shape, latency in seconds) samples; None when empty."""
    vals = [lat / work_units(s) for s, lat in samples if lat > 0]
    return float(np.median(vals)) if vals else None


def last_per_shape(samples: Iterable[tuple[ShapeMix, float]]) -> list[tuple[ShapeMix, float]]:
    """The last (shape, latency) sample of each distinct shape (by :meth:`ShapeMix.label`), in first-seen order."""
    last: dict[str, tuple[ShapeMix, float]] = {}
    for shape, lat in samples:
        last[shape.label()] = (shape, lat)
    return list(last.values())


def check_scale(scale: float | None) -> float | None:
    """``--slo-scale``: None, or a finite number > 0. Raises UsageError otherwise."""
    if scale is not None and (not math.isfinite(scale) or scale <= 0):
        raise UsageError(f"--slo-scale must be a finite number > 0 (vLLM-Omni's default is 3), got {scale:g}")
    return scale


@dataclass
class SloPolicy:
    """Which SLO each request has: ``explicit`` by request id (seconds, from the trace), else — with a
    ``scale`` and a fitted ``base_s`` — the estimate for the shape its record is labelled with (``shapes``:
    label → shape)."""

    explicit: Mapping[int, float] = field(default_factory=dict)
    scale: float | None = None
    base_s: float | None = None
    shapes: Mapping[str, ShapeMix] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return bool(self.explicit) or self.scale is not None

    def slo_for(self, rec: RequestRecord) -> float | None:
        """The record's SLO in seconds, or None (no SLO: not in the attainment's denominator)."""
        if rec.id in self.explicit:
            return self.explicit[rec.id]
        if self.scale is None or self.base_s is None:
            return None
        shape = self.shapes.get(rec.shape)
        return None if shape is None else self.base_s * work_units(shape) * self.scale

    def attainment(self, records: Iterable[RequestRecord]) -> tuple[int, int, float | None]:
        """(requests with an SLO, those ok within it by latency from intended arrival, met / defined)."""
        defined = met = 0
        for r in records:
            slo = self.slo_for(r)
            if slo is None:
                continue
            defined += 1
            if r.outcome == "ok" and r.done_s is not None and r.done_s - r.intended_s <= slo:
                met += 1
        return defined, met, (met / defined if defined else None)

    def describe(self) -> str:
        """One line for the report's conditions."""
        parts = []
        if self.explicit:
            parts.append(f"{len(self.explicit)} from the trace")
        if self.scale is not None:
            base = f"{self.base_s * 1e3:.4g} ms" if self.base_s is not None else "none (no ok warm-up)"
            parts.append(f"others = base x max(W*H/256,1) x frames x steps x {self.scale:g} (vLLM-Omni's rule; "
                         f"base {base} per unit, median of the last warm-up of each shape)")
        return "; ".join(parts) + "; met = ok and latency from intended arrival <= SLO"
