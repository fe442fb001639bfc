"""Energy around each timed run of the protocol: joules per output from a counter, or "not available" with
the reason (never a number made up)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from diffbench.bench.protocol import BenchConfig, energy_result, run_bench
from diffbench.bench.render import _shape_rows
from diffbench.engines.base import GenerationRequest
from diffbench.engines.config import EngineConfig, SimParams
from diffbench.engines.instrument.energy import EnergyTally, NvmlMeter, Unavailable, meter_for
from diffbench.engines.registry import create_engine

REQ = GenerationRequest(prompt="a", height=512, width=512, steps=8, batch=2)
WATTS = 300.0


class PowerOnSimClock:
    """A GPU drawing a constant 300 W on the simulated device's clock (pynvml's names; millijoules)."""

    def __init__(self, engine: object) -> None:
        self.engine = engine

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        return uuid

    def nvmlDeviceGetName(self, handle: str) -> str:
        return "Fake"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> int:
        return round(WATTS * self.engine.clock() / 1e6)  # ns -> mJ at 300 W


def _engine():
    e = create_engine(EngineConfig(engine="sim", sim=SimParams(tail_prob=0)))
    e.start()
    return e


def test_joules_per_output_is_the_counter_over_the_timed_runs_only():
    e = _engine()
    meter = NvmlMeter(["GPU-x"], nvml=PowerOnSimClock(e))
    (shape,) = run_bench(e, [REQ], BenchConfig(warmup=2, runs=6, repro=False), energy=meter)
    en = shape.energy
    assert en is not None and en.status == "measured" and en.source == "nvml" and en.scope == "GPU GPU-x (Fake)"
    assert (en.runs, en.outputs) == (6, 12)
    # the sim's timed runs take sum(samples_s) of its clock; the warmups are not counted
    assert en.joules == pytest.approx(WATTS * sum(shape.samples_s), rel=1e-3)
    assert en.joules_per_output == pytest.approx(WATTS * sum(shape.samples_s) / 12, rel=1e-3)
    assert en.average_watts == pytest.approx(en.joules / en.seconds)
    assert ("energy", en.text("image")) in _shape_rows(shape)
    assert en.text("image").startswith(f"{en.joules_per_output:.4g} J/image · ")


def test_average_watts_is_joules_over_the_window_seconds():
    counter = {"GPU-a": 0}

    class Fake(PowerOnSimClock):
        def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> int:
            return counter[handle]

    ticks = iter([0, 4 * 10**9, 10 * 10**9, 12 * 10**9])
    tally = EnergyTally(NvmlMeter(["GPU-a"], nvml=Fake(None)), clock=lambda: next(ticks))
    for joules in (1000, 500):
        mark = tally.begin()
        counter["GPU-a"] += joules * 1000
        tally.end(mark)
    r = energy_result(tally, batch=4)
    assert (r.joules, r.seconds, r.outputs) == (1500.0, 6.0, 8)
    assert r.average_watts == 250.0 and r.joules_per_output == 187.5


def test_the_simulated_engine_says_not_available_with_the_reason():
    (shape,) = run_bench(_engine(), [REQ], BenchConfig(warmup=0, runs=2, repro=False))
    assert shape.energy is not None
    assert shape.energy.model_dump(exclude_defaults=True) == {
        "status": "not available", "reason": "the simulated engine does no device work", "source": "none"}
    assert ("energy", "not available: the simulated engine does no device work") in _shape_rows(shape)


def _machine_rapl_reason() -> str | None:
    """Why this machine's CPU energy cannot be read, worked out from the powercap tree (None: readable)."""
    root = Path("/sys/class/powercap")
    if not root.is_dir():
        return f"{root} does not exist"
    packages = [d for d in sorted(root.glob("intel-rapl:*")) if d.name.count(":") == 1
                and (d / "name").read_text().startswith("package")]
    if not packages:
        return "no RAPL package domain"
    if not os.access(packages[0] / "energy_uj", os.R_OK):
        return "is readable by root only"
    return None


def test_on_this_machine_the_cpu_field_says_not_available_or_measures():
    meter = meter_for("diffusers", "cpu")
    (shape,) = run_bench(_engine(), [REQ], BenchConfig(warmup=0, runs=2, repro=False), energy=meter)
    en = shape.energy
    assert en is not None
    expected = _machine_rapl_reason()
    if expected is None:  # a host with readable RAPL: a measurement (the package's, whatever else runs)
        assert en.status == "measured" and en.source == "rapl" and en.joules is not None and en.joules >= 0
    else:
        assert en.status == "not available" and expected in (en.reason or "")
        assert isinstance(meter.read(), Unavailable)
        assert en.joules is None and en.joules_per_output is None and en.average_watts is None
