"""Simulator speed: 1,000,000 requests over 64 devices, and the ratio against an equivalent simpy model.

Targets: the 1M-request open-loop simulation in <= 5 s on one core, and >= 20x simpy's
per-request throughput, both measured in this run. simpy runs the same arrivals and service times on a
prefix (default 50,000 requests) and its completion times are checked against ours, so the two models are
the same queue.

Run: ``.venv/bin/python benchmarks/bench_simulator.py [--n 1000000] [--simpy-n 50000] [--devices 64]``
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Generator

import numpy as np

from diffbench.load.simulator import summarize_run
from diffbench.queueing.schedules import poisson
from diffbench.queueing.service_time import parse_service
from diffbench.queueing.simulator import fcfs_completions, simulate_open

SERVICE = "3.0*N(1,0.02)+0.8*B(0.1)"


def simpy_fcfs(arrivals: np.ndarray, service: np.ndarray, devices: int) -> np.ndarray:
    """The same FCFS queue as a simpy model: one process per request on a Resource with ``devices`` slots."""
    import simpy

    env = simpy.Environment()
    servers = simpy.Resource(env, capacity=devices)
    done = np.empty(arrivals.size)

    def request(i: int, s: float) -> Generator[object, object, None]:
        with servers.request() as slot:
            yield slot
            yield env.timeout(s)
        done[i] = env.now

    def source() -> Generator[object, object, None]:
        for i, (a, s) in enumerate(zip(arrivals.tolist(), service.tolist(), strict=True)):
            if a > env.now:
                yield env.timeout(a - env.now)
            env.process(request(i, s))

    env.process(source())
    env.run()
    return done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--simpy-n", type=int, default=50_000)
    ap.add_argument("--devices", type=int, default=64)
    ap.add_argument("--load", type=float, default=0.95, help="offered load as a fraction of capacity")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    svc = parse_service(SERVICE)
    rate = args.load * args.devices / svc.mean
    duration = args.n / rate

    full_times, core_times = [], []
    run = None
    for rep in range(args.repeat):
        t0 = time.perf_counter()
        arrivals = poisson(rate, duration * 1.02, seed=rep)[: args.n]  # exactly n requests
        run = simulate_open(arrivals, svc, args.devices, np.random.default_rng(rep + 100), duration_s=duration,
                            offered_rate=rate)
        t1 = time.perf_counter()
        fcfs_completions(run.intended, run.service, args.devices)
        t2 = time.perf_counter()
        full_times.append(t1 - t0)
        core_times.append(t2 - t1)
    assert run is not None
    n = run.intended.size
    t_sum = time.perf_counter()
    summary = summarize_run(run)
    t_sum = time.perf_counter() - t_sum

    m = min(args.simpy_n, n)
    t3 = time.perf_counter()
    ref = simpy_fcfs(run.intended[:m], run.service[:m], args.devices)
    t_simpy = time.perf_counter() - t3
    ours_prefix = fcfs_completions(run.intended[:m], run.service[:m], args.devices)
    max_diff = float(np.max(np.abs(ref - ours_prefix)))

    full, core = min(full_times), min(core_times)
    ours_per_req, simpy_per_req = core / n, t_simpy / m
    ratio = simpy_per_req / ours_per_req
    print(f"simulator: {n:,} requests, {args.devices} devices, service {SERVICE}, offered {rate:.3f} req/s "
          f"({args.load:.0%} of capacity), best of {args.repeat}")
    print(f"  schedule + service draws + FCFS queue : {full:.3f} s  (target <= 5 s: "
          f"{'PASS' if full <= 5 else 'FAIL'})")
    print(f"  FCFS queue alone                      : {core:.3f} s  ({ours_per_req * 1e9:.0f} ns/request)")
    print(f"  RateSummary of all requests           : {t_sum:.3f} s  (p99 from arrival "
          f"{summary.latency_from_arrival_s.p99:.3f} s, ok rate {summary.ok_rate:.3f} req/s)")
    print(f"simpy (same queue, first {m:,} requests): {t_simpy:.3f} s  ({simpy_per_req * 1e9:.0f} ns/request); "
          f"max |completion difference| {max_diff:.2e} s")
    print(f"  speed ratio per request (queue vs simpy): {ratio:.1f}x  (target >= 20x: "
          f"{'PASS' if ratio >= 20 else 'FAIL'})")
    print(f"  speed ratio incl. schedule and draws   : {simpy_per_req / (full / n):.1f}x")


if __name__ == "__main__":
    main()
