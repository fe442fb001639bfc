"""The FCFS multi-device simulator against queueing theory (Erlang C, Little's law) and exact cases."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from diffbench.errors import InputError, UsageError
from diffbench.load.simulator import summarize_run
from diffbench.queueing import schedules as sch
from diffbench.queueing.service_time import load_service_samples, parse_service
from diffbench.queueing.simulator import fcfs_completions, simulate_closed, simulate_open


def erlang_c(c: int, a: float) -> float:
    """Probability of waiting in M/M/c with offered load a = λ/μ (closed form, Erlang 1917)."""
    top = a**c / math.factorial(c) * c / (c - a)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


def erlang_c_via_b(c: int, a: float) -> float:
    """Same probability through the Erlang B recursion B_k = a B_{k-1} / (k + a B_{k-1}), C = cB/(c - a(1-B))."""
    b = 1.0
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    return c * b / (c - a * (1 - b))


def test_mmc_mean_wait_matches_erlang_c() -> None:
    c, mu, rho = 4, 1.0, 0.7
    lam = rho * c * mu
    p_wait = erlang_c(c, lam / mu)
    assert p_wait == pytest.approx(erlang_c_via_b(c, lam / mu), rel=1e-12)
    expected_wq = p_wait / (c * mu - lam)  # W_q = C(c, a) / (cμ - λ)

    n = 1_000_000
    arrivals = sch.poisson(lam, n / lam, seed=11)
    run = simulate_open(arrivals, parse_service(f"exp({1 / mu})"), c, np.random.default_rng(12),
                        duration_s=n / lam, offered_rate=lam)
    wait = run.waiting
    assert wait.mean() == pytest.approx(expected_wq, rel=0.03)
    # and the fraction that waited at all is C(c, a)
    assert np.mean(wait > 1e-12) == pytest.approx(p_wait, rel=0.03)


def test_littles_law_time_average() -> None:
    lam, c = 3.0, 4
    arrivals = sch.poisson(lam, 100_000.0, seed=5)
    run = simulate_open(arrivals, parse_service("U(0.5,1.5)"), c, np.random.default_rng(6), duration_s=1e5)
    t1, t2 = 10_000.0, 90_000.0
    # time-average of the number in system N(t) over [t1, t2], from the +1/-1 event sweep
    times = np.concatenate([run.intended, run.done])
    steps = np.concatenate([np.ones(run.intended.size), -np.ones(run.done.size)])
    order = np.argsort(times, kind="stable")
    times, level = times[order], np.cumsum(steps[order])
    edges = np.clip(times, t1, t2)
    area = np.sum(level[:-1] * np.diff(edges))
    mean_in_system = area / (t2 - t1)
    lam_hat = np.count_nonzero((run.intended >= t1) & (run.intended < t2)) / (t2 - t1)
    in_window = (run.intended >= t1) & (run.intended < t2)
    w = run.latency[in_window].mean()
    assert mean_in_system == pytest.approx(lam_hat * w, rel=0.01)


def _naive_fcfs(arrivals: list[float], service: list[float], c: int) -> list[float]:
    free = [0.0] * c
    out = []
    for a, s in zip(arrivals, service, strict=True):
        k = min(range(c), key=lambda j: free[j])
        free[k] = max(a, free[k]) + s
        out.append(free[k])
    return out


@pytest.mark.parametrize("c", [1, 3, 8])
def test_heap_matches_naive_assignment(c: int) -> None:
    rng = np.random.default_rng(c)
    arrivals = np.sort(rng.uniform(0, 50, 500))
    service = rng.exponential(c * 0.12, 500)
    np.testing.assert_allclose(fcfs_completions(arrivals, service, c),
                               _naive_fcfs(arrivals.tolist(), service.tolist(), c), rtol=0, atol=1e-12)


def test_closed_loop_exact_with_constant_service() -> None:
    # 8 users, 4 devices, 2 s each: every request waits one service behind another -> latency 4 s exactly
    run = simulate_closed(8, 100.0, parse_service("const(2)"), 4, np.random.default_rng(0))
    np.testing.assert_allclose(run.latency[8:], 8 * 2.0 / 4)
    assert summarize_run(run).ok_rate == pytest.approx(4 / 2.0, rel=0.02)
    # think time: 2 users, 4 devices, S = 1, Z = 3 -> each user cycles every 4 s
    run2 = simulate_closed(2, 400.0, parse_service("1"), 4, np.random.default_rng(0), think=parse_service("3"))
    np.testing.assert_allclose(run2.latency, 1.0)
    assert run2.intended.size == 2 * 100
    with pytest.raises(UsageError):
        simulate_closed(0, 10.0, parse_service("1"), 1, np.random.default_rng(0))


def test_reproducible_and_records() -> None:
    arr = sch.poisson(1.0, 200.0, seed=1)
    svc = parse_service("3.0*N(1,0.02)+0.8*B(0.1)")
    a = simulate_open(arr, svc, 4, np.random.default_rng(3), duration_s=200.0, offered_rate=1.0)
    b = simulate_open(arr, svc, 4, np.random.default_rng(3), duration_s=200.0, offered_rate=1.0)
    np.testing.assert_array_equal(a.done, b.done)
    recs = a.to_records()
    assert len(recs) == arr.size
    assert all(r.outcome == "ok" and r.sent_s == r.intended_s and r.rate == 1.0 for r in recs)
    assert recs[5].latency_from_arrival_s == pytest.approx(a.latency[5])


def test_service_expression_moments() -> None:
    svc = parse_service("3.0*N(1,0.02)+0.8*B(0.1)")
    assert svc.mean == pytest.approx(3.0 + 0.8 * 0.1)
    x = svc.sample(400_000, np.random.default_rng(0))
    # Var = 3.0² · 0.02² + 0.8² · 0.1 · 0.9
    assert x.var() == pytest.approx(9 * 0.02**2 + 0.64 * 0.09, rel=0.02)
    assert x.mean() == pytest.approx(3.08, rel=0.002)
    assert parse_service("2.5").mean == 2.5
    assert parse_service("const(2.5)").is_constant
    assert parse_service("exp(3.0)").sample(200_000, np.random.default_rng(1)).mean() == pytest.approx(3.0, rel=0.02)
    assert parse_service("U(2, 4) + 1").mean == pytest.approx(4.0)


@pytest.mark.parametrize("text, match", [
    ("", "empty"), ("3*Q(1)", "unknown factor"), ("N(1)", "takes 2"), ("B(1.5)", r"p in \[0, 1\]"),
    ("N(1,-1)", "sd >= 0"), ("3 +", "expected a number"), ("3 3", "unexpected"), ("exp(0)", "mean m > 0"),
    ("0", "finite number > 0"), ("N(1,0.1", "missing"), ("3$", "unexpected"),
])
def test_service_expression_errors(text: str, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        parse_service(text)


def test_service_from_measured_runs(tmp_path) -> None:
    bench = tmp_path / "bench.json"
    summary = {"n": 2, "mean": 1.5, "p50": 1.5}  # a Summary is not samples: ignored
    bench.write_text(json.dumps({"kind": "diffbench.bench", "latency_s": summary, "warmup_s": [9.0],
                                 "shapes": [{"latency_s": summary, "samples_s": [1.0, 2.0]},
                                            {"latency_s": {"samples": [3.0]}}]}))
    emp = load_service_samples(bench)
    assert emp.mean == pytest.approx(2.0)
    assert set(emp.sample(100, np.random.default_rng(0)).tolist()) <= {1.0, 2.0, 3.0}
    load = tmp_path / "run.jsonl"
    load.write_text('{"id":0,"intended_s":0,"sent_s":0.5,"done_s":2.5,"outcome":"ok"}\n'
                    '{"id":1,"intended_s":1,"sent_s":1.0,"done_s":9.0,"outcome":"timeout"}\n')
    assert load_service_samples(load).samples.tolist() == [2.0]
    txt = tmp_path / "lat.txt"
    txt.write_text("1.5\n2.5\nx\n")
    with pytest.raises(InputError, match=r"lat\.txt:3"):
        load_service_samples(txt)
    with pytest.raises(InputError, match="no latencies"):
        (tmp_path / "e.json").write_text("{}")
        load_service_samples(tmp_path / "e.json")
