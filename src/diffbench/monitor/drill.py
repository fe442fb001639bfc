"""``diffbench drill``: fault drills against ``diffbench serve`` with a local Prometheus (docs/guides/after-launch.md).

:func:`run_drills` runs the named drills one after another and returns one
:class:`~diffbench.monitor.drills.core.DrillReport` each. A drill that cannot run (a process that does not
start, a budget the grid cannot meet) is a failed report with ``error`` set, and the next drill still runs.
A missing ``prometheus`` binary is checked before anything starts
(:class:`~diffbench.errors.MissingDependencyError`, exit 3).

Each drill prints inject → metric moved → alert fired (seconds from the injection) → pass/fail; see
:mod:`diffbench.monitor.drills.core` for what each time means and the bound each alert is held to.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Sequence

from diffbench.core import interrupt
from diffbench.monitor.drills.core import DrillOptions, DrillReport
from diffbench.monitor.promserver import require_prometheus

DRILLS = ("cache", "shapes", "vae")
"""Drill names in the order ``all`` runs them."""


def run_drills(names: Sequence[str], opts: DrillOptions, out: list[DrillReport] | None = None) -> list[DrillReport]:
    """Run ``names`` (each in :data:`DRILLS`) in order; never raises for a failing drill. Reports are
    appended to ``out`` (a new list by default) as each drill ends, so a Ctrl-C leaves the finished ones.

    Raises:
        MissingDependencyError: no ``prometheus`` binary (before any drill starts).
    """
    require_prometheus()
    reports = [] if out is None else out
    for name in names:
        mod = importlib.import_module(f"diffbench.monitor.drills.{name}")
        report = DrillReport(drill=name)
        t0 = time.monotonic()
        try:
            mod.run(opts, report)
        except KeyboardInterrupt:
            report.error = f"interrupted ({interrupt.interrupt_name()})"
            report.wall_s = time.monotonic() - t0
            reports.append(report)
            raise
        except Exception as exc:
            report.error = f"{type(exc).__name__}: {exc}"
            report.event("error", report.error)
        report.wall_s = time.monotonic() - t0
        report.event("result", f"{'PASS' if report.passed else 'FAIL'} in {report.wall_s:.0f} s")
        reports.append(report)
    return reports
