"""Goodput constraints: which ``ok`` requests count as *good* (``--goodput "latency:10 queue_wait:2"``).

A request is good when it ended ``ok`` **and** every constraint holds (``value <= limit``). Limits are in
seconds (vLLM's ``vllm bench serve --goodput`` takes milliseconds: its metrics are per token; diffusion
requests take seconds). The metrics, per request (:class:`~diffbench.core.records.RequestRecord`):

- ``latency``: done − intended arrival (free of coordinated omission; what ``--slo`` bounds).
- ``latency_from_send`` (alias ``e2el``, vLLM's name): done − sent.
- ``ttfb`` (alias ``first_byte``): first response byte (headers) − sent.
- ``lag``: sent − intended (client send lag, client queue time included).
- ``queue_wait``: the client queue time (``--max-inflight``) plus the server-reported ``queue_wait`` stage
  (the reference service reports it in ``stage_durations``). A request whose server reported no queue stage
  has no ``queue_wait`` (the client part alone would be a lower bound that makes goodput look better than it
  is), so it is not good, like any other missing value.
- ``stage.NAME``: a server-reported stage (``stage.denoise``, ``stage.vae_decode``, ``stage.service_time``).

A constraint on a value a request does not have (no first byte, a stage the server did not report) makes
that request *not good*, and the summary warns how many ok requests lacked it: a missing value is never
silently good.

Quality floors (``psnr:30``, ``ssim:0.9``; with ``load --reference DIR``) are the other kind of item:
``value >= limit``, read from the score of a request replaying a reference (:class:`QualityFloor`,
:func:`parse_goodput_floors`). They make a second goodput, over the *scored* requests only
(:func:`count_quality_good`): good when ok, every time constraint holding and every floor holding. The
latency-only goodput over all requests (:func:`count_good`) ignores them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from diffbench.core.records import RequestRecord
from diffbench.errors import UsageError

METRICS: tuple[str, ...] = ("latency", "latency_from_send", "ttfb", "lag", "queue_wait")
ALIASES = {"first_byte": "ttfb", "e2el": "latency_from_send"}
"""``e2el`` is vLLM's name for the latency from send."""
STAGE_PREFIX = "stage."
SERVER_QUEUE_STAGE = "queue_wait"
"""Name of the server-reported queue stage (``stage_durations.queue_wait`` of the reference service)."""


class GoodputConstraint(BaseModel):
    """One constraint: ``name`` (a metric of the module docstring or ``stage.NAME``) ``<= max_s`` seconds."""

    model_config = ConfigDict(frozen=True)

    name: str
    max_s: float

    def text(self) -> str:
        return f"{self.name}:{self.max_s:g}"


class GoodputCount(BaseModel):
    """Result of :func:`count_good`: good requests, and per constraint the ok requests that lacked the
    value (``missing``; for ``queue_wait``: no server-reported queue stage)."""

    n_good: int
    missing: dict[str, int] = {}

    def warnings(self, n_ok: int) -> list[str]:
        out = [f"goodput: {k} of {n_ok} ok requests did not report {name}; they count as not good"
               for name, k in self.missing.items() if k]
        return out


def _canonical(name: str, item: str, option: str) -> str:
    name = ALIASES.get(name, name)
    if name in METRICS:
        return name
    if name.startswith(STAGE_PREFIX) and len(name) > len(STAGE_PREFIX):
        return name
    vllm = {"ttft": "ttfb (time to the response headers; an image has no tokens)", "tpot": "none (no tokens)",
            "itl": "none (no tokens)"}.get(name)
    hint = f" (vLLM's {name}: here {vllm})" if vllm else ""
    raise UsageError(f"{option}: unknown constraint {item!r}{hint}; use {', '.join(METRICS)}, first_byte, e2el or "
                     "stage.NAME (a server-reported stage, e.g. stage.denoise); with --reference also psnr or ssim")


def parse_goodput(text: str | Sequence[str], option: str = "--goodput") -> list[GoodputConstraint]:
    """Parse ``"latency:10 queue_wait:2"`` (space-separated ``name:seconds``; a list of such strings is
    joined, so a repeated option works too).

    Raises:
        UsageError: an empty spec, an item without ``:``, an unknown name, a value that is not a positive
            finite number of seconds, or a name given twice (the message names the item).
    """
    items = (text if isinstance(text, str) else " ".join(text)).split()
    if not items:
        raise UsageError(f"{option}: empty; give constraints like {option} \"latency:10 queue_wait:2\" (seconds)")
    out: list[GoodputConstraint] = []
    for item in items:
        name, sep, raw = item.partition(":")
        if not sep or not name or not raw:
            raise UsageError(f"{option}: {item!r} must look like name:seconds (e.g. latency:10)")
        name = name.strip()
        canon = _canonical(name if name.startswith(STAGE_PREFIX) else name.lower(), item, option)
        try:
            value = float(raw)
        except ValueError:
            raise UsageError(f"{option}: {item!r}: {raw!r} is not a number of seconds") from None
        if not math.isfinite(value) or value <= 0:
            raise UsageError(f"{option}: {item!r}: the limit must be a positive finite number of seconds")
        if any(c.name == canon for c in out):
            raise UsageError(f"{option}: {canon} is given twice ({item!r}); give each constraint once")
        out.append(GoodputConstraint(name=canon, max_s=value))
    return out


QUALITY_METRICS: tuple[str, ...] = ("psnr", "ssim")
"""Quality floors of ``--goodput`` (``psnr:DB``, ``ssim:S``), on requests scored against ``--reference``."""


class QualityFloor(BaseModel):
    """One quality floor: the request's score ``name`` (``psnr`` in dB, ``ssim`` in [-1, 1]) ``>= min``.

    A batch or a video is scored by its worst image or frame (lowest PSNR, lowest SSIM)."""

    model_config = ConfigDict(frozen=True)

    name: Literal["psnr", "ssim"]
    min: float

    def text(self) -> str:
        return f"{self.name}:{self.min:g}"


def parse_goodput_floors(text: str | Sequence[str], option: str = "--goodput"
                         ) -> tuple[list[GoodputConstraint], list[QualityFloor]]:
    """Parse ``"latency:3 psnr:30 ssim:0.9"``: the time constraints (:func:`parse_goodput`) and the quality
    floors (``psnr`` in dB > 0, ``ssim`` in (0, 1]).

    Raises:
        UsageError: what :func:`parse_goodput` refuses, a floor that is not a number in its range, or a
            floor given twice (the message names ``option`` and the item).
    """
    items = (text if isinstance(text, str) else " ".join(text)).split()
    floors: list[QualityFloor] = []
    rest: list[str] = []
    for item in items:
        name, sep, raw = item.partition(":")
        key = name.strip().lower()
        if key not in QUALITY_METRICS:
            rest.append(item)
            continue
        try:
            value = float(raw) if sep else math.nan
        except ValueError:
            value = math.nan
        unit = "dB" if key == "psnr" else "SSIM"
        ok = math.isfinite(value) and (value > 0 if key == "psnr" else 0 < value <= 1)
        if not ok:
            bound = "a positive finite number of dB" if key == "psnr" else "an SSIM in (0, 1]"
            raise UsageError(f"{option}: {item!r}: the floor must be {bound} (e.g. {key}:"
                             f"{'30' if key == 'psnr' else '0.9'}; {unit})")
        if any(f.name == key for f in floors):
            raise UsageError(f"{option}: {key} is given twice ({item!r}); give each constraint once")
        floors.append(QualityFloor(name=key, min=value))  # type: ignore[arg-type]
    if not items:
        parse_goodput(items, option)  # the empty-spec message
    return (parse_goodput(rest, option) if rest else []), floors


def with_slo(constraints: Sequence[GoodputConstraint], slo_s: float | None) -> list[GoodputConstraint]:
    """``--slo X`` is ``latency:X``: added when ``--goodput`` has no latency constraint; the same value is
    accepted; a different one is refused.

    Raises:
        UsageError: ``--slo`` and ``--goodput latency:...`` disagree.
    """
    out = list(constraints)
    if slo_s is None:
        return out
    have = next((c for c in out if c.name == "latency"), None)
    if have is None:
        return [GoodputConstraint(name="latency", max_s=slo_s), *out]
    if have.max_s != slo_s:
        raise UsageError(f"--slo {slo_s:g} and --goodput latency:{have.max_s:g} disagree; give the latency "
                         "objective once")
    return out


def latency_limit(constraints: Sequence[GoodputConstraint]) -> float | None:
    """The ``latency`` limit (seconds) — the knee's SLO — or None."""
    return next((c.max_s for c in constraints if c.name == "latency"), None)


def describe(constraints: Sequence[GoodputConstraint]) -> str:
    """``"latency <= 10 s and queue_wait <= 2 s"`` (empty constraints: every ok request)."""
    if not constraints:
        return "every ok request"
    return " and ".join(f"{c.name} <= {c.max_s:g} s" for c in constraints)


def value_of(rec: RequestRecord, name: str) -> float | None:
    """The metric ``name`` of one record in seconds, None when the record does not have it."""
    if name == "latency":
        return None if rec.done_s is None else rec.done_s - rec.intended_s
    if name == "latency_from_send":
        return None if rec.done_s is None or rec.sent_s is None else rec.done_s - rec.sent_s
    if name == "ttfb":
        return None if rec.first_byte_s is None or rec.sent_s is None else rec.first_byte_s - rec.sent_s
    if name == "lag":
        return None if rec.sent_s is None else rec.sent_s - rec.intended_s
    if name == "queue_wait":
        server = rec.server_stages_s.get(SERVER_QUEUE_STAGE)
        return None if server is None else rec.client_queue_s + server
    return rec.server_stages_s.get(name[len(STAGE_PREFIX):])


def count_good(records: Sequence[RequestRecord], constraints: Sequence[GoodputConstraint]) -> GoodputCount:
    """Count the good requests of ``records`` (ok, finished, every constraint holding).

    Without constraints every finished ok request is good.
    """
    missing = {c.name: 0 for c in constraints}
    good = 0
    for rec in records:
        if rec.outcome != "ok" or rec.done_s is None:
            continue
        ok = True
        for c in constraints:
            v = value_of(rec, c.name)
            if v is None:
                missing[c.name] += 1
                ok = False
            elif v > c.max_s:
                ok = False
        good += ok
    return GoodputCount(n_good=good, missing={k: v for k, v in missing.items() if v})


class QualityGoodput(BaseModel):
    """Result of :func:`count_quality_good`: of ``n`` scored requests, ``n_good`` were good; ``fraction``
    = n_good / n and its two-sided 95% Clopper-Pearson interval ``ci_low``..``ci_high`` (None when n = 0)."""

    n: int
    n_good: int
    fraction: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    floors: list[QualityFloor] = []


def quality_value(rec: RequestRecord, name: str) -> float | None:
    """The score ``name`` (``psnr`` dB or ``ssim``) of a record, None when it was not scored."""
    return rec.psnr_db if name == "psnr" else rec.ssim


def count_quality_good(records: Sequence[RequestRecord], constraints: Sequence[GoodputConstraint],
                       floors: Sequence[QualityFloor], confidence: float = 0.95) -> QualityGoodput:
    """Goodput over the requests that replay a reference (``rec.reference`` set), whatever their outcome:
    good when ok, finished, every time constraint holding and every floor holding (an ok request without a
    score — its check failed — is not good). The fraction's interval is Clopper-Pearson
    (:func:`diffbench.quality.review_score.clopper_pearson`)."""
    scored = [r for r in records if r.reference is not None]
    good = 0
    for rec in scored:
        if rec.outcome != "ok" or rec.done_s is None:
            continue
        if constraints and not all((v := value_of(rec, c.name)) is not None and v <= c.max_s for c in constraints):
            continue
        if all((q := quality_value(rec, f.name)) is not None and q >= f.min for f in floors):
            good += 1
    if not scored:
        return QualityGoodput(n=0, n_good=0, floors=list(floors))
    from diffbench.quality.review_score import clopper_pearson

    lo, hi = clopper_pearson(good, len(scored), confidence)
    return QualityGoodput(n=len(scored), n_good=good, fraction=good / len(scored), ci_low=lo, ci_high=hi,
                          floors=list(floors))


__all__ = [
    "GoodputConstraint",
    "GoodputCount",
    "QUALITY_METRICS",
    "QualityFloor",
    "QualityGoodput",
    "count_good",
    "count_quality_good",
    "parse_goodput_floors",
    "quality_value",
    "describe",
    "latency_limit",
    "parse_goodput",
    "value_of",
    "with_slo",
]
