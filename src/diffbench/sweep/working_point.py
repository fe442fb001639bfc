"""Gates per point, the speed verdict, and the working point.

Speed verdict (:func:`speed_verdict`), from the point's speed-up interval and the timing noise floor (the
baseline against itself, diffbench.sweep.interleave.noise_floor_ci):

- **measurably faster**: CI low > 1 *and* CI low > the floor's CI high (the intervals do not overlap);
- **not faster, skipped nothing**: a cache value whose skip fraction is 0 computed exactly what the
  baseline computed; whatever its timing says, it is never reported faster;
- **measurably slower**: CI high < 1 and below the floor's CI low;
- otherwise **not measurably faster** (the CI includes 1 or overlaps the floor).

Working point (:func:`choose`): the highest speed-up among the points that pass every quality gate *and* are
measurably faster. "No value is measurably faster within the budget" is a valid answer (value None).

Default gates for a budget B dB (docs/concepts/quality-metrics.md: gate on the worst image too, not only a
percentile): ``psnr.p10 >= B`` and ``psnr.worst >= B - 3``. ``--gate`` expressions (grammar of
:mod:`diffbench.quality.gates`) replace them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from diffbench.quality.gates import evaluate_gates
from diffbench.store.models import RunQuality
from diffbench.sweep.bootstrap import SpeedupCI
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


NOISE_FACTOR = 2.0
"""A timing noise floor whose 95 % CI reaches ``NOISE_FACTOR``× or 1/``NOISE_FACTOR``× (the baseline against
itself looked 2× faster or 2× slower) is too wide to judge anything: :func:`noise_floor_note`."""


def noise_floor_note(floor: SpeedupCI | None) -> str | None:
    """A note when the timing noise floor is too wide to tell even a 2× change from noise, else None.

    Rule: the floor's 95 % CI has ``low <= 1/2`` or ``high >= 2`` (the baseline against itself spans a
    factor 2 on one side; for a CI around 1 this also covers ``high / low > 4``). Then no speed-up or
    slow-down up to 2× can clear the floor, and the verdicts say "within noise" whatever the candidate does.
    """
    if floor is None or not (floor.low <= 1.0 / NOISE_FACTOR or floor.high >= NOISE_FACTOR):
        return None
    return (f"the timing noise floor (baseline against itself) is too wide to judge anything: 95 % CI "
            f"{floor.low:.3g}–{floor.high:.3g}×, so not even a {NOISE_FACTOR:g}× change can be told from noise; "
            "run more (more timed runs or blocks), interleave more, or quiet the machine (no other jobs, "
            "idle CPUs, fixed clocks) and run again")


def speed_verdict(sp: SpeedupCI, floor: SpeedupCI | None, skipped: float | None) -> tuple[bool, str]:
    """(measurably faster?, verdict text) for a speed-up interval against the timing noise floor.

    ``skipped``: the skip fraction of a cache value (None for option axes).
    """
    lo, hi = sp.low, sp.high
    if skipped is not None and skipped == 0.0:
        return False, "not faster: skipped 0 % of computations (the same work as the baseline)"
    if hi < 1.0:
        if floor is None or hi < floor.low:
            return False, f"measurably slower: the 95 % CI ({lo:.3f}-{hi:.3f}) lies below 1"
        return False, (f"slower, within timing noise: the 95 % CI ({lo:.3f}-{hi:.3f}) overlaps the noise floor "
                       f"({floor.low:.3f}-{floor.high:.3f})")
    if lo <= 1.0:
        return False, f"not measurably faster: the 95 % CI ({lo:.3f}-{hi:.3f}) includes 1"
    if floor is not None and lo <= floor.high:
        return False, (f"not measurably faster: the 95 % CI ({lo:.3f}-{hi:.3f}) overlaps the noise floor "
                       f"({floor.low:.3f}-{floor.high:.3f})")
    if floor is None:
        return True, "faster (CI low > 1; no noise floor: fewer than 2 timed blocks)"
    return True, "measurably faster"


def choose(points: Sequence[PointResult], gates: Sequence[str]) -> WorkingPoint:
    """The point with the highest speed-up among those passing every gate and measurably faster
    (:func:`speed_verdict`, recomputed from the point's interval, floor and skip fraction); ties: the
    earlier value.

    "No value meets the budget" and "no value is measurably faster within the budget" are valid answers:
    ``value`` is None and the message says which.
    """
    if not points:
        return WorkingPoint(value=None, message="no point was measured")
    passing = [p for p in points if p.passed]
    if not passing:
        best = max(points, key=lambda p: _psnr_key(p))
        return WorkingPoint(
            value=None,
            message=(
                f"no value meets the quality budget ({'; '.join(gates)}); the closest is {best.value} "
                f"(psnr p10 {best.quality.psnr.p10:.2f} dB, worst {best.quality.psnr.worst:.2f} dB)"
            ),
        )
    faster = [p for p in passing if speed_verdict(p.speedup_detail, p.noise_floor, p.skipped_steps)[0]]
    if not faster:
        best = max(passing, key=lambda p: p.speedup)
        lo, hi = best.speedup_ci
        why = speed_verdict(best.speedup_detail, best.noise_floor, best.skipped_steps)[1]
        return WorkingPoint(
            value=None,
            message=(
                f"no value is measurably faster than the baseline within the quality budget: "
                f"{len(passing)} value(s) pass the gates, the fastest is {best.value} at {best.speedup:.3f}x "
                f"(95 % CI {lo:.3f}-{hi:.3f}): {why}"
            ),
        )
    wp = max(faster, key=lambda p: p.speedup)
    lo, hi = wp.speedup_ci
    nf = wp.noise_floor
    floor = f"; noise floor {nf.low:.3f}-{nf.high:.3f}" if nf is not None else ""
    return WorkingPoint(
        value=wp.value,
        speedup=wp.speedup,
        speedup_ci=wp.speedup_ci,
        message=(
            f"working point: {wp.value} at {wp.speedup:.3f}x (95 % CI {lo:.3f}-{hi:.3f}{floor}), psnr p10 "
            f"{wp.quality.psnr.p10:.2f} dB, worst {wp.quality.psnr.worst:.2f} dB"
        ),
    )


def _psnr_key(p: PointResult) -> float:
    v = p.quality.psnr.p10
    return v if not math.isnan(v) else -math.inf
