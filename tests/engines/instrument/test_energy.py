"""Energy counters: RAPL against a fake powercap tree (wraparound included), NVML through a fake of pynvml,
and the reasons a meter gives when it cannot measure."""

from __future__ import annotations

from pathlib import Path

import pytest

from diffbench.engines.instrument.energy import (
    EnergyTally,
    NoMeter,
    NvmlMeter,
    RaplMeter,
    Unavailable,
    meter_for,
)

RANGE_UJ = 262_143_328_850  # a real max_energy_range_uj


def _domain(root: Path, name: str, kind: str, energy_uj: int, range_uj: int = RANGE_UJ) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "name").write_text(kind + "\n")
    (d / "energy_uj").write_text(f"{energy_uj}\n")
    (d / "max_energy_range_uj").write_text(f"{range_uj}\n")
    return d


def _set(d: Path, energy_uj: int) -> None:
    (d / "energy_uj").write_text(f"{energy_uj}\n")


def test_rapl_sums_package_domains_only_and_unfolds_a_wraparound(tmp_path):
    p0 = _domain(tmp_path, "intel-rapl:0", "package-0", RANGE_UJ - 1_000_000)  # 1 J before the wrap
    p1 = _domain(tmp_path, "intel-rapl:1", "package-1", 5_000_000)
    core = _domain(tmp_path, "intel-rapl:0:0", "core", 7)  # a sub-domain: part of package-0
    dram = _domain(tmp_path, "intel-rapl:0:1", "dram", 7)
    mmio = _domain(tmp_path, "intel-rapl-mmio:0", "package-0", 7)  # the same package through MMIO
    m = RaplMeter(tmp_path)
    assert m.unavailable is None
    assert m.scope == "CPU packages intel-rapl:0, intel-rapl:1"
    assert m.read() == 0.0
    _set(p0, 2_500_000)  # wrapped: 1 J to the top, then 2.5 J
    _set(p1, 8_000_000)  # +3 J
    for d in (core, dram, mmio):
        _set(d, 10**9)  # +1000 J each if counted
    assert m.read() == pytest.approx(1.0 + 2.5 + 3.0)
    _set(p0, 4_500_000)  # +2 J, no wrap
    assert m.read() == pytest.approx(8.5)


def test_rapl_skips_psys_and_says_when_there_is_no_package(tmp_path):
    _domain(tmp_path, "intel-rapl:1", "psys", 10)
    m = RaplMeter(tmp_path)
    assert isinstance(m.read(), Unavailable)
    assert str(m.read()) == f"not available: no RAPL package domain (intel-rapl:N named package-N) under {tmp_path}"


def test_rapl_without_a_powercap_tree_is_not_available_with_the_reason(tmp_path):
    m = RaplMeter(tmp_path / "missing")
    r = m.read()
    assert isinstance(r, Unavailable) and r != 0
    assert str(r).startswith(f"not available: {tmp_path / 'missing'} does not exist")


def test_rapl_unreadable_energy_file_names_the_root_only_rule(tmp_path, monkeypatch):
    d = _domain(tmp_path, "intel-rapl:0", "package-0", 5)
    real = Path.read_text

    def read_text(self: Path, *a: object, **k: object) -> str:
        if self == d / "energy_uj":  # what a non-root user gets on Linux >= 5.10
            raise PermissionError(13, "Permission denied")
        return real(self, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", read_text)
    r = RaplMeter(tmp_path).read()
    assert isinstance(r, Unavailable)
    assert r.reason == (f"{d / 'energy_uj'} is readable by root only (Linux 5.10 and later restrict it, "
                        "CVE-2020-8694): run as root or grant read access to energy_uj")


class FakeNvml:
    """pynvml's names over a table of counters (millijoules), advanced by the test."""

    def __init__(self, counters: dict[str, int], fail: str | None = None) -> None:
        self.counters = counters
        self.fail = fail

    def nvmlInit(self) -> None:
        if self.fail:
            raise RuntimeError(self.fail)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        return uuid

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"index{index}"

    def nvmlDeviceGetName(self, handle: str) -> bytes:
        return b"Fake GPU"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> int:
        return self.counters[handle]


def test_nvml_meter_sums_the_devices_in_joules_since_it_was_made():
    fake = FakeNvml({"GPU-a": 5_000_000, "index1": 7_000})
    m = NvmlMeter(["GPU-a", "1"], nvml=fake)
    assert m.scope == "GPU GPU-a (Fake GPU), 1 (Fake GPU)"
    assert m.read() == 0.0
    fake.counters["GPU-a"] += 1_500  # 1.5 J
    fake.counters["index1"] += 250  # 0.25 J
    assert m.read() == pytest.approx(1.75)


def test_nvml_failure_is_not_available_with_nvmls_message():
    m = NvmlMeter(["0"], nvml=FakeNvml({}, fail="Driver Not Loaded"))
    assert str(m.read()) == "not available: NVML: Driver Not Loaded"


def test_tally_sums_windows_and_keeps_the_first_reason():
    fake = FakeNvml({"GPU-a": 0})
    ticks = iter([0, 2_000_000_000, 5_000_000_000, 6_000_000_000])
    tally = EnergyTally(NvmlMeter(["GPU-a"], nvml=fake), clock=lambda: next(ticks))
    mark = tally.begin()
    fake.counters["GPU-a"] += 600_000  # 600 J over 2 s
    assert tally.end(mark) == (pytest.approx(600.0), 2.0)
    mark = tally.begin()
    fake.counters["GPU-a"] += 100_000  # 100 J over 1 s
    tally.end(mark)
    assert (tally.joules, tally.seconds, tally.windows) == (pytest.approx(700.0), 3.0, 2)
    assert tally.unavailable is None
    none = EnergyTally(NoMeter("because"))
    assert none.end(none.begin()) == Unavailable("because") and none.windows == 0


def test_meter_for_on_this_machine_says_why_not(tmp_path):
    assert str(meter_for("http", "remote").read()).startswith("not available: the engine is a remote service")
    assert str(meter_for("sim", "sim").read()) == "not available: the simulated engine does no device work"
    assert isinstance(meter_for("diffusers", "cpu", powercap=tmp_path / "none"), RaplMeter)
    assert str(meter_for("diffusers", "mps").read()) == "not available: no energy counter is read on device mps"
