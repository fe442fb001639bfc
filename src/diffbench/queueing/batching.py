"""Batched service: ``c`` identical workers, each serving up to ``B`` queued requests as one batch (M/G^[B]/c).

**Batching policy** (greedy, no batching delay): requests wait in one FCFS queue. Whenever a worker is
free and the queue is not empty, it takes the oldest ``min(queued, B)`` requests at once and serves them as
one batch; a request that arrives while every worker is busy waits for the next free worker; a request
that arrives at an idle worker starts at once as a batch of 1 (a worker never waits to fill a batch). A
batch of ``k`` takes ``S(k)`` seconds (``S(k)`` from the ledger at batch ``k``, times a per-batch random
factor of mean 1) and all its requests complete together. With ``B = 1`` this is the M/G/c FCFS queue of
:func:`diffbench.queueing.simulator.fcfs_completions`, request for request.

Serving engines that wait up to a time limit to fill a batch (MLPerf's SDXL harness waits up to a few
seconds) trade a little latency at low load for fuller batches; the greedy policy is the no-wait end of that
range, and batches fill by themselves as the load grows (the queue holds more requests when a worker frees).

Closed form used to check the simulator (:func:`mmb1_mean_latency`): with Poisson arrivals (rate λ), one
worker and a batch time Exp(μ) whatever the batch size, the state (requests waiting q, worker busy or idle)
is a Markov chain. For q ≥ 1 its balance equations are those of the bulk-service queue,
(λ + μ)·p_q = λ·p_{q−1} + μ·p_{q+B}, solved by p_q = C·r^q with r the root in (0, 1) of
μ·r^{B+1} − (λ + μ)·r + λ = 0; the boundary equations (idle: λ·p_idle = μ·p_0; busy with none waiting:
(λ + μ)·p_0 = λ·p_idle + μ·Σ_{q=1..B} p_q) hold for the same r, which gives p_idle = μC/λ and
C = 1 ÷ (1/(1 − r) + μ/λ). The mean number waiting is E[q] = C·r/(1 − r)², and by Little's law the mean
latency is E[q]/λ + 1/μ. For B = 1 this is the M/M/1 mean 1/(μ − λ).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from diffbench.errors import UsageError
from diffbench.queueing.schedules import poisson
from diffbench.queueing.service_time import ServiceTime
from diffbench.queueing.sizing import MAX_INSTANCES, p99_with_interval

BATCH_SEED_OFFSET = 1  # the per-batch factors use their own generator, so arrivals match size_pool's


def batch_completions(arrivals: np.ndarray, batch_s: Sequence[float], factors: np.ndarray, workers: int,
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Completion times under the greedy batching policy of the module docstring.

    Args:
        arrivals: float64 seconds, sorted non-decreasing, shape (n,).
        batch_s: ``batch_s[k - 1]`` = mean seconds of a batch of k requests, k = 1..B (B = ``len(batch_s)``).
        factors: per-batch multiplicative factors of mean 1, shape (>= n,); the j-th batch formed takes
            ``batch_s[k - 1] × factors[j]`` seconds.
        workers: identical workers, >= 1.

    Returns:
        (completion times, float64 shape (n,); size of the batch each request was served in, int64 shape (n,)).

    Raises:
        ValueError: no batch times, a negative batch time, too few factors, or workers < 1.
    """
    bmax = len(batch_s)
    if bmax < 1 or any(not (s >= 0 and math.isfinite(s)) for s in batch_s):
        raise ValueError(f"batch times must be finite and >= 0 seconds, got {list(batch_s)}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    n = arrivals.size
    if factors.size < n:
        raise ValueError(f"need at least {n} batch factors, got {factors.size}")
    arr = arrivals.tolist()
    fac = factors.tolist()
    sizes_s = list(batch_s)
    free = [0.0] * workers
    done = np.empty(n, dtype=np.float64)
    size = np.empty(n, dtype=np.int64)
    i = j = 0
    while i < n:
        f = free[0]
        start = arr[i] if arr[i] > f else f
        k = 1
        while k < bmax and i + k < n and arr[i + k] <= start:
            k += 1
        end = start + sizes_s[k - 1] * fac[j]
        heapq.heapreplace(free, end)
        done[i:i + k] = end
        size[i:i + k] = k
        i += k
        j += 1
    return done, size


def mmb1_mean_latency(rate: float, mean_s: float, max_batch: int) -> float:
    """Mean latency (waiting + service, seconds) of one worker serving up to ``max_batch`` per batch with
    Exp(1/mean_s) batch times and Poisson arrivals at ``rate`` (the closed form of the module docstring).

    Returns ``inf`` when unstable (rate × mean_s >= max_batch).

    Raises:
        ValueError: a non-positive rate or mean, or max_batch < 1.
    """
    if rate <= 0 or mean_s <= 0 or max_batch < 1:
        raise ValueError(f"need rate > 0, mean_s > 0, max_batch >= 1; got {rate}, {mean_s}, {max_batch}")
    lam, mu = rate, 1.0 / mean_s
    if lam >= max_batch * mu:
        return math.inf

    def g(r: float) -> float:
        return mu * r ** (max_batch + 1) - (lam + mu) * r + lam

    lo, hi = 0.0, 1.0 - 1e-15  # g(0) = λ > 0; g < 0 just below 1 when stable (g(1) = 0, g'(1) = μB − λ > 0)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if g(mid) > 0:
            lo = mid
        else:
            hi = mid
    r = 0.5 * (lo + hi)
    c = 1.0 / (1.0 / (1.0 - r) + mu / lam)
    waiting = c * r / (1.0 - r) ** 2
    return waiting / lam + mean_s


@dataclass(frozen=True)
class BatchedSizing:
    """Workers needed at a request rate when each serves batches of up to ``max_batch`` (seconds throughout).

    ``instances`` is the smallest count whose simulated p99 latency meets the SLO (``None``: even a batch of
    1 misses it); ``p99_s`` its p99 with a 95 % batch-means interval ``p99_ci_s``; ``mean_batch`` the mean
    size of the batches served there; ``formula_instances`` = ⌈QPS × S(B)/B × headroom⌉ (full batches).
    """

    qps: float
    slo_p99_s: float
    max_batch: int
    batch_s: tuple[float, ...]
    formula_instances: int
    instances: int | None
    p99_s: float
    p99_ci_s: tuple[float, float]
    mean_batch: float
    service_p99_s: float
    requests: int
    warmup: int
    seed: int
    method: str = "simulated M/G^[B]/c, greedy batching (a free worker takes up to B queued), Poisson arrivals"

    @property
    def meets_slo(self) -> bool:
        return self.instances is not None


def _check(qps: float, slo_p99_s: float, batch_s: Sequence[float]) -> None:
    if not (qps > 0 and math.isfinite(qps)):
        raise UsageError(f"--qps {qps}: must be a finite rate > 0 req/s")
    if not (slo_p99_s > 0 and math.isfinite(slo_p99_s)):
        raise UsageError(f"--slo-p99 {slo_p99_s}: must be a finite number of seconds > 0")
    if not batch_s or any(not (s > 0 and math.isfinite(s)) for s in batch_s):
        raise UsageError(f"batch times must be finite and > 0 seconds, got {list(batch_s)}")


def _draws(qps: float, n: int, warm: int, factor: ServiceTime, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrivals = poisson(qps, (n + warm) / qps * 1.05 + 10.0 / qps, rng)[: n + warm]
    frng = np.random.default_rng(seed + BATCH_SEED_OFFSET)
    factors = np.asarray(factor.sample(arrivals.size, frng), dtype=np.float64)
    return arrivals, factors / factor.mean


def size_batched_pool(qps: float, batch_s: Sequence[float], factor: ServiceTime, slo_p99_s: float,
                      headroom: float = 1.0, *, requests: int = 40_000, seed: int = 0) -> BatchedSizing:
    """Smallest worker count whose p99 latency with queueing meets ``slo_p99_s`` under greedy batching.

    Args:
        qps: Poisson arrival rate, req/s.
        batch_s: mean seconds of a batch of k = 1..B requests (``batch_s[k - 1]``), from the ledger at batch k.
        factor: the spread of a batch's time; its draws are divided by its mean (a factor of mean 1), e.g.
            ``N(1, 0.05)`` or a measured bench run.
        slo_p99_s: p99 latency target, seconds.
        headroom: the formula's factor (reported, not used by the queue).
        requests: simulated requests per candidate count after ``max(1000, requests // 10)`` of warm-up;
            the same draws serve every count (common random numbers).
        seed: seed of the arrivals (the factors use ``seed + 1``).

    Raises:
        UsageError: a non-positive rate, SLO or batch time, or more than 100,000 workers needed.
    """
    _check(qps, slo_p99_s, batch_s)
    bmax = len(batch_s)
    formula = max(1, math.ceil(qps * batch_s[-1] / bmax * headroom - 1e-9))
    stable = int(math.floor(qps * batch_s[-1] / bmax)) + 1
    if stable > MAX_INSTANCES:
        raise UsageError(f"--qps {qps:g} needs over {MAX_INSTANCES:,} workers at batch {bmax}; lower the rate")
    warm = max(1000, requests // 10)
    arrivals, factors = _draws(qps, requests, warm, factor, seed)
    svc_p99 = float(np.quantile(batch_s[0] * factors, 0.99))
    cache: dict[int, tuple[float, tuple[float, float], float]] = {}

    def run(c: int) -> tuple[float, tuple[float, float], float]:
        if c not in cache:
            done, size = batch_completions(arrivals, batch_s, factors, c)
            p99, ci = p99_with_interval((done - arrivals)[warm:])
            cache[c] = (p99, ci, float(np.mean(size[warm:])))
        return cache[c]

    def result(c: int | None, at: int) -> BatchedSizing:
        p99, ci, mb = run(at)
        return BatchedSizing(qps=qps, slo_p99_s=slo_p99_s, max_batch=bmax, batch_s=tuple(batch_s),
                             formula_instances=formula, instances=c, p99_s=p99, p99_ci_s=ci, mean_batch=mb,
                             service_p99_s=svc_p99, requests=requests, warmup=warm, seed=seed)

    if svc_p99 > slo_p99_s:
        return result(None, max(stable, formula))
    lo, hi, step = stable - 1, stable, 1
    while run(hi)[0] > slo_p99_s:
        lo, hi = hi, hi + step
        step *= 2
        if hi > MAX_INSTANCES:
            raise UsageError(f"no worker count up to {MAX_INSTANCES:,} meets the {slo_p99_s:g} s p99 SLO")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if run(mid)[0] <= slo_p99_s:
            hi = mid
        else:
            lo = mid
    return result(hi, hi)


def max_rate_one_worker(batch_s: Sequence[float], factor: ServiceTime, slo_p99_s: float, *,
                        requests: int = 20_000, seed: int = 0) -> float:
    """The highest Poisson rate (req/s) one worker serves with a p99 latency within ``slo_p99_s`` under
    greedy batching (bisection to 0.5 % between 0 and the saturation rate B ÷ S(B)); 0.0 when even a batch
    of 1 misses the SLO. The draws are made at unit rate and rescaled per candidate rate (common random
    numbers, so the p99 rises monotonically with the rate in practice).

    Raises:
        UsageError: a non-positive SLO or batch time.
    """
    _check(1.0, slo_p99_s, batch_s)
    bmax = len(batch_s)
    warm = max(1000, requests // 10)
    unit, factors = _draws(1.0, requests, warm, factor, seed)
    if float(np.quantile(batch_s[0] * factors, 0.99)) > slo_p99_s:
        return 0.0
    sat = max(k / s for k, s in zip(range(1, bmax + 1), batch_s, strict=True))

    def p99(rate: float) -> float:
        arr = unit / rate
        done, _ = batch_completions(arr, batch_s, factors, 1)
        return float(np.quantile((done - arr)[warm:], 0.99))

    lo, hi = 0.0, sat
    while hi - lo > 0.005 * hi:
        mid = 0.5 * (lo + hi)
        if p99(mid) <= slo_p99_s:
            lo = mid
        else:
            hi = mid
    return lo
