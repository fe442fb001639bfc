"""Quality gates: parse ``"psnr.p10>=30"`` and evaluate it against a report's summaries.

Grammar: ``METRIC.STAT OP NUMBER`` with METRIC one of :data:`METRICS` (the metrics ``quality`` can
compute), STAT in ``n, mean, p10, p50, p90, min, max, worst`` (``worst`` is the minimum when higher is
better, the maximum otherwise) and OP in ``>=, <=, >, <``. An unknown metric or statistic is a usage
error (exit 2, before any work); a gate on a known metric that was not computed in this run fails
(never passes silently).

Presets are *starting points that need per-model calibration* (bands and their anchors:
docs/concepts/quality-metrics.md):

- ``equivalent``: every image PSNR >= 40 dB (numerics-level change).
- ``sglang-ci-image``: every image SSIM >= 0.95 and PSNR >= 28 dB. SGLang's CI (sgl-project/sglang
  ``python/sglang/multimodal_gen/test/server/consistency_threshold.json``) computes these with
  scikit-image's *uniform 7×7* SSIM (``channel_axis=2, data_range=255``); our Gaussian SSIM reads
  differently, so the same numbers are not interchangeable.
- ``sglang-ci-video``: every compared frame SSIM >= 0.92 and PSNR >= 24 dB (SGLang compares only the
  first/middle/last frames; we apply it to all frames, which is stricter).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence

from pydantic import BaseModel

from diffbench.errors import UsageError
from diffbench.quality.models import HIGHER_IS_BETTER, GateResult, MetricSummary

METRICS: tuple[str, ...] = tuple(sorted(HIGHER_IS_BETTER))
STATS = ("n", "mean", "p10", "p50", "p90", "min", "max", "worst")
_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt,
}
_GATE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z0-9_]+)\s*(>=|<=|>|<)\s*([-+0-9.eE]+|inf)\s*$")

PRESETS: dict[str, tuple[str, ...]] = {
    "equivalent": ("psnr.min>=40",),
    "sglang-ci-image": ("ssim.min>=0.95", "psnr.min>=28"),
    "sglang-ci-video": ("frame_ssim.min>=0.92", "frame_psnr.min>=24"),
}


class Gate(BaseModel):
    expr: str
    metric: str
    stat: str
    op: str
    threshold: float


def parse_gate(expr: str, metrics: Sequence[str] | None = None) -> Gate:
    """Parse one gate expression.

    Args:
        expr: ``METRIC.STAT OP NUMBER``.
        metrics: the metric names accepted (default :data:`METRICS`).

    Raises:
        UsageError: malformed expression, unknown metric or unknown statistic (the message names the
            known ones). Exit code 2.
    """
    m = _GATE.match(expr)
    if not m:
        raise UsageError(f"bad gate {expr!r}; expected METRIC.STAT OP NUMBER, e.g. 'psnr.p10>=30'")
    metric, stat, op, num = m.groups()
    known = tuple(metrics) if metrics is not None else METRICS
    if metric not in known:
        raise UsageError(f"bad gate {expr!r}: unknown metric {metric!r}; use one of {', '.join(known)}")
    if stat not in STATS:
        raise UsageError(f"bad gate {expr!r}: unknown statistic {stat!r}; use one of {', '.join(STATS)}")
    try:
        thr = float(num)
    except ValueError as exc:
        raise UsageError(f"bad gate {expr!r}: {num!r} is not a number") from exc
    return Gate(expr=expr.strip(), metric=metric, stat=stat, op=op, threshold=thr)


def preset_gates(name: str) -> list[Gate]:
    """Gates of a named preset. Raises UsageError for an unknown name."""
    if name not in PRESETS:
        raise UsageError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return [parse_gate(e) for e in PRESETS[name]]


# The value of a metric on an identical pair: the mean of a summary whose pairs are all identical is None
# (identical pairs stay out of means), and a gate on it is judged with this value instead of failing.
IDENTICAL_VALUE: dict[str, float] = {
    "psnr": math.inf, "frame_psnr": math.inf, "ssim": 1.0, "frame_ssim": 1.0, "ms_ssim": 1.0,
    "lpips": 0.0, "frame_lpips": 0.0,
}


def _stat(s: MetricSummary, stat: str) -> float | None:
    if stat == "n":
        return float(s.n)
    v = getattr(s, stat)
    if v is None and stat == "mean" and s.n > 0 and s.n_identical == s.n:
        return IDENTICAL_VALUE.get(s.metric)
    return v


def evaluate_gates(summary: Mapping[str, MetricSummary], gates: Sequence[Gate | str]) -> list[GateResult]:
    """Evaluate gates against metric summaries (``QualityReport.summaries``).

    Args:
        summary: metric name → :class:`MetricSummary`.
        gates: parsed :class:`Gate` objects or expression strings.

    Returns:
        One :class:`GateResult` per gate, in order; ``margin`` = value − threshold for ``>``/``>=`` and
        threshold − value for ``<``/``<=`` (positive: passed by that much; negative: failed by that much).
    """
    out: list[GateResult] = []
    for g in gates:
        gate = parse_gate(g) if isinstance(g, str) else g
        s = summary.get(gate.metric)
        value = _stat(s, gate.stat) if s is not None else None
        if value is None or (isinstance(value, float) and math.isnan(value)):
            out.append(GateResult(
                expr=gate.expr, metric=gate.metric, stat=gate.stat, op=gate.op, threshold=gate.threshold,
                value=None, passed=False, margin=None,
                message=f"FAIL {gate.expr}: metric {gate.metric!r} was not computed "
                        f"(available: {', '.join(sorted(summary)) or 'none'})",
            ))
            continue
        passed = bool(_OPS[gate.op](value, gate.threshold))
        margin = value - gate.threshold if gate.op in (">=", ">") else gate.threshold - value
        word = "PASS" if passed else "FAIL"
        by = "by" if passed else "short by"
        if s is not None and s.mean is None and gate.stat == "mean":
            out.append(GateResult(
                expr=gate.expr, metric=gate.metric, stat=gate.stat, op=gate.op, threshold=gate.threshold,
                value=value, passed=passed, margin=margin,
                message=f"{word} {gate.expr}: all {s.n} pairs identical ({gate.metric} = {value:g} each)",
            ))
            continue
        out.append(GateResult(
            expr=gate.expr, metric=gate.metric, stat=gate.stat, op=gate.op, threshold=gate.threshold,
            value=value, passed=passed, margin=margin,
            message=f"{word} {gate.expr}: {gate.metric}.{gate.stat} = {value:.6g} ({by} {abs(margin):.4g})",
        ))
    return out
