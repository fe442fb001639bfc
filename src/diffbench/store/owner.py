"""Which process owns a ``running`` row of the store, and whether it still runs.

Each row records the process that wrote it: its pid, the host name and the process's start time (Unix
seconds, from psutil). A pid alone is not enough, since pids are reused: the owner has ended when no
process has that pid, or the process that has it started at another time. Rows of another host cannot be
judged from here (None).
"""

from __future__ import annotations

import socket

import psutil

_START_TOLERANCE_S = 1.0  # create_time is derived from boot time and clock ticks: allow rounding


def current() -> tuple[int, str, float]:
    """(pid, host, start time in Unix seconds) of this process."""
    proc = psutil.Process()
    return proc.pid, socket.gethostname(), proc.create_time()


def ended(pid: int | None, host: str | None, started: float | None) -> bool | None:
    """True when the owner process has ended, False when it still runs, None when it cannot be told (no
    owner recorded, or another host)."""
    if pid is None or host is None:
        return None
    if host != socket.gethostname():
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:  # killed, not yet reaped by its parent
            return True
        return started is not None and abs(proc.create_time() - started) > _START_TOLERANCE_S
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # access denied etc.: it exists
        return False


def ended_note(pid: int | None) -> str:
    """The status note of a row whose process has ended: ``"pid 1234 ended"``."""
    return f"pid {pid} ended"
