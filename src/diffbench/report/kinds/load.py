"""Report sections of ``diffbench load`` and ``diffbench simulate`` results (both :class:`LoadResult`).

Sections, with every block id prefixed ``load-``:

- ``load-summary``: per result its source and mode, the SLO, the knee and why, the capacity and where it
  came from, request totals and outcomes, and its warnings; a result with no rows (the warm-up failed) or
  one stopped early says so here instead of plotting nothing silently.
- ``load-plots`` (``load-open-plots`` / ``load-closed-plots`` when open- and closed-loop results are mixed,
  since their x axes differ: offered rate vs users): latency p50/p99 from arrival vs load with knee and SLO
  lines; achieved, ok and goodput rates vs offered (y = x) or vs users; outcome stacks per row;
  first-half vs second-half p50 (divergence); client send lag p50/p99. Several results are overlaid, one
  colour per result, each with its own knee line (plots in :mod:`diffbench.report.kinds.load_plots`).
  With one rate (or user count) only, a note and a table of the row replace the plots (one point each).
- ``load-server``: the server's own view of each row when ``load --scrape`` collected it, and the stage
  times the server reported in its responses (:func:`server_blocks`).
- ``load-rows``: per result a table of every plotted number per row, the row warnings and the run's
  conditions (devices and service of a simulation; url, shapes, arrival, seed of a load run).
"""

from __future__ import annotations

import math

from diffbench.load.knee import LoadResult
from diffbench.load.summary import RateSummary
from diffbench.report.document import Block, Facts, Note, Plot, Section, Table
from diffbench.report.kinds import ReportOptions
from diffbench.report.kinds.load_plots import (
    Series,
    divergence_plot,
    divergence_rows,
    knee_x,
    lag_plot,
    latency_plot,
    outcome_kinds,
    outcomes_plot,
    rates_plot,
    row_label,
    row_x,
)
from diffbench.report.loader import LoadedResult

METHOD = "percentiles by linear interpolation (diffbench.core.stats, numpy 'linear')"


def num(v: float | None, digits: int = 4) -> str:
    """A number as the tables show it (``digits`` significant digits; ``"—"`` for None / NaN)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return f"{v:.{digits}g}"


def ms(v: float | None) -> str:
    """Seconds shown in ms (4 significant digits)."""
    return "—" if v is None or not math.isfinite(v) else num(v * 1e3)


def _source(r: LoadedResult) -> str:
    return f"{r.model.source}: {r.label}"


def _kinds(row: RateSummary) -> str:
    """`` (black_image 3, ...)``: the row's invalid answers by sanity kind ("" when none)."""
    return f" ({', '.join(f'{k} {v}' for k, v in row.invalid_kinds.items())})" if row.invalid_kinds else ""


def _flags(res: LoadResult, i: int, row: RateSummary) -> str:
    out = []
    if res.knee.index == i:
        out.append("KNEE")
    if row.unstable:
        out.append("UNSTABLE")
    elif row.saturated:
        out.append("SATURATED")
    return " ".join(out)


def summary_blocks(i: int, r: LoadedResult) -> list[Block]:
    """The knee, capacity and totals of result ``i``, its no-rows / partial notes and its sweep warnings."""
    res: LoadResult = r.model
    if res.capacity_rps is None:
        capacity = "none (no request succeeded)"
    else:
        capacity = (f"{res.capacity_rps:.4g} ok/s ({'saturated' if res.capacity_saturated else 'lower bound'}; "
                    f"from {res.capacity_source or 'the rows'})")
    outcomes = ", ".join(f"{k} {v}" for k, v in res.outcomes.items() if v) or "none"
    items = [("source", f"{res.source}, {res.mode} loop, {len(res.rates)} row(s)"),
             ("SLO", "none" if res.slo_s is None else f"p99 latency from arrival ≤ {res.slo_s:g} s"),
             ("knee", f"{res.knee.method}: {res.knee.reason}"), ("capacity", capacity),
             ("requests", f"{res.n} ({res.n_ok} ok, {res.failed_fraction:.1%} failed)"), ("outcomes", outcomes)]
    if res.partial or res.interrupted:
        items.append(("partial", "yes (interrupted)" if res.interrupted else "yes"))
    blocks: list[Block] = [Facts(id=f"load-result-{i}", title=_source(r), items=items)]
    if not res.rates:
        warm = ", ".join(f"{k} {v}" for k, v in res.warmup_outcomes.items()) or "none"
        blocks.append(Note(id=f"load-empty-{i}", level="warn",
                           text=f"{_source(r)}: nothing was measured, so there is nothing to plot. "
                                f"{res.error or 'The result has no rows.'} (warm-up outcomes: {warm})"))
    elif res.error:
        blocks.append(Note(id=f"load-error-{i}", level="warn", text=f"{_source(r)}: {res.error}"))
    if res.rates and (res.partial or res.interrupted):
        blocks.append(Note(id=f"load-partial-{i}", level="warn",
                           text=f"{_source(r)}: a partial result (the run was stopped early); the last row "
                                "covers a shorter window than planned"))
    for j, w in enumerate(res.warnings):
        blocks.append(Note(id=f"load-warn-{i}-{j}", level="warn", text=f"{r.label}: {w}"))
    return blocks


def conditions_facts(i: int, r: LoadedResult) -> Facts:
    """The run's conditions as stored with result ``i`` (devices, service, url, arrival, seed ...)."""
    items = [("file", str(r.path)), *r.model.conditions.items()]
    return Facts(id=f"load-conditions-{i}", title=f"{_source(r)}: conditions", items=items)


def rows_table(i: int, r: LoadedResult) -> Table:
    """Every plotted number per row of result ``i`` (latencies in ms, rates in req/s)."""
    res: LoadResult = r.model
    kinds = outcome_kinds([(r.label, res)])
    head = ["users" if res.mode == "closed" else "offered (req/s)", "n", "n ok", "sent/s", "ok/s", "goodput/s",
            "completed/s", "failed", "p50 (ms)", "p90 (ms)", "p99 (ms)", "p99.9 (ms)", "p99 send (ms)",
            "lag p50 (ms)", "lag p99 (ms)", "1st half p50 (ms)", "2nd half p50 (ms)",
            *(f"{k}" for k in kinds), "flags"]
    rows = []
    for j, row in enumerate(res.rates):
        la, d = row.latency_from_arrival_s, row.divergence
        rows.append([row_label(row), str(row.n), str(row.n_ok), num(row.sent_rate), num(row.ok_rate),
                     num(row.goodput), num(row.completed_rate), f"{row.failed_fraction:.1%}",
                     ms(la.p50), ms(la.p90), ms(la.p99), ms(la.p999), ms(row.latency_from_send_s.p99),
                     ms(row.lag_s.p50), ms(row.lag_s.p99), ms(d.first_half_p50_s), ms(d.second_half_p50_s),
                     *(str(row.outcomes.get(k, 0)) + (_kinds(row) if k == "invalid_payload" else "")
                       for k in kinds), _flags(res, j, row)])
    knee = knee_x(res)
    cap = (f"latency from intended arrival over ok requests, {METHOD}; rates over each row's window "
           "(ok/s counts successes only; goodput: ok within the SLO / --goodput); lag = sent − intended; halves "
           "split the arrival window (divergence check, — where a half had too few requests). Knee: "
           f"{'none' if knee is None else f'{knee:g}'} ({res.knee.method}).")
    return Table(id=f"load-rows-{i}", title=f"{_source(r)}: rows", headers=head, rows=rows, caption=cap)


def server_blocks(i: int, r: LoadedResult) -> list[Block]:
    """The server's own view of each row of result ``i``, as ``load --scrape`` stored it (``row.server``:
    queue depth and running requests (mean/max of the scrapes inside the row), mean queue wait, request,
    service and stage times (ms, from histogram sum/count deltas over the row), the outcomes the server
    counted) and the per-stage times the server reported in its responses (``row.server_stages_s``, mean over
    ok requests, ms). Empty when the run was not scraped and no response reported stages."""
    res: LoadResult = r.model
    blocks: list[Block] = []
    scraped = [row for row in res.rates if row.server is not None]
    if scraped:
        url = scraped[0].server.url  # type: ignore[union-attr]
        stages = list(dict.fromkeys(st for row in scraped for st in row.server.stages_mean_s))  # type: ignore[union-attr]

        def pair(a: float | None, b: float | None) -> str:
            return "—" if a is None else f"{a:.3g} / {b:.3g}" if b is not None else f"{a:.3g}"

        rows = []
        for row in res.rates:
            sv = row.server
            if sv is None:
                rows.append([row_label(row), ms(row.latency_from_arrival_s.p50 if row.n_ok else None)]
                            + ["—"] * (8 + len(stages)))
                continue
            outs = " · ".join(f"{k} {v}" for k, v in sv.outcomes.items() if v) or "none"
            rows.append([row_label(row), ms(row.latency_from_arrival_s.p50 if row.n_ok else None),
                         pair(sv.queue_depth_mean, sv.queue_depth_max), pair(sv.running_mean, sv.running_max),
                         ms(sv.queue_wait_mean_s), ms(sv.request_mean_s), ms(sv.service_mean_s),
                         *(ms(sv.stages_mean_s.get(st)) for st in stages), str(sv.n), outs,
                         str(sv.scrapes) + (f" ({len(sv.errors)} failed)" if sv.errors else "")])
        blocks.append(Table(
            id=f"load-server-{i}", title=f"{_source(r)}: server side (scraped from {url})",
            headers=["users" if res.mode == "closed" else "offered (req/s)", "client p50 (ms)",
                     "queue depth mean / max", "running mean / max", "queue wait mean (ms)",
                     "request mean (ms)", "service mean (ms)", *(f"{st} mean (ms)" for st in stages),
                     "server n", "server outcomes", "scrapes"], rows=rows,
            caption="the server's /metrics, scraped during each row (load --scrape): queue depth and running "
                    "requests are the mean / max of the scrapes inside the row (requests); times are means "
                    "from histogram sum/count deltas over the row; server n and outcomes are "
                    "diffusion_requests_total deltas (user traffic); — where the server exported nothing"))
    reported = [row for row in res.rates if row.server_stages_s]
    if reported:
        keys = list(dict.fromkeys(k for row in reported for k in row.server_stages_s))
        blocks.append(Table(
            id=f"load-server-stages-{i}", title=f"{_source(r)}: stage times reported by the server",
            headers=["users" if res.mode == "closed" else "offered (req/s)", *(f"{k} (ms)" for k in keys)],
            rows=[[row_label(row), *(ms(row.server_stages_s.get(k)) for k in keys)] for row in reported],
            caption="mean over the ok requests of each row of the stage times the server put in its responses"))
    if any(row.outcomes.get("abandoned", 0) for row in res.rates):
        rows = []
        for row in res.rates:
            sv = row.server
            rows.append([row_label(row), str(row.outcomes.get("abandoned", 0)),
                         "—" if sv is None else str(sv.cancelled_running),
                         ms(sv.cancel_release_mean_s if sv else None),
                         "—" if sv is None or sv.cancelled_s is None else f"{sv.cancelled_s:.4g}"])
        blocks.append(Table(
            id=f"load-abandon-{i}", title=f"{_source(r)}: abandoned requests",
            headers=["users" if res.mode == "closed" else "offered (req/s)", "abandoned", "server cancelled",
                     "release mean (ms)", "GPU·s on abandoned"], rows=rows,
            caption="load --abandon-after: requests given up by their client (connection closed, or video job "
                    "deleted), neither ok nor failed; from --scrape: the generations the server cancelled while "
                    "they ran, its mean time from the cancel to the worker released, and the device seconds "
                    "spent on answers nobody took (diffusion_cancelled_seconds_total); — where not scraped"))
    return blocks


def work_cost_table(i: int, r: LoadedResult) -> Table | None:
    """Each row's start (UTC, from the run's one wall-clock/monotonic pair), its work-normalized throughput
    (megapixel·steps/s, per GPU with ``load --gpus``) and its cost per 1,000 ok outputs (with
    ``--gpu-hour-price``), as :mod:`diffbench.load.workcost` defines them; the columns a result has, None
    when it has none (an older result, or a simulation)."""
    from diffbench.core.workcost import utc_text

    res: LoadResult = r.model
    cols = [("started (UTC)", "started_unix_s"), ("ok outputs", "ok_outputs"),
            ("Mpx·steps/s", "mpx_steps_per_s"), ("Mpx·steps/s per GPU", "mpx_steps_per_s_per_gpu"),
            ("GPUs", "gpus"), ("GPU·s per output", "gpu_s_per_output"), ("cost / 1,000 outputs", "cost_per_1000")]
    cols = [(h, k) for h, k in cols if any(getattr(row, k) is not None for row in res.rates)]
    if not cols:
        return None

    def cell(key: str, v: float | int | None) -> str:
        if v is None:
            return "—"
        if key == "started_unix_s":
            return utc_text(float(v))
        return str(v) if isinstance(v, int) else num(v)

    price = next((row.gpu_hour_price for row in res.rates if row.gpu_hour_price is not None), None)
    cap = ("started: the row's t=0 on the wall clock (ISO 8601 UTC); Mpx·steps/s: width × height × frames × "
           "steps of the ok outputs / 10⁶ per second of the ok window; GPU·s per output: GPUs × window / ok "
           "outputs (the GPUs are paid for the whole window)"
           + (f"; cost: {price:g} per GPU-hour × GPU·s per output × 1000 / 3600" if price is not None else ""))
    return Table(id=f"load-work-{i}", title=f"{_source(r)}: start, work and cost",
                 headers=["users" if res.mode == "closed" else "offered (req/s)", *(h for h, _ in cols)],
                 rows=[[row_label(row), *(cell(k, getattr(row, k)) for _, k in cols)] for row in res.rates],
                 caption=cap)


def quality_table(i: int, r: LoadedResult) -> Table | None:
    """``load --reference``: each row's reference requests scored against the references (PSNR in dB and
    SSIM: median, 10th percentile, worst; the share under the ``psnr:`` gate) and the goodput with the quality
    floors over the scored requests (with its 95 % Clopper-Pearson interval) beside the latency-only goodput
    over all requests; None when no row replayed a reference."""
    res: LoadResult = r.model
    if not any(row.quality is not None for row in res.rates):
        return None

    def db(v: float | None) -> str:
        return "—" if v is None else f"{v:.2f}"

    rows = []
    for row in res.rates:
        q = row.quality
        if q is None:
            rows.append([row_label(row)] + ["—"] * 9)
            continue
        g = q.goodput
        good = "—" if g.fraction is None else (f"{g.n_good}/{g.n} = {g.fraction:.1%}"
                                               + (f" ({g.ci_low:.1%}–{g.ci_high:.1%})"
                                                  if g.ci_low is not None and g.ci_high is not None else ""))
        latency = "—" if row.n_good is None or not row.n else f"{row.n_good}/{row.n} = {row.n_good / row.n:.1%}"
        rows.append([row_label(row), f"{q.n_scored}/{q.n_reference}", db(q.psnr_p50_db), db(q.psnr_p10_db),
                     db(q.psnr_worst_db), "—" if q.ssim_p50 is None else f"{q.ssim_p50:.4f}",
                     "—" if q.ssim_worst is None else f"{q.ssim_worst:.4f}",
                     "—" if q.fraction_under_gate is None else f"{q.fraction_under_gate:.1%} < {q.gate_psnr_db:g} dB",
                     good, latency])
    return Table(id=f"load-quality-{i}", title=f"{_source(r)}: quality under load",
                 headers=["users" if res.mode == "closed" else "offered (req/s)", "scored / sent", "PSNR p50 (dB)",
                          "PSNR p10 (dB)", "PSNR worst (dB)", "SSIM p50", "SSIM worst", "under the gate",
                          "goodput with quality (scored)", "latency goodput (all)"], rows=rows,
                 caption="load --reference: the answers to the replayed reference requests scored against the "
                         "references (worst image of a batch; an identical answer is recorded as 200 dB); "
                         "goodput with quality: scored requests that were ok, within every --goodput time "
                         "constraint and at or above every quality floor (95 % Clopper-Pearson interval); "
                         "latency goodput: every request of the row against the time constraints alone")


def energy_table(i: int, r: LoadedResult) -> Table | None:
    """``load --scrape``: each row's energy from the server's counter (joules over the row and per ok output,
    with the counter it came from); None when no row read a counter."""
    res: LoadResult = r.model
    if not any(row.server is not None and row.server.energy_j is not None for row in res.rates):
        return None
    rows = []
    for row in res.rates:
        sv = row.server
        rows.append([row_label(row), "—" if sv is None or sv.energy_j is None else num(sv.energy_j),
                     "—" if sv is None or sv.energy_per_ok_output_j is None else num(sv.energy_per_ok_output_j),
                     "—" if sv is None else str(sv.energy_source or "—")])
    return Table(id=f"load-energy-{i}", title=f"{_source(r)}: energy",
                 headers=["users" if res.mode == "closed" else "offered (req/s)", "energy (J)", "J per ok output",
                          "counter"], rows=rows,
                 caption="the increase of the server's energy counter over each row (load --scrape): "
                         "diffusion_energy_joules_total (diffbench serve: its generations) or DCGM's "
                         "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ, the whole GPU, idle time included); "
                         "— where the server exported neither")


def row_warnings_table(i: int, r: LoadedResult) -> Table | None:
    lines = [[row_label(row), w] for row in r.model.rates for w in row.warnings]
    if not lines:
        return None
    return Table(id=f"load-rowwarn-{i}", title=f"{_source(r)}: row warnings", headers=["row", "warning"],
                 rows=lines)


def _n_range(series: Series) -> str:
    ns = [row.n_ok for _, res in series for row in res.rates]
    lo, hi = min(ns), max(ns)
    return f"n = {lo}" if lo == hi else f"n = {lo}–{hi}"


def _one_point(prefix: str, series: Series) -> list[Block]:
    """One rate (or user count) only: a chart against the load axis would be one point per line, so the row's
    headline numbers are a table instead, with a note saying why there is no chart."""
    closed = series[0][1].mode == "closed"
    rows = [[label, row_label(row), num(row.ok_rate), num(row.goodput), ms(row.latency_from_arrival_s.p50),
             ms(row.latency_from_arrival_s.p99), str(row.n_ok)] for label, res in series for row in res.rates]
    return [
        Note(id=f"{prefix}-one-point-note",
             text=f"one {'user count' if closed else 'offered rate'} only: charts against the load axis need two "
                  f"or more {'user counts' if closed else 'rates'} (e.g. --rates 2,4,8), so this row is a table"),
        Table(id=f"{prefix}-one-point", title="The one row",
              headers=["result", "users" if closed else "offered (req/s)", "ok/s", "goodput (req/s)",
                       "p50 (ms)", "p99 (ms)", "n ok"], rows=rows,
              caption=f"latency from intended arrival of ok requests, {METHOD}; every number of the row is in "
                      "the rows table below"),
    ]


def plot_blocks(prefix: str, series: Series) -> list[Block]:
    """The plots of results of one mode (``series`` non-empty, every result with rows)."""
    mode = series[0][1].mode
    n = _n_range(series)
    blocks: list[Block] = []
    if len({row_x(row) for _, res in series for row in res.rates}) < 2:
        return _one_point(prefix, series)
    bid = f"{prefix}-latency"
    blocks.append(Plot(id=bid, title="Latency from arrival vs load", figure=latency_plot(bid, series),
                       caption=f"p50 (dashed) and p99 (solid) latency from intended arrival of ok requests, "
                               f"{n} ok requests per row (see the rows table), {METHOD}. Dotted vertical: the "
                               "knee; red dashed: the SLO. Log scale when the values span > 30×."))
    bid = f"{prefix}-rates"
    what = ("achieved (sent/s), ok/s and goodput against the offered rate; grey dashed y = x (a client that "
            "keeps the schedule)" if mode == "open" else "ok/s and goodput against the user count")
    blocks.append(Plot(id=bid, title="Throughput vs load", figure=rates_plot(bid, series),
                       caption=f"{what}; dash-dot: the capacity estimate (highest ok rate). Only ok requests "
                               "count as throughput."))
    bid = f"{prefix}-outcomes"
    blocks.append(Plot(id=bid, title="Outcomes per row", figure=outcomes_plot(bid, series),
                       caption="Requests per row by outcome, stacked (counts in the rows table)."))
    checked = [(label, res) for label, res in series if divergence_rows(res)]
    if checked:
        bid = f"{prefix}-divergence"
        blocks.append(Plot(id=bid, title="First half vs second half of each window",
                           figure=divergence_plot(bid, checked),
                           caption="p50 latency from arrival of requests arriving in the first and in the "
                                   "second half of each row's window; a growing second half (red cross: "
                                   "flagged unstable) means the queue grows with the test's duration."))
    else:
        reasons = sorted({row.divergence.reason for _, res in series for row in res.rates})
        blocks.append(Note(id=f"{prefix}-divergence-note",
                           text="first-half vs second-half latency: not checked in any row ("
                                + "; ".join(reasons) + ")"))
    has_lag = [any(row.lag_s.n and row.lag_s.max > 0 for row in res.rates) for _, res in series]
    lagged = [s for s, lag in zip(series, has_lag, strict=True) if lag]
    if lagged:
        bid = f"{prefix}-lag"
        blocks.append(Plot(id=bid, title="Client send lag", figure=lag_plot(bid, lagged),
                           caption=f"send lag (actual send − intended arrival) p50 and p99 in ms over the sent "
                                   f"requests of each row, {METHOD}; red dashed: the 10 ms warning."))
    if len(lagged) < len(series):
        names = ", ".join(label for (label, _), lag in zip(series, has_lag, strict=True) if not lag)
        blocks.append(Note(id=f"{prefix}-lag-note",
                           text=f"send lag is 0 in every row of {names} (a simulated client is never late), "
                                "so it is not plotted"))
    return blocks


def build(results: list[LoadedResult], opts: ReportOptions) -> list[Section]:
    """Sections of one or several load / simulate results (overlaid; see the module docstring)."""
    summary: list[Block] = []
    for i, r in enumerate(results):
        summary += summary_blocks(i, r)
    sources = sorted({r.model.source for r in results})
    sections = [Section(id="load-summary", title=f"{' + '.join(sources)}: knee and capacity", blocks=summary)]
    with_rows = [(i, r) for i, r in enumerate(results) if r.model.rates]
    modes = [m for m in ("open", "closed") if any(r.model.mode == m for _, r in with_rows)]
    for mode in modes:
        series = [(r.label, r.model) for _, r in with_rows if r.model.mode == mode]
        prefix = "load" if len(modes) == 1 else f"load-{mode}"
        sections.append(Section(id=f"{prefix}-plots", title=f"{' + '.join(sources)}: {mode} loop",
                                blocks=plot_blocks(prefix, series)))
    server = [b for i, r in enumerate(results) for b in server_blocks(i, r)]
    if server:
        sections.append(Section(id="load-server", title=f"{' + '.join(sources)}: server side", blocks=server))
    tables: list[Block] = []
    for i, r in enumerate(results):
        if r.model.rates:
            tables.append(rows_table(i, r))
            for extra_table in (work_cost_table(i, r), quality_table(i, r), energy_table(i, r)):
                if extra_table is not None:
                    tables.append(extra_table)
            extra = row_warnings_table(i, r)
            if extra is not None:
                tables.append(extra)
        tables.append(conditions_facts(i, r))
    sections.append(Section(id="load-rows", title=f"{' + '.join(sources)}: every row and the conditions",
                            blocks=tables))
    return sections
