"""The profile driver (a load rate sweep; guidellm calls it a "profile"): which runs happen in sequence,
each summarized once.

- Open loop, given rates: one run per rate on a schedule from :func:`diffbench.queueing.schedules.build_schedule`
  (seeded per rate), summarized by :func:`diffbench.load.summary.summarize_rate`.
- Open loop, ``rates="auto"``: first a closed-loop capacity probe (users 1, 2, 4, … until the ok rate
  grows by less than ``PROBE_GAIN`` (5 %) or ``auto_max_users``), capacity = best probe ok rate (failed
  requests never count); then rates at ``AUTO_FRACTIONS`` of capacity (0.25 … 1.2×). A probe in which no
  request succeeded ends the sweep (the caller reports it as a failed run).
- Closed loop: one run per user count.

Stops (:mod:`diffbench.load.stops`): an open-loop rate ends at ``duration_s`` or after ``num_requests``
arrivals, whichever comes first; a rate of ``inf`` is a burst of ``num_requests`` arrivals at 0 (its row
has ``offered_rate`` None and ``schedule`` ``"burst"``). Goodput (:mod:`diffbench.load.goodput`): a
request is good when it is ok and every constraint of ``goodput`` holds; the knee's SLO is ``slo_s``, or
the ``latency`` constraint when only that is given.

Live progress: a :class:`RowMonitor` (``monitor=``) is told when each run begins and ends and gets the
runner hooks ``on_sent(lag_s)`` / ``on_record(rec)``; a hook is passed only to a runner that takes it.

Before measuring, every distinct warm-up key of the workload (:mod:`diffbench.workload.warmkey`: size,
frames, steps, ``n``, guidance on/off, negative prompt, adapter; the rows break down by the same key) is
warmed up (``warmup_per_shape`` sequential requests each, not recorded; the keys are listed in the
``warmup_keys`` condition) so compilation and first-shape costs do not land in the measured window
(a warm-up at reduced steps leaves them there: sgl-project/sglang PR #29306). The knee, the divergence flag and the capacity come from
:func:`diffbench.load.knee.analyze_sweep`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from diffbench.core.records import RequestRecord
from diffbench.errors import DiffbenchError, UsageError
from diffbench.load.client.base import Attempt, Backend
from diffbench.load.client.control import JsonlSink, RunControl
from diffbench.load.client.executor import InProcess, LoadExecutor
from diffbench.load.client.runners import RunResult
from diffbench.load.client.sanity import mark_duplicates
from diffbench.load.client.slo import SloPolicy, base_unit_s, last_per_shape
from diffbench.load.client.workload import RequestPlanner, RequestSpec, ShapeMix
from diffbench.load.goodput import GoodputConstraint, QualityFloor, latency_limit
from diffbench.load.knee import Knee, LoadResult, analyze_sweep, merge_probe_capacity
from diffbench.load.scored import quality_row
from diffbench.load.stops import plan_arrivals
from diffbench.load.summary import RateSummary, run_label, summarize_rate
from diffbench.load.workcost import work_cost_fields
from diffbench.queueing.schedules import ScheduleSpec


class NoSuccessError(DiffbenchError):
    """A run in which no request succeeded: there is no throughput, capacity or knee to report (exit 1)."""

    exit_code = 1


class WarmupFailed(NoSuccessError):
    """Every warm-up request failed to connect: nothing was measured (exit 1). ``report`` holds the counts."""

    def __init__(self, message: str, report: WarmupReport) -> None:
        super().__init__(message)
        self.report = report


def warmup_failure_result(cfg: ProfileConfig, exc: DiffbenchError, conditions: dict[str, str]) -> LoadResult:
    """The :class:`LoadResult` written to ``--json`` when a run failed before it had a result (the warm-up
    failed, a load worker died): no rows, no knee, no capacity, ``partial`` true, the error text and, for a
    failed warm-up, its outcome counts."""
    method = "slo" if cfg.knee_slo_s is not None else ("saturation" if cfg.mode == "closed" else "tail_ratio")
    return LoadResult(source="load", mode=cfg.mode, slo_s=cfg.knee_slo_s, rates=[],
                       knee=Knee(index=None, method=method, reason="none: nothing was measured"),
                       capacity_rps=None, capacity_saturated=False, partial=True, conditions=conditions,
                       error=str(exc),
                       warmup_outcomes=dict(exc.report.outcomes) if isinstance(exc, WarmupFailed) else {},
                       warnings=[f"warm-up error: {e}" for e in exc.report.errors]
                       if isinstance(exc, WarmupFailed) else [])


class StoppedBeforeMeasuring(DiffbenchError):
    """Ctrl-C before any measured request finished: nothing to summarize or write (exit 130, as bench)."""

    exit_code = 130


AUTO_FRACTIONS: tuple[float, ...] = (0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.2)
PROBE_GAIN = 1.05


class ProfileConfig(BaseModel):
    """What to run. ``rates`` None means automatic (open loop only); a rate ``inf`` is a burst (needs
    ``num_requests``). Durations in seconds. ``num_requests`` stops each open-loop rate after that many
    arrivals (or at ``duration_s``, whichever first); ``goodput`` defines a good request; ``workers`` is
    the number of load processes (recorded; the executor that runs them is passed to :func:`run_profile`);
    ``gpus`` and ``gpu_hour_price`` add each row's per-GPU throughput and cost."""

    model_config = ConfigDict(frozen=True)

    mode: Literal["open", "closed"] = "open"
    rates: list[float] | None = None
    users: list[int] = [1, 2, 4]
    duration_s: float = Field(gt=0)
    schedule: ScheduleSpec = ScheduleSpec()
    slo_s: float | None = Field(default=None, gt=0)
    max_inflight: int | None = Field(default=None, ge=1)
    think_time_s: float = Field(default=0.0, ge=0)
    drain_s: float = Field(default=10.0, ge=0)
    warmup_per_shape: int = Field(default=1, ge=0)
    auto_max_users: int = Field(default=16, ge=1)
    seed: int = 0
    max_requests: int = Field(default=200_000, ge=1)
    num_requests: int | None = Field(default=None, ge=1)
    goodput: list[GoodputConstraint] = []
    quality_floors: list[QualityFloor] = []
    """``--goodput psnr:DB ssim:S``: the floors of the quality goodput over reference requests."""
    workers: int = Field(default=1, ge=1)
    gpus: int | None = Field(default=None, ge=1)
    """GPUs serving the load (per-GPU throughput and cost; :mod:`diffbench.load.workcost`)."""
    gpu_hour_price: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Price per GPU-hour (cost per 1,000 outputs, with ``gpus``)."""

    @property
    def knee_slo_s(self) -> float | None:
        """The knee's latency objective: ``slo_s``, else the ``latency`` goodput constraint, else None."""
        return self.slo_s if self.slo_s is not None else latency_limit(self.goodput)


class WarmupReport(BaseModel):
    """Outcomes of the (unrecorded) warm-up requests, by outcome kind; ``errors`` holds distinct texts;
    ``latencies`` the send-to-done seconds of the ok ones with their shape (for the SLO estimate)."""

    n: int = 0
    outcomes: dict[str, int] = {}
    errors: list[str] = []
    latencies: list[tuple[ShapeMix, float]] = []
    first_ok_perf_s: float | None = None
    """``time.perf_counter()`` when the first ok warm-up answer was done (None when none was)."""
    keys: list[str] = []
    """The warm-up keys warmed (:meth:`ShapeMix.label <diffbench.load.client.workload.ShapeMix.label>`), in order."""


class ProfileRun(BaseModel):
    """A finished (or interrupted) profile: the result, the capacity probe (auto rates) and the warm-up.

    ``failed_in`` names the stage in which no request succeeded (``"capacity probe"``: the sweep stopped
    there and ``result`` holds the probe's rows), else None."""

    result: LoadResult
    probe: LoadResult | None = None
    warmup: WarmupReport = WarmupReport()
    interrupted: bool = False
    failed_in: str | None = None


Progress = Callable[[str], None]


def _noop(_: str) -> None:
    pass


class RowMonitor(Protocol):
    """Live view of the runs of a sweep (:class:`diffbench.load.progress.LoadProgress`): ``begin`` before
    each run (its label, planned request count or None, and scheduled seconds), the runner hooks during
    it, ``end`` after it. Hooks must be cheap (they run on the measuring loop)."""

    def begin(self, label: str, planned: int | None, window_s: float) -> None: ...

    def on_sent(self, lag_s: float) -> None: ...

    def on_record(self, rec: RequestRecord) -> None: ...

    def end(self) -> None: ...


def _hooks(monitor: RowMonitor | None) -> dict[str, Callable[..., None]]:
    """The monitor's per-send and per-record hooks, as executor keywords (none without a monitor)."""
    if monitor is None:
        return {}
    return {"on_record": monitor.on_record, "on_sent": monitor.on_sent}


async def _warm_shapes(backend: Backend, planner: RequestPlanner, per_shape: int, rep: WarmupReport,
                       seen: set[str]) -> None:
    for shape, ref in planner.warmup_keys():
        if shape.label() in seen:
            continue
        seen.add(shape.label())
        rep.keys.append(shape.label())
        for _ in range(per_shape):
            spec = planner.warm_spec(shape, ref)
            a = Attempt()
            await backend.execute(spec, a, time.perf_counter)
            await backend.check(spec, a)
            if a.outcome == "ok" and a.sent_s is not None and a.done_s is not None:
                rep.latencies.append((shape, a.done_s - a.sent_s))
                if rep.first_ok_perf_s is None:
                    rep.first_ok_perf_s = a.done_s
            rep.n += 1
            rep.outcomes[a.outcome] = rep.outcomes.get(a.outcome, 0) + 1
            if a.error and a.error not in rep.errors and len(rep.errors) < 5:
                rep.errors.append(a.error)


async def warmup(backend: Backend, planner: RequestPlanner, per_shape: int) -> WarmupReport:
    """Send ``per_shape`` requests of every distinct warm-up key of the workload and of ``load --reference``'s
    references (:meth:`ShapeMix.label <diffbench.load.client.workload.ShapeMix.label>`: size, frames, steps,
    ``n``, guidance on/off, negative prompt, adapter; :meth:`RequestPlanner.warmup_keys
    <diffbench.load.client.workload.RequestPlanner.warmup_keys>`), one at a time; nothing is recorded.

    Raises:
        WarmupFailed: every warm-up request failed with a connection error (refused, reset, TLS): nothing
            is measured against a service that cannot be reached.
    """
    rep = WarmupReport()
    if per_shape == 0:
        return rep
    seen: set[str] = set()
    abandoning = getattr(backend, "abandon_enabled", None)  # a warm-up request is never abandoned
    if abandoning is not None:
        backend.abandon_enabled = False  # type: ignore[attr-defined]
    try:
        await _warm_shapes(backend, planner, per_shape, rep, seen)
    finally:
        if abandoning is not None:
            backend.abandon_enabled = abandoning  # type: ignore[attr-defined]
    if rep.outcomes.get("connection_error", 0) == rep.n:
        raise WarmupFailed(f"no warm-up request succeeded (connection_error {rep.n}): "
                           f"{rep.errors[0] if rep.errors else 'connection error'}; nothing was measured. "
                           "Check --url and that the server is up", rep)
    if rep.outcomes.get("http_error", 0) == rep.n:  # every answer an error (not a 429/503 rejection)
        first = rep.errors[0] if rep.errors else "HTTP error"
        hint = " (--url is the service's base URL, without /v1)" if first.startswith("HTTP 404") else ""
        raise WarmupFailed(f"no warm-up request succeeded (http_error {rep.n}): {first}; nothing was measured: "
                           f"every request would fail the same way. Check --url{hint} and the request shape", rep)
    return rep


def auto_rates(capacity_rps: float) -> list[float]:
    """Rates at :data:`AUTO_FRACTIONS` of the capacity (ok req/s), rounded to 3 significant digits (req/s)."""
    if not capacity_rps > 0:
        raise NoSuccessError("the capacity probe measured no ok request; cannot choose rates automatically "
                             "(give --rates R1,R2,...)")
    out = []
    for f in AUTO_FRACTIONS:
        r = capacity_rps * f
        digits = 2 - int(math.floor(math.log10(r)))
        out.append(round(r, digits))
    return sorted(set(out))


def _summarize(run: RunResult, cfg: ProfileConfig, *, schedule: str | None = None,
               stopped_by: Literal["duration", "num_requests", "interrupted"] | None = None,
               slo: SloPolicy | None = None) -> RateSummary:
    """One row over the runner's window (the count stop's window is passed to the runner as its duration);
    a burst (``schedule="burst"``) is counted over the time to its last event. Answers that repeat a
    picture across seeds or prompts are counted ``invalid_payload`` here, when the row is complete
    (:func:`~diffbench.load.client.sanity.mark_duplicates`)."""
    duration = run.duration_s
    records = mark_duplicates(run.records)
    if schedule == "burst":
        last = [t for r in records for t in (r.sent_s, r.done_s) if t is not None]
        duration = max(max(last, default=0.0), 1e-9)
    row = summarize_rate(records, offered_rate=run.offered_rate, duration_s=duration,
                         slo_s=cfg.knee_slo_s, mode=run.mode, users=run.users, goodput=cfg.goodput or None,
                         schedule=schedule)
    update: dict[str, object] = {"stopped_by": stopped_by} if stopped_by else {}
    update.update(work_cost_fields(run.records, duration, gpus=cfg.gpus, gpu_hour_price=cfg.gpu_hour_price,
                                   t0_ns=run.t0_ns))
    if run.hdr is not None:
        update["hdr"] = run.hdr
    quality = quality_row(run.records, cfg.goodput, cfg.quality_floors)
    if quality is not None:
        update["quality"] = quality
    if slo is not None and slo.active:
        defined, met, rate = slo.attainment(records)
        update.update(slo_requests=defined, slo_met=met, slo_attainment=rate)
    return row.model_copy(update=update) if update else row


async def _closed_rows(cfg: ProfileConfig, users_list: list[int], executor: LoadExecutor, planner: RequestPlanner,
                       control: RunControl, sink: JsonlSink | None, progress: Progress,
                       probe: bool, monitor: RowMonitor | None = None,
                       slo: SloPolicy | None = None) -> list[RateSummary]:
    rows: list[RateSummary] = []
    best = 0.0
    for users in users_list:
        if control.stopped:
            break
        label = f"{'capacity probe: ' if probe else ''}closed loop, {users} users"
        progress(f"{label} for {cfg.duration_s:g} s")
        hooks = _hooks(monitor)
        if monitor is not None:
            monitor.begin(run_label(users=users, probe=probe), None, cfg.duration_s)
        try:
            run = await executor.closed_loop(users, planner, duration_s=cfg.duration_s,
                                             think_time_s=cfg.think_time_s, drain_s=cfg.drain_s,
                                             control=control, sink=None if probe else sink, **hooks)
        finally:
            if monitor is not None:
                monitor.end()
        if not run.records:
            break
        row = _summarize(run, cfg, slo=None if probe else slo)
        rows.append(row)
        if probe:
            if row.ok_rate <= 0 or row.ok_rate < PROBE_GAIN * best:
                break
            best = max(best, row.ok_rate)
    return rows


async def run_profile(
    cfg: ProfileConfig,
    backend: Backend,
    planner: RequestPlanner,
    *,
    control: RunControl | None = None,
    sink: JsonlSink | None = None,
    conditions: dict[str, str] | None = None,
    progress: Progress = _noop,
    monitor: RowMonitor | None = None,
    executor: LoadExecutor | None = None,
    replay: tuple[np.ndarray, Sequence[RequestSpec]] | None = None,
    slo: SloPolicy | None = None,
) -> ProfileRun:
    """Warm up, run every rate (or user count), summarize each and analyse the sweep.

    ``replay`` (open loop, ``load --trace``): instead of the rates, one run sending ``specs[i]`` at
    ``times[i]`` seconds; its row (``schedule`` ``"trace"``, no offered rate) counts rates over the arrival
    span extended by one mean gap (``span x n / (n - 1)``: an evenly spaced trace reads its own rate), or,
    for a trace of one instant, over the time to its last event. ``slo``: per-request objectives; its base
    unit time is fitted here on the warm-up (:mod:`diffbench.load.client.slo`), and each row gets
    ``slo_requests``, ``slo_met`` and ``slo_attainment``.

    A stop (Ctrl-C) ends the current run after its drain; the rows measured so far (the interrupted one
    included, over its shortened window) are summarized and returned with ``interrupted=True``.

    Raises:
        UsageError: bad rates (<= 0), a burst without ``num_requests``, a schedule above ``max_requests``, or
            no rate whose schedule drew any arrival in ``duration_s`` (exit 2; nothing measured).
        WarmupFailed: no warm-up request reached the service.
        StoppedBeforeMeasuring: a stop before any request finished (exit 130).
    """
    control = control or RunControl()
    executor = executor or InProcess(backend)  # the warm-up below always uses backend, in this process
    conditions = dict(conditions or {})
    progress(f"warm-up: {cfg.warmup_per_shape} request(s) per shape")
    wu_box: list[WarmupReport] = []

    async def _warm() -> None:
        wu_box.append(await warmup(backend, planner, cfg.warmup_per_shape))

    if not await control.interruptible(_warm()):
        raise StoppedBeforeMeasuring("interrupted during the warm-up; nothing was measured or written")
    wu = wu_box[0]
    if wu.keys:
        conditions["warmup_keys"] = f"{len(wu.keys)}: {', '.join(wu.keys)}"
    if slo is not None and slo.scale is not None:
        slo.base_s = base_unit_s(last_per_shape(wu.latencies))
        if slo.base_s is not None:
            conditions["slo_base_unit_s"] = f"{slo.base_s:.12g} (median of the last warm-up latency / work units per shape)"
    if slo is not None and slo.active:
        conditions["slo_per_request"] = slo.describe()
    probe_result: LoadResult | None = None
    rows: list[RateSummary] = []
    skipped: list[str] = []
    if cfg.mode == "closed":
        rows = await _closed_rows(cfg, cfg.users, executor, planner, control, sink, progress, probe=False,
                                  monitor=monitor, slo=slo)
    elif replay is not None:
        times, specs = replay
        n = len(times)
        span = float(times[-1]) if n else 0.0
        window = span * n / (n - 1) if n > 1 and span > 0 else 1e-9
        progress(f"trace replay: {n} requests over {span:g} s")
        hooks = _hooks(monitor)
        if monitor is not None:
            monitor.begin(run_label(trace=n), n, span)
        try:
            run = await executor.open_loop(times, specs, offered_rate=None, duration_s=window,
                                           max_inflight=cfg.max_inflight, drain_s=cfg.drain_s, control=control,
                                           sink=sink, run_label="trace", **hooks)
        finally:
            if monitor is not None:
                monitor.end()
        if run.records:
            rows.append(_summarize(run, cfg, schedule="trace" if window > 1e-9 else "burst",
                                   stopped_by="interrupted" if run.interrupted else "duration", slo=slo))
    else:
        rates = cfg.rates
        if rates is None:
            probe_users = [u for u in (1, 2, 4, 8, 16, 32, 64) if u <= cfg.auto_max_users]
            probe_rows = await _closed_rows(cfg, probe_users, executor, planner, control, sink, progress,
                                            probe=True, monitor=monitor)
            if probe_rows:
                probe_result = analyze_sweep(probe_rows, slo_s=cfg.knee_slo_s, source="load",
                                             conditions={"purpose": "capacity probe"})
            capacity = max((r.ok_rate for r in probe_rows), default=0.0)
            if probe_result is not None and capacity <= 0:
                return ProfileRun(result=probe_result, probe=probe_result, warmup=wu,
                                interrupted=control.stopped, failed_in="capacity probe")
            if not control.stopped:
                rates = auto_rates(capacity)
                conditions["capacity_probe_rps"] = f"{capacity:.4g}"
                progress(f"capacity ~{capacity:.3g} ok/s; rates: {', '.join(f'{r:g}' for r in rates)}")
            else:
                rates = []
        for k, rate in enumerate(rates):
            if not rate > 0:
                raise UsageError(f"--rates: rate must be > 0, got {rate}")
            if control.stopped:
                break
            burst = math.isinf(rate)
            if burst and cfg.num_requests is None:
                raise UsageError("--request-rate inf sends every request at once and needs --num-requests N")
            expected = min(rate * cfg.duration_s, cfg.num_requests or math.inf)
            if expected > cfg.max_requests:
                raise UsageError(f"rate {rate:g} req/s x --duration {cfg.duration_s:g} s schedules "
                                 f"~{expected:.3g} requests, above --max-requests "
                                 f"{cfg.max_requests:,}; lower the duration or raise --max-requests")
            spec = cfg.schedule if burst else cfg.schedule.with_rate(rate)
            arrivals = plan_arrivals(spec.model_copy(update={"rate": rate}), duration_s=cfg.duration_s,
                                     seed=[cfg.seed, k], num_requests=cfg.num_requests)
            times = arrivals.times
            window = arrivals.window_s if arrivals.window_s is not None else cfg.duration_s
            specs = planner.stream(len(times))
            label = f"open loop, burst of {len(times)} requests at once" if burst else f"open loop, {rate:g} req/s"
            progress(label + ("" if burst else f" for {window:g} s ({len(times)} requests"
                              + (", stopped by --num-requests)" if arrivals.stop == "num_requests" else ")")))
            offered = None if burst else rate
            hooks = _hooks(monitor)
            if monitor is not None:
                monitor.begin(run_label(burst=len(times)) if burst else run_label(rate=rate), len(times),
                              0.0 if burst else window)
            try:
                run = await executor.open_loop(times, specs, offered_rate=offered, duration_s=window,
                                               max_inflight=cfg.max_inflight, drain_s=cfg.drain_s,
                                               control=control, sink=sink, run_label="burst" if burst else None,
                                               **hooks)
            finally:
                if monitor is not None:
                    monitor.end()
            if run.records:
                rows.append(_summarize(run, cfg, schedule="burst" if burst else cfg.schedule.kind,
                                       stopped_by="interrupted" if run.interrupted else arrivals.stop, slo=slo))
            elif not control.stopped:
                skipped.append(f"{rate:g} req/s: the schedule drew no arrival in --duration {cfg.duration_s:g} s "
                               f"(expected rate x duration = {rate * cfg.duration_s:.3g} arrivals; no row); "
                               "use a longer --duration or a higher rate")
    if not rows and probe_result is not None and control.stopped:
        partial = probe_result.model_copy(update={"partial": True, "interrupted": True})
        return ProfileRun(result=partial, probe=probe_result, warmup=wu, interrupted=True)
    if not rows and skipped and not control.stopped:
        raise UsageError("nothing was measured: " + "; ".join(skipped))
    if not rows:
        raise StoppedBeforeMeasuring("interrupted before any request finished; nothing was measured or written")
    result = merge_probe_capacity(analyze_sweep(rows, slo_s=cfg.knee_slo_s, source="load", conditions=conditions),
                                  probe_result)
    extra = skipped + ([f"run stopped early ({control.reason})"] if control.stopped else [])
    if extra:
        result = result.model_copy(update={"warnings": [*result.warnings, *extra]})
    if control.stopped:
        result = result.model_copy(update={"partial": True, "interrupted": True})
    return ProfileRun(result=result, probe=probe_result, warmup=wu, interrupted=control.stopped)

