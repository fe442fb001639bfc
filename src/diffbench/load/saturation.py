"""Over-saturation tests for one open-loop row, made for short runs (few requests per half window).

Two independent signals, both computed after the run from the per-request columns:

1. **Slope test** (:func:`slope_test`, the idea of guidellm's over-saturation constraint, re-derived here):
   a least-squares line through (a) the number of requests in the system at each arrival and (b) the
   latency from arrival of each request, against the arrival time. A queue above capacity grows both at a
   sustained rate (in-flight by ``λ − μ`` per second, latency by ``λ/μ − 1`` seconds per second); a stable
   queue's do not trend. The row is *over-saturated* when both slopes are positive beyond a Student-t
   margin (95 %, two-sided) **and** the fitted growth over the window is material: the in-flight count
   grows by ``>= max(2, its first-half mean)`` and the latency by ``>=`` its first-half median (both at
   least double). Samples of a queue are autocorrelated over about one service time, so the margin uses an
   effective sample count ``n_eff = clip(duration / L10, 3, n)`` instead of ``n`` (``L10`` the 10th
   percentile of the first half's latencies, close to the bare service time).
2. **Ok-rate shortfall** (:func:`ok_shortfall`): in a stable system a request arriving at ``t`` is done by
   ``t + L`` (``L`` the first-half median latency of ok requests), so the ok completions by the end of the
   window ``D`` should match the arrivals before ``D − L``. The row is *short* when
   ``arrivals − ok completions > z · sqrt(arrivals)`` (``z = 3``, the Poisson count noise) and the gap is
   at least 3 requests: the ok rate is below the offered rate beyond the noise of the count, whether from
   a queue that cannot keep up or from failures.

Sources: least-squares slope and its standard error, e.g. Montgomery & Runger, *Applied Statistics and
Probability for Engineers*, §11.4; the Student-t quantile from Abramowitz & Stegun 26.7.5 (see
:func:`t_ppf`).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
from pydantic import BaseModel, ConfigDict

CONFIDENCE = 0.95
MIN_POINTS = 6
SHORTFALL_Z = 3.0
SHORTFALL_MIN = 3


def t_ppf(p: float, dof: float) -> float:
    """Quantile of Student's t distribution (no scipy: the load client installs without it).

    Exact for ``dof`` 1 and 2; otherwise the Cornish-Fisher expansion of Abramowitz & Stegun 26.7.5
    (terms to ``1/dof**4``) around the normal quantile. Relative error vs ``scipy.stats.t.ppf`` for ``p``
    in [0.9, 0.995]: < 1 % at ``dof = 3``, < 0.2 % from ``dof = 4`` (tests/load/test_saturation.py).

    Raises:
        ValueError: ``p`` outside (0, 1) or ``dof`` <= 0.
    """
    if not 0.0 < p < 1.0 or not dof > 0:
        raise ValueError(f"t_ppf needs 0 < p < 1 and dof > 0, got p={p}, dof={dof}")
    if dof == 1:
        return math.tan(math.pi * (p - 0.5))
    if dof == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    x = NormalDist().inv_cdf(p)
    g1 = (x**3 + x) / 4
    g2 = (5 * x**5 + 16 * x**3 + 3 * x) / 96
    g3 = (3 * x**7 + 19 * x**5 + 17 * x**3 - 15 * x) / 384
    g4 = (79 * x**9 + 776 * x**7 + 1482 * x**5 - 1920 * x**3 - 945 * x) / 92160
    return x + g1 / dof + g2 / dof**2 + g3 / dof**3 + g4 / dof**4


def slope_test(x: np.ndarray, y: np.ndarray, n_eff: float, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Least-squares slope of ``y`` on ``x`` and its t margin (half-width of the two-sided interval).

    Args:
        x, y: float64 arrays of one length n >= 3.
        n_eff: effective sample count for the degrees of freedom and the standard error (<= n, >= 3).
        confidence: two-sided level of the margin.

    Returns:
        (slope, margin) in units of y per unit of x; ``slope - margin > 0`` means significantly positive.
    """
    n = x.size
    xm, ym = float(x.mean()), float(y.mean())
    sxx = float(((x - xm) ** 2).sum())
    if n < 3 or sxx <= 0:
        return 0.0, math.inf
    sxy = float(((x - xm) * (y - ym)).sum())
    slope = sxy / sxx
    rss = max(float(((y - ym - slope * (x - xm)) ** 2).sum()), 0.0)
    n_eff = min(max(float(n_eff), 3.0), float(n))
    dof = n_eff - 2.0
    # residual variance per point is rss / (n - 2); fewer independent points widen the slope's SE
    se = math.sqrt(rss / (n - 2) / sxx * (n / n_eff))
    return slope, t_ppf(0.5 + confidence / 2.0, dof) * se


class Saturation(BaseModel):
    """The over-saturation verdict of one open-loop row (see the module docstring).

    ``inflight_slope`` (requests/s) and ``latency_slope`` (s/s) with their margins; ``arrivals_by_end``
    (arrivals before ``duration − L``) and ``ok_by_end`` (ok done by ``duration``) for the shortfall.
    """

    model_config = ConfigDict(frozen=True)

    checked: bool
    detected: bool = False
    short: bool = False
    reason: str
    n_eff: float | None = None
    inflight_slope: float | None = None
    inflight_margin: float | None = None
    latency_slope: float | None = None
    latency_margin: float | None = None
    arrivals_by_end: int | None = None
    ok_by_end: int | None = None


MAX_FIT_POINTS = 20_000
"""Above this many points the fits use an evenly spaced subset (the margin is set by ``n_eff``, far
smaller, so the verdict does not change; a 1,000,000-request row stays fast)."""


def _inflight_at(intended: np.ndarray, done: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Requests in the system (arrived, not yet done) at each time of ``at``."""
    arr = intended if bool(np.all(intended[1:] >= intended[:-1])) else np.sort(intended)
    dn = np.sort(np.where(np.isnan(done), np.inf, done))
    return (np.searchsorted(arr, at, side="right") - np.searchsorted(dn, at, side="right")).astype(np.float64)


def ok_shortfall(intended: np.ndarray, done: np.ndarray, ok: np.ndarray, duration_s: float,
                 ref_latency_s: float) -> tuple[bool, int, int]:
    """(short?, arrivals before ``duration − ref_latency``, ok completions by ``duration``)."""
    arrivals = int(np.count_nonzero(intended <= duration_s - ref_latency_s))
    ok_done = int(np.count_nonzero(ok & (done <= duration_s)))
    gap = arrivals - ok_done
    return (gap >= SHORTFALL_MIN and gap > SHORTFALL_Z * math.sqrt(max(arrivals, 1))), arrivals, ok_done


def check_saturation(intended: np.ndarray, done: np.ndarray, ok: np.ndarray, queued: np.ndarray,
                     duration_s: float) -> Saturation:
    """Both tests on one open-loop row.

    Args:
        intended, done: float64 seconds on the run clock (NaN ``done``: never finished), same length.
        ok: bool, the request succeeded.
        queued: bool, the request reached the server's queue (ok, timeout, invalid payload, cancelled).
        duration_s: the window of arrivals in seconds (> 0), starting at 0.
    """
    in_window = intended < duration_s
    if int(np.count_nonzero(in_window)) < MIN_POINTS:
        return Saturation(checked=False, reason=f"too few arrivals (need >= {MIN_POINTS})")
    first_half = in_window & (intended < duration_s / 2.0)
    lat_ok_first = (done - intended)[ok & first_half]
    ref = float(np.median(lat_ok_first)) if lat_ok_first.size else 0.0
    short, arrivals, ok_done = ok_shortfall(intended, done, ok, duration_s, ref)

    finished = ~np.isnan(done)
    t_end = max(float(done[finished].max()) if finished.any() else duration_s, duration_s)
    lat = np.where(finished, done, t_end) - intended
    use = in_window & (queued | ~finished)
    detected = False
    fields: dict[str, float] = {}
    if int(np.count_nonzero(use)) >= MIN_POINTS:
        idx = np.flatnonzero(use)
        if idx.size > MAX_FIT_POINTS:
            idx = idx[np.linspace(0, idx.size - 1, MAX_FIT_POINTS).astype(np.int64)]
            use = np.zeros_like(use)
            use[idx] = True
        x = intended[use]
        first = use & (intended < duration_s / 2.0)
        lat_first = lat[first] if first.any() else lat[use]
        med = float(np.median(lat_first))
        fast = float(np.percentile(lat_first, 10))  # ~ the service time: a stable queue forgets in a few
        n_eff = min(float(x.size), max(3.0, duration_s / fast if fast > 0 else float(x.size)))
        q = _inflight_at(intended, done, x)
        q_slope, q_margin = slope_test(x, q, n_eff)
        l_slope, l_margin = slope_test(x, lat[use], n_eff)
        in_first = x < duration_s / 2.0
        q_first = float(q[in_first].mean()) if in_first.any() else float(q.mean())
        span = float(x.max() - x.min())
        material = q_slope * span >= max(2.0, q_first) and l_slope * span >= med
        detected = bool(q_slope - q_margin > 0 and l_slope - l_margin > 0 and material)
        fields = {"n_eff": n_eff, "inflight_slope": q_slope, "inflight_margin": q_margin,
                  "latency_slope": l_slope, "latency_margin": l_margin}
    parts = []
    if detected:
        parts.append(f"over-saturated: in-flight grows {fields['inflight_slope']:.3g} req/s "
                     f"(± {fields['inflight_margin']:.2g}) and latency {fields['latency_slope']:.3g} s/s "
                     f"(± {fields['latency_margin']:.2g}) over the window")
    if short:
        parts.append(f"ok rate below offered: {ok_done} ok completions by {duration_s:g} s for {arrivals} "
                     f"arrivals (beyond {SHORTFALL_Z:g} sqrt(n) of Poisson noise)")
    reason = "; ".join(parts) if parts else "no sign of over-saturation"
    return Saturation(checked=True, detected=detected, short=short, reason=reason, arrivals_by_end=arrivals,
                      ok_by_end=ok_done, **fields)  # type: ignore[arg-type]


__all__ = ["Saturation", "check_saturation", "ok_shortfall", "slope_test", "t_ppf"]
