"""Greedy batched service (M/G^[B]/c) against closed forms: with B = 1 it is the FCFS M/G/c simulator request
for request and the Erlang C sizing; with exponential batch times on one worker its mean latency is the
bulk-service geometric solution (derived in diffbench.queueing.batching), which is 1/(μ − λ) at B = 1."""

from __future__ import annotations

import numpy as np
import pytest

from diffbench.errors import UsageError
from diffbench.queueing.batching import (
    batch_completions,
    max_rate_one_worker,
    mmb1_mean_latency,
    size_batched_pool,
)
from diffbench.queueing.schedules import poisson
from diffbench.queueing.service_time import parse_service
from diffbench.queueing.simulator import fcfs_completions
from diffbench.queueing.sizing import mmc_latency_quantile


def _arrivals(rate: float, n: int, seed: int = 3) -> np.ndarray:
    return poisson(rate, n / rate * 1.1 + 10 / rate, np.random.default_rng(seed))[:n]


@pytest.mark.parametrize("workers", [1, 3])
def test_batch_of_one_is_fcfs(workers):
    arr = _arrivals(2.0, 5000)
    svc = np.random.default_rng(4).exponential(1.0, arr.size)
    done, size = batch_completions(arr, [1.0], svc, workers)
    assert np.array_equal(done, fcfs_completions(arr, svc, workers))
    assert (size == 1).all()


def test_mmb1_closed_form_reduces_to_mm1():
    for lam in (0.2, 0.5, 0.9):
        assert mmb1_mean_latency(lam, 1.0, 1) == pytest.approx(1 / (1 - lam), rel=1e-9)
    assert mmb1_mean_latency(2.0, 1.0, 2) == float("inf")  # λ = Bμ: unstable


@pytest.mark.slow
@pytest.mark.parametrize(("rate", "bmax"), [(0.8, 2), (1.5, 2), (2.5, 4), (0.8, 4)])
def test_simulation_matches_the_bulk_service_closed_form(rate, bmax):
    """One worker, Exp(1) batch time whatever its size: simulated mean latency within 3 % of the closed form."""
    arr = _arrivals(rate, 300_000)
    f = np.random.default_rng(5).exponential(1.0, arr.size)
    done, size = batch_completions(arr, [1.0] * bmax, f, 1)
    warm = 10_000
    sim = float(np.mean((done - arr)[warm:]))
    assert sim == pytest.approx(mmb1_mean_latency(rate, 1.0, bmax), rel=0.03)
    assert size.max() == bmax and size.min() == 1


def test_batches_fill_under_overload_and_never_exceed_the_limit():
    arr = _arrivals(20.0, 4000)  # 20 req/s against at most 4 per 1 s batch: the queue grows
    done, size = batch_completions(arr, [1.0, 1.0, 1.0, 1.0], np.ones(arr.size), 1)
    assert size.max() == 4 and np.mean(size[100:]) == pytest.approx(4.0, abs=0.01)
    assert np.all(np.diff(done) >= 0)  # FCFS: completions in arrival order on one worker


@pytest.mark.parametrize(("qps", "mean", "slo"), [(5.0, 1.0, 5.5), (2.0, 1.0, 5.3), (10.0, 1.0, 5.6)])
def test_batch_one_sizing_is_erlang_c(qps, mean, slo):
    """B = 1 with exponential service: the smallest count whose M/M/c p99 (closed form) meets the SLO (SLOs
    chosen away from the closed form's p99 at neighbouring counts), and the simulated p99 there within 5 %."""
    c = int(qps * mean) + 1
    while mmc_latency_quantile(0.99, c, qps, mean) > slo:
        c += 1
    z = size_batched_pool(qps, [mean], parse_service("exp(1)"), slo, requests=100_000)
    assert z.instances == c and z.mean_batch == 1.0
    assert z.p99_s == pytest.approx(mmc_latency_quantile(0.99, c, qps, mean), rel=0.05)


def test_batching_helps_when_a_batch_costs_less_than_its_requests():
    """Batch time 1 s whatever its size: one worker with B = 4 carries 3 req/s (saturation 4/s) within a
    10 s p99, which needs 4+ workers without batching (M/M/c-like load 3 Erlangs)."""
    fac = parse_service("N(1,0.05)")
    one = size_batched_pool(3.0, [1.0], fac, 10.0)
    four = size_batched_pool(3.0, [1.0] * 4, fac, 10.0)
    assert one.instances is not None and one.instances >= 4
    assert four.instances == 1 and four.mean_batch > 2
    rate = max_rate_one_worker([1.0] * 4, fac, 10.0)
    assert 3.0 <= rate < 4.0  # below the saturation rate B / S(B)


def test_no_count_meets_an_slo_below_the_batch_of_one():
    z = size_batched_pool(1.0, [2.0, 2.5], parse_service("2"), 1.0)
    assert z.instances is None and not z.meets_slo
    assert max_rate_one_worker([2.0], parse_service("1"), 1.0) == 0.0


@pytest.mark.parametrize(("qps", "batch_s", "slo"), [(0.0, [1.0], 5.0), (1.0, [], 5.0), (1.0, [0.0], 5.0),
                                                     (1.0, [1.0], float("nan"))])
def test_bad_arguments(qps, batch_s, slo):
    with pytest.raises(UsageError):
        size_batched_pool(qps, batch_s, parse_service("1"), slo)
