"""One result from many load processes: the exact merge of records, and the HdrHistogram merge.

- **Exact** (:func:`merge_records`): the workers' records are concatenated and sorted by id. Every
  percentile computed from the merged list is *identical* to the one of a single list holding the same
  records (a percentile is a function of the multiset of values, not of who measured them).
- **HdrHistogram** (:class:`LatencyHistograms`, package ``hdrhistogram``, module ``hdrh``): each worker
  records the latency from arrival, the latency from send and the lag of its ``ok`` requests in integer
  **microseconds** with :data:`SIGNIFICANT_DIGITS` = 3 significant digits; the parent adds the histograms
  (``HdrHistogram.add``, which is exact: bucket counts add). Merging loses nothing; *recording* quantizes:
  a reported percentile ``v`` and the true order statistic ``x`` (see below) satisfy
  ``|v - x| <= x * 10**-3 + 1 us`` (the bucket width is at most ``x / 1024`` (HdrHistogram's sub-bucket
  resolution for 3 digits, below 10^-3 relative), and a value is rounded to the microsecond when recorded).
  Range: 0 us to :data:`HIGHEST_US` (one hour); a value outside is clamped to it and counted in
  ``clamped`` (lags below 0, which the clock cannot produce, count as 0).

Percentile definition of the HdrHistogram summary (HdrHistogram's own): ``p_q`` is the order statistic of rank
``max(1, floor(q * n / 100 + 0.5))`` (1-based), reported as the highest value equivalent to it in its bucket.
The exact path uses numpy's linear interpolation (:func:`diffbench.core.stats.percentile`), as the summaries
always have; the two differ by at most the gap between neighbouring order statistics plus the error above.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from pydantic import BaseModel

from diffbench.core.records import RequestRecord
from diffbench.errors import DiffbenchError

SIGNIFICANT_DIGITS = 3
HIGHEST_US = 3_600 * 1_000_000
"""One hour in microseconds: the largest value a histogram tracks."""
UNIT = "us"
QUANTITIES = ("latency_from_arrival", "latency_from_send", "lag")
PERCENTILES = (50.0, 90.0, 99.0, 99.9)


def merge_records(parts: Iterable[Sequence[RequestRecord]]) -> list[RequestRecord]:
    """Concatenate the records of several workers, sorted by id.

    Raises:
        DiffbenchError: an id appears twice (two workers measured the same request: a partitioning bug).
    """
    out = [r for part in parts for r in part]
    out.sort(key=lambda r: r.id)
    for a, b in zip(out, out[1:], strict=False):
        if a.id == b.id:
            raise DiffbenchError(f"request id {a.id} was recorded twice while merging worker results")
    return out


class HdrQuantity(BaseModel):
    """Percentiles of one quantity from merged histograms, in **seconds** (converted from microseconds)."""

    n: int
    p50: float
    p90: float
    p99: float
    p999: float
    max: float


class HdrSummary(BaseModel):
    """The HdrHistogram merge of the ``ok`` requests of a run: one :class:`HdrQuantity` per quantity.

    ``error`` states the merge error in words (see the module docstring)."""

    unit: str = UNIT
    significant_digits: int = SIGNIFICANT_DIGITS
    relative_error: float = 10.0 ** -SIGNIFICANT_DIGITS
    absolute_error_s: float = 1e-6
    error: str = (f"each percentile is within {10.0 ** -SIGNIFICANT_DIGITS:g} x its value + 1 us of the "
                  "order statistic of rank max(1, floor(q n / 100 + 0.5)) (HdrHistogram, "
                  f"{SIGNIFICANT_DIGITS} significant digits, microseconds)")
    clamped: int = 0
    quantities: dict[str, HdrQuantity]


class LatencyHistograms:
    """Three HdrHistograms (latency from arrival, from send, lag) of ``ok`` requests, in microseconds.

    :meth:`encode` / :meth:`decode` give a compact, picklable form (HdrHistogram's base64 wire format) for
    sending from a worker process; :meth:`merge` adds another instance.
    """

    def __init__(self) -> None:
        from hdrh.histogram import HdrHistogram

        self.hists = {q: HdrHistogram(1, HIGHEST_US, SIGNIFICANT_DIGITS) for q in QUANTITIES}
        self.clamped = 0

    def _record(self, quantity: str, seconds: float) -> None:
        us = int(round(seconds * 1e6)) if math.isfinite(seconds) else HIGHEST_US
        if us < 0 or us > HIGHEST_US:
            self.clamped += 1
            us = min(max(us, 0), HIGHEST_US)
        self.hists[quantity].record_value(us)

    def add(self, rec: RequestRecord) -> None:
        """Record ``rec`` if it is ``ok`` (other outcomes have no latency in the summaries either)."""
        if rec.outcome != "ok" or rec.done_s is None or rec.sent_s is None:
            return
        self._record("latency_from_arrival", rec.done_s - rec.intended_s)
        self._record("latency_from_send", rec.done_s - rec.sent_s)
        self._record("lag", rec.sent_s - rec.intended_s)

    def add_all(self, records: Iterable[RequestRecord]) -> LatencyHistograms:
        for r in records:
            self.add(r)
        return self

    def merge(self, other: LatencyHistograms) -> LatencyHistograms:
        """Add ``other``'s counts into this one (exact); returns self."""
        for q in QUANTITIES:
            self.hists[q].add(other.hists[q])
        self.clamped += other.clamped
        return self

    def encode(self) -> dict[str, object]:
        """A picklable/JSON-able form: HdrHistogram's compressed base64 payload per quantity."""
        return {"clamped": self.clamped, **{q: self.hists[q].encode().decode("ascii") for q in QUANTITIES}}

    @classmethod
    def decode(cls, data: dict[str, object]) -> LatencyHistograms:
        from hdrh.histogram import HdrHistogram

        out = cls()
        for q in QUANTITIES:
            out.hists[q] = HdrHistogram.decode(str(data[q]))
        out.clamped = int(data.get("clamped", 0))  # type: ignore[call-overload]
        return out

    @property
    def n(self) -> int:
        return int(self.hists["lag"].get_total_count())

    def percentile_us(self, quantity: str, q: float) -> int:
        """Percentile ``q`` of ``quantity`` in microseconds (HdrHistogram's definition, module docstring)."""
        return int(self.hists[quantity].get_value_at_percentile(q))

    def summary(self) -> HdrSummary | None:
        """Percentiles in seconds; None when no ``ok`` request was recorded."""
        if self.n == 0:
            return None
        out = {}
        for q in QUANTITIES:
            h = self.hists[q]
            p = h.get_percentile_to_value_dict(list(PERCENTILES))
            out[q] = HdrQuantity(n=int(h.get_total_count()), p50=p[50.0] * 1e-6, p90=p[90.0] * 1e-6,
                                 p99=p[99.0] * 1e-6, p999=p[99.9] * 1e-6,
                                 max=h.get_highest_equivalent_value(h.get_max_value()) * 1e-6)
        return HdrSummary(clamped=self.clamped, quantities=out)


def merge_histograms(parts: Iterable[LatencyHistograms]) -> LatencyHistograms:
    """The sum of several workers' histograms (a fresh instance)."""
    out = LatencyHistograms()
    for p in parts:
        out.merge(p)
    return out
