"""Environment capture: hardware, software versions, determinism-relevant settings.

Never imports torch itself: GPU details come from torch only when an engine already imported it, and
otherwise from ``nvidia-smi`` when present. Versions come from package metadata (no import).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version

from pydantic import BaseModel

from diffbench import __version__


class GpuInfo(BaseModel):
    """One GPU: name, memory in bytes, compute capability when known."""

    name: str
    memory_bytes: int | None = None
    capability: str | None = None


class EnvInfo(BaseModel):
    """Hardware and software the run happened on."""

    cpu: str
    cpu_cores_logical: int
    cpu_cores_physical: int | None = None
    memory_bytes: int | None = None
    os: str
    gpus: list[GpuInfo] = []
    driver: str | None = None
    cuda: str | None = None
    python: str
    packages: dict[str, str] = {}
    torch_threads: int | None = None
    deterministic_algorithms: bool | None = None


def _pkg(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvidia_smi() -> tuple[list[GpuInfo], str | None]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return [], None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return [], None
    gpus, driver = [], None
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3:
            mem = int(float(parts[1]) * 2**20) if parts[1].replace(".", "").isdigit() else None
            gpus.append(GpuInfo(name=parts[0], memory_bytes=mem))
            driver = parts[2]
    return gpus, driver


def capture_env() -> EnvInfo:
    """Capture the environment (cheap; ~10 ms, plus nvidia-smi when present)."""
    try:
        import psutil

        physical = psutil.cpu_count(logical=False)
        mem = int(psutil.virtual_memory().total)
    except ImportError:  # pragma: no cover
        physical, mem = None, None
    gpus, driver = _nvidia_smi()
    cuda = None
    threads = deterministic = None
    torch = sys.modules.get("torch")
    if torch is not None:
        threads = int(torch.get_num_threads())
        deterministic = bool(torch.are_deterministic_algorithms_enabled())
        cuda = torch.version.cuda
        if torch.cuda.is_available():
            gpus = []
            for i in range(torch.cuda.device_count()):
                prop = torch.cuda.get_device_properties(i)
                gpus.append(
                    GpuInfo(
                        name=prop.name,
                        memory_bytes=int(prop.total_memory),
                        capability=f"{prop.major}.{prop.minor}",
                    )
                )
    packages = {n: _pkg(n) for n in ("torch", "diffusers", "transformers", "numpy")}
    packages["diffbench"] = __version__
    return EnvInfo(
        cpu=_cpu_model(),
        cpu_cores_logical=os.cpu_count() or 1,
        cpu_cores_physical=physical,
        memory_bytes=mem,
        os=f"{platform.system()} {platform.release()}",
        gpus=gpus,
        driver=driver,
        cuda=cuda,
        python=platform.python_version(),
        packages=packages,
        torch_threads=threads,
        deterministic_algorithms=deterministic,
    )


def busy_machine_warning(device: str, threads: int | None) -> str | None:
    """A warning when other work competes for the CPUs (1-minute load average above 0.75 x the CPU count).

    ``device`` is the engine's device string (``"cpu"``, ``"cuda:0"``, ...); ``threads`` the torch thread
    count the run set (None: torch's default). Returns None on a quiet machine or where the load average is
    unavailable (``os.getloadavg``: Unix only).
    """
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    cpus = os.cpu_count() or 1
    if load <= 0.75 * cpus:
        return None
    hint = ""
    if device.startswith("cpu") and threads != 1:
        hint = ("; on a shared CPU, --threads 1 avoids torch's OpenMP threads waiting on each other for whole "
                "time slices (runs 10x slower and erratic)")
    return (f"the machine was busy while timing (1-minute load average {load:.1f} on {cpus} CPUs): timings "
            f"are slower and more spread than on a quiet machine{hint}")
