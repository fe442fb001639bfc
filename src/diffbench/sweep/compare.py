"""Fingerprint checks, and comparing two stored runs (``diffbench runs compare``).

A fixed-seed baseline is valid only for the deployment it was made with (engines/fingerprint.py): a
comparison whose baseline and candidate fingerprints differ in anything other than the option under test
is refused, naming every differing field, unless forced (and then the result says so).

Timing in ``runs compare`` (:func:`compare_timing`):

- a sweep's **baseline and one of its points**: the point's own interleaved baseline samples (same
  configuration, same blocks; the baseline run itself holds no timing, stored runs being immutable), paired,
  beside the timing noise floor of that session (the baseline against itself, even vs odd blocks), when the
  point was measured against that very baseline run; a point measured against another baseline run of the
  same sweep id gets no speed-up and a warning naming its own baseline (never the other's samples);
- both runs from **one interleaved session** (same ``session_id``: two points of one sweep): the paired
  bootstrap over their blocks, beside that session's floor;
- otherwise the runs were **measured at different times**: the independent bootstrap, no floor, and a
  warning that their ratio carries the machine's drift between the two measurements.
"""

from __future__ import annotations

from pydantic import BaseModel

from diffbench.engines.fingerprint import fingerprint_diff
from diffbench.errors import InputError, UsageError
from diffbench.store.models import RunQuality, RunRecord
from diffbench.store.runs import RunStore
from diffbench.sweep.bootstrap import SpeedupCI, paired_speedup_ci, speedup_ci


def check_fingerprints(
    baseline: dict[str, object],
    candidate: dict[str, object],
    allowed: str | None,
    force: bool,
    baseline_label: str = "baseline",
) -> list[str]:
    """Fields (other than ``allowed``) that differ; raises unless ``force``.

    Returns:
        The differing fields (empty when the fingerprints agree).

    Raises:
        UsageError: they differ and ``force`` is False; the message lists each field with both values.
    """
    diff = fingerprint_diff(baseline, candidate, ignore=(allowed,) if allowed else ())
    if diff and not force:
        detail = "; ".join(f"{k}: baseline {baseline.get(k)!r}, candidate {candidate.get(k)!r}" for k in diff)
        what = f" (the option under test, {allowed}, may differ)" if allowed else ""
        raise UsageError(
            f"refusing to compare: the deployment fingerprint of {baseline_label} differs from the "
            f"candidate's{what} in: {', '.join(diff)} ({detail}). A baseline is valid only for the "
            f"configuration it was made with: rebuild it under the candidate's configuration, or pass --force "
            f"to compare anyway (the report will say so)"
        )
    return diff


PAIRING_CONDITIONS = ("shape", "steps", "guidance", "batch")  # what makes two runs' outputs and timings comparable


class RunComparison(BaseModel):
    """Candidate run vs baseline run: speed-up with its interval and per-image quality."""

    baseline: str
    candidate: str
    allowed: str | None
    forced: bool
    fingerprint_differences: list[str]
    speedup: SpeedupCI | None
    noise_floor: SpeedupCI | None = None
    paired: bool = False
    measurably_faster: bool | None = None
    verdict: str | None = None
    warnings: list[str] = []
    quality: RunQuality | None
    conditions_baseline: dict[str, object]
    conditions_candidate: dict[str, object]


def compare_runs(
    store: RunStore, baseline_id: str, candidate_id: str, allowed: str | None = "cache", force: bool = False,
    ssim: bool = True,
) -> RunComparison:
    """Compare two stored runs (refusing on a fingerprint mismatch unless ``force``).

    Raises:
        UsageError: unknown run, or differing fingerprints without ``force``.
        InputError: the runs differ in :data:`PAIRING_CONDITIONS` (the message names each), or the outputs
            of a run are gone or do not pair.
    """
    from diffbench.sweep.pairs import compare_images, load_images

    a, b = store.get_run(baseline_id), store.get_run(candidate_id)
    diff = check_fingerprints(a.fingerprint, b.fingerprint, allowed, force, f"baseline run {a.id}")
    sp, floor, paired, warnings = compare_timing(a, b)
    fast, verdict = (None, None)
    if sp is not None:
        from diffbench.sweep.working_point import speed_verdict

        fast, verdict = speed_verdict(sp, floor, b.skipped.fraction if b.skipped else None)
        if not paired:
            fast = False
            verdict = f"{verdict}; not interleaved: the ratio carries machine drift, it cannot show a speed-up"
    differ = [f"{k} {a.conditions.get(k)!r} vs {b.conditions.get(k)!r}" for k in PAIRING_CONDITIONS
              if a.conditions.get(k) != b.conditions.get(k)]
    if differ:
        raise InputError(
            f"runs {a.id} and {b.id} were generated under different conditions ({'; '.join(differ)}): their "
            f"outputs do not pair and their timings measure different work; compare runs made with the same "
            f"shape, steps, guidance and batch"
        )
    quality = None
    if _has_outputs(a) and _has_outputs(b):
        quality = compare_images(load_images(a.outputs_dir), load_images(b.outputs_dir), a.id, ssim)  # type: ignore[arg-type]
    return RunComparison(
        baseline=a.id,
        candidate=b.id,
        allowed=allowed,
        forced=bool(diff),
        fingerprint_differences=diff,
        speedup=sp,
        noise_floor=floor,
        paired=paired,
        measurably_faster=fast,
        verdict=verdict,
        warnings=warnings,
        quality=quality,
        conditions_baseline=a.conditions,
        conditions_candidate=b.conditions,
    )


def compare_timing(a: RunRecord, b: RunRecord) -> tuple[SpeedupCI | None, SpeedupCI | None, bool, list[str]]:
    """(speed-up of ``b`` over ``a``, timing noise floor, paired?, warnings); see the module docstring."""
    from diffbench.sweep.interleave import noise_floor_ci

    ta, tb = a.timing, b.timing
    own_base = (a.kind == "baseline" and b.kind == "point" and a.sweep_id and a.sweep_id == b.sweep_id
                and tb is not None and tb.baseline_samples_s and len(tb.baseline_samples_s) == len(tb.samples_s))
    against = b.quality.against_run if b.quality is not None else None
    if own_base and against is not None and against != a.id:
        # b was timed beside the baseline of its own run (another baseline run of the same sweep id, e.g. two
        # runs of one sweep on one store): its samples are not a's
        return None, None, False, [
            f"point {b.id} was measured against baseline run {against}, not {a.id}: its interleaved baseline "
            f"samples belong to {against}, so no speed-up against {a.id} is given (compare {against} {b.id} "
            f"for its timing); the quality below is against {a.id}, as named"]
    if tb is not None and own_base:  # the baseline run holds no timing: its samples of b's session are on b
        own = list(tb.baseline_samples_s or [])
        return paired_speedup_ci(own, tb.samples_s), noise_floor_ci(own), True, []
    if ta is None or tb is None:
        if a.kind == "baseline" and b.kind == "point" and against is not None and against != a.id:
            # a point of another sweep: it was timed only beside its own baseline run
            return None, None, False, [
                f"point {b.id} (sweep {b.sweep_id}) was measured against its own baseline run {against}, not "
                f"{a.id} (sweep {a.sweep_id}): a point is timed only beside its own baseline, so no speed-up "
                f"against {a.id} is given (compare {against} {b.id} for its timing); the quality below is "
                f"against {a.id}, as named"]
        return None, None, False, ["a run has no timing: no speed-up"]
    base: list[float] | None = None
    floor_src: list[float] | None = None
    if ta.session_id and ta.session_id == tb.session_id and len(ta.samples_s) == len(tb.samples_s):
        base = ta.samples_s
        floor_src = tb.baseline_samples_s or ta.baseline_samples_s or (ta.samples_s if a.kind == "baseline" else None)
    if base is not None:
        sp = paired_speedup_ci(base, tb.samples_s)
        floor = noise_floor_ci(floor_src) if floor_src else None
        return sp, floor, True, []
    when = []
    for r in (a, b):
        t = r.timing
        span = t.measured_unix if t is not None and t.measured_unix else (r.created_unix, r.created_unix)
        when.append(span)
    gap = abs(when[1][0] - when[0][0])
    warning = (
        f"runs {a.id} and {b.id} were measured at different times ({gap:.0f} s apart, not interleaved in one "
        f"process): their ratio carries the machine's drift between the two measurements and has no noise "
        f"floor; to compare them, sweep both configurations in one `diffbench sweep`"
    )
    return speedup_ci(ta.samples_s, tb.samples_s), None, False, [warning]


def _has_outputs(run: RunRecord) -> bool:
    return bool(run.outputs_dir)
