"""Gates per point and the working point: the fastest value whose quality passes every gate.

Default gates for a budget B dB (quality-metrics.md §9.3: gate on the worst image too, not only a
percentile): ``psnr.p10 >= B`` and ``psnr.worst >= B - 3``. ``--gate`` expressions (grammar of
:mod:`diffbench.quality.gates`) replace them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from diffbench.quality.gates import evaluate_gates
from diffbench.store.models import RunQuality
from diffbench.sweep.models import GateRow, PointResult, WorkingPoint
from diffbench.sweep.pairs import summaries_of

WORST_SLACK_DB = 3.0


def default_gates(budget_db: float) -> list[str]:
    """``psnr.p10>=B`` and ``psnr.worst>=B-3``."""
    return [f"psnr.p10>={budget_db:g}", f"psnr.worst>={budget_db - WORST_SLACK_DB:g}"]


def gate_rows(quality: RunQuality, gates: Sequence[str], noise: RunQuality | None) -> list[GateRow]:
    """Evaluate ``gates`` on ``quality``; each row carries the noise floor's value of the same statistic."""
    results = evaluate_gates(summaries_of(quality), list(gates))
    floor = {r.expr: r.value for r in evaluate_gates(summaries_of(noise), list(gates))} if noise else {}
    return [GateRow(gate=r, noise_floor=floor.get(r.expr)) for r in results]


def choose(points: Sequence[PointResult], gates: Sequence[str]) -> WorkingPoint:
    """The passing point with the highest speed-up (ties: the earlier value).

    "No value meets the budget" is a valid answer: ``value`` is None and the message says so.
    """
    passing = [p for p in points if p.passed]
    if not points:
        return WorkingPoint(value=None, message="no point was measured")
    if not passing:
        best = max(points, key=lambda p: _psnr_key(p))
        return WorkingPoint(
            value=None,
            message=(
                f"no value meets the quality budget ({'; '.join(gates)}); the closest is {best.value} "
                f"(psnr p10 {best.quality.psnr.p10:.2f} dB, worst {best.quality.psnr.worst:.2f} dB)"
            ),
        )
    wp = max(passing, key=lambda p: p.speedup)
    lo, hi = wp.speedup_ci
    note = "" if lo > 1.0 else f"; its 95 % interval includes 1 ({lo:.3f}–{hi:.3f}): not measurably faster"
    return WorkingPoint(
        value=wp.value,
        speedup=wp.speedup,
        speedup_ci=wp.speedup_ci,
        message=(
            f"working point: {wp.value} at {wp.speedup:.3f}x (95 % CI {lo:.3f}–{hi:.3f}), psnr p10 "
            f"{wp.quality.psnr.p10:.2f} dB, worst {wp.quality.psnr.worst:.2f} dB{note}"
        ),
    )


def _psnr_key(p: PointResult) -> float:
    v = p.quality.psnr.p10
    return v if not math.isnan(v) else -math.inf
