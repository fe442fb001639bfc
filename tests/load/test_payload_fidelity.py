"""Large-payload fidelity (issue 10, the 'wrong number' row): against a server answering ~8 MB instantly, the
latency from send that ``diffbench load`` reports, with payload checks on, stays near a bare
aiohttp client's measured in the same test on the same schedule.

Setup: the noop responder in its own process (so it shares no GIL with the clients); both clients in this
process, on one event loop, interleaved bare, diffbench, bare, diffbench, ... (4 pairs), each warmed first on
its own connections (the diffbench warm-up also starts its payload-check pool). Each pair runs a seeded
Poisson schedule at 20 req/s (the issue's rate) for 1 s, the same for both: ~80 samples per client.
Poisson, not constant: a constant 50 ms spacing leaves room for the ~30 ms check of each 8 MB answer
between two receptions, so a client decoding on its measuring loop would go unnoticed; Poisson bursts
overlap them (measured while writing this test: an aiohttp loop decoding inline reported p50 46-74 ms
against 5-6 ms).

Tolerance: ``ours_p50 <= RATIO * bare_p50 + allowance``. The issue's target, 1.2x, is a performance
figure and lives in the benchmark (``python benchmarks/bench_load_client.py --only large``, on a machine
with free cores). This test guards the regression it was written for, decoding on the measuring loop
(10x and more: p50 46-74 ms against 5-6 ms, above), and must hold on a 2-core machine with two busy loops
beside it, where diffbench's client measured 1.4-1.8x the bare loop, and 1.4-1.6x with the checks turned
off: there the client's own per-request work competes with the busy loops for the CPU, not the checks.
``RATIO`` = 2.5 sits between the two. The allowance is computed from this run, never a constant time:

- sampling error: 2 standard errors of the bare client's pooled median, SE = 1.2533 * sigma / sqrt(n)
  (the asymptotic variance of the median of a normal sample, pi * sigma^2 / (2n)), sigma robustly from
  the IQR / 1.349;
- the noise floor: how far the bare client's p50 moves between its own runs (pooled even-numbered vs
  odd-numbered bare runs), i.e. what the machine does to identical clients in this test;
- two ticks of ``perf_counter`` (its resolution).
"""

from __future__ import annotations

import asyncio
import json
import math
import time

import numpy as np
import pytest

from diffbench.load.client import HttpBackend, RequestPlanner, Target, default_workload, run_open_loop
from diffbench.load.client.bare import run_bare
from diffbench.load.client.dialects import IMAGES_PATH, image_body
from diffbench.load.client.noop_server import ServerProcess
from diffbench.queueing.schedules import constant, poisson

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # 8 MB answers on 2 busy cores

BODY_BYTES = 8_000_000
RATE, SECONDS, PAIRS, SEED = 20.0, 1.0, 4, 7
TIMEOUT_S = 30.0
RATIO = 2.5


def _median_se(samples: np.ndarray) -> float:
    """Standard error of the sample median (normal approximation, sigma from the IQR)."""
    q75, q25 = np.percentile(samples, [75, 25])
    return 1.2533 * ((q75 - q25) / 1.349) / math.sqrt(samples.size)


def allowance_s(bare_runs: list[np.ndarray]) -> float:
    """The absolute allowance in seconds (module docstring) from the bare client's per-run samples."""
    pooled = np.concatenate(bare_runs)
    even, odd = np.concatenate(bare_runs[0::2]), np.concatenate(bare_runs[1::2])
    noise = abs(float(np.median(even)) - float(np.median(odd)))
    return 2 * _median_se(pooled) + noise + 2 * time.get_clock_info("perf_counter").resolution


async def _measure(url: str, size: tuple[int, int]) -> tuple[list[np.ndarray], list[np.ndarray], list[str]]:
    planner = RequestPlanner(default_workload(size[0], size[1], 1), ["a lighthouse"], seed=0)
    body = json.dumps(image_body(planner.take(1)[0], "vllm-omni")).encode()
    warm = constant(5.0, 0.6)
    backend = HttpBackend(Target(base_url=url, timeout_s=TIMEOUT_S, decode_payload=True))
    await backend.start()
    bare: list[np.ndarray] = []
    ours: list[np.ndarray] = []
    outcomes: list[str] = []
    try:
        await run_open_loop(warm, planner.take(len(warm)), backend, offered_rate=5.0, duration_s=0.6)
        for i in range(PAIRS):
            schedule = poisson(RATE, SECONDS, seed=SEED + i)
            res = await run_bare(url + IMAGES_PATH, schedule, body, TIMEOUT_S, warmup_s=warm)
            assert res.n_ok == len(schedule), [r.error for r in res.records if r.outcome != "ok"][:3]
            bare.append(res.latency_from_send_s())
            run = await run_open_loop(schedule, planner.take(len(schedule)), backend, offered_rate=RATE,
                                      duration_s=SECONDS)
            outcomes.extend(r.outcome for r in run.records)
            ours.append(np.array([r.latency_from_send_s for r in run.records if r.outcome == "ok"]))
    finally:
        await backend.close()
    return bare, ours, outcomes


def test_latency_from_send_p50_of_8mb_answers_stays_near_a_bare_client():
    with ServerProcess(BODY_BYTES) as srv:
        bare, ours, outcomes = asyncio.run(_measure(srv.url, srv.size))
    n = sum(len(poisson(RATE, SECONDS, seed=SEED + i)) for i in range(PAIRS))
    # the checks ran and passed: every 8 MB image decoded at the requested size
    assert outcomes == ["ok"] * n and sum(b.size for b in bare) == n
    allowance = allowance_s(bare)
    bare_p50, ours_p50 = float(np.median(np.concatenate(bare))), float(np.median(np.concatenate(ours)))
    assert ours_p50 <= RATIO * bare_p50 + allowance, (
        f"diffbench latency from send p50 {ours_p50 * 1e3:.1f} ms vs bare aiohttp {bare_p50 * 1e3:.1f} ms "
        f"({ours_p50 / bare_p50:.2f}x; allowed {RATIO}x + {allowance * 1e3:.2f} ms)")
