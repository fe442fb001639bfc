"""A cold start inside a measured load row: ``cold_start_in_measurement``.

A request whose warm-up key (:class:`~diffbench.workload.warmkey.WarmupKey`; the record's ``shape`` label)
no warm-up covered pays a first-call compile inside the measurement. Two signs are read per row:

- **Leading outliers per key**: the ok requests of each key, in arrival order (intended time, then id), get
  ``bench``'s leading-outlier test
  (:func:`diffbench.core.warmth.leading_cold`: leading samples each above ``FIRST_RUN_OUTLIER`` (3) x the
  median of the later ones). One such request is enough under load: unlike ``bench``'s timed runs, a
  measured row has no warm-up runs of its own after which a single slow first run is expected. A key needs
  at least 3 ok requests in the row to be tested. The samples are the server-reported service times
  (``service_time_s`` of the answers) where every ok answer of the key carries one, else the latencies from
  arrival: behind a compile that blocks the device every later request queues, so their latencies rise with
  the compile's and no request stands out, while the service time of the compiling request alone does.
- **The server's recompile counter** (``load --scrape``): ``diffusion_compile_recompiles`` rose during the
  row (:attr:`~diffbench.load.scrape.ServerSide.recompiles`): the service compiled a graph it had not
  compiled before, while serving.

Either one adds a :class:`ColdStart` to the row's ``cold_start`` and a row warning that starts with
``cold_start_in_measurement:`` (console, JSON and report page), never a silent p99.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from diffbench.core.records import RequestRecord
from diffbench.core.warmth import FIRST_RUN_OUTLIER, leading_cold

COLD_START = "cold_start_in_measurement"
"""The warning's name: every row warning of this kind starts with it."""
SERVER = "(server)"
"""``ColdStart.shape`` of a finding from the server's recompile counter (not tied to one key)."""


class ColdStart(BaseModel):
    """One cold start found in a row: ``shape`` the warm-up key's label (or :data:`SERVER`), ``leading`` how
    many leading ok requests of the key were outliers, ``latency_s`` their samples (seconds, arrival order),
    ``rest_median_s`` the median sample of the key's later ok requests (seconds), ``measure`` what the samples
    are (``service_time``: server-reported; ``latency_from_arrival``: the client's), and ``recompiles`` the
    server's recompile count over the row (``load --scrape``; None otherwise)."""

    model_config = ConfigDict(frozen=True)

    shape: str
    leading: int = 0
    latency_s: list[float] = []
    rest_median_s: float | None = None
    measure: Literal["service_time", "latency_from_arrival"] | None = None
    recompiles: int | None = None

    def message(self) -> str:
        """The row warning, ``cold_start_in_measurement: ...``."""
        if self.shape == SERVER:
            return (f"{COLD_START}: the server counted {self.recompiles} recompile(s) during the row "
                    "(diffusion_compile_recompiles): a request shape, batch or guidance outside the warmed set "
                    "compiled while being measured; warm every key of the workload (--warmup >= 1) and the "
                    "service's (serve --warmup/--shapes)")
        lo, hi = min(self.latency_s), max(self.latency_s)
        span = f"{lo:.4g} s" if self.leading == 1 else f"{lo:.4g}-{hi:.4g} s"
        rest = self.rest_median_s or 0.0
        ratio = f", {lo / rest:.1f}x" if rest > 0 else ""
        what = "server service time" if self.measure == "service_time" else "latency from arrival"
        return (f"{COLD_START}: {self.shape}: the first {self.leading} measured request(s) took {span} ({what}){ratio} "
                f"the median of the rest ({rest:.4g} s, threshold {FIRST_RUN_OUTLIER:g}x): a first-call compile or "
                "cold start is in the statistics (its p99); warm this key before measuring (--warmup >= 1 warms "
                "every key of the workload)")


def leading_cold_starts(records: Sequence[RequestRecord], service_key: str = "service_time") -> list[ColdStart]:
    """The keys (record ``shape`` labels, sorted) whose ok requests, in arrival order, start with leading
    outliers (see the module docstring); one :class:`ColdStart` each. ``service_key``: the key of the
    server-reported service time in ``RequestRecord.server_stages_s``."""
    by_key: dict[str, list[RequestRecord]] = {}
    for r in records:
        if r.outcome == "ok" and r.done_s is not None:
            by_key.setdefault(r.shape, []).append(r)
    out = []
    for shape, rs in sorted(by_key.items()):
        rs.sort(key=lambda r: (r.intended_s, r.id))
        served = all(service_key in r.server_stages_s for r in rs)
        lat = ([r.server_stages_s[service_key] for r in rs] if served
               else [r.done_s - r.intended_s for r in rs])  # type: ignore[operator]
        lead = leading_cold(lat)
        if lead:
            out.append(ColdStart(shape=shape or "(none)", leading=lead, latency_s=lat[:lead],
                                 rest_median_s=float(np.median(lat[lead:])),
                                 measure="service_time" if served else "latency_from_arrival"))
    return out


def recompile_cold_start(recompiles: int | None) -> ColdStart | None:
    """The :data:`SERVER` finding when the server's recompile counter rose during the row, else None."""
    return ColdStart(shape=SERVER, recompiles=recompiles) if recompiles else None


__all__ = ["COLD_START", "ColdStart", "SERVER", "leading_cold_starts", "recompile_cold_start"]
