"""How many instances a request rate needs when the SLO is a p99 that includes queueing.

Two answers side by side:

- **the formula** (the planning rule, docs/guides/plan-a-deployment.md): ``instances = ⌈QPS × E[S] × headroom⌉``. It keeps
  utilisation at ≤ 1/headroom but says nothing about waiting: a 4.3 s service time against a 5 s p99 SLO
  leaves 0.7 s for the queue, which the formula never checks;
- **the queue** (:func:`size_pool`): the smallest ``c`` whose p99 latency (waiting + service) over ``c``
  identical FCFS instances meets the SLO, computed with the discrete-event simulator of
  :mod:`diffbench.queueing.simulator` under Poisson arrivals (M/G/c, any service distribution).

Closed forms for the exponential case (M/M/c), used to check the simulator: Erlang C
(:func:`erlang_c`, the probability that an arrival waits; A. K. Erlang 1917, in Kleinrock, *Queueing
Systems* Vol. 1 §3.5) and the response-time tail (:func:`mmc_latency_quantile`): the wait is 0 with
probability 1 − C and Exp(cμ − λ) otherwise, independent of the Exp(μ) service, so
P(T > t) = (1 − C)·e^{−μt} + C·(θ·e^{−μt} − μ·e^{−θt}) / (θ − μ) with θ = cμ − λ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from diffbench.errors import UsageError
from diffbench.queueing.schedules import poisson
from diffbench.queueing.service_time import ServiceTime
from diffbench.queueing.simulator import fcfs_completions

MAX_INSTANCES = 100_000


def erlang_c(c: int, offered_load: float) -> float:
    """Probability that an arrival waits in an M/M/c queue (Erlang C).

    Args:
        c: servers, >= 1.
        offered_load: a = λ·E[S] in Erlangs (>= 0); the queue is stable only for a < c.

    Returns:
        C(c, a) in [0, 1]; 1.0 when a >= c (every arrival waits, the queue grows without bound).

    Computed through the Erlang B recursion B(k) = a·B(k−1) / (k + a·B(k−1)), C = B / (1 − ρ(1 − B)), which is
    numerically stable for thousands of servers.

    Raises:
        ValueError: c < 1 or a negative load.
    """
    if c < 1:
        raise ValueError(f"servers must be >= 1, got {c}")
    if offered_load < 0:
        raise ValueError(f"offered load must be >= 0, got {offered_load}")
    if offered_load >= c:
        return 1.0
    b = 1.0
    for k in range(1, c + 1):
        b = offered_load * b / (k + offered_load * b)
    rho = offered_load / c
    return b / (1.0 - rho * (1.0 - b))


def mmc_latency_tail(t: float, c: int, rate: float, mean_s: float) -> float:
    """P(T > t) of the response time (waiting + service) of a stable M/M/c FCFS queue, t in seconds."""
    mu = 1.0 / mean_s
    theta = c * mu - rate
    if theta <= 0:
        return 1.0
    cw = erlang_c(c, rate * mean_s)
    if abs(theta - mu) < 1e-12 * mu:
        both = (1.0 + mu * t) * math.exp(-mu * t)  # Erlang-2 tail when θ = μ
    else:
        both = (theta * math.exp(-mu * t) - mu * math.exp(-theta * t)) / (theta - mu)
    return (1.0 - cw) * math.exp(-mu * t) + cw * both


def mmc_latency_quantile(q: float, c: int, rate: float, mean_s: float) -> float:
    """The q-quantile (e.g. 0.99) of the M/M/c response time in seconds; ``inf`` when unstable.

    Solved by bisection on :func:`mmc_latency_tail` (monotone in t) to 1e-9 relative.
    """
    if not 0 < q < 1:
        raise ValueError(f"quantile must be in (0, 1), got {q}")
    if rate * mean_s >= c:
        return math.inf
    lo, hi = 0.0, mean_s
    while mmc_latency_tail(hi, c, rate, mean_s) > 1 - q:
        hi *= 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mmc_latency_tail(mid, c, rate, mean_s) > 1 - q:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-9 * hi:
            break
    return hi


def formula_instances(qps: float, mean_s: float, headroom: float = 1.0) -> int:
    """The planning formula's count ⌈QPS × E[S] × headroom⌉ (at least 1)."""
    return max(1, math.ceil(qps * mean_s * headroom - 1e-9))


@dataclass(frozen=True)
class PoolSizing:
    """The instance count of one pool, by formula and by queue (seconds throughout).

    ``instances`` is the smallest count whose simulated p99 latency meets the SLO (``None`` when even the
    service time's own p99 misses it: no number of instances helps); ``p99_s`` is that count's p99;
    ``p99_at_formula_s`` the p99 at the formula's count (``inf``: unstable there). ``requests`` were
    simulated per candidate count after ``warmup`` requests that are discarded (the queue starts empty);
    ``p99_ci_s`` is a 95 % batch-means interval of that p99 (:func:`simulated_p99`).
    """

    qps: float
    slo_p99_s: float
    service_mean_s: float
    service_p99_s: float
    formula_instances: int
    instances: int | None
    p99_s: float
    p99_ci_s: tuple[float, float]
    p99_at_formula_s: float
    utilisation: float
    requests: int
    warmup: int
    seed: int
    method: str = "simulated M/G/c FCFS, Poisson arrivals"

    @property
    def meets_slo(self) -> bool:
        return self.instances is not None


BATCHES = 20


def simulated_p99(arrivals: np.ndarray, service: np.ndarray, c: int, warmup: int) -> tuple[float, tuple[float, float]]:
    """p99 latency (seconds) of FCFS service on ``c`` instances after dropping the first ``warmup`` requests,
    with a 95 % interval by batch means (20 consecutive batches; their p99s are close to independent even
    when successive waits are strongly correlated near saturation, which an order-statistic interval ignores).
    """
    done = fcfs_completions(arrivals, service, c)
    return p99_with_interval((done - arrivals)[warmup:])


def p99_with_interval(lat: np.ndarray) -> tuple[float, tuple[float, float]]:
    """p99 of latencies (seconds, shape (n,), in arrival order) with the 95 % batch-means interval of
    :func:`simulated_p99`."""
    p99 = float(np.quantile(lat, 0.99))
    batches = np.array_split(lat, BATCHES)
    per = np.array([np.quantile(b, 0.99) for b in batches if b.size])
    half = 2.093 * float(per.std(ddof=1)) / math.sqrt(per.size)  # Student t, 19 degrees of freedom, 97.5 %
    return p99, (p99 - half, p99 + half)


def _mmc_guess(qps: float, mean_s: float, wait_budget_s: float, stable: int) -> int | None:
    """Smallest count (from ``stable``) whose M/M/c 99th-percentile wait fits ``wait_budget_s`` (None: > 4× stable).

    M/M/c wait: 0 with probability 1 − C, else Exp(cμ − λ), so its q-quantile is ln(C / (1 − q)) / (cμ − λ)
    when C > 1 − q, else 0."""
    if wait_budget_s <= 0:
        return None
    for c in range(stable, 4 * stable + 2):
        cw = erlang_c(c, qps * mean_s)
        w99 = 0.0 if cw <= 0.01 else math.log(cw / 0.01) / (c / mean_s - qps)
        if w99 <= wait_budget_s:
            return c
    return None


def size_pool(qps: float, service: ServiceTime, slo_p99_s: float, headroom: float = 1.0, *,
              requests: int | None = None, seed: int = 0) -> PoolSizing:
    """Smallest instance count whose p99 latency with queueing meets ``slo_p99_s`` at ``qps`` req/s.

    Args:
        qps: mean Poisson arrival rate, req/s, > 0.
        service: per-request service time of one instance (seconds), e.g. ``parse_service("N(1.8,0.05)")``
            or a measured ``bench`` run (:func:`~diffbench.queueing.service_time.load_service_samples`).
        slo_p99_s: the p99 latency target in seconds, > 0.
        headroom: the formula's headroom factor (>= 1), reported for comparison only.
        requests: simulated requests per candidate count (default: max(40,000, 200 × formula count), so the
            p99 rests on >= 400 tail samples, and on >= 2 per instance in large pools); the same arrivals and service draws are reused for every
            count (common random numbers), so p99 falls monotonically as instances are added.
        seed: seed of the arrivals and service draws.

    Returns:
        :class:`PoolSizing`. The search brackets the answer between the smallest stable count (⌊λ·E[S]⌋ + 1)
        and an M/M/c-based guess (doubling past it if the simulation says it is not enough), then bisects.

    Raises:
        UsageError: a non-positive rate or SLO, or a rate needing more than 100,000 instances.
    """
    if not (qps > 0 and math.isfinite(qps)):
        raise UsageError(f"--qps {qps}: must be a finite rate > 0 req/s")
    if not (slo_p99_s > 0 and math.isfinite(slo_p99_s)):
        raise UsageError(f"--slo-p99 {slo_p99_s}: must be a finite number of seconds > 0")
    mean = service.mean
    f_count = formula_instances(qps, mean, headroom)
    stable = int(math.floor(qps * mean)) + 1
    if stable > MAX_INSTANCES:
        raise UsageError(f"--qps {qps:g} with a {mean:.3g} s service time needs over {MAX_INSTANCES:,} instances; "
                         "lower the rate or split it into pools")
    n = requests if requests is not None else max(40_000, 200 * f_count)
    warm = max(1000, n // 10)
    rng = np.random.default_rng(seed)
    # enough arrivals for warmup + n measured requests
    duration = (n + warm) / qps
    arrivals = poisson(qps, duration * 1.05 + 10.0 / qps, rng)[: n + warm]
    svc = np.asarray(service.sample(arrivals.size, rng), dtype=np.float64)
    svc_p99 = float(np.quantile(svc, 0.99))

    def p99_of(c: int) -> tuple[float, tuple[float, float]]:
        if qps * mean >= c:
            return math.inf, (math.inf, math.inf)
        return simulated_p99(arrivals, svc, c, warm)

    cache: dict[int, tuple[float, tuple[float, float]]] = {}

    def cached(c: int) -> tuple[float, tuple[float, float]]:
        if c not in cache:
            cache[c] = p99_of(c)
        return cache[c]

    at_formula, _ = cached(f_count)
    if svc_p99 > slo_p99_s:
        best = max(stable, f_count)
        p, ci = cached(best)
        return PoolSizing(qps=qps, slo_p99_s=slo_p99_s, service_mean_s=mean, service_p99_s=svc_p99,
                          formula_instances=f_count, instances=None, p99_s=p, p99_ci_s=ci,
                          p99_at_formula_s=at_formula, utilisation=qps * mean / best, requests=n, warmup=warm,
                          seed=seed)
    def ok(c: int) -> bool:
        return cached(c)[0] <= slo_p99_s

    lo = stable - 1  # known to fail (unstable)
    # first guess: the M/M/c wait's 99th percentile on top of the service's own p99, which over-provisions for
    # service less variable than exponential (Allen-Cunneen: waits scale with (1 + CV²)/2); confirmed or
    # corrected by simulation below, so the guess only saves simulations
    guess = _mmc_guess(qps, mean, slo_p99_s - svc_p99, stable)
    if guess is not None and ok(guess):
        hi = guess
    else:
        lo = max(lo, guess or lo)
        hi = lo + 1
    step = 1
    while not ok(hi):
        lo = hi
        hi = lo + step
        step *= 2
        if hi > MAX_INSTANCES:
            raise UsageError(f"no instance count up to {MAX_INSTANCES:,} meets the {slo_p99_s:g} s p99 SLO")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    p, ci = cache[hi]
    return PoolSizing(qps=qps, slo_p99_s=slo_p99_s, service_mean_s=mean, service_p99_s=svc_p99,
                      formula_instances=f_count, instances=hi, p99_s=p, p99_ci_s=ci, p99_at_formula_s=at_formula,
                      utilisation=qps * mean / hi, requests=n, warmup=warm, seed=seed)
