"""The per-rate summary shared by ``diffbench load`` and ``diffbench simulate``.

One :class:`RateSummary` per offered rate (open loop) or user count (closed loop), computed once from the
per-request records (:class:`~diffbench.core.records.RequestRecord`) and never re-measured.

Definitions (all times in seconds on the run clock):

``duration`` is the arrival window: ``--duration``, or with ``--num-requests N`` the time the first
arrival beyond N would have come (``schedule[N]``; the duration when the schedule has no more arrivals);
for a burst (``--request-rate inf``) the caller passes the time of the last event, so every rate is over
the time it took. Every rate is a count over one kind of window, ``[t0, max(duration, last event))`` with ``t0 = min(0,
first intended arrival)`` (the run clock starts at the schedule's 0): never shorter than the arrival
window, so one early event cannot make a high rate, and events after the window (late sends, the drain of
a queue) stretch it. Since ``n_sent >= n_ok`` and the last send precedes the last ok completion, ``sent/s
>= ok/s`` always; for a constant schedule of ``n`` arrivals all sent within the window, ``sent/s = n /
duration``.

- *scheduled rate*: all records over ``[t0, max(duration, last intended)]`` (open loop only): the rate of
  the schedule actually drawn, so the Poisson count noise of a random schedule is not blamed on the client.
- *sent rate* (``sent/s``): sent requests over ``[t0, max(duration, last send)]`` (did the client keep
  the schedule). Warned when below 98 % of the scheduled rate (open loop).
- *ok rate* (``ok/s``): ``ok`` requests over ``[t0, max(duration, last ok done)]``.
  The throughput of the service: the only rate the knee, the capacity and ``--rates auto`` use.
- *goodput*: *good* requests per second over the ok window. Good = ``ok`` and, with ``--goodput``
  constraints (:mod:`diffbench.load.goodput`), every constraint holding; with ``slo_s`` only, latency from
  intended arrival ``<= slo_s``; without either it equals the ok rate. Failed requests never count as good.
  ``n_good`` holds the count and ``goodput_constraints`` the definition.
- *completed rate* (``completed/s``): requests that ended with any outcome except ``cancelled``, per
  second over ``[t0, max(duration, last done)]``. Secondary: a server that fails fast completes fast.
- *achieved rate*: open loop, the sent rate; closed loop, the ok rate (ok completions/s).
- *failed fraction*: requests that ended not ``ok`` over requests that ended (``cancelled`` left out).
- *latency from arrival* = done − intended (free of coordinated omission); *latency from send* = done − sent;
  both over ``ok`` requests only (failures are counted in ``outcomes``, never dropped silently).
- *lag* = sent − intended over sent requests (includes client queue time under an in-flight cap);
  warned when its p99 exceeds 10 ms.

Divergence ("unstable: p99 depends on test duration") is checked on open-loop rows by
:func:`detect_divergence` (the rule is documented there); a closed loop holds at most ``users`` requests,
so its queue is bounded by construction and it is never flagged. Open-loop rows also get the short-run
over-saturation tests of :mod:`diffbench.load.saturation` (``saturation``); ``saturated`` is true when
either rule fires.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from diffbench.core.records import OUTCOMES, RequestRecord
from diffbench.core.stats import Summary, summarize
from diffbench.load.coldstart import ColdStart, leading_cold_starts
from diffbench.load.goodput import GoodputConstraint, count_good
from diffbench.load.merge import HdrSummary
from diffbench.load.saturation import Saturation, check_saturation
from diffbench.load.scored import QualityRow
from diffbench.load.scrape import ServerSide

SCHEMA_VERSION = 2
LAG_P99_WARN_S = 0.010
ACHIEVED_RATE_WARN_FRACTION = 0.98
FAILED_WARN_FRACTION = 0.05

# Divergence rule constants (see detect_divergence).
DIVERGENCE_MIN_N = 20
DIVERGENCE_P50_RATIO = 1.5
DIVERGENCE_GROWTH_FRACTION = 0.02
UNSTABLE_MESSAGE = "unstable: p99 depends on test duration"

SERVICE_TIME_KEY = "service_time"
"""Key of the server-reported total service time in ``RequestRecord.server_stages_s`` (a total, not one
more stage)."""

_OUTCOME_CODE = {name: i for i, name in enumerate(OUTCOMES)}
_OK = _OUTCOME_CODE["ok"]
_CANCELLED = _OUTCOME_CODE["cancelled"]
_ABANDONED = _OUTCOME_CODE["abandoned"]  # given up on purpose (--abandon-after): neither ok nor a failure
# Outcomes that mean the request was (or may have been) served, so its latency reflects the queue.
_QUEUE_OUTCOMES = tuple(_OUTCOME_CODE[k] for k in ("ok", "timeout", "invalid_payload", "cancelled"))


class Divergence(BaseModel):
    """Result of the first-half / second-half comparison of one measurement window.

    ``checked`` is False when a half has fewer than ``DIVERGENCE_MIN_N`` samples (then ``unstable`` is
    False and ``reason`` says why). Latencies are from intended arrival in seconds; ``backlog_*`` count
    requests that had arrived but not completed at the middle and at the end of the window.
    """

    model_config = ConfigDict(frozen=True)

    checked: bool
    unstable: bool
    reason: str
    first_half_n: int = 0
    second_half_n: int = 0
    first_half_p50_s: float | None = None
    second_half_p50_s: float | None = None
    first_half_p90_s: float | None = None
    second_half_p90_s: float | None = None
    backlog_mid: int = 0
    backlog_end: int = 0


class ShapeSummary(BaseModel):
    """Per-shape breakdown (one per warm-up key, by its label: size, frames, steps, ``n``, guidance, negative
    prompt, adapter): request count, outcome counts and latency from arrival of ok requests (s)."""

    model_config = ConfigDict(frozen=True)

    n: int
    outcomes: dict[str, int]
    latency_from_arrival_s: Summary


class RateSummary(BaseModel):
    """Everything reported for one rate (open loop) or one user count (closed loop).

    Rates are requests per second; latencies are :class:`~diffbench.core.stats.Summary` objects in seconds
    (``n, mean, std, min, max, p50, p90, p99, p999``). ``outcomes`` has a count for every kind in
    :data:`~diffbench.core.records.OUTCOMES`; ``statuses`` counts HTTP status codes (keys are the code as
    text). ``server_stages_s`` is the mean per server-reported stage over ok requests that reported it;
    ``server_service_time_s`` summarizes the server-reported service time (``service_time_s`` or
    ``inference_time_s`` of the response) of the ok requests that carried one. ``first_error`` is the
    outcome and error text of the first failed request (by id). ``saturated`` is
    ``unstable`` or ``saturation.detected`` or ``saturation.short`` (open loop). ``schedule`` is the
    arrival kind of an open-loop row (``"burst"`` for ``--request-rate inf``: all arrivals at 0 and
    ``offered_rate`` None, since JSON has no infinity); ``stopped_by`` says which stop ended an open-loop
    row's schedule (``--duration``, ``--num-requests``, or ``interrupted`` by Ctrl-C / SIGTERM; None when not recorded); ``n_good`` and ``goodput_constraints`` count and
    define the goodput.
    """

    model_config = ConfigDict(frozen=True)

    schema_version: int = SCHEMA_VERSION
    mode: Literal["open", "closed"]
    offered_rate: float | None
    users: int | None = None
    duration_s: float
    slo_s: float | None = None
    schedule: str | None = None
    stopped_by: Literal["duration", "num_requests", "interrupted"] | None = None
    goodput_constraints: list[GoodputConstraint] = []
    n: int
    n_sent: int
    n_completed: int
    n_ok: int = 0
    n_good: int | None = None
    scheduled_rate: float | None
    sent_rate: float
    achieved_rate: float
    ok_rate: float
    goodput: float
    completed_rate: float
    failed_fraction: float
    latency_from_arrival_s: Summary
    latency_from_send_s: Summary
    lag_s: Summary
    client_queue_s: Summary
    outcomes: dict[str, int]
    statuses: dict[str, int] = {}
    retry_after_s: Summary | None = None
    per_shape: dict[str, ShapeSummary] = {}
    server_stages_s: dict[str, float] = {}
    server_peak_memory_bytes: int | None = None
    server_service_time_s: Summary | None = None
    divergence: Divergence
    unstable: bool
    saturation: Saturation = Saturation(checked=False, reason="not checked")
    saturated: bool = False
    first_error: str | None = None
    warnings: list[str] = []
    slo_requests: int | None = None
    """Requests of the row with a per-request SLO (``load --trace`` ``slo_s``/``slo_ms``, ``--slo-scale``);
    None when per-request SLOs are off."""
    slo_met: int | None = None
    """Of those, the ok ones whose latency from intended arrival is within their SLO."""
    slo_attainment: float | None = None
    """``slo_met / slo_requests`` (vLLM-Omni's ``slo_attainment_rate``; failures count as not met)."""
    poll_granularity_s: float | None = None
    """Video jobs: the largest ``poll_granularity_s`` of the row's ok jobs (seconds): every latency of the
    row overstates its job's end by at most this much (adaptive polling). None: no polled job."""
    invalid_kinds: dict[str, int] = {}
    adapter_swaps: int | None = None
    """Ok requests before which the server switched the active LoRA adapter (its answer reported an
    ``adapter_swap`` stage > 0; ``serve --lora``); None when no answer reported the stage."""
    """``invalid_payload`` requests of the row by named sanity kind (``black_image``, ``constant_image``,
    ``black_frame``, ``duplicate_across_seeds``; only kinds that occurred). The rest of
    ``outcomes["invalid_payload"]`` failed the format checks (JSON, base64, decoding, size, count)."""
    server: ServerSide | None = None
    """The server's own view of the row, scraped from its ``/metrics`` (``load --scrape``; None without)."""
    hdr: HdrSummary | None = None
    """The HdrHistogram merge of the workers' ok requests, with its error bound (``load --ray``, and
    ``--workers`` runs of more than 100,000 planned requests; None otherwise). The other figures of the row
    come from the exact merge of the records."""
    started_unix_s: float | None = None
    """Wall clock of the row's ``t=0`` (the origin of its records' offsets), Unix epoch seconds (UTC), from
    the run's one wall-clock/monotonic pair (:mod:`diffbench.load.workcost`); None: not recorded."""
    ok_outputs: int | None = None
    """Outputs (images, or videos) of the ok requests."""
    mpx_steps_per_s: float | None = None
    """Work-normalized throughput: megapixel·steps of the ok requests (width x height x frames x steps x
    outputs / 1e6) per second of the ok window; None when the work of an ok request is unknown."""
    gpus: int | None = None
    """GPUs serving the row (``load --gpus``); None: unknown."""
    mpx_steps_per_s_per_gpu: float | None = None
    """``mpx_steps_per_s / gpus``."""
    gpu_s_per_output: float | None = None
    """GPU·seconds paid per ok output: ``gpus x ok window / ok_outputs`` (the GPUs are paid for the whole
    window)."""
    gpu_hour_price: float | None = None
    """``load --gpu-hour-price`` (per GPU-hour, currency-neutral)."""
    cost_per_1000: float | None = None
    """Cost of 1,000 ok outputs: ``gpu_hour_price x gpu_s_per_output x 1000 / 3600``."""
    cold_start: list[ColdStart] = []
    """Cold starts measured in the row (:mod:`diffbench.load.coldstart`): per warm-up key, leading ok requests
    far above the key's later ones, and the server's recompiles (``load --scrape``); each also a row warning
    ``cold_start_in_measurement: ...``. Empty: none found."""
    quality: QualityRow | None = None
    """``load --reference``: the row's reference requests scored against the references (PSNR, SSIM, the
    quality goodput over them; :mod:`diffbench.load.scored`). None without references."""

    @property
    def label(self) -> str:
        """The row's name in the knee's reasons, warnings and scrape windows (:func:`run_label`): ``"U users"``
        (closed loop), ``"burst of N"`` (N requests at once), else ``"R req/s"`` (the offered rate; a trace
        replay, which has none, by its achieved rate)."""
        if self.mode == "closed":
            return run_label(users=self.users or 0)
        if self.schedule == "burst":
            return run_label(burst=self.n)
        return run_label(rate=self.offered_rate if self.offered_rate is not None else self.achieved_rate)

    def made_by(self, run: str, *, probe: bool = False) -> bool:
        """Whether the run the profile driver named ``run`` (:func:`run_label`) produced this row: equal
        labels, except that a burst or a trace replay matches any run of its kind (the driver names them by
        the planned count, the row by what it measured); ``probe``: a capacity-probe row."""
        if self.mode == "open" and self.schedule == "burst":
            return run.startswith("burst of ")
        if self.mode == "open" and self.schedule == "trace":
            return run.startswith("trace of ")
        return run == (run_label(users=self.users or 0, probe=True) if probe else self.label)


def run_label(*, users: int | None = None, rate: float | None = None, burst: int | None = None,
              trace: int | None = None, probe: bool = False) -> str:
    """The name of one run of a profile, the one :attr:`RateSummary.label` gives its row: ``users`` (closed
    loop, ``"probe U users"`` in a capacity probe), a ``burst`` or a ``trace`` replay of N requests, else the
    open-loop ``rate`` (req/s)."""
    if users is not None:
        return f"{'probe ' if probe else ''}{users} users"
    if burst is not None:
        return f"burst of {burst}"
    if trace is not None:
        return f"trace of {trace}"
    return f"{rate:g} req/s"


def detect_divergence(
    intended: np.ndarray,
    done: np.ndarray,
    outcome_codes: np.ndarray,
    duration_s: float,
) -> Divergence:
    """Flag a window whose queue grows without bound ("unstable: p99 depends on test duration").

    Rule: split the window ``[t0, t0 + duration_s)`` (``t0`` = first intended arrival) into halves by
    intended arrival. Take latency from arrival of requests that reached the server's queue (ok, timeout,
    invalid payload, cancelled; fast rejections and connection errors are left out). A request that never
    finished gets the lower bound ``t_end - intended`` with ``t_end`` the last completion in the run.
    The window is *unstable* when both hold:

    1. p50 of the second half >= ``DIVERGENCE_P50_RATIO`` (1.5) × p50 of the first half, and
    2. the p50 grew by >= ``DIVERGENCE_GROWTH_FRACTION`` (2 %) of the half-window length, i.e. latency
       keeps rising at a sustained slope (an M/G/c queue above capacity grows its wait by
       ``(λ/μc - 1)`` seconds per second; a stable queue's p50 does not trend with time).

    Both halves need at least ``DIVERGENCE_MIN_N`` (20) samples, else ``checked`` is False.
    Measured on the simulator (4 devices, service ``3.0*N(1,0.02)+0.8*B(0.1)``, capacity 1.30 req/s, Poisson
    arrivals, 1800 s, 200 seeds): flagged in 0 % of runs at 1.0 and 1.2 req/s (ρ = 0.77, 0.92), 3.5 % at
    1.25 (ρ = 0.96, where p99 does depend strongly on duration), 99 % at 1.4 req/s (ρ = 1.08).
    Backlog at the middle and end of the window is reported alongside (not part of the rule).

    Args:
        intended, done: float64 seconds, NaN in ``done`` for unfinished requests; same length.
        outcome_codes: int index into :data:`~diffbench.core.records.OUTCOMES`, same length.
        duration_s: window length in seconds, > 0.
    """
    n = intended.size
    if n == 0:
        return Divergence(checked=False, unstable=False, reason="no requests")
    t0 = float(intended.min())
    mid = t0 + duration_s / 2.0
    end = t0 + duration_s
    finished = ~np.isnan(done)
    backlog_mid = int(np.count_nonzero((intended < mid) & (~finished | (done >= mid))))
    backlog_end = int(np.count_nonzero((intended < end) & (~finished | (done >= end))))
    t_end = float(done[finished].max()) if finished.any() else end
    lat = np.where(finished, done, max(t_end, end)) - intended
    use = np.isin(outcome_codes, _QUEUE_OUTCOMES) | ~finished
    first = lat[use & (intended < mid)]
    second = lat[use & (intended >= mid) & (intended < end)]
    common = {"first_half_n": int(first.size), "second_half_n": int(second.size),
              "backlog_mid": backlog_mid, "backlog_end": backlog_end}
    if first.size < DIVERGENCE_MIN_N or second.size < DIVERGENCE_MIN_N:
        return Divergence(checked=False, unstable=False,
                          reason=f"too few requests per half (need >= {DIVERGENCE_MIN_N})", **common)
    p50a, p90a = (float(v) for v in np.percentile(first, [50, 90]))
    p50b, p90b = (float(v) for v in np.percentile(second, [50, 90]))
    growth = p50b - p50a
    ratio = p50b / p50a if p50a > 0 else math.inf
    unstable = ratio >= DIVERGENCE_P50_RATIO and growth >= DIVERGENCE_GROWTH_FRACTION * duration_s / 2.0
    if unstable:
        reason = (f"{UNSTABLE_MESSAGE} (p50 from arrival {p50a:.3g} s in the first half, {p50b:.3g} s in the "
                  f"second; backlog {backlog_mid} -> {backlog_end})")
    else:
        reason = f"stable (p50 from arrival {p50a:.3g} s -> {p50b:.3g} s between halves)"
    return Divergence(checked=True, unstable=unstable, reason=reason, first_half_p50_s=p50a,
                      second_half_p50_s=p50b, first_half_p90_s=p90a, second_half_p90_s=p90b, **common)


def summarize_columns(
    intended: np.ndarray,
    sent: np.ndarray,
    done: np.ndarray,
    outcome_codes: np.ndarray | None = None,
    *,
    offered_rate: float | None,
    duration_s: float,
    slo_s: float | None = None,
    mode: Literal["open", "closed"] = "open",
    users: int | None = None,
    client_queue: np.ndarray | None = None,
    retry_after: np.ndarray | None = None,
    statuses: dict[str, int] | None = None,
    per_shape: dict[str, ShapeSummary] | None = None,
    server_stages_s: dict[str, float] | None = None,
    server_peak_memory_bytes: int | None = None,
    server_service_time_s: Summary | None = None,
    n_good: int | None = None,
    schedule: str | None = None,
) -> RateSummary:
    """:func:`summarize_rate` on columns (fast path for the simulator; no per-request objects).

    Args:
        intended, sent, done: float64 arrays of seconds, same length n; NaN in ``sent``/``done`` means
            not sent / not finished.
        outcome_codes: int array, index into :data:`~diffbench.core.records.OUTCOMES`; None = all ok.
        client_queue: float64 seconds per request (None = zeros).
        retry_after: float64 seconds per request, NaN where absent (None = none).
        n_good: the good-request count when the caller evaluated goodput constraints (None: from ``slo_s``).
        Other arguments as in :func:`summarize_rate`.
    """
    intended = np.asarray(intended, dtype=np.float64)
    sent = np.asarray(sent, dtype=np.float64)
    done = np.asarray(done, dtype=np.float64)
    n = intended.size
    codes = np.zeros(n, dtype=np.int64) if outcome_codes is None else np.asarray(outcome_codes, dtype=np.int64)
    warnings: list[str] = []
    if slo_s is not None and not slo_s > 0:
        raise ValueError(f"slo_s must be > 0 seconds, got {slo_s}")
    if not duration_s > 0:
        raise ValueError(f"duration_s must be > 0 seconds, got {duration_s}")
    if not (sent.size == n and done.size == n and codes.size == n):
        raise ValueError(f"intended, sent, done and outcome_codes must have one length, got {n}, {sent.size}, "
                         f"{done.size}, {codes.size}")

    is_sent = ~np.isnan(sent)
    finished = ~np.isnan(done)
    ok = (codes == _OK) & finished
    completed = finished & (codes != _CANCELLED)

    lat_arrival = (done - intended)[ok]
    lat_send_mask = ok & is_sent
    lat_send = (done - sent)[lat_send_mask]
    lag = (sent - intended)[is_sent]
    cq = np.zeros(int(is_sent.sum())) if client_queue is None else np.asarray(client_queue, np.float64)[is_sent]

    s_arrival = summarize(lat_arrival, check=(90, 99, 99.9))
    s_send = summarize(lat_send, check=(90, 99, 99.9))
    s_lag = summarize(lag)
    s_cq = summarize(cq)

    # One window rule for every rate (module docstring): [t0, max(duration, last event)], t0 = min(0, first
    # intended arrival); never shorter than the arrival window, so one early event cannot make a high rate,
    # and late sends or the drain of an overloaded queue stretch it.
    t_start = min(0.0, float(intended.min())) if n else 0.0
    n_ok = int(ok.sum())
    n_completed = int(completed.sum())
    n_sent = int(is_sent.sum())

    def window(last: np.ndarray) -> float:
        return max(duration_s, float(last.max()) - t_start) if last.size else duration_s

    scheduled = n / window(intended) if mode == "open" else None
    sent_rate = n_sent / window(sent[is_sent])
    ok_window = window(done[ok])
    any_window = window(done[completed])
    ok_rate = n_ok / ok_window
    completed_rate = n_completed / any_window
    if n_good is None:
        n_good = int(np.count_nonzero(lat_arrival <= slo_s)) if slo_s is not None else n_ok
    good = n_good
    goodput = good / ok_window
    ended = n - int(np.count_nonzero((codes == _CANCELLED) | (codes == _ABANDONED)))
    failed_fraction = (ended - n_ok) / ended if ended else 0.0
    achieved = ok_rate if mode == "closed" else sent_rate

    outcomes = {name: int(np.count_nonzero(codes == i)) for i, name in enumerate(OUTCOMES)}

    retry_summary = None
    if retry_after is not None:
        ra = np.asarray(retry_after, dtype=np.float64)
        ra = ra[~np.isnan(ra)]
        if ra.size:
            retry_summary = summarize(ra)

    # the warning is about the client's own dispatch: the wait for a --max-inflight slot is deliberate
    # (it stays in the lag and in the latency from arrival, and in client_queue_s)
    send_lag = lag - cq if lag.size else lag
    if send_lag.size and float(np.percentile(send_lag, 99)) > LAG_P99_WARN_S:
        p99 = float(np.percentile(send_lag, 99))
        warnings.append(f"client send lag p99 {p99 * 1e3:.1f} ms (lag without the --max-inflight wait) exceeds "
                        f"{LAG_P99_WARN_S * 1e3:.0f} ms: the client did not send on time (on a busy client, try "
                        f"--defer-checks)")
    elif s_lag.n and s_lag.p99 > LAG_P99_WARN_S:
        warnings.append(f"lag p99 {s_lag.p99 * 1e3:.1f} ms is the wait for a --max-inflight slot "
                        f"(client queue p99 {s_cq.p99 * 1e3:.1f} ms): the cap, not the client, held requests")
    if scheduled is not None and scheduled > 0 and sent_rate < ACHIEVED_RATE_WARN_FRACTION * scheduled:
        warnings.append(f"sent rate {sent_rate:.4g} req/s is below {ACHIEVED_RATE_WARN_FRACTION:.0%} of "
                        f"the scheduled {scheduled:.4g} req/s")
    warnings.extend(f"latency from arrival: {w}" for w in s_arrival.warnings if w != "no samples")
    if n and s_arrival.n == 0:
        warnings.append("no ok requests: latency percentiles are undefined")
    not_ok = ended - n_ok
    if not_ok:
        warnings.append(f"{not_ok} of {ended} requests did not succeed ({failed_fraction:.0%}; see outcomes); "
                        "they are excluded from ok/s, goodput and the latency percentiles")

    queued = np.isin(codes, _QUEUE_OUTCOMES)
    if mode == "closed":
        divergence = Divergence(checked=False, unstable=False,
                                reason="closed loop: at most `users` requests are in the system, so the queue "
                                       "cannot grow without bound")
        saturation = Saturation(checked=False, reason="closed loop: the queue is bounded by the user count")
    elif schedule == "burst":
        divergence = Divergence(checked=False, unstable=False,
                                reason="burst: every request arrived at 0, there is no arrival window to split")
        saturation = Saturation(checked=False, reason="burst: every request arrived at 0")
    else:
        divergence = detect_divergence(intended, done, codes, duration_s)
        saturation = check_saturation(intended, done, ok, queued, duration_s)
    if saturation.detected or saturation.short:
        warnings.append(saturation.reason)
    saturated = divergence.unstable or saturation.detected or saturation.short

    return RateSummary(
        mode=mode,
        offered_rate=offered_rate,
        users=users,
        duration_s=float(duration_s),
        slo_s=slo_s,
        schedule=schedule,
        n=n,
        n_sent=int(is_sent.sum()),
        n_completed=n_completed,
        n_ok=n_ok,
        n_good=good,
        scheduled_rate=scheduled,
        sent_rate=float(sent_rate),
        achieved_rate=float(achieved),
        ok_rate=float(ok_rate),
        goodput=float(goodput),
        completed_rate=float(completed_rate),
        failed_fraction=float(failed_fraction),
        latency_from_arrival_s=s_arrival,
        latency_from_send_s=s_send,
        lag_s=s_lag,
        client_queue_s=s_cq,
        outcomes=outcomes,
        statuses=statuses or {},
        retry_after_s=retry_summary,
        per_shape=per_shape or {},
        server_stages_s=server_stages_s or {},
        server_peak_memory_bytes=server_peak_memory_bytes,
        server_service_time_s=server_service_time_s,
        divergence=divergence,
        unstable=divergence.unstable,
        saturation=saturation,
        saturated=saturated,
        warnings=warnings,
    )


def _per_shape(records: Sequence[RequestRecord]) -> dict[str, ShapeSummary]:
    groups: dict[str, list[RequestRecord]] = {}
    for r in records:
        groups.setdefault(r.shape, []).append(r)
    if set(groups) == {""}:
        return {}
    out = {}
    for shape, rs in sorted(groups.items()):
        lat = [r.done_s - r.intended_s for r in rs if r.outcome == "ok" and r.done_s is not None]
        counts = {k: 0 for k in OUTCOMES}
        for r in rs:
            counts[r.outcome] += 1
        out[shape or "(none)"] = ShapeSummary(n=len(rs), outcomes=counts, latency_from_arrival_s=summarize(lat))
    return out


def summarize_rate(
    records: Sequence[RequestRecord],
    *,
    offered_rate: float | None,
    duration_s: float,
    slo_s: float | None = None,
    mode: Literal["open", "closed"] = "open",
    users: int | None = None,
    goodput: Sequence[GoodputConstraint] | None = None,
    schedule: str | None = None,
) -> RateSummary:
    """Summarize the records of one rate (open loop) or one user count (closed loop).

    Args:
        records: every request of the rate, whatever its outcome (never drop failures).
        offered_rate: target requests per second (None for closed loop).
        duration_s: the scheduled measurement window in seconds (> 0), used for the divergence halves.
        slo_s: latency-from-arrival objective in seconds for goodput (None: goodput = ok throughput).
        mode: ``"open"`` or ``"closed"``.
        users: closed-loop user count.
        goodput: constraints a good request meets (:mod:`diffbench.load.goodput`); None or empty: ``slo_s``
            alone decides. A request lacking a constrained value is not good (a row warning counts them).
        schedule: the arrival kind of an open-loop row (``"burst"`` for all arrivals at once).

    Returns:
        The :class:`RateSummary` (see the module docstring for every definition).

    Raises:
        ValueError: ``duration_s`` or ``slo_s`` not positive.
    """
    if not duration_s > 0:
        raise ValueError(f"duration_s must be > 0 seconds, got {duration_s}")
    nan = math.nan
    intended = np.fromiter((r.intended_s for r in records), dtype=np.float64, count=len(records))
    sent = np.fromiter((nan if r.sent_s is None else r.sent_s for r in records), np.float64, len(records))
    done = np.fromiter((nan if r.done_s is None else r.done_s for r in records), np.float64, len(records))
    codes = np.fromiter((_OUTCOME_CODE[r.outcome] for r in records), np.int64, len(records))
    cq = np.fromiter((r.client_queue_s for r in records), np.float64, len(records))
    ra = np.fromiter((nan if r.retry_after_s is None else r.retry_after_s for r in records), np.float64,
                     len(records))
    statuses: dict[str, int] = {}
    stage_sum: dict[str, float] = {}
    stage_n: dict[str, int] = {}
    peak: int | None = None
    service: list[float] = []
    poll_gap: float | None = None
    kinds: dict[str, int] = {}
    for r in records:
        if r.outcome == "invalid_payload" and r.invalid_kind is not None:
            kinds[r.invalid_kind] = kinds.get(r.invalid_kind, 0) + 1
        if r.outcome == "ok" and r.poll_granularity_s is not None:
            poll_gap = r.poll_granularity_s if poll_gap is None else max(poll_gap, r.poll_granularity_s)
        if r.status is not None:
            statuses[str(r.status)] = statuses.get(str(r.status), 0) + 1
        if r.outcome == "ok":
            if SERVICE_TIME_KEY in r.server_stages_s:
                service.append(r.server_stages_s[SERVICE_TIME_KEY])
            for name, value in r.server_stages_s.items():
                stage_sum[name] = stage_sum.get(name, 0.0) + value
                stage_n[name] = stage_n.get(name, 0) + 1
        if r.server_peak_memory_bytes is not None:
            peak = r.server_peak_memory_bytes if peak is None else max(peak, r.server_peak_memory_bytes)
    stages = {k: stage_sum[k] / stage_n[k] for k in sorted(stage_sum)}
    first_error = next((f"{r.outcome}: {r.error or (f'HTTP {r.status}' if r.status else 'no detail')}"
                        for r in sorted(records, key=lambda r: r.id) if r.outcome not in ("ok", "cancelled")),
                       None)
    gp = count_good(records, goodput) if goodput else None
    summary = summarize_columns(
        intended, sent, done, codes, n_good=gp.n_good if gp else None, schedule=schedule,
        offered_rate=offered_rate, duration_s=duration_s, slo_s=slo_s, mode=mode, users=users,
        client_queue=cq, retry_after=ra, statuses=dict(sorted(statuses.items())),
        per_shape=_per_shape(records), server_stages_s=stages, server_peak_memory_bytes=peak,
        server_service_time_s=summarize(service) if service else None,
    )
    update: dict[str, object] = {"first_error": first_error} if first_error else {}
    if poll_gap is not None:
        update["poll_granularity_s"] = poll_gap
    if kinds:
        update["invalid_kinds"] = dict(sorted(kinds.items()))
    swaps = [r.server_stages_s["adapter_swap"] for r in records
             if r.outcome == "ok" and "adapter_swap" in r.server_stages_s]
    if swaps:
        update["adapter_swaps"] = sum(1 for v in swaps if v > 0)
    extra: list[str] = []
    if goodput:
        update["goodput_constraints"] = list(goodput)
        extra = gp.warnings(summary.n_ok) if gp else []
    cold = leading_cold_starts(records, SERVICE_TIME_KEY)
    if cold:
        update["cold_start"] = cold
        extra = [*extra, *(c.message() for c in cold)]
    if extra:
        update["warnings"] = [*summary.warnings, *extra]
    return summary.model_copy(update=update) if update else summary


__all__ = [
    "ColdStart",
    "Divergence",
    "RateSummary",
    "ShapeSummary",
    "FAILED_WARN_FRACTION",
    "SERVICE_TIME_KEY",
    "UNSTABLE_MESSAGE",
    "detect_divergence",
    "run_label",
    "summarize_columns",
    "summarize_rate",
]
