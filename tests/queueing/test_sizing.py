"""Queueing-aware sizing against closed forms: Erlang C by its textbook sum, M/M/1 response time (exponential
with rate μ − λ), and the simulator's p99 against the M/M/c response-time quantile."""

from __future__ import annotations

import math

import numpy as np
import pytest

from diffbench.errors import UsageError
from diffbench.queueing.service_time import parse_service
from diffbench.queueing.sizing import (
    erlang_c,
    formula_instances,
    mmc_latency_quantile,
    simulated_p99,
    size_pool,
)


def _erlang_c_sum(c: int, a: float) -> float:
    """Textbook form: C = (a^c/c!)·(c/(c−a)) / (Σ_{k<c} a^k/k! + (a^c/c!)·(c/(c−a)))."""
    top = a**c / math.factorial(c) * c / (c - a)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


@pytest.mark.parametrize(("c", "a"), [(1, 0.5), (2, 1.0), (4, 3.0), (10, 8.5), (30, 25.0)])
def test_erlang_c_matches_the_textbook_sum(c, a) -> None:
    assert erlang_c(c, a) == pytest.approx(_erlang_c_sum(c, a), rel=1e-12)


def test_erlang_c_edges() -> None:
    assert erlang_c(1, 0.3) == pytest.approx(0.3)  # M/M/1: P(wait) = ρ
    assert erlang_c(3, 3.0) == 1.0 and erlang_c(3, 5.0) == 1.0  # unstable: everyone waits
    assert erlang_c(5, 0.0) == 0.0
    with pytest.raises(ValueError):
        erlang_c(0, 1.0)


@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_mm1_latency_quantile_is_exponential(q) -> None:
    lam, mean = 0.6, 1.0
    assert mmc_latency_quantile(q, 1, lam, mean) == pytest.approx(-math.log(1 - q) / (1 / mean - lam), rel=1e-8)


def test_mmc_quantile_unstable_is_inf() -> None:
    assert mmc_latency_quantile(0.99, 2, 2.0, 1.0) == math.inf


@pytest.mark.parametrize(("c", "lam"), [(1, 0.7), (4, 3.2), (16, 14.0)])
def test_simulated_p99_matches_mmc(c, lam) -> None:
    rng = np.random.default_rng(c)
    n = 200_000
    arrivals = np.cumsum(rng.exponential(1 / lam, n))
    service = rng.exponential(1.0, n)
    p99, (lo, hi) = simulated_p99(arrivals, service, c, warmup=n // 10)
    exact = mmc_latency_quantile(0.99, c, lam, 1.0)
    assert lo <= exact <= hi or abs(p99 - exact) <= 1.5 * (hi - lo), (p99, exact, lo, hi)
    assert abs(p99 - exact) / exact < 0.05


def test_size_pool_exponential_equals_the_closed_form_count() -> None:
    qps, slo = 3.0, 6.0
    s = size_pool(qps, parse_service("exp(1)"), slo, requests=200_000, seed=1)
    exact = min(c for c in range(4, 50) if mmc_latency_quantile(0.99, c, qps, 1.0) <= slo)
    assert s.instances == exact  # closed form: c = 4 gives 6.006 s > 6, c = 5 gives 4.82 s
    assert s.p99_s <= slo
    assert s.p99_s == pytest.approx(mmc_latency_quantile(0.99, exact, qps, 1.0), rel=0.05)
    assert s.formula_instances == formula_instances(qps, 1.0) == 3
    assert s.p99_at_formula_s == math.inf  # ρ = 1 at the formula's count without headroom


def test_near_the_slo_the_queue_needs_more_than_the_formula() -> None:
    # 4.3 s service against a 5 s p99: the formula's 30 % headroom still leaves p99 over the SLO
    qps = 6.0
    s = size_pool(qps, parse_service("N(4.3,0.1)"), 5.0, headroom=1.3, seed=0)
    assert s.instances is not None and s.instances >= s.formula_instances
    assert s.p99_at_formula_s > 5.0
    assert s.formula_instances == math.ceil(qps * 4.3 * 1.3)


@pytest.mark.parametrize(("qps", "svc"), [(50.0, "N(0.1,0.005)"), (7.0, "U(0.9,1.1)"), (200.0, "const(0.25)")])
def test_far_below_the_slo_the_queue_equals_the_formula_within_one(qps, svc) -> None:
    service = parse_service(svc)
    s = size_pool(qps, service, slo_p99_s=30 * service.mean, seed=0)
    assert abs(s.instances - formula_instances(qps, service.mean)) <= 1
    assert s.instances >= math.floor(qps * service.mean) + 1  # never below the stable count


def test_service_slower_than_the_slo_cannot_be_sized() -> None:
    s = size_pool(2.0, parse_service("N(4,0.1)"), 3.0)
    assert s.instances is None and not s.meets_slo
    assert s.service_p99_s > 3.0


def test_seeded_and_deterministic() -> None:
    a = size_pool(20.0, parse_service("N(1,0.1)"), 1.5, seed=7)
    b = size_pool(20.0, parse_service("N(1,0.1)"), 1.5, seed=7)
    assert a == b


@pytest.mark.parametrize(("qps", "slo"), [(0.0, 1.0), (-1.0, 1.0), (math.nan, 1.0), (1.0, 0.0), (1.0, math.inf)])
def test_bad_arguments_are_usage_errors(qps, slo) -> None:
    with pytest.raises(UsageError):
        size_pool(qps, parse_service("1"), slo)
