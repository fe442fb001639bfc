"""The clock-offset estimate of ``load --ray`` (no Ray): synthetic clocks with a known offset and known
one-way delays, so the estimate's error is known in closed form: for a round trip with outbound delay
``d1`` and return delay ``d2`` the midpoint estimate is off by exactly ``(d2 - d1) / 2`` (NTP, RFC 5905),
which is at most half the round trip."""

from __future__ import annotations

import numpy as np
import pytest

from diffbench.distributed.clock import (
    LARGE_OFFSET_S,
    LARGE_UNCERTAINTY_S,
    ClockOffset,
    ClockSample,
    estimate_offset,
    measure,
)
from diffbench.distributed.load import check_reachable
from diffbench.errors import DiffbenchError, UsageError

EPOCH_NS = 1_796_000_000 * 10**9  # a wall-clock reading of 2026: the arithmetic must stay exact at this size


def _samples(offset_ns: int, d1: np.ndarray, d2: np.ndarray, start_ns: int = EPOCH_NS) -> list[ClockSample]:
    out, t = [], start_ns
    for a, b in zip(d1, d2, strict=True):
        t1 = t
        actor = t1 + int(a) + offset_ns  # the actor reads its clock d1 after the driver's t1
        t2 = t1 + int(a) + int(b)
        out.append(ClockSample(t1_ns=t1, actor_ns=actor, t2_ns=t2))
        t = t2 + 1_000_000
    return out


@pytest.mark.parametrize("offset_ns", [0, 3_700_000_000, -250_000_000, 17])
def test_the_minimum_rtt_sample_gives_the_offset_within_half_its_round_trip(offset_ns):
    rng = np.random.default_rng(3)
    d1 = rng.exponential(400_000, 32).astype(np.int64) + 50_000  # asymmetric legs, 50 us minimum each
    d2 = rng.exponential(900_000, 32).astype(np.int64) + 50_000
    got = estimate_offset(_samples(offset_ns, d1, d2))
    best = int(np.argmin(d1 + d2))
    assert got.samples == 32
    assert got.rtt_s == pytest.approx((d1[best] + d2[best]) * 1e-9, abs=1e-12)
    assert got.uncertainty_s == pytest.approx(got.rtt_s / 2, abs=1e-12)
    # closed form of the midpoint's error for that sample
    assert got.offset_s - offset_ns * 1e-9 == pytest.approx(-(d2[best] - d1[best]) / 2 * 1e-9, abs=1e-9)
    assert abs(got.offset_s - offset_ns * 1e-9) <= got.uncertainty_s + 1e-9  # the bound holds


def test_symmetric_legs_give_the_offset_exactly_and_the_tightest_sample_wins():
    d1 = np.array([5_000_000, 200_000, 3_000_000])
    d2 = np.array([1_000_000, 200_000, 9_000_000])  # the second round trip is the shortest and symmetric
    got = estimate_offset(_samples(-1_234_567_890, d1, d2))
    assert got.offset_s == pytest.approx(-1.23456789, abs=1e-12)
    assert got.rtt_s == pytest.approx(400e-6, abs=1e-12)
    assert got.offset_ns == -1_234_567_890


def test_measure_runs_round_trips_against_a_remote_clock():
    driver = iter(range(EPOCH_NS, EPOCH_NS + 10**12, 1_000_000))  # each reading 1 ms after the last

    def driver_ns() -> int:
        return next(driver)

    remote_offset = 42_000_000

    def read_remote() -> int:  # read between the two driver readings of its round trip
        return next(driver) + remote_offset

    got = measure(read_remote, driver_ns, n=5)
    assert got.samples == 5 and got.rtt_s == pytest.approx(2e-3) and got.offset_s == pytest.approx(0.042)


def test_bad_samples_are_refused():
    with pytest.raises(DiffbenchError, match="no clock samples"):
        estimate_offset([])
    with pytest.raises(DiffbenchError, match="went backwards"):
        estimate_offset([ClockSample(t1_ns=10, actor_ns=5, t2_ns=9)])


def test_large_offsets_and_uncertainties_are_said():
    fine = ClockOffset(offset_s=0.0002, uncertainty_s=0.0003, rtt_s=0.0006, samples=16)
    assert fine.warnings() == [] and fine.describe().startswith("+0.200 ms ± 0.300 ms")
    skewed = ClockOffset(offset_s=-2 * LARGE_OFFSET_S, uncertainty_s=0.0003, rtt_s=0.0006, samples=16)
    (w,) = skewed.warnings()
    assert "not synchronized" in w and "corrected" in w
    far = ClockOffset(offset_s=0.0, uncertainty_s=2 * LARGE_UNCERTAINTY_S, rtt_s=4 * LARGE_UNCERTAINTY_S,
                      samples=16)
    (w,) = far.warnings()
    assert "±10.0 ms" in w and "time zero" in w


@pytest.mark.parametrize("url, nodes, bad", [
    ("http://127.0.0.1:8000", ["10.0.0.5", "10.0.0.6"], True),
    ("http://localhost:8000", ["10.0.0.5", "10.0.0.6"], True),
    ("http://[::1]:8000", ["10.0.0.5", "10.0.0.7"], True),
    ("http://127.0.0.1:8000", ["10.0.0.5"], False),  # one node: the driver's own loopback
    ("http://10.0.0.9:8000", ["10.0.0.5", "10.0.0.6"], False),
])
def test_a_loopback_target_is_refused_on_a_multi_node_cluster(url, nodes, bad):
    if bad:
        with pytest.raises(UsageError, match="loopback address, which load actors on other nodes"):
            check_reachable(url, "10.0.0.5", nodes)
    else:
        check_reachable(url, "10.0.0.5", nodes)
