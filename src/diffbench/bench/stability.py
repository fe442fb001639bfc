"""Can these timings be trusted? Warnings for a cold start in the timed runs, a slow-down after warmup, a
wide spread, and a busy machine.

All checks read the timed samples ``samples_s`` (seconds, in run order) and the warmup samples; none changes
a number, each adds a :class:`~diffbench.bench.result.Note` that the console and the JSON ``warnings`` show.

- ``warmup_insufficient``: (1) the first ``2 * DEFAULT_WINDOW`` timed samples fail the sweep's
  warm-until-stable test (:func:`diffbench.core.warmth.is_warm`: a significant one-sided Mann-Kendall
  downward trend with a drop above 2 %), or (2) two or more *leading* timed samples exceed
  ``FIRST_RUN_OUTLIER`` (3) x the median of the rest (:func:`diffbench.core.warmth.leading_cold`, the test
  ``load`` applies per warm-up key for ``cold_start_in_measurement``) (a cold start that outlasted the warmup; one such sample
  alone is the existing ``first_run_outlier`` note).
- ``slower_than_warmup``: the timed median is over ``SLOWER_THAN_WARMUP`` x the fastest warmup: the
  machine got slower after warmup (other work started), so the numbers are not the configuration's.
- ``unstable_timing``: with >= ``SPREAD_MIN_N`` samples, p90 / p10 above ``SPREAD_RATIO``.
- ``machine_busy``: the 1-minute load average above 0.75 x the CPU count (the sweep's check,
  :func:`diffbench.core.env.busy_machine_warning`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from diffbench.bench.result import Note
from diffbench.core.warmth import DEFAULT_WINDOW, is_warm, leading_cold
from diffbench.engines.base import EngineInfo

TREND_N = 2 * DEFAULT_WINDOW  # the start of the timed runs that must pass the warm test
SLOWER_THAN_WARMUP = 2.0  # timed median > 2x the fastest warmup
SPREAD_RATIO = 1.5  # p90 / p10 above this: the samples do not describe one steady state
SPREAD_MIN_N = 10  # fewer samples: p10/p90 are the extremes, not a spread estimate


def timing_notes(shape: str, samples: Sequence[float], warmup_s: Sequence[float]) -> list[Note]:
    """The trust warnings for one shape's timed samples (seconds, run order); see the module docstring."""
    xs = [float(x) for x in samples]
    notes: list[Note] = []
    if len(xs) < 2:
        return notes
    med = float(np.median(xs))
    lead = leading_cold(xs)
    if lead >= 2:
        warm = float(np.median(xs[lead:]))
        notes.append(Note(code="warmup_insufficient", message=(
            f"{shape}: the first {lead} timed runs took {min(xs[:lead]):.4g}-{max(xs[:lead]):.4g} s, "
            f"{min(xs[:lead]) / warm:.1f}x+ the median of the rest ({warm:.4g} s): a cold start leaked into the "
            f"statistics; raise --warmup (at least {len(warmup_s) + lead})")))
    elif len(xs) >= TREND_N and not is_warm(xs[:TREND_N], window=TREND_N):
        notes.append(Note(code="warmup_insufficient", message=(
            f"{shape}: the first {TREND_N} timed runs still fall ({xs[0]:.4g} s -> {xs[TREND_N - 1]:.4g} s, a "
            "significant downward trend by the warm-until-stable test (diffbench.core.warmth)): the warmup was too short; "
            "raise --warmup")))
    if warmup_s and med > SLOWER_THAN_WARMUP * min(warmup_s):
        notes.append(Note(code="slower_than_warmup", message=(
            f"{shape}: the timed median {med:.4g} s is {med / min(warmup_s):.1f}x the fastest warmup "
            f"({min(warmup_s):.4g} s, threshold {SLOWER_THAN_WARMUP:g}x): the machine slowed down after "
            "warmup (other work?); these timings are not the configuration's")))
    if len(xs) >= SPREAD_MIN_N:
        p10, p90 = (float(v) for v in np.percentile(xs, [10, 90]))
        if p10 > 0 and p90 / p10 > SPREAD_RATIO:
            notes.append(Note(code="unstable_timing", message=(
                f"{shape}: timings are unstable: p90/p10 = {p90 / p10:.2f} (threshold {SPREAD_RATIO:g}; "
                f"p10 {p10:.4g} s, p90 {p90:.4g} s, min {min(xs):.4g} s, max {max(xs):.4g} s); a busy machine or "
                "a cold start: compare medians only with care")))
    return notes


def load_notes(info: EngineInfo, threads: int | None) -> list[Note]:
    """``machine_busy`` when the 1-minute load average shows other work competing for the CPUs."""
    from diffbench.core.env import busy_machine_warning

    msg = busy_machine_warning(info.device, threads)
    return [] if msg is None else [Note(code="machine_busy", message=msg)]
