"""Decisions from measurements: keep, reject, reclassify a lossless candidate; gate a lossy one; choose the
best set of lossy options within the quality budget.

Rules (docs/guides/derive.md):

* **lossless** (②): kept only when measurably faster (the 95 % CI of the paired speed-up lies above 1 and
  above the timing noise floor, :func:`diffbench.sweep.working_point.speed_verdict`) **and** lossless: every
  image identical to the baseline's, or PSNR p10 >= :data:`~diffbench.derive.models.LOSSLESS_DB`. A
  "lossless" option that changes pixels more than that is *reclassified*: it is measured again with the lossy
  I options and spends budget like them.
* **lossy** (③ numerics, gate PSNR p10 > :data:`~diffbench.derive.models.LOSSY_I_DB`; ④ skipped work, gate
  PSNR p10 >= the budget): an option passes when it is measurably faster and clears its gate.
* **the set** (:func:`best_set`): every subset of the passing options with at most one option per group
  (one numerics change, one attention kernel, one step-cache threshold) is scored as ``plan`` scores its
  ledger estimates — speed-up the product of the measured speed-ups, quality cost the combined PSNR of
  independent errors (:func:`diffbench.plan.quality.combine_psnr`) — and the fastest subset whose combined
  PSNR stays at or above the budget is chosen (ties: the higher PSNR). An option that passes its own gate
  but is left out because it does not fit the remaining budget beside the chosen ones is recorded
  ``not combined``. The chosen set is then measured as one configuration against the lossless deployment.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from diffbench.derive.models import LOSSLESS_DB, Decision, Measured
from diffbench.plan.quality import combine_psnr


def is_lossless(m: Measured) -> bool:
    """Every image identical, or PSNR p10 >= :data:`LOSSLESS_DB` against the baseline."""
    return m.identical or m.psnr_p10 >= LOSSLESS_DB


def quality_text(m: Measured) -> str:
    """``identical`` or ``PSNR p10 X dB (p50 Y, worst Z)``."""
    if m.identical:
        return "identical to the baseline"
    return f"PSNR p10 {m.psnr_p10:.1f} dB (p50 {m.psnr_p50:.1f}, worst {m.psnr_worst:.1f})"


def speed_text(m: Measured) -> str:
    """``1.23x (95 % CI 1.10-1.35; noise floor 0.97-1.03)``."""
    floor = f"; noise floor {m.noise_floor[0]:.3f}-{m.noise_floor[1]:.3f}" if m.noise_floor else ""
    return f"{m.speedup:.3f}x (95 % CI {m.ci[0]:.3f}-{m.ci[1]:.3f}{floor})"


def lossless_decision(m: Measured) -> tuple[Decision, str]:
    """The decision on a lossless candidate (② rule in the module docstring)."""
    if not is_lossless(m):
        return "reclassified", (f"not lossless: {quality_text(m)} < {LOSSLESS_DB:g} dB against the baseline; "
                                f"measured again with the lossy I options")
    if not m.measurably_faster:
        return "rejected", f"{m.verdict}: {speed_text(m)}"
    return "kept", f"measurably faster, {speed_text(m)}, and lossless ({quality_text(m)})"


def lossy_gate(m: Measured, gate_db: float, stage: int) -> tuple[bool, str]:
    """(passes?, why) for a lossy option: measurably faster and PSNR p10 above its gate (③: > gate, ④: >=)."""
    if not m.measurably_faster:
        return False, f"{m.verdict}: {speed_text(m)}"
    ok = m.psnr_p10 > gate_db if stage == 3 else m.psnr_p10 >= gate_db
    if not ok:
        return False, (f"fails the quality gate: {quality_text(m)}, gate {'>' if stage == 3 else '>='} "
                       f"{gate_db:g} dB")
    return True, f"measurably faster, {speed_text(m)}; {quality_text(m)} clears the gate ({gate_db:g} dB)"


@dataclass(frozen=True)
class LossyOption:
    """A lossy option that passed its gate: ``name``, exclusive ``group``, its measurement."""

    name: str
    group: str
    measured: Measured


@dataclass(frozen=True)
class ChosenSet:
    """The chosen options (in the order given), the product of their speed-ups and their combined PSNR."""

    names: tuple[str, ...]
    speedup: float
    psnr_db: float | None


def _score(opts: tuple[LossyOption, ...]) -> ChosenSet:
    sp = 1.0
    for o in opts:
        sp *= o.measured.speedup
    return ChosenSet(tuple(o.name for o in opts), sp, combine_psnr([o.measured.psnr_p10 for o in opts]))


def best_set(options: list[LossyOption], budget_db: float) -> ChosenSet:
    """The fastest subset (at most one option per group) whose combined PSNR p10 is >= ``budget_db``."""
    best = ChosenSet((), 1.0, None)
    for k in range(1, len(options) + 1):
        for combo in itertools.combinations(options, k):
            if len({o.group for o in combo}) < k:
                continue
            s = _score(combo)
            if s.psnr_db is None or s.psnr_db < budget_db:
                continue
            if (s.speedup, s.psnr_db) > (best.speedup, best.psnr_db if best.psnr_db is not None else float("inf")):
                best = s
    return best


def left_out_reason(o: LossyOption, chosen: ChosenSet, options: list[LossyOption], budget_db: float) -> str:
    """Why a passing option is not in the chosen set (``not combined``)."""
    others = [x for x in options if x.name in chosen.names and x.group != o.group]
    with_it = combine_psnr([x.measured.psnr_p10 for x in others] + [o.measured.psnr_p10])
    if others and with_it is not None and with_it < budget_db:
        return (f"passes its own gate, but together with {', '.join(x.name for x in others)} the combined PSNR "
                f"p10 would be {with_it:.1f} dB, below the remaining budget ({budget_db:g} dB)")
    return (f"passes its own gate, but a faster set within the budget was chosen "
            f"({' + '.join(chosen.names) or 'none'}: {chosen.speedup:.3f}x)")
