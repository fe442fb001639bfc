"""Energy counters read around a timed run (``bench``) or a generation (``serve``): measured joules, never an
estimate.

- :class:`NvmlMeter`: ``nvmlDeviceGetTotalEnergyConsumption`` of the NVIDIA Management Library (package
  ``nvidia-ml-py``, module ``pynvml``): millijoules since the driver was loaded, per GPU (Volta and newer;
  "Not Supported" on older boards). The counter covers the whole board and every process on it; NVML
  refreshes it every few tens of milliseconds, so a run much shorter than that carries the granularity.
- :class:`RaplMeter`: Linux RAPL through the powercap interface, ``/sys/class/powercap/intel-rapl:N/energy_uj``
  (microjoules; the same files on AMD CPUs), summed over the *package* domains only (``name`` =
  ``package-N``): the ``core``/``uncore``/``dram`` sub-domains ``intel-rapl:N:M`` are parts of (or beside) the
  package and would be counted twice, ``psys`` covers the whole platform and ``intel-rapl-mmio`` repeats the
  package counter. The counter wraps at ``max_energy_range_uj``: a read below the previous one adds one range
  (within one counter unit, a few tens of µJ, per wrap); two wraps between reads (a window longer than the range
  ÷ package power: minutes at full load) cannot be seen. Since Linux 5.10 ``energy_uj`` is readable by root
  only (CVE-2020-8694). A package counter includes every process on the CPU.
- :class:`Unavailable`: what a meter returns instead of a number when it cannot measure, with the reason
  (``str()`` reads ``"not available: <reason>"``); never 0.

The seam: :class:`EnergyMeter` (``read()`` → cumulative joules or :class:`Unavailable`). Tests pass fakes: a
powercap tree under a temporary directory (``RaplMeter(root=...)``) or an object with pynvml's function names
(``NvmlMeter(..., nvml=fake)``). :class:`EnergyTally` sums the windows read around runs.

Importing this module imports neither pynvml nor torch.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

POWERCAP = Path("/sys/class/powercap")
_PACKAGE_DIR = re.compile(r"^intel-rapl:\d+$")


@dataclass(frozen=True)
class Unavailable:
    """No measurement, and why (a sentence without the ``not available:`` prefix, which ``str()`` adds)."""

    reason: str

    def __str__(self) -> str:
        return f"not available: {self.reason}"


Reading = float | Unavailable
"""Cumulative joules since the meter was made, or why there is no reading."""


@runtime_checkable
class EnergyMeter(Protocol):
    """An energy counter. ``source``: ``"nvml"`` or ``"rapl"`` (``"none"`` for :class:`NoMeter`); ``scope``:
    what it covers, in words (``"GPU 0 (NVIDIA H100 …)"``, ``"CPU package intel-rapl:0"``)."""

    source: str
    scope: str

    def read(self) -> Reading:
        """Joules since the meter was made (monotonic), or :class:`Unavailable`."""
        ...


class NoMeter:
    """A meter that never measures: every read is ``Unavailable(reason)``."""

    source = "none"

    def __init__(self, reason: str) -> None:
        self.scope = ""
        self.unavailable = Unavailable(reason)

    def read(self) -> Reading:
        return self.unavailable


class RaplMeter:
    """The package domains of Linux RAPL under ``root`` (default ``/sys/class/powercap``), summed, with the
    wraparound of each counter unfolded. Thread-safe. See the module docstring for what is counted.

    A meter that cannot read (no powercap tree, no package domain, ``energy_uj`` not readable) is made all the
    same; its reads return :class:`Unavailable` with the reason (``unavailable`` holds it from the start)."""

    source = "rapl"

    def __init__(self, root: Path | str = POWERCAP) -> None:
        self.root = Path(root)
        self._lock = threading.Lock()
        self._domains: list[tuple[Path, float]] = []  # (energy_uj file, max_energy_range_uj)
        self._last: list[int] = []
        self._total_uj = 0.0
        self.unavailable: Unavailable | None = None
        self.scope = ""
        try:
            self._open()
        except _Refused as exc:
            self.unavailable = Unavailable(str(exc))

    def _open(self) -> None:
        if not self.root.is_dir():
            raise _Refused(f"{self.root} does not exist (no RAPL powercap driver, or the directory is not "
                           "exposed, as in most containers and VMs)")
        names = []
        for d in sorted(self.root.iterdir(), key=lambda p: p.name):
            if not _PACKAGE_DIR.match(d.name):
                continue
            try:
                kind = (d / "name").read_text(encoding="ascii").strip()
            except OSError:
                continue
            if not kind.startswith("package"):
                continue  # psys (the whole platform) would count the packages twice
            energy, range_ = d / "energy_uj", d / "max_energy_range_uj"
            try:
                raw = int(energy.read_text(encoding="ascii"))
                top = float(range_.read_text(encoding="ascii"))
            except PermissionError:
                raise _Refused(f"{energy} is readable by root only (Linux 5.10 and later restrict it, "
                               "CVE-2020-8694): run as root or grant read access to energy_uj") from None
            except (OSError, ValueError) as exc:
                raise _Refused(f"{energy}: cannot read ({exc})") from None
            self._domains.append((energy, top))
            self._last.append(raw)
            names.append(d.name)
        if not self._domains:
            raise _Refused(f"no RAPL package domain (intel-rapl:N named package-N) under {self.root}")
        self.scope = "CPU package" + ("s " if len(names) > 1 else " ") + ", ".join(names)

    def read(self) -> Reading:
        if self.unavailable is not None:
            return self.unavailable
        with self._lock:
            for i, (path, top) in enumerate(self._domains):
                try:
                    raw = int(path.read_text(encoding="ascii"))
                except (OSError, ValueError) as exc:
                    return Unavailable(f"{path}: cannot read ({exc})")
                step = raw - self._last[i]
                if step < 0:  # the counter wrapped at max_energy_range_uj
                    step += top
                self._total_uj += step
                self._last[i] = raw
            return self._total_uj / 1e6


class NvmlMeter:
    """``nvmlDeviceGetTotalEnergyConsumption`` summed over ``devices`` (NVML selectors: a ``GPU-…`` UUID, or
    an NVML index as text), in joules since the meter was made. ``nvml``: an object with pynvml's function
    names (``nvmlInit``, ``nvmlDeviceGetHandleByUUID``, ``nvmlDeviceGetHandleByIndex``,
    ``nvmlDeviceGetName``, ``nvmlDeviceGetTotalEnergyConsumption``); default the ``pynvml`` module, imported
    here. Any failure at construction (no pynvml, no driver, an unsupported board) leaves ``unavailable`` set
    with NVML's own message."""

    source = "nvml"

    def __init__(self, devices: Sequence[str], nvml: Any = None) -> None:
        self.unavailable: Unavailable | None = None
        self.scope = ""
        self._handles: list[Any] = []
        self._start_mj = 0
        self._lock = threading.Lock()
        if nvml is None:
            try:
                import pynvml as nvml  # type: ignore[no-redef]
            except ImportError:
                self.unavailable = Unavailable("pynvml is not installed (pip install 'diffbench[serve]' or "
                                               "'nvidia-ml-py>=12')")
                return
        self._nvml = nvml
        if not devices:
            self.unavailable = Unavailable("no GPU to measure")
            return
        try:
            nvml.nvmlInit()
            names = []
            for sel in devices:
                h = (nvml.nvmlDeviceGetHandleByUUID(sel) if sel.startswith(("GPU-", "MIG-"))
                     else nvml.nvmlDeviceGetHandleByIndex(int(sel)))
                self._handles.append(h)
                name = nvml.nvmlDeviceGetName(h)
                names.append(f"{sel} ({name.decode() if isinstance(name, bytes) else name})")
            self._start_mj = self._raw()
        except Exception as exc:  # pynvml.NVMLError and its subclasses: "Not Supported", "Driver Not Loaded"…
            self.unavailable = Unavailable(f"NVML: {exc}")
            return
        self.scope = "GPU " + ", ".join(names)

    def _raw(self) -> int:
        return sum(int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self._handles)

    def read(self) -> Reading:
        if self.unavailable is not None:
            return self.unavailable
        with self._lock:
            try:
                return (self._raw() - self._start_mj) / 1e3
            except Exception as exc:
                return Unavailable(f"NVML: {exc}")


class _Refused(Exception):
    pass


def cuda_uuid(device: str) -> str | None:
    """The NVML selector (``GPU-<uuid>``) of torch device ``device`` (``cuda`` or ``cuda:N``), from torch's
    device properties (CUDA's device order and ``CUDA_VISIBLE_DEVICES`` need not match NVML's indexes);
    None when torch is not loaded or does not report a UUID."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        index = int(device.partition(":")[2] or torch.cuda.current_device())
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    except Exception:
        return None
    return None if uuid is None else f"GPU-{uuid}"


def meter_for(engine: str, device: str, *, nvml: Any = None, powercap: Path | str = POWERCAP) -> EnergyMeter:
    """The meter of an engine running on ``device`` in this process: NVML for ``cuda[:N]`` (that GPU only),
    RAPL for ``cpu``; a :class:`NoMeter` with the reason for a remote service (``engine`` ``http``), the
    simulated engine and any other device."""
    if engine == "http":
        return NoMeter("the engine is a remote service: its energy is spent on the server (load --scrape reads "
                       "the server's energy counter)")
    if engine == "sim":
        return NoMeter("the simulated engine does no device work")
    if device.startswith("cuda"):
        sel = cuda_uuid(device)
        if sel is None:
            return NoMeter(f"cannot tell which NVML device {device} is (torch reports no device UUID)")
        return NvmlMeter([sel], nvml=nvml)
    if device == "cpu":
        return RaplMeter(powercap)
    return NoMeter(f"no energy counter is read on device {device}")


@dataclass(frozen=True)
class Mark:
    """The start of one window: monotonic ns and the meter's reading."""

    t_ns: int
    reading: Reading


class EnergyTally:
    """Windows of one meter, summed: :meth:`begin` before a run, :meth:`end` after it (the device
    synchronized). ``joules``/``seconds``/``windows`` cover the windows that both reads measured;
    ``unavailable`` is the first reason a window had no measurement (None while every window measured).
    ``clock``: monotonic nanoseconds (tests inject one)."""

    def __init__(self, meter: EnergyMeter, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.meter = meter
        self._clock = clock
        self.joules = 0.0
        self.seconds = 0.0
        self.windows = 0
        self.unavailable: Unavailable | None = getattr(meter, "unavailable", None)

    def begin(self) -> Mark:
        return Mark(self._clock(), self.meter.read())

    def end(self, mark: Mark) -> tuple[float, float] | Unavailable:
        """Close the window opened by ``mark``: ``(joules, seconds)`` of it (added to the totals), or why
        there is none."""
        reading, t = self.meter.read(), self._clock()
        for r in (mark.reading, reading):
            if isinstance(r, Unavailable):
                self.unavailable = self.unavailable or r
                return r
        joules, seconds = float(reading) - float(mark.reading), (t - mark.t_ns) / 1e9  # type: ignore[arg-type]
        self.joules += joules
        self.seconds += seconds
        self.windows += 1
        return joules, seconds


__all__ = ["POWERCAP", "EnergyMeter", "EnergyTally", "Mark", "NoMeter", "NvmlMeter", "RaplMeter", "Reading",
           "Unavailable", "cuda_uuid", "meter_for"]
