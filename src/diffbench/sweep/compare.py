"""Fingerprint checks, and comparing two stored runs (``diffbench runs compare``).

A fixed-seed baseline is valid only for the deployment it was made with (core/fingerprint.py): a
comparison whose baseline and candidate fingerprints differ in anything other than the option under test
is refused, naming every differing field, unless forced (and then the result says so).
"""

from __future__ import annotations

from pydantic import BaseModel

from diffbench.core.fingerprint import fingerprint_diff
from diffbench.errors import UsageError
from diffbench.store.models import RunQuality, RunRecord
from diffbench.store.runs import RunStore
from diffbench.sweep.bootstrap import SpeedupCI, speedup_ci


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


class RunComparison(BaseModel):
    """Candidate run vs baseline run: speed-up with its interval and per-image quality."""

    baseline: str
    candidate: str
    allowed: str | None
    forced: bool
    fingerprint_differences: list[str]
    speedup: SpeedupCI | None
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
        InputError: the outputs of a run are gone or do not pair.
    """
    from diffbench.sweep.pairs import compare_images, load_images

    a, b = store.get_run(baseline_id), store.get_run(candidate_id)
    diff = check_fingerprints(a.fingerprint, b.fingerprint, allowed, force, f"baseline run {a.id}")
    sp = None
    if a.timing is not None and b.timing is not None:
        sp = speedup_ci(a.timing.samples_s, b.timing.samples_s)
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
        quality=quality,
        conditions_baseline=a.conditions,
        conditions_candidate=b.conditions,
    )


def _has_outputs(run: RunRecord) -> bool:
    return bool(run.outputs_dir)
