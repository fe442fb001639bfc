"""``diffbench load --scrape URL``: the server's own view of each rate row, from its ``/metrics``.

A :class:`MetricsScraper` fetches the service's ``/metrics`` every ``interval_s`` (1 s) on its own daemon
thread with urllib (the HTTP round trip and the parse never run on the load generator's event loop), and
takes one *boundary* scrape when a run begins and one when it ends (:class:`ScrapeMonitor`, the sweep's
row monitor). Between two boundaries, per row (:class:`ServerSide`):

- queue depth and running requests: mean and max of the periodic scrapes taken inside the row (gauges);
- queue wait: Δ``diffusion_queue_wait_seconds_sum`` / Δ``_count`` (mean, seconds);
- stage times: per stage, Δsum / Δcount of ``diffusion_stage_duration_seconds`` (text_encode, denoise,
  vae_decode, …), summed over shapes; ``service_mean_s`` is the sum of the stage means;
- request time: Δsum / Δcount of ``diffusion_request_duration_seconds`` (user traffic; arrival to response
  ready, measured by the server);
- outcomes: Δ``diffusion_requests_total`` per ``outcome`` (user traffic): the same requests the client
  counted, in the server's outcome names;
- abandoned work: Δ``diffusion_cancelled_seconds_total`` (all reasons: the device seconds spent on requests
  whose answer nobody took, the GPU·s of the row's abandoned requests) and the mean time from a cancel to
  the worker released, Δsum / Δcount of ``diffusion_cancel_release_seconds`` (None where the server
  exports neither);
- energy: Δ of the server's energy counter over the row, from the first of: ``diffusion_energy_joules_total``
  (diffbench's ``serve``: the energy its device used during generations, joules), or DCGM's
  ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` where the scraped text carries it (dcgm-exporter's default counter,
  "Total energy consumption since boot (in mJ)",
  https://github.com/NVIDIA/dcgm-exporter/blob/main/etc/default-counters.csv: millijoules, the whole GPU,
  idle time and other processes included), summed over GPUs; the row then reports joules per ok output
  (:func:`~diffbench.load.scrape_rows.attach`). Neither exported: ``energy_source`` says "not available".
- recompiles: Δ``diffusion_compile_recompiles`` (torch.compile compilations after the service's warm-up): a
  rise is a cold start inside the row (:mod:`diffbench.load.coldstart`); None where not exported.

The end boundary waits (up to :data:`SETTLE_S`) until the server has counted at least as many requests as
the client got an HTTP answer for: a server counts a request after its answer is sent, so a scrape taken
the instant the last answer arrives could miss it. In a row with abandoned requests it also waits until
the server runs nothing (``diffusion_requests_running`` 0): a cancelled generation's seconds are counted
when its worker is released, up to one denoising step after the disconnect.

Mismatch (:func:`mismatch_warning`): the client's mean latency (from intended arrival, ok requests) is
the mean time outside the server plus the server's mean request time (both means over the same requests,
so the split is exact, unlike a p50 against a mean). When the outside part is more than
:data:`MISMATCH_SHARE` of the client's mean, more than :data:`MISMATCH_FACTOR` × the server's mean queue
wait and more than :data:`MISMATCH_FLOOR_S`, the time is spent in front of the server (a proxy, a load
balancer's queue, the network, or the client itself): a warning on the row and in the summary.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel

from diffbench.core.records import RequestRecord
from diffbench.errors import UsageError
from diffbench.metrics.names import OUTCOMES, STAGES
from diffbench.metrics.scrape import Scrape, fetch_metrics, metrics_url

ENERGY_COUNTERS: tuple[tuple[str, float], ...] = (
    ("diffusion_energy_joules_total", 1.0),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 1e-3),  # mJ (dcgm-exporter etc/default-counters.csv)
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total", 1e-3),  # the same counter as a text parser may name it
)
"""Energy counters a scrape is read for, in order of preference, with the factor to joules."""
NO_ENERGY = ("not available: the scraped endpoint exports neither diffusion_energy_joules_total (diffbench serve "
             "where the device's counter is readable) nor DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
SETTLE_S = 2.0
SETTLE_POLL_S = 0.02
MISMATCH_SHARE = 0.25
MISMATCH_FACTOR = 2.0
MISMATCH_FLOOR_S = 0.010
MAX_ERRORS = 5


class ServerSide(BaseModel):
    """The server's view of one row (times in seconds; None where the server exported nothing)."""

    url: str
    scrapes: int
    """Periodic scrapes taken inside the row (the two boundary scrapes not counted)."""
    queue_depth_mean: float | None = None
    queue_depth_max: float | None = None
    running_mean: float | None = None
    running_max: float | None = None
    queue_wait_mean_s: float | None = None
    request_mean_s: float | None = None
    service_mean_s: float | None = None
    stages_mean_s: dict[str, float] = {}
    outcomes: dict[str, int] = {}
    cancelled_s: float | None = None
    """Device seconds spent on generations nobody took an answer for (client gone, job deleted): the GPU·s
    of the row's abandoned requests (None: the server does not export ``diffusion_cancelled_seconds_total``)."""
    cancel_release_mean_s: float | None = None
    """Mean seconds from the cancel of a running generation to its worker released (None: none was cancelled
    while running, or not exported)."""
    cancelled_running: int = 0
    """Generations cancelled while running on the device (Δcount of ``diffusion_cancel_release_seconds``)."""
    n: int = 0
    """Requests the server counted in the row (sum of ``outcomes``)."""
    energy_j: float | None = None
    """Joules the server's energy counter rose by over the row (None: no counter exported)."""
    energy_source: str | None = None
    """The counter ``energy_j`` comes from (:data:`ENERGY_COUNTERS`), or ``"not available: …"``."""
    energy_per_ok_output_j: float | None = None
    """``energy_j`` ÷ the outputs of the row's ok requests (images or videos; set by
    :func:`~diffbench.load.scrape_rows.attach`); None without energy or without an ok request."""
    errors: list[str] = []
    """Scrapes that failed during the row (at most a few texts)."""
    recompiles: int | None = None
    """Compilations the server counted during the row (Δ``diffusion_compile_recompiles``); None: not exported."""


def _delta(a: Scrape, b: Scrape, sample: str, by: tuple[str, ...] = (), **want: str | None) -> dict[tuple[str, ...], float]:
    before, after = a.grouped(sample, by, **want), b.grouped(sample, by, **want)
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def _mean(a: Scrape, b: Scrape, family: str, by: tuple[str, ...] = (), **want: str | None) -> dict[tuple[str, ...], float]:
    sums = _delta(a, b, family + "_sum", by, **want)
    counts = _delta(a, b, family + "_count", by, **want)
    return {k: sums.get(k, 0.0) / c for k, c in counts.items() if c > 0}


def _user_requests(s: Scrape) -> float:
    return s.total("diffusion_requests_total", traffic="user") or 0.0


def energy_delta(begin: Scrape, end: Scrape) -> tuple[float | None, str]:
    """``(joules, counter name)`` the first counter of :data:`ENERGY_COUNTERS` both scrapes carry rose by
    between them (summed over its series: GPUs, hosts), or ``(None, "not available: …")``."""
    for name, to_joules in ENERGY_COUNTERS:
        if begin.has(name) and end.has(name):
            dcgm = name.startswith("DCGM_")  # named as dcgm-exporter writes it, whatever the parser appended
            return sum(_delta(begin, end, name).values()) * to_joules, name.removesuffix("_total") if dcgm else name
    return None, NO_ENERGY


RECOMPILES = ("diffusion_compile_recompiles_total", "diffusion_compile_recompiles")
"""The recompile counter as exposed (a counter's ``_total`` sample) or as a parser may name it."""


def recompile_delta(begin: Scrape, end: Scrape) -> int | None:
    """Compilations counted between the two scrapes (summed over models), None when neither carries the counter."""
    for name in RECOMPILES:
        if begin.has(name) or end.has(name):
            return round(sum(_delta(begin, end, name).values()))
    return None


def server_side(begin: Scrape, end: Scrape, periodic: list[Scrape], url: str, errors: list[str]) -> ServerSide:
    """The :class:`ServerSide` of a row from its boundary scrapes and the periodic ones in between."""
    def gauge(name: str) -> list[float]:
        return [v for s in periodic if (v := s.total(name)) is not None]

    depth, running = gauge("diffusion_queue_depth"), gauge("diffusion_requests_running")
    qw = _mean(begin, end, "diffusion_queue_wait_seconds").get(())
    req = _mean(begin, end, "diffusion_request_duration_seconds", traffic="user").get(())
    stages = {k[0]: v for k, v in _mean(begin, end, "diffusion_stage_duration_seconds", ("stage",)).items()}
    stages = {s: stages[s] for s in (*STAGES, *sorted(set(stages) - set(STAGES))) if s in stages}
    outs = {k[0]: round(v) for k, v in _delta(begin, end, "diffusion_requests_total", ("outcome",),
                                               traffic="user").items()}
    outs = {o: outs.get(o, 0) for o in OUTCOMES} | {o: v for o, v in outs.items() if o not in OUTCOMES}
    wasted = _delta(begin, end, "diffusion_cancelled_seconds_total").get(())
    release = _mean(begin, end, "diffusion_cancel_release_seconds").get(())
    released = _delta(begin, end, "diffusion_cancel_release_seconds_count").get((), 0.0)
    energy_j, energy_source = energy_delta(begin, end)
    return ServerSide(
        recompiles=recompile_delta(begin, end),
        cancelled_s=wasted, cancel_release_mean_s=release, cancelled_running=round(released),
        url=url, scrapes=len(periodic),
        queue_depth_mean=sum(depth) / len(depth) if depth else None, queue_depth_max=max(depth, default=None),
        running_mean=sum(running) / len(running) if running else None, running_max=max(running, default=None),
        queue_wait_mean_s=qw, request_mean_s=req, service_mean_s=sum(stages.values()) if stages else None,
        stages_mean_s=stages, outcomes=outs, n=sum(outs.values()), errors=errors[:MAX_ERRORS],
        energy_j=energy_j, energy_source=energy_source,
    )


def mismatch_warning(client_mean_s: float | None, lag_mean_s: float | None, server: ServerSide) -> str | None:
    """The warning when the client's latency is not explained by the server (see the module docstring),
    else None. ``client_mean_s``: mean latency from intended arrival of the row's ok requests;
    ``lag_mean_s``: the client's own mean lag (sent − intended)."""
    if client_mean_s is None or client_mean_s != client_mean_s:
        return None
    inside = server.request_mean_s
    if inside is None and server.service_mean_s is not None:
        inside = server.service_mean_s + (server.queue_wait_mean_s or 0.0)
    if inside is None:
        return None
    outside = client_mean_s - inside
    qwait = server.queue_wait_mean_s or 0.0
    if outside > MISMATCH_SHARE * client_mean_s and outside > MISMATCH_FACTOR * qwait and outside > MISMATCH_FLOOR_S:
        lag = f", of which {lag_mean_s * 1e3:.3g} ms is the client's own send lag" if lag_mean_s else ""
        return (f"client mean latency {client_mean_s * 1e3:.3g} ms but the server's request time is "
                f"{inside * 1e3:.3g} ms "
                f"with a queue wait of {qwait * 1e3:.3g} ms: {outside * 1e3:.3g} ms per request is spent in front "
                f"of the server{lag} — a queue outside it (proxy, load balancer, network or the client); the "
                "server's metrics will not show this latency")
    return None


def coverage_warning(client_ok: int, server: ServerSide) -> str | None:
    """The warning when the scraped endpoint did not count the row's successful requests: none of them (the
    URL is another service, or the probe's endpoint) or only part (one replica behind a balancer), so the
    server columns describe other traffic. None when it counted them all, or when the row's scrapes failed
    (their errors say so)."""
    if client_ok <= 0 or server.errors and not server.outcomes:
        return None
    counted = int(server.outcomes.get("ok", 0))
    if counted >= client_ok:
        return None
    what = ("none" if counted == 0 else f"only {counted}")
    return (f"the scraped endpoint {server.url} counted {what} of the {client_ok} requests this row got ok "
            "answers for: it is not (all of) the service under load (another service, the probe's endpoint, or "
            "one replica behind a balancer); its columns describe other traffic")


@dataclass
class _Window:
    label: str
    begin: Scrape
    periodic: list[Scrape] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    view: ServerSide | None = None


class MetricsScraper:
    """Scrape ``url`` every ``interval_s`` on a daemon thread; :meth:`begin_row` / :meth:`end_row` mark the
    rows (both scrape synchronously in the caller's thread, outside any measured window).

    Args:
        url: the service's ``/metrics`` (a base URL gets ``/metrics`` appended).
        interval_s: seconds between periodic scrapes (> 0).
        timeout_s: per scrape.
        fetch: the fetch function (tests); ``fetch(url) -> Scrape``.

    Raises:
        UsageError: a bad interval. (:meth:`check` raises InputError for a bad URL or answer.)
    """

    def __init__(self, url: str, *, interval_s: float = 1.0, timeout_s: float = 5.0,
                 fetch: Callable[[str], Scrape] | None = None) -> None:
        if not (interval_s > 0 and interval_s < 3600):
            raise UsageError(f"--scrape-interval must be > 0 and < 3600 seconds, got {interval_s:g}")
        self.url = metrics_url(url, "--scrape")
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._fetch = fetch or (lambda u: fetch_metrics(u, option="--scrape", timeout_s=timeout_s))
        self._lock = threading.Lock()
        self._current: _Window | None = None
        self.windows: list[_Window] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> Scrape:
        """One scrape now, so a wrong URL fails before the run (InputError, exit 2)."""
        return self._fetch(self.url)

    def start(self) -> None:
        """Start the periodic thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="diffbench-scrape", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the periodic thread (waits at most one scrape timeout)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + self.interval_s + 1)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                s = self._fetch(self.url)
                err = None
            except Exception as exc:  # a failed scrape is data, the run continues
                s, err = None, str(exc)
            with self._lock:
                w = self._current
                if w is None:
                    continue
                if s is not None:
                    w.periodic.append(s)
                elif len(w.errors) < MAX_ERRORS:
                    w.errors.append(err or "scrape failed")

    def _safe(self) -> tuple[Scrape | None, str | None]:
        try:
            return self._fetch(self.url), None
        except Exception as exc:
            return None, str(exc)

    def begin_row(self, label: str) -> None:
        """Boundary scrape and a new window named ``label`` (the sweep monitor's label)."""
        s, err = self._safe()
        with self._lock:
            if s is None:
                self._current = None
                self.windows.append(_Window(label, Scrape([]), errors=[f"begin: {err}"]))
                return
            self._current = _Window(label, s)
            self.windows.append(self._current)

    def end_row(self, answered: int, abandoned: int = 0) -> None:
        """Close the window: scrape until the server counted ``answered`` requests (the client's records
        with an HTTP status) and, when the row ``abandoned`` any, runs nothing, or :data:`SETTLE_S` passed,
        and compute its :class:`ServerSide`."""
        with self._lock:
            w, self._current = self._current, None
        if w is None:
            return
        deadline = time.monotonic() + SETTLE_S
        while True:
            s, err = self._safe()
            if s is None:
                w.errors.append(f"end: {err}")
                return
            idle = not abandoned or not s.total("diffusion_requests_running")
            counted = _user_requests(s) - _user_requests(w.begin) >= answered
            if (counted and idle) or time.monotonic() > deadline:
                break
            time.sleep(SETTLE_POLL_S)
        w.view = server_side(w.begin, s, w.periodic, self.url, w.errors)


class ScrapeMonitor:
    """A sweep row monitor that marks rows on a :class:`MetricsScraper` and forwards everything to
    ``inner`` (the live progress line, or None). ``on_sent`` is the inner hook itself (or a no-op);
    ``on_record`` adds one counter increment per record."""

    def __init__(self, scraper: MetricsScraper, inner: object | None = None) -> None:
        self.scraper = scraper
        self.inner = inner
        self.on_sent: Callable[[float], None] = getattr(inner, "on_sent", None) or _noop
        self._inner_record = getattr(inner, "on_record", None)
        self._answered = 0
        self._abandoned = 0

    def begin(self, label: str, planned: int | None, window_s: float) -> None:
        self.scraper.begin_row(label)
        self._answered = 0
        self._abandoned = 0
        if self.inner is not None:
            self.inner.begin(label, planned, window_s)  # type: ignore[attr-defined]

    def on_record(self, rec: RequestRecord) -> None:
        if rec.status is not None:
            self._answered += 1
        if rec.outcome == "abandoned":
            self._abandoned += 1
        if self._inner_record is not None:
            self._inner_record(rec)

    def end(self) -> None:
        if self.inner is not None:
            self.inner.end()  # type: ignore[attr-defined]
        self.scraper.end_row(self._answered, self._abandoned)


def _noop(_: float) -> None:
    pass


__all__ = ["ENERGY_COUNTERS", "MetricsScraper", "ScrapeMonitor", "ServerSide", "coverage_warning", "energy_delta",
           "mismatch_warning", "server_side"]
