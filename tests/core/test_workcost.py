"""The work and cost formulas and the run's wall-clock anchor (:mod:`diffbench.core.workcost`)."""

from __future__ import annotations

import math
import time
from datetime import datetime, timezone

import pytest

from diffbench.core.workcost import (
    ClockPair,
    cost_per_1000,
    gpus_error,
    mpx_steps,
    price_error,
    utc_text,
)


def test_mpx_steps_is_pixels_frames_steps_outputs():
    assert mpx_steps(1024, 1024, 30) == pytest.approx(1024 * 1024 * 30 / 1e6)
    assert mpx_steps(832, 480, 30, frames=33, outputs=1) == pytest.approx(832 * 480 * 33 * 30 / 1e6)
    assert mpx_steps(512, 512, 8, outputs=4) == pytest.approx(4 * 512 * 512 * 8 / 1e6)


def test_cost_per_1000_closed_form():
    # 2 $/GPU-hour, 1.8 GPU-s per image: 1000 images = 1800 GPU-s = 0.5 GPU-hour = 1 $
    assert cost_per_1000(2.0, 1.8) == pytest.approx(1.0)
    assert cost_per_1000(0.0, 5.0) == 0.0
    assert cost_per_1000(3.0, 3.6) == pytest.approx(3.0)


@pytest.mark.parametrize(("value", "bad"), [(0.0, False), (2.5, False), (-0.01, True), (math.nan, True),
                                            (math.inf, True)])
def test_price_bounds(value, bad):
    assert (price_error(value) is not None) is bad


def test_gpu_bounds():
    assert gpus_error(1) is None and gpus_error(8) is None
    assert gpus_error(0) == "must be >= 1 GPUs, got 0"


def test_clock_pair_maps_monotonic_differences_exactly():
    pair = ClockPair.take()
    assert abs(pair.unix_s - time.time()) < 0.5
    later = pair.perf_ns + 1_500_000_000
    assert pair.unix_at(later) - pair.unix_at(pair.perf_ns) == pytest.approx(1.5, abs=1e-6)
    assert pair.unix_at(pair.perf_ns) == pair.unix_s


def test_utc_text_is_iso_8601_with_z():
    t = datetime(2026, 1, 31, 12, 0, 0, 250000, tzinfo=timezone.utc).timestamp()
    assert utc_text(t) == "2026-01-31T12:00:00.250Z"
