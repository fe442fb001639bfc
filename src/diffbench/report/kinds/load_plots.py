"""The plots of a load / simulate report (:class:`~diffbench.load.knee.LoadResult`), one or several overlaid.

Every plot takes ``series``: ``(label, result)`` pairs of one mode (open loop: x = offered rate in req/s;
closed loop: x = user count), drawn in :data:`~diffbench.report.figures.COLORS` order, one colour per
result. Numbers are the result's own (nothing is recomputed): latency percentiles are the stored
:class:`~diffbench.core.stats.Summary` values (linear interpolation, ``diffbench.core.stats``), rates the
stored ok / sent / goodput rates.

Reference lines carry a matplotlib ``gid`` (written as the SVG element id, so tests find them in the figure
and on the page): ``<block>-knee-<i>`` (vertical, at the knee of result ``i``: its ``knee.offered_rate``, or
``knee.users`` in a closed loop), ``<block>-slo-<j>`` (horizontal, at ``slo_s`` seconds),
``<block>-identity`` (y = x), ``<block>-capacity-<i>``. Data series are ``<block>-<what>-<i>``
(``p50``, ``p99``, ``sent``, ``ok``, ``goodput``, ``half1``, ``half2``, ``lagp50``, ``lagp99``) and the
outcome bars ``<block>-<i>-<outcome>-<row>``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from diffbench.core.records import OUTCOMES
from diffbench.load.knee import LoadResult
from diffbench.load.summary import LAG_P99_WARN_S, RateSummary
from diffbench.report.figures import COLORS, new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Series = Sequence[tuple[str, LoadResult]]

OUTCOME_COLORS = {
    "ok": "#2ca02c", "rejected": "#ff7f0e", "timeout": "#d62728", "http_error": "#9467bd",
    "connection_error": "#8c564b", "invalid_payload": "#e377c2", "cancelled": "#7f7f7f", "abandoned": "#bcbd22",
}
SLO_COLOR = "#d62728"


def row_x(row: RateSummary) -> float:
    """The x of a row: user count (closed loop), else offered rate in req/s (a burst: its sent rate)."""
    if row.mode == "closed":
        return float(row.users or 0)
    return row.offered_rate if row.offered_rate is not None else row.sent_rate


def row_label(row: RateSummary) -> str:
    """``"1.2 req/s"``, ``"8 users"`` or ``"burst of 40"`` (the row names of the table and the bars)."""
    if row.schedule == "burst":
        return f"burst of {row.n}"
    return f"{row.users} users" if row.mode == "closed" else f"{row_x(row):g} req/s"


def knee_x(result: LoadResult) -> float | None:
    """Where the knee line goes: ``knee.users`` (closed loop) or ``knee.offered_rate`` (req/s); None when
    the result has no knee."""
    k = result.knee
    if k.index is None or not result.rates:
        return None
    if result.mode == "closed":
        return float(k.users) if k.users is not None else row_x(result.rates[k.index])
    return k.offered_rate if k.offered_rate is not None else row_x(result.rates[k.index])


def x_label(mode: str) -> str:
    return "users (closed loop)" if mode == "closed" else "offered rate (req/s)"


def _finite(v: float | None) -> bool:
    return v is not None and math.isfinite(v)


def _log_if_spread(ax: Axes, values: Sequence[float], spread: float = 30.0) -> None:
    pos = [v for v in values if _finite(v) and v > 0]
    if pos and max(pos) / min(pos) > spread:
        ax.set_yscale("log")


def _knee_lines(ax: Axes, bid: str, series: Series) -> None:
    for i, (label, res) in enumerate(series):
        x = knee_x(res)
        if x is None:
            continue
        ax.axvline(x, color=COLORS[i % len(COLORS)], ls=":", lw=1.6, gid=f"{bid}-knee-{i}",
                   label=f"knee {label} ({x:g})" if len(series) > 1 else f"knee ({x:g})")


def latency_plot(bid: str, series: Series) -> Figure:
    """p50 and p99 latency from intended arrival (s, ok requests) against load, knee and SLO lines."""
    fig = new_figure(8.4, 3.1)
    ax = fig.axes[0]
    values: list[float] = []
    for i, (label, res) in enumerate(series):
        c = COLORS[i % len(COLORS)]
        rows = [r for r in res.rates if r.latency_from_arrival_s.n > 0]
        xs = [row_x(r) for r in rows]
        p50 = [r.latency_from_arrival_s.p50 for r in rows]
        p99 = [r.latency_from_arrival_s.p99 for r in rows]
        values += p50 + p99
        ax.plot(xs, p99, "o-", color=c, gid=f"{bid}-p99-{i}", label=f"{label} p99")
        ax.plot(xs, p50, "s--", color=c, alpha=0.75, gid=f"{bid}-p50-{i}", label=f"{label} p50")
    slos = sorted({res.slo_s for _, res in series if res.slo_s is not None})
    for j, slo in enumerate(slos):
        ax.axhline(slo, color=SLO_COLOR, ls="--", lw=1.2, gid=f"{bid}-slo-{j}", label=f"SLO p99 ≤ {slo:g} s")
        values.append(slo)
    _knee_lines(ax, bid, series)
    _log_if_spread(ax, values)
    ax.set_xlabel(x_label(series[0][1].mode))
    ax.set_ylabel("latency from arrival (s)")
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def rates_plot(bid: str, series: Series) -> Figure:
    """Achieved (sent) rate, ok rate and goodput (req/s) against the offered rate with y = x (open loop),
    or ok rate and goodput against users (closed loop), with each result's capacity and knee."""
    fig = new_figure(8.4, 3.1)
    ax = fig.axes[0]
    closed = series[0][1].mode == "closed"
    top = 0.0
    for i, (label, res) in enumerate(series):
        c = COLORS[i % len(COLORS)]
        xs = [row_x(r) for r in res.rates]
        if not closed:
            ax.plot(xs, [r.sent_rate for r in res.rates], "o-", color=c, gid=f"{bid}-sent-{i}",
                    label=f"{label} achieved (sent/s)")
        ax.plot(xs, [r.ok_rate for r in res.rates], "^-", color=c, alpha=0.85, gid=f"{bid}-ok-{i}",
                label=f"{label} ok/s")
        ax.plot(xs, [r.goodput for r in res.rates], "v:", color=c, alpha=0.7, gid=f"{bid}-goodput-{i}",
                label=f"{label} goodput")
        if res.capacity_rps is not None:
            kind = "saturated" if res.capacity_saturated else "lower bound"
            ax.axhline(res.capacity_rps, color=c, ls="-.", lw=0.9, alpha=0.6, gid=f"{bid}-capacity-{i}",
                       label=f"{label} capacity {res.capacity_rps:.4g} ok/s ({kind})")
        top = max([top, *xs] if not closed else [top])
    if not closed and top > 0:
        ax.plot([0, top], [0, top], color="#7f7f7f", lw=1, ls="--", gid=f"{bid}-identity", label="y = x")
    _knee_lines(ax, bid, series)
    ax.set_xlabel(x_label(series[0][1].mode))
    ax.set_ylabel("requests per second")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def outcome_kinds(series: Series) -> list[str]:
    """The outcome kinds with a non-zero count in any row (in :data:`OUTCOMES` order)."""
    return [k for k in OUTCOMES if any(r.outcomes.get(k, 0) for _, res in series for r in res.rates)]


def outcomes_plot(bid: str, series: Series) -> Figure:
    """Stacked outcome counts per row (one panel per result); ``ok`` at the bottom."""
    kinds = outcome_kinds(series)
    fig = new_figure(8.4, 1.0 + 2.3 * len(series), nrows=len(series))
    for i, (ax, (label, res)) in enumerate(zip(fig.axes, series, strict=True)):
        pos = list(range(len(res.rates)))
        bottom = [0] * len(res.rates)
        for k in kinds:
            h = [r.outcomes.get(k, 0) for r in res.rates]
            bars = ax.bar(pos, h, bottom=bottom, color=OUTCOME_COLORS.get(k, "#17becf"),
                          label=k if i == 0 else None, width=0.7)
            for j, patch in enumerate(bars.patches):
                patch.set_gid(f"{bid}-{i}-{k}-{j}")
            bottom = [b + v for b, v in zip(bottom, h, strict=True)]
        ax.set_xticks(pos, [row_label(r) for r in res.rates], rotation=30 if len(pos) > 6 else 0, fontsize=8)
        ax.set_ylabel("requests")
        ax.set_title(label, fontsize=9, loc="left")
        ax.grid(axis="x", visible=False)
    fig.axes[0].legend(fontsize=7.5, ncols=min(len(kinds), 4), loc="upper left")
    return fig


def divergence_rows(res: LoadResult) -> list[RateSummary]:
    """Rows whose first/second-half comparison was made (``divergence.checked``)."""
    return [r for r in res.rates if r.divergence.checked and _finite(r.divergence.first_half_p50_s)
            and _finite(r.divergence.second_half_p50_s)]


def divergence_plot(bid: str, series: Series) -> Figure:
    """p50 latency from arrival (s) of the first and of the second half of each row's window; an unstable
    row (second half ≥ 1.5 × the first and growing, :func:`~diffbench.load.summary.detect_divergence`) is
    marked with a red cross."""
    fig = new_figure(8.4, 3.1)
    ax = fig.axes[0]
    values: list[float] = []
    for i, (label, res) in enumerate(series):
        c = COLORS[i % len(COLORS)]
        rows = divergence_rows(res)
        xs = [row_x(r) for r in rows]
        a = [float(r.divergence.first_half_p50_s or 0.0) for r in rows]
        b = [float(r.divergence.second_half_p50_s or 0.0) for r in rows]
        values += a + b
        ax.plot(xs, a, "o-", color=c, gid=f"{bid}-half1-{i}", label=f"{label} first half p50")
        ax.plot(xs, b, "s--", color=c, gid=f"{bid}-half2-{i}", label=f"{label} second half p50")
        bad = [(x, v) for x, v, r in zip(xs, b, rows, strict=True) if r.divergence.unstable]
        if bad:
            ax.plot([x for x, _ in bad], [v for _, v in bad], "x", color=SLO_COLOR, ms=10, mew=2,
                    gid=f"{bid}-unstable-{i}", label=f"{label} unstable")
    _log_if_spread(ax, values)
    ax.set_xlabel(x_label(series[0][1].mode))
    ax.set_ylabel("p50 latency from arrival (s)")
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def lag_plot(bid: str, series: Series) -> Figure:
    """Client send lag (sent − intended, ms) p50 and p99 per row, with the 10 ms warning line."""
    fig = new_figure(8.4, 3.0)
    ax = fig.axes[0]
    for i, (label, res) in enumerate(series):
        c = COLORS[i % len(COLORS)]
        rows = [r for r in res.rates if r.lag_s.n > 0]
        xs = [row_x(r) for r in rows]
        ax.plot(xs, [r.lag_s.p99 * 1e3 for r in rows], "o-", color=c, gid=f"{bid}-lagp99-{i}",
                label=f"{label} lag p99")
        ax.plot(xs, [r.lag_s.p50 * 1e3 for r in rows], "s--", color=c, alpha=0.75, gid=f"{bid}-lagp50-{i}",
                label=f"{label} lag p50")
    ax.axhline(LAG_P99_WARN_S * 1e3, color=SLO_COLOR, ls="--", lw=1, gid=f"{bid}-lagwarn",
               label=f"warning: p99 > {LAG_P99_WARN_S * 1e3:g} ms")
    ax.set_xlabel(x_label(series[0][1].mode))
    ax.set_ylabel("send lag (ms)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


__all__ = [
    "OUTCOME_COLORS",
    "divergence_plot",
    "divergence_rows",
    "knee_x",
    "lag_plot",
    "latency_plot",
    "outcome_kinds",
    "outcomes_plot",
    "rates_plot",
    "row_label",
    "row_x",
    "x_label",
]
