"""Block schedule and timing noise floor of the interleaved protocol (on a fake clock)."""

from __future__ import annotations

import pytest

from diffbench.engines.base import GenerationRequest, GenerationResult
from diffbench.sweep.bootstrap import paired_speedup_ci
from diffbench.sweep.interleave import Arm, block_orders, noise_floor_ci, request_for_block, run_interleaved


def test_every_block_is_a_seeded_permutation():
    a = block_orders(4, 50, seed=3)
    assert a == block_orders(4, 50, seed=3) and a != block_orders(4, 50, seed=4)
    assert all(sorted(o) == [0, 1, 2, 3] for o in a)
    firsts = [o[0] for o in a]
    assert len(set(firsts)) == 4  # every configuration goes first in some block


def test_blocks_2i_and_2i_plus_1_share_a_request():
    reqs = [GenerationRequest(prompt=f"p{i}", prompt_id=f"p{i}", height=8, width=8, steps=1) for i in range(3)]
    got = [request_for_block(reqs, b).prompt_id for b in range(8)]
    assert got == ["p0", "p0", "p1", "p1", "p2", "p2", "p0", "p0"]


def test_noise_floor_is_even_vs_odd_blocks_paired():
    base = [1.0, 1.1, 2.0, 2.2, 3.0, 3.3, 9.9]  # the 7th block has no partner and is left out
    nf = noise_floor_ci(base, resamples=500, seed=0)
    ref = paired_speedup_ci([1.0, 2.0, 3.0], [1.1, 2.2, 3.3], resamples=500, seed=0)
    assert nf is not None and (nf.speedup, nf.low, nf.high) == (ref.speedup, ref.low, ref.high)
    assert nf.speedup == pytest.approx(2.0 / 2.2)
    assert noise_floor_ci([1.0]) is None


class _Clocked:
    """An engine on a virtual clock: each call takes ``lat(k)`` seconds (k = calls so far, shared)."""

    calls = 0
    ns = 0

    def __init__(self, lat) -> None:
        self.lat = lat

    def generate(self, request: GenerationRequest) -> GenerationResult:
        _Clocked.ns += int(self.lat(_Clocked.calls) * 1e9)
        _Clocked.calls += 1
        return GenerationResult(images=None)

    def sync(self) -> None:
        return None

    def clock(self) -> int:
        return _Clocked.ns


def test_warmup_runs_until_stable_then_blocks_interleave():
    _Clocked.calls = _Clocked.ns = 0
    reqs = [GenerationRequest(prompt="p", height=8, width=8, steps=1)]
    cold = _Clocked(lambda k: 0.1 + 2.0 * 0.7 ** k)  # a cold process, shared by both arms
    arms = [Arm("baseline", cold), Arm("x", cold)]  # type: ignore[arg-type]
    sched = run_interleaved(arms, reqs, blocks=10, seed=0, min_warmup=1, max_warmup=40, window=5)
    for a in arms:
        assert a.stable and len(a.warmup_s) >= 5
        assert a.warmup_s[0] > 1.0  # the cold calls are in the warmup
        assert len(a.samples_s) == 10 and max(a.samples_s) < 0.1 + 2.0 * 0.7 ** 20
    assert sched.orders == block_orders(2, 10, 0) and sched.arms == ["baseline", "x"]
    # cap: a latency that keeps falling is reported as not stable after max_warmup rounds
    _Clocked.calls = _Clocked.ns = 0
    falling = _Clocked(lambda k: 10.0 - 0.1 * k)
    arms = [Arm("baseline", falling)]  # type: ignore[arg-type]
    run_interleaved(arms, reqs, blocks=2, max_warmup=8, window=5)
    assert not arms[0].stable and len(arms[0].warmup_s) == 8


class _Remote(_Clocked):
    """A remote engine: its call takes 1 s on the clock (decoding included), of which it reports 0.25 s from
    the send to the last byte of the answer."""

    def generate(self, request: GenerationRequest) -> GenerationResult:
        from diffbench.engines.base import CLIENT_LATENCY

        _Clocked.ns += 10**9
        return GenerationResult(images=None, extra={CLIENT_LATENCY: 0.25})


def test_a_remote_engines_own_latency_is_the_sample():
    _Clocked.calls = _Clocked.ns = 0
    reqs = [GenerationRequest(prompt="p", height=8, width=8, steps=1)]
    arms = [Arm("baseline", _Remote(None))]  # type: ignore[arg-type]
    run_interleaved(arms, reqs, blocks=3, min_warmup=1, max_warmup=5, window=5)
    assert arms[0].samples_s == [0.25] * 3 and set(arms[0].warmup_s) == {0.25}
