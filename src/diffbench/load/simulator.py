"""``diffbench simulate``: rate sweeps over the FCFS engine of :mod:`diffbench.queueing.simulator`,
summarised with the same :class:`~diffbench.load.summary.RateSummary` as ``diffbench load`` and analysed for
the knee like a measured sweep.

The engine, schedules and service-time distributions live in :mod:`diffbench.queueing` (shared with the
planner); this module re-exports the engine's names for callers of the load package.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from diffbench.errors import UsageError
from diffbench.load.knee import LoadResult, analyze_sweep
from diffbench.load.summary import RateSummary, summarize_columns
from diffbench.queueing.schedules import ScheduleSpec, build_schedule
from diffbench.queueing.service_time import ServiceTime, load_service_samples, parse_service
from diffbench.queueing.simulator import SimRun, fcfs_completions, simulate_closed, simulate_open

__all__ = ["MAX_DEVICES", "MAX_REQUESTS", "SimConfig", "SimProgress", "SimRun", "expected_requests",
           "fcfs_completions", "simulate_closed", "simulate_open", "simulate_sweep", "summarize_run"]

MAX_REQUESTS = 1_000_000
"""Default cap on the requests of one simulated row (``--max-requests``): ~40 bytes per request in
columns, so 1,000,000 hold ~40 MB and simulate in about a second."""
MAX_DEVICES = 100_000


def expected_requests(config: SimConfig, service: ServiceTime, think: ServiceTime | None) -> list[tuple[str, float]]:
    """(row label, mean request count) of every row of ``config``, computed before anything is drawn.

    Open loop: ``rate x duration`` (a ramp: its mean rate). Closed loop: each of ``N`` users cycles in
    ``E[S] + E[Z]`` seconds, and ``c`` devices complete at most ``c / E[S]`` per second, so
    ``duration x min(N / (E[S] + E[Z]), c / E[S]) + N``.
    """
    d = config.duration_s
    if config.mode == "closed":
        z = think.mean if think is not None else 0.0
        s = service.mean
        return [(f"--users {u}", d * min(u / (s + z), config.devices / s) + u) for u in config.users]
    spec = config.schedule
    if spec.kind == "ramp":
        return [(f"--ramp {spec.ramp_start:g}:{spec.ramp_end:g}", (spec.offered_rate or 0.0) * d)]
    if spec.kind == "trace":
        return []
    return [(f"--rates {r:g}", r * d) for r in config.rates]


def summarize_run(run: SimRun, slo_s: float | None = None) -> RateSummary:
    """The :class:`RateSummary` of one simulated run (same format as ``diffbench load``)."""
    return summarize_columns(run.intended, run.intended, run.done, None, offered_rate=run.offered_rate,
                             duration_s=run.duration_s, slo_s=slo_s, mode=run.mode, users=run.users)


class SimConfig(BaseModel):
    """What ``diffbench simulate`` runs.

    ``service`` is an expression (see :mod:`diffbench.queueing.service_time`) or None when ``service_from``
    names a measured run; ``schedule`` is the open-loop arrival template (its rate is replaced by each of
    ``rates``; a ramp or trace runs once); ``think`` is a think-time expression for closed loop; durations
    in seconds; ``slo_s`` the latency-from-arrival objective.
    """

    model_config = ConfigDict(frozen=True)

    devices: int = Field(ge=1)
    service: str | None = None
    service_from: str | None = None
    mode: Literal["open", "closed"] = "open"
    rates: list[float] = []
    users: list[int] = []
    schedule: ScheduleSpec = ScheduleSpec()
    duration_s: float = Field(gt=0)
    think: str | None = None
    slo_s: float | None = None
    seed: int = 0
    max_requests: int = Field(default=MAX_REQUESTS, ge=1)


def service_of(config: SimConfig) -> ServiceTime:
    """The service-time distribution of a config.

    Raises:
        UsageError: neither or both of ``service`` / ``service_from``, or a bad expression.
        InputError: an unreadable ``service_from`` file.
    """
    if (config.service is None) == (config.service_from is None):
        raise UsageError("give exactly one of --service EXPR or --service-from RUN.json/.jsonl")
    if config.service is not None:
        return parse_service(config.service)
    return load_service_samples(config.service_from or "")


@dataclass(frozen=True)
class SimProgress:
    """Where a simulated sweep stands (for a progress line).

    ``row`` is 1-based (0 before the first row starts), ``rows`` the row count, ``label`` the row's load
    (``"1.2 req/s"`` / ``"8 users"``), ``done`` the requests simulated so far over all rows and
    ``expected`` the estimate of the whole sweep's requests (:func:`expected_requests`), ``finished``
    true once every row is done.
    """

    row: int
    rows: int
    label: str
    done: int
    expected: float
    finished: bool = False


def simulate_sweep(config: SimConfig, on_run: Callable[[SimRun], None] | None = None,
                   on_progress: Callable[[SimProgress], None] | None = None) -> LoadResult:
    """Simulate every rate (open loop) or user count (closed loop) of ``config`` and analyse the sweep.

    Each row ``i`` draws from ``numpy.random.SeedSequence([seed, i])`` (arrivals and service streams
    spawned from it), so rows are independent and a run is reproducible.

    Args:
        config: the simulation.
        on_run: called with each :class:`SimRun` as it finishes (e.g. to stream records to JSONL).
        on_progress: called with a :class:`SimProgress` when each row starts, when it ends and once at the
            end (a few calls per row, never per request: the simulation loop stays untouched).

    Raises:
        UsageError: no rates / users for the mode, or an invalid option (see :func:`service_of`).
    """
    service = service_of(config)
    think = parse_service(config.think, option="--think") if config.think else None
    if config.devices > MAX_DEVICES:
        raise UsageError(f"--devices {config.devices:,} is above {MAX_DEVICES:,}; simulate fewer devices")
    expected_rows = expected_requests(config, service, think)
    for label, expected in expected_rows:
        if not expected <= config.max_requests:
            raise UsageError(f"{label} x --duration {config.duration_s:g} s makes ~{expected:.3g} requests, above "
                             f"--max-requests {config.max_requests:,}; shorten --duration, lower the load, or "
                             "raise --max-requests if you mean it")
    rows: list[RateSummary] = []
    runs: list[tuple[int, float | None, int | None]] = []
    spec = config.schedule.model_copy(update={"duration_s": config.duration_s})
    if config.mode == "open":
        if spec.kind in ("ramp", "trace"):
            if config.rates:
                raise UsageError(f"a {spec.kind} schedule runs once; drop --rates")
            runs = [(0, spec.offered_rate, None)]
        else:
            if not config.rates:
                raise UsageError("open loop needs --rates R1,R2,... (requests per second)")
            runs = [(i, r, None) for i, r in enumerate(config.rates)]
    else:
        if not config.users:
            raise UsageError("closed loop needs --users N1,N2,...")
        runs = [(i, None, u) for i, u in enumerate(config.users)]
    expected_total = float(sum(e for _, e in expected_rows))
    simulated = 0

    def report(row: int, label: str, finished: bool = False) -> None:
        if on_progress is not None:
            on_progress(SimProgress(row=row, rows=len(runs), label=label, done=simulated, expected=expected_total,
                                    finished=finished))

    label = ""
    interrupted = False
    try:
        for i, rate, users in runs:
            if users is not None:
                label = f"{users} users"
            else:
                label = spec.kind if spec.kind in ("ramp", "trace") or rate is None else f"{rate:g} req/s"
            report(i + 1, label)
            arr_rng, svc_rng = (np.random.default_rng(s) for s in np.random.SeedSequence([config.seed, i]).spawn(2))
            if users is None:
                row_spec = spec.with_rate(rate) if spec.kind not in ("ramp", "trace") and rate else spec
                arrivals = build_schedule(row_spec, seed=arr_rng)
                duration = config.duration_s
                if spec.kind == "trace" and arrivals.size > 1:  # the window ends one mean gap after the last
                    duration = min(duration, float(arrivals[-1]) * arrivals.size / (arrivals.size - 1))
                offered = rate if rate is not None else _trace_rate(arrivals, duration)
                run = simulate_open(arrivals, service, config.devices, svc_rng, duration_s=duration,
                                    offered_rate=offered)
            else:
                run = simulate_closed(users, config.duration_s, service, config.devices, svc_rng, think=think)
            if on_run is not None:
                on_run(run)
            rows.append(summarize_run(run, config.slo_s))
            simulated += int(run.intended.size)
            report(i + 1, label)
    except KeyboardInterrupt:  # Ctrl-C / SIGTERM: the rows that finished are the partial result
        if not rows:
            raise
        interrupted = True
    if not interrupted:
        report(len(runs), label, finished=True)
    conditions = {
        "devices": str(config.devices),
        "service": service.text,
        "service_mean_s": f"{service.mean:.6g}",
        "capacity_rps_model": f"{config.devices / service.mean:.6g}",
        "duration_s": f"{config.duration_s:g}",
        "seed": str(config.seed),
    }
    warnings: list[str] = []
    for name, dist in (("service", service), ("think", think)):
        clipped = getattr(dist, "clipped_fraction", 0.0)
        if dist is not None and clipped > 0:
            conditions[f"{name}_clipped_fraction"] = f"{clipped:.6g}"
            warnings.append(f"--{name} {dist.text!r}: {clipped:.2%} of the draws were negative and clipped to "
                            f"0 s, so the real mean differs from the stated {dist.mean:.4g} s; use a narrower "
                            "distribution")
    if config.mode == "open":
        conditions["arrival"] = config.schedule.kind
        if config.schedule.kind == "gamma":
            conditions["burstiness"] = f"{config.schedule.burstiness:g}"
    elif think is not None:
        conditions["think"] = think.text
    result = analyze_sweep(rows, slo_s=config.slo_s, source="simulate", conditions=conditions)
    if interrupted:
        warnings.append(f"interrupted: {len(rows)} of {len(runs)} row(s) finished; the rest were not simulated")
    if warnings or interrupted:
        result = result.model_copy(update={"warnings": [*warnings, *result.warnings], "partial": interrupted,
                                           "interrupted": interrupted})
    return result


def _trace_rate(arrivals: np.ndarray, duration: float) -> float | None:
    return arrivals.size / duration if duration > 0 and arrivals.size else None


__all__ = [
    "MAX_REQUESTS",
    "SimConfig",
    "SimProgress",
    "expected_requests",
    "SimRun",
    "fcfs_completions",
    "service_of",
    "simulate_closed",
    "simulate_open",
    "simulate_sweep",
]
