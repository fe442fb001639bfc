from __future__ import annotations

import math

import numpy as np
import pytest

from diffbench.core.stats import min_n_for, percentile, percentile_warnings, summarize


def _type7(xs: list[float], q: float) -> float:
    """Hyndman-Fan type 7 written out from its definition (independent of numpy)."""
    s = sorted(xs)
    h = (len(s) - 1) * q / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (h - lo) * (s[hi] - s[lo])


def test_percentiles_match_the_definition() -> None:
    rng = np.random.default_rng(1)
    xs = list(rng.lognormal(0, 1, 137))
    s = summarize(xs)
    for q, v in ((50, s.p50), (90, s.p90), (99, s.p99), (99.9, s.p999)):
        assert v == pytest.approx(_type7(xs, q), rel=1e-12)
        assert percentile(xs, q) == pytest.approx(_type7(xs, q), rel=1e-12)
    assert s.n == 137
    assert s.mean == pytest.approx(sum(xs) / len(xs))
    assert s.std == pytest.approx(float(np.std(xs, ddof=1)))
    assert (s.min, s.max) == (min(xs), max(xs))


def test_support_rule() -> None:
    assert min_n_for(99) == 100
    assert min_n_for(90) == 10
    assert min_n_for(99.9) == 1000
    assert percentile_warnings(99, (99,)) and not percentile_warnings(100, (99,))
    assert summarize([1.0] * 10).warnings and not summarize([1.0] * 100).warnings


def test_nan_never_reaches_a_summary() -> None:
    with pytest.raises(ValueError, match="NaN"):
        summarize([1.0, float("nan")])
    empty = summarize([])
    assert empty.n == 0 and math.isnan(empty.p50)
