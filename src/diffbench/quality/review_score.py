"""Score the verdicts of a blind A/B review against its key: worse / same / better, a binomial interval, a gate.

A verdict is the side the reviewer judged better (``left`` / ``right``) or ``same``. Through the key's
``candidate_side`` it becomes: the candidate was judged **worse** (the other side was picked), **better**
(its side was picked) or the **same** (a tie). Every pair of the key must have exactly one verdict.

Statistic: over the n judged pairs, ``share_worse = worse / n``, ``share_better = better / n``,
``share_same = same / n`` (ties count in n: a tie is "not worse"). Each share gets a two-sided
**Clopper–Pearson exact** interval at ``confidence`` (default 95 %), from beta quantiles:
``lower = B(α/2; k, n−k+1)``, ``upper = B(1−α/2; k+1, n−k)`` (lower = 0 when k = 0, upper = 1 when k = n);
Clopper & Pearson (1934), the interval of ``scipy.stats.binomtest(k, n).proportion_ci(method="exact")``.

Gate (``max_worse``): passes when the **upper** end of the interval for ``share_worse`` is ≤ ``max_worse``,
i.e. the data rule out (at the one-sided level 1 − α/2) that the candidate is judged worse more often than
allowed. The point estimate alone would pass 0 worse out of 3 pairs; with 0 worse out of n the upper end
is ``1 − (α/2)^(1/n)``, so passing 0.1 at 95 % takes n ≥ 36 pairs (:func:`min_pairs_to_pass`).

The worst-N pairs are chosen to be the worst; over all pairs the shares are therefore pessimistic (a safe
direction for a gate); the ``random`` rows (``by_selection``) alone estimate the shares over all outputs.
"""

from __future__ import annotations

import math
from pathlib import Path

from pydantic import BaseModel

from diffbench.errors import InputError, UsageError
from diffbench.quality.review import ReviewKey, _read_json

VERDICTS_KIND = "diffbench-review-verdicts"
VERDICT_VALUES = ("left", "same", "right")
CI_METHOD = "Clopper-Pearson exact (two-sided)"


class Counts(BaseModel):
    n: int = 0
    worse: int = 0
    same: int = 0
    better: int = 0


class Share(BaseModel):
    """k of n, the share k/n and its interval."""

    k: int
    n: int
    share: float
    ci_low: float
    ci_high: float


class ReviewScore(BaseModel):
    """Result of ``review --score`` (``--json``)."""

    schema_version: int = 1
    kind: str = "diffbench-review-score"
    review_id: str
    verdicts: str
    key: str
    counts: Counts
    worse: Share
    same: Share
    better: Share
    by_selection: dict[str, Counts]
    ci_method: str = CI_METHOD
    confidence: float
    max_worse: float | None = None
    gate_statistic: str = "upper end of the interval for the share judged worse"
    passed: bool | None = None
    message: str = ""
    time_ms_total: float | None = None
    time_ms_median: float | None = None


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided Clopper–Pearson exact interval for a binomial proportion (beta quantiles, scipy).

    Args:
        k: successes, 0 ≤ k ≤ n. n: trials ≥ 1. confidence: in (0, 1).

    Raises:
        UsageError: n < 1, k outside [0, n] or confidence outside (0, 1).
    """
    if n < 1 or not 0 <= k <= n:
        raise UsageError(f"clopper_pearson needs 0 <= k <= n and n >= 1, got k={k}, n={n}")
    if not 0.0 < confidence < 1.0:
        raise UsageError(f"--confidence {confidence}: must be in (0, 1), e.g. 0.95")
    from scipy.stats import beta

    a = 1.0 - confidence
    lo = 0.0 if k == 0 else float(beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


def min_pairs_to_pass(max_worse: float, confidence: float = 0.95) -> int:
    """Smallest n whose 0-worse upper bound ``1 − (α/2)^(1/n)`` is ≤ ``max_worse`` (a closed form)."""
    if not max_worse > 0.0:
        raise UsageError("max_worse must be > 0")
    if max_worse >= 1.0:
        return 1
    return math.ceil(math.log((1 - confidence) / 2) / math.log(1 - max_worse))


def _share(k: int, n: int, confidence: float) -> Share:
    lo, hi = clopper_pearson(k, n, confidence)
    return Share(k=k, n=n, share=k / n, ci_low=lo, ci_high=hi)


def read_verdicts(path: Path) -> tuple[str, dict[str, tuple[str, float | None]]]:
    """``(review_id, {pair id: (verdict, time_ms)})`` from a verdict file saved by the page.

    Raises:
        InputError: missing, not JSON, not a verdict file, a pair judged twice, an unknown verdict value.
    """
    data = _read_json(path, "--score")
    if not isinstance(data, dict) or data.get("kind") != VERDICTS_KIND:
        raise InputError(f"--score {path} is not a verdict file (kind {VERDICTS_KIND!r}); give the JSON that the "
                         "review page's 'save verdicts' downloaded")
    rid = data.get("review_id")
    rows = data.get("verdicts")
    if not isinstance(rid, str) or not isinstance(rows, list):
        raise InputError(f"--score {path}: needs a review_id string and a verdicts list")
    out: dict[str, tuple[str, float | None]] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("pair"), str):
            raise InputError(f"--score {path}: verdict #{i + 1} has no pair id")
        pid, v, ms = row["pair"], row.get("verdict"), row.get("time_ms")
        if v not in VERDICT_VALUES:
            raise InputError(f"--score {path}: pair {pid}: unknown verdict {v!r}; expected one of "
                             f"{', '.join(VERDICT_VALUES)}")
        if pid in out:
            raise InputError(f"--score {path}: pair {pid} is judged twice")
        out[pid] = (v, float(ms) if isinstance(ms, (int, float)) and not isinstance(ms, bool) else None)
    return rid, out


def score(verdicts_path: Path, key_path: Path, key: ReviewKey, *, max_worse: float | None = None,
          confidence: float = 0.95) -> ReviewScore:
    """Map every verdict through the key and compute the shares, intervals and gate (module docstring).

    Raises:
        InputError: review ids differ, pairs of the key have no verdict, or verdicts name unknown pairs.
        UsageError: ``max_worse`` outside (0, 1] or ``confidence`` outside (0, 1).
    """
    if max_worse is not None and not 0.0 < max_worse <= 1.0:
        raise UsageError(f"--max-worse {max_worse}: a share of pairs in (0, 1], e.g. 0.1 (0 can never pass: the "
                         "interval's upper end is above 0 for any finite review)")
    if not 0.0 < confidence < 1.0:
        raise UsageError(f"--confidence {confidence}: must be in (0, 1), e.g. 0.95")
    rid, verdicts = read_verdicts(verdicts_path)
    if rid != key.review_id:
        raise InputError(f"--score {verdicts_path} is review {rid}, but --key {key_path} is review {key.review_id}; "
                         "give the key written with that page")
    ids = [p.id for p in key.pairs]
    missing = [i for i in ids if i not in verdicts]
    unknown = sorted(set(verdicts) - set(ids))
    if unknown:
        raise InputError(f"--score {verdicts_path}: {len(unknown)} verdict(s) for pairs not in the key "
                         f"({', '.join(unknown[:5])})")
    if missing:
        raise InputError(f"--score {verdicts_path}: {len(missing)} of {len(ids)} pair(s) have no verdict "
                         f"({', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}); finish the review on the "
                         "page and save again")
    total = Counts()
    by_sel: dict[str, Counts] = {}
    times = []
    for p in key.pairs:
        v, ms = verdicts[p.id]
        outcome = "same" if v == "same" else ("better" if v == p.candidate_side else "worse")
        for c in (total, by_sel.setdefault(p.selection, Counts())):
            c.n += 1
            setattr(c, outcome, getattr(c, outcome) + 1)
        if ms is not None:
            times.append(ms)
    n = total.n
    res = ReviewScore(review_id=rid, verdicts=str(verdicts_path), key=str(key_path), counts=total,
                      worse=_share(total.worse, n, confidence), same=_share(total.same, n, confidence),
                      better=_share(total.better, n, confidence), by_selection=by_sel, confidence=confidence,
                      max_worse=max_worse)
    if times:
        import numpy as np

        res.time_ms_total = float(sum(times))
        res.time_ms_median = float(np.median(times))
    if max_worse is not None:
        hi = res.worse.ci_high
        res.passed = hi <= max_worse
        pct = f"{confidence:.0%}"
        res.message = (f"candidate judged worse in {total.worse}/{n} pair(s) ({res.worse.share:.1%}); the {pct} "
                       f"upper bound {hi:.1%} is {'<=' if res.passed else '>'} --max-worse {max_worse:.1%}")
        if not res.passed and total.worse == 0:
            res.message += (f" (with 0 worse, passing needs at least {min_pairs_to_pass(max_worse, confidence)} "
                            "pairs: review more pairs)")
    return res
