"""Load-client benchmark: every figure of the load client's target table, each beside a bare aiohttp client run on
the same schedule in the same invocation.

Run::

    python benchmarks/bench_load_client.py [--quick] [--only ROW[,ROW]] [--seconds S] [--repeats N] [--score] [--defer-checks]

Rows (``--only`` names): ``500``, ``1000``, ``2000`` (the client pinned to one CPU and the server to
another), ``inflight`` (5,000 in flight), ``large`` (8 MB answers at 20 req/s), ``sizes`` (1, 8, 32 MB),
``workers`` (the ceiling of 1 vs 2 worker processes), ``transport`` (bare aiohttp vs bare httpx) and
``scale`` (the ceiling of one process, of ``--workers N`` processes and of N Ray actors on a
local cluster, each pool kept open over its search; needs the ray extra, skipped without it).
``--quick`` is a smoke run (3 s per run, 2 s per ceiling probe, 1,500 in flight instead of 5,000): its
numbers are not the target figures.

Setup. The server is :mod:`diffbench.load.client.noop_server` in its own process (a raw asyncio responder
answering a precomputed images response: an 8x8 PNG for the no-op rows, incompressible noise PNGs of ~1, 8
and 32 MB for the payload rows). The *diffbench* side is the public API: ``HttpBackend(Target(...))``, a
``RequestPlanner`` over ``default_workload`` (the size the server answers, so the payload check passes;
checks are on), ``run_open_loop`` (or ``WorkerPool`` for the workers row) and ``summarize_rate``. The *bare*
side is :func:`diffbench.load.client.bare.run_bare` (one aiohttp session, the same absolute-schedule
dispatch, no payload parsing), sending the very JSON body diffbench sends; its records go through the same
``summarize_rate``. Both run on the same event loop kind (uvloop when installed; ``--loop``), each on a
fresh session/backend warmed first (0.5 s at the row's rate, at most 100 req/s; not counted).

``--score`` turns on what ``load --reference DIR`` adds: every diffbench request replays a reference whose
image is the no-op server's own answer (written to a temporary directory at start), so each answer is
decoded, sanity-checked (black/constant pixels, pixel hash) *and* scored (PSNR, SSIM against the reference)
in the checker processes, as a ``--quality-sample 1`` run does; the duplicate-across-seeds check runs over
each run's records (``mark_duplicates``) before they are summarized. The rows then add "scored / ok" (every
ok answer must carry a PSNR) beside the usual figures. Sanity checks are on in every run (the default of
``load``); ``--score`` adds the scoring. ``--defer-checks`` holds diffbench's checks until each run's last timed
answer, as ``load --defer-checks`` does.

Noise floor. Each row runs peer, client, peer, client, ... (``--repeats`` pairs, default 2), interleaved so
a drift in machine load hits both. The figure printed is the median over repeats; the ratio column is the
median of the per-pair ratios with their range over repeats ``[min-max]`` beside it: a ratio whose range
straddles the target is not resolved by this run. The ceiling row is the exception: one search per client
(doubling, then bisection; its step is the resolution), the probes are not paired. The machine (CPUs, load average at start and end) is
printed; a busy machine makes every ratio noisier.

Definitions (those of ``diffbench load``, :mod:`diffbench.load.summary`): sent/target = sent rate / offered
rate, ok/target = ok rate / offered rate (ok = 2xx and, for diffbench, a payload that decodes at the
requested size; the bare client checks nothing), lag = sent - intended, latency from send = done - sent
(ok requests). A target "100 %" is met at >= 99.5 %.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import base64
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from diffbench.core.records import RequestRecord
from diffbench.load.client import HttpBackend, RequestPlanner, Target, default_workload, run_open_loop
from diffbench.load.client.bare import BareRecord, BareResult, run_bare
from diffbench.load.client.dialects import IMAGES_PATH, image_body
from diffbench.load.client.noop_server import ServerProcess, build_body, image_size_for, raise_nofile_limit
from diffbench.load.client.runners import quiet_gc
from diffbench.load.client.sanity import mark_duplicates
from diffbench.load.client.workload import ReferenceRequest
from diffbench.load.summary import RateSummary, summarize_rate
from diffbench.queueing.schedules import constant, poisson

T = TypeVar("T")
ROWS = ("500", "1000", "2000", "inflight", "large", "sizes", "workers", "transport", "scale")
MB = 1_000_000
LARGE_RATES = {1 * MB: 20.0, 8 * MB: 20.0, 32 * MB: 5.0}
"""Offered rate per body size of the payload rows: 20 req/s (the target's) up to 8 MB; 5 req/s at 32 MB, so
the checks (~4 ms per MB in one process) fit in the machine (~160 MB/s of answers in both cases)."""
LAG_TARGET_S = 0.002
SCHEDULE_SEED = 11


@dataclass
class Opts:
    seconds: float
    repeats: int
    inflight_s: float
    inflight_delay_s: float
    probe_s: float
    quick: bool
    use_uvloop: bool
    score: bool = False
    ref_dir: str = ""
    defer: bool = False


# ------------------------------------------------------------------------------------------- helpers


def run_loop(coro: Coroutine[Any, Any, T], use_uvloop: bool) -> T:
    """Run ``coro`` on a fresh event loop of the chosen kind."""
    if use_uvloop:
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")


def lag_p99_in(records: Sequence[RequestRecord], lo: float, hi: float) -> float:
    """Lag p99 (s) of the requests intended in ``[lo, hi)``."""
    lag = [r.lag_s for r in records if r.lag_s is not None and lo <= r.intended_s < hi]
    return float(np.percentile(lag, 99)) if lag else float("nan")


def warm_schedule(rate: float) -> np.ndarray:
    return constant(min(rate, 100.0), 0.5)


def request_body(size: tuple[int, int]) -> bytes:
    """The JSON body diffbench sends for one request of ``size`` (the bare clients send these bytes)."""
    spec = RequestPlanner(default_workload(size[0], size[1], 1), ["p"], seed=0).next()
    return json.dumps(image_body(spec, "vllm-omni")).encode()


# ------------------------------------------------------------------------------------------- clients


REFERENCES: dict[tuple[int, int], ReferenceRequest] = {}
"""``--score``: the reference of each no-op server size (its own answer image), written once per run."""


def reference_for(size: tuple[int, int], opts: Opts) -> ReferenceRequest | None:
    """The reference replayed against a server answering ``size`` images (``--score``), else None."""
    if not opts.score:
        return None
    if size not in REFERENCES:
        body_bytes = next((b for b in (0, *LARGE_RATES) if image_size_for(b) == size), None)
        if body_bytes is None:
            raise RuntimeError(f"no no-op body answers {size[0]}x{size[1]}")
        b64 = json.loads(build_body(body_bytes))["data"][0]["b64_json"]
        path = os.path.join(opts.ref_dir, f"ref_{size[0]}x{size[1]}.png")
        with open(path, "wb") as fh:
            fh.write(base64.b64decode(b64))
        REFERENCES[size] = ReferenceRequest(label=f"noop {size[0]}x{size[1]}", prompt="p", seed=0, width=size[0],
                                            height=size[1], steps=None, files=(path,))
    return REFERENCES[size]


async def _diffbench(url: str, size: tuple[int, int], schedule: np.ndarray, rate: float, duration: float,
                     timeout_s: float, ref: ReferenceRequest | None = None, defer: bool = False) -> list[RequestRecord]:
    backend = HttpBackend(Target(base_url=url, timeout_s=timeout_s, defer_checks=defer))
    await backend.start()
    try:
        planner = RequestPlanner(default_workload(size[0], size[1], 1), ["p"], seed=0,
                                 references=() if ref is None else (ref,))
        warm = warm_schedule(rate)
        await run_open_loop(warm, planner.take(len(warm)), backend, offered_rate=float(warm.size / 0.5),
                            duration_s=0.5)
        run = await run_open_loop(schedule, planner.take(len(schedule)), backend, offered_rate=rate,
                                  duration_s=duration)
        return mark_duplicates(run.records) if ref is not None else run.records
    finally:
        await backend.close()


def diffbench_run(url: str, size: tuple[int, int], schedule: np.ndarray, rate: float, duration: float,
                  timeout_s: float, opts: Opts) -> list[RequestRecord]:
    return run_loop(_diffbench(url, size, schedule, rate, duration, timeout_s, reference_for(size, opts),
                               opts.defer), opts.use_uvloop)


def bare_run(url: str, size: tuple[int, int], schedule: np.ndarray, rate: float, timeout_s: float,
             opts: Opts) -> list[RequestRecord]:
    res = run_loop(run_bare(url + IMAGES_PATH, schedule, request_body(size), timeout_s,
                            warmup_s=warm_schedule(rate)), opts.use_uvloop)
    return res.to_request_records(rate=rate)


async def run_bare_httpx(url: str, schedule: np.ndarray, body: bytes, timeout_s: float, *,
                         warmup_s: np.ndarray | None = None) -> BareResult:
    """:func:`run_bare` with one ``httpx.AsyncClient`` (unbounded pool) instead of aiohttp: the same
    dispatch, bookkeeping and garbage-collector window, for the transport row."""
    import httpx

    ns = time.perf_counter_ns
    headers = {"Content-Type": "application/json"}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(timeout_s), trust_env=False) as client:

        async def dispatch(sched: np.ndarray) -> BareResult:
            times = np.asarray(sched, dtype=np.float64).tolist()
            records = [BareRecord(id=i, intended_s=t) for i, t in enumerate(times)]

            async def send(rec: BareRecord) -> None:
                rec.sent_s = (ns() - t0) / 1e9
                async with client.stream("POST", url, content=body, headers=headers) as resp:
                    rec.first_byte_s = (ns() - t0) / 1e9
                    await resp.aread()
                    rec.done_s = (ns() - t0) / 1e9
                    rec.status = resp.status_code

            async def one(rec: BareRecord) -> None:
                try:
                    await asyncio.wait_for(send(rec), timeout_s)
                except Exception as exc:
                    rec.done_s, rec.status = (ns() - t0) / 1e9, None
                    rec.error = "TimeoutError" if isinstance(exc, (asyncio.TimeoutError, httpx.TimeoutException)) \
                        else type(exc).__name__

            tasks = []
            t0 = ns() + 5_000_000
            for rec, t in zip(records, times, strict=True):
                while (delay := (t0 - ns()) / 1e9 + t) > 0:  # never early (uvloop may wake early)
                    await asyncio.sleep(delay)
                tasks.append(asyncio.get_running_loop().create_task(one(rec)))
            if tasks:
                await asyncio.wait(tasks)
            return BareResult(records=records, elapsed_s=(ns() - t0) / 1e9)

        if warmup_s is not None and len(warmup_s):
            await dispatch(warmup_s)
        with quiet_gc():
            return await dispatch(schedule)


# ------------------------------------------------------------------------------------------- table


@dataclass
class Metric:
    """One printed line: a figure of the client and of its peer per repeat, and the target."""

    name: str
    unit: str  # "%", "ms", "x", "n", "req/s"
    target: str = ""
    ok: Callable[[float], bool] | None = None  # applied to the client's median (or the ratio, see on_ratio)
    on_ratio: bool = False
    client: list[float] = field(default_factory=list)
    peer: list[float] = field(default_factory=list)

    def met(self) -> str:
        if self.ok is None:
            return ""
        value = self.ratio_median() if self.on_ratio else median(self.client)
        return "yes" if self.ok(value) else "NO"

    def ratios(self) -> list[float]:
        return [ratio(c, p) for c, p in zip(self.client, self.peer, strict=False)]

    def ratio_median(self) -> float:
        return median(self.ratios())


SUMMARY: list[tuple[str, str, str, str, str]] = []


def fmt(value: float, unit: str) -> str:
    if value != value:  # nan
        return "n/a"
    if unit == "%":
        return f"{value:.1%}"
    if unit == "ms":
        return f"{value * 1e3:.2f} ms"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "n":
        return f"{value:.0f}"
    return f"{value:.0f} req/s"


def print_table(row: str, metrics: Sequence[Metric], client_name: str = "diffbench",
                peer_name: str = "bare aiohttp") -> None:
    print(f"  {'figure':<34} {client_name:>13} {peer_name:>13} {'ratio [range]':>22}  {'target':<22} met")
    for m in metrics:
        rs = [r for r in m.ratios() if r == r]
        spread = f"[{min(rs):.2f}-{max(rs):.2f}]" if len(rs) > 1 else ""
        rtxt = f"{m.ratio_median():.2f} {spread}" if rs else "n/a"
        peer = fmt(median(m.peer), m.unit) if m.peer else "-"
        print(f"  {m.name:<34} {fmt(median(m.client), m.unit):>13} {peer:>13} {rtxt:>22}  {m.target:<22} "
              f"{m.met()}")
        if m.target:
            shown = f"ratio {m.ratio_median():.2f}" if m.on_ratio else fmt(median(m.client), m.unit)
            SUMMARY.append((row, m.name, shown, m.target, m.met()))


def pct_ok(floor: float) -> Callable[[float], bool]:
    return lambda v: v >= floor


def at_most(limit: float) -> Callable[[float], bool]:
    return lambda v: v <= limit


def rate_metrics(rate: float, sent_floor: float, timeouts: bool = False) -> list[Metric]:
    hundred = sent_floor >= 0.995
    tgt = "100 % (>= 99.5 %)" if hundred else f">= {sent_floor:.0%}"
    ms = [Metric("sent / target", "%", tgt, pct_ok(sent_floor)),
          Metric("ok / target", "%", tgt if hundred else "", pct_ok(sent_floor) if hundred else None),
          Metric("lag p50", "ms"),
          Metric("lag p99", "ms", "<= 2 ms", at_most(LAG_TARGET_S)),
          Metric("lag max", "ms")]
    if timeouts:
        ms.append(Metric("timeouts", "n", "0", at_most(0)))
    return ms


def scored_metric(opts: Opts) -> list[Metric]:
    """``--score``: the fraction of ok answers that were scored (each must carry a PSNR), else nothing."""
    return [Metric("scored / ok (--score)", "%", "100 %", pct_ok(1.0))] if opts.score else []


def fill_scored(ms: Sequence[Metric], recs: Sequence[RequestRecord]) -> None:
    """Append the client's scored/ok fraction to the ``scored_metric`` of ``ms`` (if any)."""
    for m in ms:
        if m.name.startswith("scored / ok"):
            ok = [r for r in recs if r.outcome == "ok"]
            m.client.append(ratio(sum(r.psnr_db is not None for r in ok), len(ok)))


def fill_rate(ms: Sequence[Metric], s: RateSummary, rate: float, side: str) -> None:
    values = [s.sent_rate / rate, s.ok_rate / rate, s.lag_s.p50, s.lag_s.p99, s.lag_s.max,
              float(s.outcomes.get("timeout", 0))]
    for m, v in zip(ms, values, strict=False):
        getattr(m, side).append(v)


# ------------------------------------------------------------------------------------------- rows


def row_constant(rate: float, opts: Opts, *, one_core: bool = False) -> None:
    floor = 0.99 if one_core else 0.995
    d = opts.seconds
    schedule = constant(rate, d)
    cpus = sorted(os.sched_getaffinity(0))
    pin = one_core and len(cpus) >= 2
    title = f"constant {rate:,.0f} req/s for {d:g} s"
    if one_core:
        title += (f", client pinned to CPU {cpus[0]}, server to CPU {cpus[1]} (os.sched_setaffinity)" if pin
                  else " (fewer than 2 CPUs: NOT pinned)")
    print(f"\n== {title}")
    ms = rate_metrics(rate, floor, timeouts=rate >= 1000 and not one_core) + scored_metric(opts)
    saved = os.sched_getaffinity(0)
    with ServerProcess(0, cpu=cpus[1] if pin else None) as srv:
        try:
            if pin:
                os.sched_setaffinity(0, {cpus[0]})
            for _ in range(opts.repeats):
                recs = bare_run(srv.url, srv.size, schedule, rate, 10.0, opts)
                fill_rate(ms, summarize_rate(recs, offered_rate=rate, duration_s=d), rate, "peer")
                recs = diffbench_run(srv.url, srv.size, schedule, rate, d, 10.0, opts)
                fill_rate(ms, summarize_rate(recs, offered_rate=rate, duration_s=d), rate, "client")
                fill_scored(ms, recs)
        finally:
            os.sched_setaffinity(0, saved)
    print_table(f"{rate:,.0f} req/s" + (" one core" if one_core else ""), ms)


def row_inflight(opts: Opts) -> None:
    rate, d, delay = 500.0, opts.inflight_s, opts.inflight_delay_s
    print(f"\n== {int(rate * min(d, delay)):,} in flight: {rate:g} req/s for {d:g} s, the server answers after "
          f"{delay:g} s (lag p99 of the requests intended in the last second / the first second)")
    schedule = constant(rate, d)
    timeout = delay + 30.0
    grow = Metric("lag p99 last s / first s", "x", "<= 2x", at_most(2.0))
    first = Metric("lag p99 first second", "ms")
    last = Metric("lag p99 last second", "ms")
    failed = Metric("requests not ok", "n", "0", at_most(0))
    with ServerProcess(0, delay_s=delay) as srv:
        for _ in range(opts.repeats):
            for side, run in (("peer", lambda: bare_run(srv.url, srv.size, schedule, rate, timeout, opts)),
                              ("client", lambda: diffbench_run(srv.url, srv.size, schedule, rate, d, timeout,
                                                               opts))):
                recs = run()
                a, b = lag_p99_in(recs, 0.0, 1.0), lag_p99_in(recs, d - 1.0, d)
                getattr(first, side).append(a)
                getattr(last, side).append(b)
                getattr(grow, side).append(ratio(b, a))
                getattr(failed, side).append(float(sum(r.outcome != "ok" for r in recs)))
    print_table("in flight", [first, last, grow, failed])


def _payload_pairs(body_bytes: int, opts: Opts, with_noop: bool) -> dict[str, list[list[RequestRecord]]]:
    """Interleaved runs on one seeded Poisson schedule: bare/diffbench against ``body_bytes`` answers (and
    against no-op answers when ``with_noop``). Keys: bare, client, bare_noop, client_noop."""
    rate, d = LARGE_RATES.get(body_bytes, 20.0), opts.seconds
    schedule = poisson(rate, d, seed=SCHEDULE_SEED)
    out: dict[str, list[list[RequestRecord]]] = {"bare": [], "client": [], "bare_noop": [], "client_noop": []}
    with ServerProcess(body_bytes) as big, ServerProcess(0) as noop:
        for _ in range(opts.repeats):
            if with_noop:
                out["bare_noop"].append(bare_run(noop.url, noop.size, schedule, rate, 60.0, opts))
                out["client_noop"].append(diffbench_run(noop.url, noop.size, schedule, rate, d, 60.0, opts))
            out["bare"].append(bare_run(big.url, big.size, schedule, rate, 60.0, opts))
            out["client"].append(diffbench_run(big.url, big.size, schedule, rate, d, 60.0, opts))
    return out


def _lat_p50(recs: Sequence[RequestRecord]) -> float:
    lat = [r.latency_from_send_s for r in recs if r.outcome == "ok" and r.latency_from_send_s is not None]
    return float(np.median(lat)) if lat else float("nan")


def _lag_p99(recs: Sequence[RequestRecord]) -> float:
    return lag_p99_in(recs, -1e18, 1e18)


PAYLOAD_CACHE: dict[int, dict[str, list[list[RequestRecord]]]] = {}


def row_large(opts: Opts) -> None:
    rate = LARGE_RATES[8 * MB]
    w, h = image_size_for(8 * MB)
    print(f"\n== 8 MB base64 PNG answers ({w}x{h} noise) at {rate:g} req/s (Poisson, seed {SCHEDULE_SEED}) for "
          f"{opts.seconds:g} s, payload checks on; no-op runs (8x8 PNG) on the same schedule")
    runs = _payload_pairs(8 * MB, opts, with_noop=True)
    PAYLOAD_CACHE[8 * MB] = runs
    lag_ratio = Metric("lag p99 8 MB / no-op", "x", "<= 2x", at_most(2.0))
    lag_big = Metric("lag p99 8 MB", "ms")
    lag_noop = Metric("lag p99 no-op", "ms")
    lat = Metric("latency from send p50 (8 MB)", "ms", "<= 1.2x bare", at_most(1.2), on_ratio=True)
    okm = Metric("ok / sent (8 MB)", "%")
    scored = scored_metric(opts)
    for i in range(opts.repeats):
        for side, key in (("peer", "bare"), ("client", "client")):
            big, small = runs[key][i], runs[key + "_noop"][i]
            getattr(lag_big, side).append(_lag_p99(big))
            getattr(lag_noop, side).append(_lag_p99(small))
            getattr(lag_ratio, side).append(ratio(_lag_p99(big), _lag_p99(small)))
            getattr(lat, side).append(_lat_p50(big))
            getattr(okm, side).append(ratio(sum(r.outcome == "ok" for r in big), sum(r.sent_s is not None
                                                                                    for r in big)))
        fill_scored(scored, runs["client"][i])
    print_table("8 MB at 20 req/s", [lag_noop, lag_big, lag_ratio, lat, okm, *scored])


def row_sizes(opts: Opts) -> None:
    print(f"\n== latency from send p50 vs bare, payload checks on, Poisson (seed {SCHEDULE_SEED}), "
          f"{opts.seconds:g} s per run; rates: " + ", ".join(f"{b // MB} MB at {r:g} req/s"
                                                          for b, r in LARGE_RATES.items()))
    ms = []
    for body in LARGE_RATES:
        runs = PAYLOAD_CACHE.get(body) or _payload_pairs(body, opts, with_noop=False)
        m = Metric(f"latency from send p50 ({body // MB} MB)", "ms", "<= 1.2x bare", at_most(1.2),
                   on_ratio=True)
        m.peer = [_lat_p50(r) for r in runs["bare"]]
        m.client = [_lat_p50(r) for r in runs["client"]]
        ms.append(m)
    print_table("sizes", ms)


def _probe_passes(recs: Sequence[RequestRecord], rate: float, d: float) -> bool:
    s = summarize_rate(recs, offered_rate=rate, duration_s=d)
    return s.sent_rate / rate >= 0.99 and s.ok_rate / rate >= 0.99 and s.lag_s.p99 <= LAG_TARGET_S


def ceiling(probe: Callable[[float], bool], start: float = 250.0, limit: float = 64_000.0,
            bisections: int = 3) -> tuple[float, float, list[tuple[float, bool]]]:
    """(highest passing rate, search step, history): double from ``start`` until a rate fails, then bisect
    the last interval ``bisections`` times (below ``start`` when it already fails). A rate fails when two
    probes in a row fail (one retry), so one transient stall of a shared machine does not end the search."""
    history: list[tuple[float, bool]] = []

    def passes(rate: float) -> bool:
        for _ in range(2):
            ok = probe(rate)
            history.append((rate, ok))
            if ok:
                return True
        return False

    lo, hi = 0.0, start
    while hi <= limit and passes(hi):
        lo, hi = hi, hi * 2
    step = (hi - lo) / 2 ** bisections
    for _ in range(bisections):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if passes(mid) else (lo, mid)
    return lo, step, history


async def _pool_run(url: str, rate: float, d: float, workers: int) -> list[RequestRecord]:
    from diffbench.load.client.executor import WorkerPool

    size = image_size_for(0)
    planner = RequestPlanner(default_workload(size[0], size[1], 1), ["p"], seed=0)
    schedule = constant(rate, d)
    warm = warm_schedule(rate)
    async with WorkerPool(Target(base_url=url, timeout_s=5.0), workers=workers) as pool:
        await pool.open_loop(warm, planner.take(len(warm)), offered_rate=float(warm.size / 0.5), duration_s=0.5)
        run = await pool.open_loop(schedule, planner.take(len(schedule)), offered_rate=rate, duration_s=d)
    return list(run.records)


def row_workers(opts: Opts) -> None:
    d = opts.probe_s
    print(f"\n== ceiling: the highest constant rate with sent and ok >= 99 % of target and lag p99 <= 2 ms "
          f"({d:g} s probes, doubling from 250 req/s then 3 bisection steps, a rate fails when 2 probes in a row "
          f"fail; one search per client: the step below is the resolution); {os.cpu_count()} CPUs, shared with the server process")
    try:
        from diffbench.load.client.executor import WorkerPool  # noqa: F401
    except ImportError:
        pool_ok = False
    else:
        pool_ok = True
    results: dict[str, tuple[float, float, list[tuple[float, bool]]]] = {}
    with ServerProcess(0) as srv:
        results["bare aiohttp, 1 process"] = ceiling(lambda r: _probe_passes(
            bare_run(srv.url, srv.size, constant(r, d), r, 5.0, opts), r, d))
        results["diffbench, 1 process"] = ceiling(lambda r: _probe_passes(
            diffbench_run(srv.url, srv.size, constant(r, d), r, d, 5.0, opts), r, d))
        if pool_ok:
            results["diffbench, WorkerPool workers=2"] = ceiling(lambda r: _probe_passes(
                run_loop(_pool_run(srv.url, r, d, 2), opts.use_uvloop), r, d))
    for name, (c, step, hist) in results.items():
        trail = " ".join(f"{r:.0f}{'+' if ok else '-'}" for r, ok in hist)
        shown = f"{c:>8,.0f}" if c > 0 else f"< {min(r for r, _ in hist):,.0f}"
        print(f"  {name:<34} ceiling {shown:>8} req/s (step {step:,.0f})   probes: {trail}")
    one = results["diffbench, 1 process"][0]
    print(f"  diffbench 1 process / bare: {ratio(one, results['bare aiohttp, 1 process'][0]):.2f}")
    if not pool_ok:
        print("  2 workers: skipped: WorkerPool not available")
        SUMMARY.append(("workers", "ceiling 2 workers / 1 worker", "skipped", ">= 1.8x", ""))
        return
    two = results["diffbench, WorkerPool workers=2"][0]
    r = ratio(two, one)
    met = "yes" if r >= 1.8 else "NO"
    note = "  (1 worker below the lowest probe: the ratio is undefined)" if one == 0 else ""
    print(f"  ceiling 2 workers / 1 worker: {r:.2f}  (target >= 1.8x: {met}){note}")
    SUMMARY.append(("workers", "ceiling 2 workers / 1 worker", f"ratio {r:.2f}", ">= 1.8x", met))


class _PoolProbe:
    """A sweep of open-loop probes on one pool kept open (its own event loop on a thread), so a Ray pool's
    actor start-up and clock measurement are paid once per search, not per probe."""

    def __init__(self, make_pool: Callable[[], Any]) -> None:
        import threading

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.pool = make_pool()
        self.size = image_size_for(0)
        self.planner = RequestPlanner(default_workload(self.size[0], self.size[1], 1), ["p"], seed=0)
        self._call(self.pool.start())

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def records(self, rate: float, d: float) -> list[RequestRecord]:
        warm = warm_schedule(rate)
        self._call(self.pool.open_loop(warm, self.planner.take(len(warm)), offered_rate=float(warm.size / 0.5),
                                       duration_s=0.5))
        schedule = constant(rate, d)
        run = self._call(self.pool.open_loop(schedule, self.planner.take(len(schedule)), offered_rate=rate,
                                             duration_s=d))
        return list(run.records)

    def close(self) -> None:
        self._call(self.pool.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5.0)


def interleaved_ceilings(probes: dict[str, Callable[[float], bool]], start: float = 250.0,
                         limit: float = 64_000.0, bisections: int = 3
                         ) -> dict[str, tuple[float, float, list[tuple[float, bool]]]]:
    """:func:`ceiling` for several clients at once, one search step of each client in turn (round-robin), so
    a drift in the machine's load hits every client's search alike. Same rule per client: double from
    ``start`` until a rate fails (two failed probes in a row), then bisect ``bisections`` times."""
    state = {name: {"lo": 0.0, "hi": start, "doubling": True, "left": bisections, "step": 0.0, "hist": []}
             for name in probes}

    def passes(name: str, rate: float) -> bool:
        for _ in range(2):
            ok = probes[name](rate)
            state[name]["hist"].append((rate, ok))  # type: ignore[union-attr]
            if ok:
                return True
        return False

    while any(st["doubling"] or st["left"] for st in state.values()):
        for name, st in state.items():
            if st["doubling"]:
                if st["hi"] <= limit and passes(name, st["hi"]):
                    st["lo"], st["hi"] = st["hi"], st["hi"] * 2
                else:
                    st["doubling"] = False
                    st["step"] = (st["hi"] - st["lo"]) / 2 ** bisections
            elif st["left"]:
                mid = (st["lo"] + st["hi"]) / 2
                st["lo"], st["hi"] = (mid, st["hi"]) if passes(name, mid) else (st["lo"], mid)
                st["left"] -= 1
    return {name: (st["lo"], st["step"], st["hist"]) for name, st in state.items()}  # type: ignore[misc]


def row_scale(opts: Opts) -> None:
    """Issue 15, limits: the highest sustained rate of one process, of N local worker processes and of N Ray
    actors (a local cluster), against the no-op server on this machine, with the ratios. The three searches
    are interleaved step by step (:func:`interleaved_ceilings`) and repeated ``--repeats`` times; the ratio
    printed is the median over repeats with its range (its noise floor) beside it."""
    d = opts.probe_s
    n = max(2, min(4, (os.cpu_count() or 2)))
    print(f"\n== scale: ceiling (sent and ok >= 99 % of target, lag p99 <= 2 ms; {d:g} s probes, doubling from "
          f"250 req/s then 3 bisections, a rate fails on 2 failed probes in a row) of 1 process, --workers {n} "
          f"and {n} Ray actors (local cluster, {os.cpu_count()} CPUs, shared with the no-op server); the three "
          f"searches interleaved step by step, {opts.repeats} repeat(s)")
    try:
        import ray  # noqa: F401  (the ray extra, needed for the Ray side)

        from diffbench.distributed.cluster import connect
        from diffbench.distributed.load import RayWorkerPool
        from diffbench.load.client.executor import WorkerPool
    except ImportError as exc:
        print(f"  skipped: {exc} (install the ray extra)")
        SUMMARY.append(("scale", "ceiling Ray actors / 1 process", "skipped", "stated", ""))
        return
    names = ("diffbench, 1 process", f"diffbench, --workers {n}", f"diffbench, --ray local, {n} actors")
    found: dict[str, list[float]] = {k: [] for k in names}
    clocks = ""
    with ServerProcess(0) as srv, connect("local", num_cpus=max(n, os.cpu_count() or 1)):
        target = Target(base_url=srv.url, timeout_s=5.0)
        local = _PoolProbe(lambda: WorkerPool(target, workers=n, use_uvloop=opts.use_uvloop))
        ray_probe = _PoolProbe(lambda: RayWorkerPool(target, workers=n, address="local", use_uvloop=opts.use_uvloop,
                                                     backend_options={"check_workers": 1}))
        try:
            clocks = "; ".join(c.describe() for c in ray_probe.pool.clocks)
            for rep in range(opts.repeats):
                results = interleaved_ceilings({
                    names[0]: lambda r: _probe_passes(diffbench_run(srv.url, srv.size, constant(r, d), r, d, 5.0,
                                                                    opts), r, d),
                    names[1]: lambda r: _probe_passes(local.records(r, d), r, d),
                    names[2]: lambda r: _probe_passes(ray_probe.records(r, d), r, d),
                })
                for name, (c, step, hist) in results.items():
                    found[name].append(c)
                    trail = " ".join(f"{r:.0f}{'+' if ok else '-'}" for r, ok in hist)
                    shown = f"{c:>8,.0f}" if c > 0 else f"< {min(r for r, _ in hist):,.0f}"
                    print(f"  [{rep + 1}] {name:<34} ceiling {shown:>8} req/s (step {step:,.0f})   probes: {trail}")
                sys.stdout.flush()
        finally:
            ray_probe.close()
            local.close()
    print(f"  Ray actors' clock offsets to the driver: {clocks}")

    def ratios(a: str, b: str) -> str:
        rs = [ratio(x, y) for x, y in zip(found[a], found[b], strict=True)]
        return f"{median(rs):.2f} [{min(rs):.2f}-{max(rs):.2f}]"

    one, pool, ray_c = (median(found[k]) for k in names)
    print(f"  ceilings (median over repeats): 1 process {one:,.0f}, --workers {n} {pool:,.0f}, Ray {n} actors "
          f"{ray_c:,.0f} req/s")
    print(f"  ratios, median [range over repeats]: --workers {n} / 1 process {ratios(names[1], names[0])};  "
          f"Ray / 1 process {ratios(names[2], names[0])};  Ray / --workers {ratios(names[2], names[1])}")
    SUMMARY.append(("scale", f"ceiling 1 / --workers {n} / Ray {n}", f"{one:,.0f}/{pool:,.0f}/{ray_c:,.0f}",
                    "stated", f"Ray/1 {ratios(names[2], names[0])}"))


def row_transport(opts: Opts) -> None:
    rate, d = 1000.0, opts.seconds
    print(f"\n== transport: bare aiohttp vs bare httpx (one AsyncClient, unbounded pool), constant {rate:,.0f} "
          f"req/s for {d:g} s, the same dispatch and body")
    schedule = constant(rate, d)
    ms = [Metric("sent / target", "%"), Metric("ok / target", "%"), Metric("lag p50", "ms"),
          Metric("lag p99", "ms"), Metric("lag max", "ms"), Metric("timeouts", "n")]
    body = request_body(image_size_for(0))
    with ServerProcess(0) as srv:
        url = srv.url + IMAGES_PATH
        for _ in range(opts.repeats):
            res = run_loop(run_bare(url, schedule, body, 10.0, warmup_s=warm_schedule(rate)), opts.use_uvloop)
            fill_rate(ms, summarize_rate(res.to_request_records(rate), offered_rate=rate, duration_s=d), rate,
                      "peer")
            res = run_loop(run_bare_httpx(url, schedule, body, 10.0, warmup_s=warm_schedule(rate)),
                           opts.use_uvloop)
            fill_rate(ms, summarize_rate(res.to_request_records(rate), offered_rate=rate, duration_s=d), rate,
                      "client")
    print_table("transport", ms, client_name="bare httpx", peer_name="bare aiohttp")
    lag_a, lag_h = median(ms[3].peer), median(ms[3].client)
    sent_a, sent_h = median(ms[0].peer), median(ms[0].client)
    winner = "aiohttp" if (sent_a >= sent_h - 0.005 and lag_a <= lag_h) else "httpx" if (
        sent_h >= sent_a - 0.005 and lag_h <= lag_a) else "neither on both figures"
    print(f"  measured winner at {rate:,.0f} req/s: {winner}")
    SUMMARY.append(("transport", "lag p99 httpx / aiohttp", f"ratio {ms[3].ratio_median():.2f}",
                    "the lower wins", winner))


# ------------------------------------------------------------------------------------------- main


def machine(label: str) -> str:
    la = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{label}: load average {la} (1/5/15 min) on {os.cpu_count()} CPUs"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: 3 s per run, 2 s probes, 1,500 in flight")
    ap.add_argument("--seconds", type=float, default=None, help="seconds per measured run (default 10; quick 3)")
    ap.add_argument("--repeats", type=int, default=2, help="interleaved peer/client pairs per row (default 2)")
    ap.add_argument("--only", default=None, help=f"comma-separated rows: {', '.join(ROWS)}")
    ap.add_argument("--score", action="store_true",
                    help="diffbench scores every answer against a reference (the server's own image), as "
                         "load --reference DIR --quality-sample 1 does; sanity checks are on either way")
    ap.add_argument("--defer-checks", action="store_true",
                    help="diffbench holds its checks until each run's last timed answer (load --defer-checks)")
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default=None,
                    help="event loop for every client (default: uvloop when installed)")
    args = ap.parse_args(argv)
    rows = ROWS if args.only is None else tuple(x.strip() for x in args.only.split(",") if x.strip())
    bad = [r for r in rows if r not in ROWS]
    if bad:
        ap.error(f"--only: unknown row(s) {', '.join(bad)}; choose from {', '.join(ROWS)}")
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    if args.seconds is not None and not args.seconds >= 2:
        ap.error("--seconds must be >= 2 (the in-flight row compares the first and the last second)")
    if args.loop is None:
        try:
            import uvloop  # noqa: F401
        except ImportError:
            args.loop = "asyncio"
        else:
            args.loop = "uvloop"
    seconds = args.seconds or (3.0 if args.quick else 10.0)
    opts = Opts(seconds=seconds, repeats=args.repeats, quick=args.quick, use_uvloop=args.loop == "uvloop",
                inflight_s=3.0 if args.quick else 10.0, inflight_delay_s=4.0 if args.quick else 12.0,
                probe_s=2.0 if args.quick else 5.0, score=args.score, defer=args.defer_checks,
                ref_dir=tempfile.mkdtemp(prefix="bench_load_client_ref_") if args.score else "")
    if opts.ref_dir:
        atexit.register(shutil.rmtree, opts.ref_dir, True)
    raise_nofile_limit()
    import aiohttp
    import httpx

    print(f"bench_load_client: python {platform.python_version()}, event loop {args.loop}, aiohttp "
          f"{aiohttp.__version__}, httpx {httpx.__version__}; {len(os.sched_getaffinity(0))} CPUs usable "
          f"({platform.processor() or platform.machine()})")
    print(machine("start"))
    if args.quick:
        print("QUICK smoke run: short runs; these are not the target figures")
    print(f"{seconds:g} s per run, {args.repeats} interleaved pair(s) per row (bare peer first); diffbench checks: "
          "decode, size, sanity" + (", scoring against a reference (--score)" if args.score else "")
          + (", held until each run's last timed answer (--defer-checks)" if args.defer_checks else ""))
    t0 = time.perf_counter()
    table: dict[str, Callable[[], None]] = {
        "500": lambda: row_constant(500.0, opts),
        "1000": lambda: row_constant(1000.0, opts),
        "2000": lambda: row_constant(2000.0, opts, one_core=True),
        "inflight": lambda: row_inflight(opts),
        "large": lambda: row_large(opts),
        "sizes": lambda: row_sizes(opts),
        "workers": lambda: row_workers(opts),
        "transport": lambda: row_transport(opts),
        "scale": lambda: row_scale(opts),
    }
    for name in ROWS:
        if name in rows:
            table[name]()
            sys.stdout.flush()
    print("\n== summary (diffbench figure, median over repeats; against the targets)")
    for row, name, shown, target, met in SUMMARY:
        print(f"  {row:<18} {name:<34} {shown:>14}  {target:<22} {met}")
    print(machine("end"))
    print(f"wall {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
