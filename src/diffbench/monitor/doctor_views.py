"""What ``diffbench doctor`` reads the metrics through: one or two saved/fetched scrapes, or PromQL.

Both views answer the same questions, so every check is written once:

- :meth:`hist_mean` — mean of a histogram per label group: Δ``_sum`` / Δ``_count`` between two scrapes,
  ``_sum`` / ``_count`` totals of one scrape, ``sum by (...) (increase(x_sum[w])) / sum by (...)
  (increase(x_count[w]))`` on Prometheus (aggregate numerator and denominator, then divide:
  https://prometheus.io/docs/practices/rules/);
- :meth:`hist_quantile` — ``histogram_quantile`` over all groups (linear interpolation inside the bucket, as
  Prometheus does);
- :meth:`delta` — a counter's increase (Δ, total, or ``increase(x_total[w])``);
- :meth:`gauge` — a gauge's value now (``peak=True``: the largest value seen, ``max_over_time`` on
  Prometheus, the largest of the scrapes otherwise);
- :meth:`info` — the label sets of an ``*_info`` gauge whose value is 1.

Label filters (``want``) match a label only where the series carries it (an older exporter without
``traffic`` is not filtered out): on Prometheus ``label=~"value|"``, which also matches an absent label.
Every family name passed in must be in :data:`diffbench.metrics.names.METRICS`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from diffbench.metrics import names
from diffbench.metrics.scrape import PromQuery, Scrape

Key = tuple[str, ...]


def _check_name(family: str) -> names.MetricSpec:
    return names.spec(family)  # KeyError: a programming error, never user input


class MetricsView(Protocol):
    """The questions the checks ask (see the module docstring)."""

    basis: str
    """One sentence saying what the numbers cover (deltas between two scrapes, totals, a PromQL window)."""

    def hist_mean(self, family: str, by: Sequence[str], **want: str | None) -> dict[Key, tuple[float, float]]:
        """Per group: (mean in the family's unit, observation count); groups without observations omitted."""
        ...

    def hist_quantile(self, family: str, q: float, **want: str | None) -> float | None: ...

    def delta(self, family: str, by: Sequence[str], **want: str | None) -> dict[Key, float]: ...

    def gauge(self, family: str, by: Sequence[str], *, peak: bool = False, **want: str | None) -> dict[Key, float]: ...

    def info(self, family: str) -> list[dict[str, str]]: ...


def interpolate_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Prometheus's ``histogram_quantile``: ``buckets`` are (upper edge, cumulative count) with ``+Inf``
    last; the rank ``q × total`` is located and interpolated linearly inside its bucket (lower edge 0 for
    the first). A rank in the ``+Inf`` bucket returns the largest finite edge. None without observations."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    lo_edge, lo_count = 0.0, 0.0
    for edge, count in buckets:
        if count >= rank:
            if math.isinf(edge):
                return lo_edge
            if count == lo_count:
                return edge
            return lo_edge + (edge - lo_edge) * (rank - lo_count) / (count - lo_count)
        lo_edge, lo_count = edge, count
    return lo_edge


class ScrapeView:
    """Counters and histograms as deltas between the first and last scrape (one scrape: totals since the
    exporter started); gauges from the last scrape (``peak``: the largest of all scrapes)."""

    def __init__(self, scrapes: Sequence[Scrape]) -> None:
        if not scrapes:
            raise ValueError("ScrapeView needs at least one scrape")
        self.scrapes = list(scrapes)
        self.after = self.scrapes[-1]
        self.before = self.scrapes[0] if len(self.scrapes) > 1 else None
        if self.before is None:
            self.basis = (f"one scrape ({self.after.source}): counters and histograms are totals since the "
                          "exporter started, not a recent window; give two scrapes (before/after) for deltas")
        else:
            span = (self.after.time_s - self.before.time_s
                    if self.after.time_s is not None and self.before.time_s is not None else None)
            self.basis = ("deltas between two scrapes" + (f" {span:.0f} s apart" if span is not None else "")
                          + f" ({self.before.source} → {self.after.source})")

    def _delta_samples(self, sample: str, by: Sequence[str], want: dict[str, str | None]) -> dict[Key, float]:
        after = self.after.grouped(sample, by, **want)
        if self.before is None:
            return after
        before = self.before.grouped(sample, by, **want)
        out = {}
        for k, v in after.items():
            d = v - before.get(k, 0.0)
            out[k] = v if d < 0 else d  # a counter that went down: the exporter restarted, take its total
        return out

    def hist_mean(self, family: str, by: Sequence[str], **want: str | None) -> dict[Key, tuple[float, float]]:
        spec = _check_name(family)
        assert spec.kind == "histogram", family
        sums = self._delta_samples(family + "_sum", by, want)
        counts = self._delta_samples(family + "_count", by, want)
        return {k: (sums.get(k, 0.0) / c, c) for k, c in counts.items() if c > 0}

    def hist_quantile(self, family: str, q: float, **want: str | None) -> float | None:
        _check_name(family)
        per_le = self._delta_samples(family + "_bucket", ("le",), want)
        return interpolate_quantile(q, [(float(le), c) for (le,), c in per_le.items()])

    def delta(self, family: str, by: Sequence[str], **want: str | None) -> dict[Key, float]:
        spec = _check_name(family)
        assert spec.kind == "counter", family
        return self._delta_samples(spec.samples[0], by, want)

    def gauge(self, family: str, by: Sequence[str], *, peak: bool = False, **want: str | None) -> dict[Key, float]:
        _check_name(family)
        if not peak:
            return self.after.grouped(family, by, **want)
        out: dict[Key, float] = {}
        for s in self.scrapes:
            for k, v in s.grouped(family, by, **want).items():
                out[k] = max(out.get(k, v), v)
        return out

    def info(self, family: str) -> list[dict[str, str]]:
        _check_name(family)
        return [dict(s.labels) for s in self.after.select(family) if s.value == 1]


def _selector(want: dict[str, str | None]) -> str:
    parts = [f'{k}=~"{_escape(v)}|"' for k, v in want.items() if v is not None]
    return "{" + ",".join(parts) + "}" if parts else ""


def _escape(v: str) -> str:
    import re

    return re.escape(v).replace("\\", "\\\\").replace('"', '\\"')


class PromView:
    """The same questions as PromQL over ``window`` (a Prometheus duration such as ``15m``)."""

    def __init__(self, prom: PromQuery, window: str) -> None:
        self.prom = prom
        self.window = window
        self.basis = f"PromQL over the last {window} from {prom.base}"

    def _by(self, by: Sequence[str]) -> str:
        return f" by ({', '.join(by)})" if by else ""

    def _grouped(self, expr: str, by: Sequence[str]) -> dict[Key, float]:
        out = {}
        for s in self.prom.query(expr):
            if math.isnan(s.value):
                continue
            out[tuple(s.labels.get(b, "") for b in by)] = s.value
        return out

    def hist_mean(self, family: str, by: Sequence[str], **want: str | None) -> dict[Key, tuple[float, float]]:
        _check_name(family)
        sel, w, b = _selector(want), self.window, self._by(by)
        sums = self._grouped(f"sum{b} (increase({family}_sum{sel}[{w}]))", by)
        counts = self._grouped(f"sum{b} (increase({family}_count{sel}[{w}]))", by)
        return {k: (sums.get(k, 0.0) / c, c) for k, c in counts.items() if c > 0}

    def hist_quantile(self, family: str, q: float, **want: str | None) -> float | None:
        _check_name(family)
        sel = _selector(want)
        got = self.prom.query(f"histogram_quantile({q}, sum by (le) (rate({family}_bucket{sel}[{self.window}])))")
        vals = [s.value for s in got if not math.isnan(s.value)]
        return vals[0] if vals else None

    def delta(self, family: str, by: Sequence[str], **want: str | None) -> dict[Key, float]:
        spec = _check_name(family)
        return self._grouped(f"sum{self._by(by)} (increase({spec.samples[0]}{_selector(want)}[{self.window}]))", by)

    def gauge(self, family: str, by: Sequence[str], *, peak: bool = False, **want: str | None) -> dict[Key, float]:
        _check_name(family)
        sel = _selector(want)
        inner = f"max_over_time({family}{sel}[{self.window}])" if peak else f"{family}{sel}"
        return self._grouped(f"max{self._by(by)} ({inner})", by)

    def info(self, family: str) -> list[dict[str, str]]:
        _check_name(family)
        return [dict(s.labels) for s in self.prom.query(f"{family} == 1")]


__all__ = ["MetricsView", "PromView", "ScrapeView", "interpolate_quantile"]
