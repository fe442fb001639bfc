"""``diffbench doctor``: the triage runbook as a command.

Given metrics (a ``/metrics`` URL, a Prometheus server, or saved scrapes) and a symptom, walk the first
checks of :data:`~diffbench.monitor.doctor_checks.RUNBOOK` in order and say, for each, what the metrics
show: value, verdict (``ok`` / ``suspect`` / ``no data``), one sentence, and the ``diffbench`` command that
confirms it. Usage::

    from diffbench.monitor.doctor import diagnose_scrapes

    report = diagnose_scrapes("artifacts", "tests/fixtures/scrapes/cache")   # a directory of scrapes
    [f.verdict for f in report.checks]

With two scrapes (before/after) counters and histograms are deltas between them; with one, totals since
the exporter started (the report says so); with Prometheus, PromQL over a window (``--window 15m``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from diffbench.errors import UsageError
from diffbench.metrics.scrape import PromQuery, Scrape, fetch_metrics, merge, metrics_url, read_scrapes
from diffbench.monitor.doctor_checks import RUNBOOK, Context, Finding
from diffbench.monitor.doctor_views import MetricsView, PromView, ScrapeView

Symptom = Literal["p99", "artifacts", "oom"]
SYMPTOMS: tuple[str, ...] = tuple(RUNBOOK)


class DoctorReport(BaseModel):
    """Every check of one symptom, in runbook order; ``suspects`` lists the keys of suspect checks."""

    symptom: str
    source: str
    basis: str
    checks: list[Finding]
    suspects: list[str]
    summary: str


def parse_window(text: str) -> str:
    """A Prometheus duration (``30s``, ``15m``, ``1h``, ``1h30m``) for ``--window``; returned as given.

    Raises:
        UsageError: anything else.
    """
    t = text.strip()
    if not re.fullmatch(r"(\d+(ms|s|m|h|d|w|y))+", t) or not re.search(r"[1-9]", t):
        raise UsageError(f"--window {text!r}: not a Prometheus duration; use e.g. 5m, 15m, 1h")
    return t


def view_from_scrapes(scrapes: Sequence[Scrape]) -> ScrapeView:
    """A view over one scrape (totals) or the first and last of several (deltas)."""
    return ScrapeView(scrapes)


def diagnose_scrapes(symptom: str, *paths: str | Path) -> DoctorReport:
    """:func:`diagnose` on saved scrapes: one or two files, or one directory of them (see
    :func:`~diffbench.metrics.scrape.read_scrapes`), e.g. ``diagnose_scrapes("oom", "tests/fixtures/scrapes/vae")``.

    Raises:
        InputError: a path that is missing or not a metrics text.
    """
    scrapes = read_scrapes(paths)
    if len(scrapes) > 2:
        scrapes = [scrapes[0], scrapes[-1]]
    return diagnose(symptom, view_from_scrapes(scrapes), source=" + ".join(s.source for s in scrapes))


SERVICE_INFO_TIMEOUT_S = 5.0
"""Total deadline (s) of the ``GET /v1/models`` that fills the confirming commands."""


def context_from(view: MetricsView, url: str | None) -> Context:
    """The values the confirming commands are filled with: the service URL and the model seen in the
    metrics; with a URL, what the service reports in ``GET /v1/models`` (its model id, engine and default
    steps) wins, so that the commands run as printed against it. A service without that route keeps the
    metrics' values."""
    ctx = Context()
    if url:
        ctx.url = url.rstrip("/").removesuffix("/metrics")
    models = [d.get("model", "") for d in view.info("diffusion_deployment_info")]
    if not any(models):
        models = [k[0] for k in view.delta("diffusion_requests", ("model",))]
    if models and models[0]:
        ctx.model = models[0]
    if url:
        card = _service_card(ctx.url, ctx.model)
        if isinstance(card.get("id"), str) and card["id"]:
            ctx.model = card["id"]
        if isinstance(card.get("engine"), str):
            ctx.engine = card["engine"]
        steps = card.get("default_steps")
        if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0:
            ctx.steps = steps
    return ctx


def _service_card(base_url: str, model: str) -> dict[str, object]:
    """The service's model card (``GET /v1/models``: the one named ``model``, else the first); {} when the
    service does not answer it."""
    import http.client
    import json

    from diffbench.core.httpget import request

    try:
        resp = request(base_url + "/v1/models", deadline_s=SERVICE_INFO_TIMEOUT_S)
        data = json.loads(resp.body).get("data") if resp.status == 200 else None
    except (OSError, http.client.HTTPException, ValueError, AttributeError):
        return {}
    cards = [c for c in data if isinstance(c, dict)] if isinstance(data, list) else []
    return next((c for c in cards if c.get("id") == model), cards[0] if cards else {})


def diagnose(symptom: str, view: MetricsView, *, url: str | None = None, source: str = "") -> DoctorReport:
    """Run the checks of ``symptom`` in order on ``view``.

    Raises:
        UsageError: an unknown symptom.
        InputError: the metrics source failed while a check read it (Prometheus unreachable mid-run).
    """
    if symptom not in RUNBOOK:
        raise UsageError(f"unknown symptom {symptom!r}; choose one of {', '.join(SYMPTOMS)}")
    ctx = context_from(view, url)
    checks = [check(view, ctx) for check in RUNBOOK[symptom]]
    suspects = [c.key for c in checks if c.verdict == "suspect"]
    if suspects:
        first = next(c for c in checks if c.verdict == "suspect")
        summary = f"first suspect: {first.title} — {first.sentence}"
    elif all(c.verdict == "no data" for c in checks):
        summary = "no check had data: the metrics lack the families this symptom needs"
    else:
        summary = "no check is suspect on these metrics; look beyond the runbook's first checks"
    return DoctorReport(symptom=symptom, source=source, basis=view.basis, checks=checks, suspects=suspects,
                        summary=summary)


def open_view(*, metrics: str | Sequence[str] | None = None, prometheus: str | None = None,
              scrapes: Sequence[Scrape] = (), window: str = "15m",
              interval_s: float = 0.0) -> tuple[MetricsView, str, str | None]:
    """The view of exactly one source: (view, source text, service URL when known).

    ``metrics``: one ``/metrics`` URL or several (the service's and the probe's), fetched once (totals) or
    twice ``interval_s`` apart (deltas); several endpoints are merged into one scrape per moment, and the
    first is taken as the service's URL in the confirming commands. ``prometheus``: checked with one query
    first, so a wrong URL fails before any check.

    Raises:
        UsageError: none or several kinds of source.
        InputError: the source is unreachable or not metrics (see :mod:`diffbench.metrics.scrape`).
    """
    urls = [metrics] if isinstance(metrics, str) else list(metrics or ())
    given = [n for n, v in (("--metrics", urls), ("--prometheus", prometheus), ("--scrape", scrapes)) if v]
    if len(given) != 1:
        raise UsageError("give exactly one of --metrics URL, --prometheus URL or --scrape FILE"
                         + (f" (got {', '.join(given)})" if given else ""))
    if urls:
        urls = [metrics_url(u, "--metrics") for u in urls]

        def moment() -> Scrape:
            parts = [fetch_metrics(u, option="--metrics") for u in urls]
            return parts[0] if len(parts) == 1 else merge(parts, " + ".join(urls))

        got = [moment()]
        if interval_s > 0:
            time.sleep(interval_s)
            got.append(moment())
        return ScrapeView(got), " + ".join(urls), urls[0]
    if prometheus:
        prom = PromQuery(prometheus)
        prom.check()
        return PromView(prom, window), prom.base, None
    if len(scrapes) > 2:
        scrapes = [scrapes[0], scrapes[-1]]
    return ScrapeView(scrapes), " + ".join(s.source for s in scrapes), None


_STYLE = {"ok": "green", "suspect": "bold red", "no data": "yellow"}


def render(report: DoctorReport, console: object) -> None:
    """Print the report: one numbered block per check, its details, and the confirming command."""
    from rich.console import Console

    assert isinstance(console, Console)
    console.print(f"diffbench doctor {report.symptom} · {report.basis}", style="dim")
    for i, c in enumerate(report.checks, 1):
        console.print(f"{i}. {c.title}: [{_STYLE[c.verdict]}]{c.verdict}[/] — {c.sentence}", highlight=False)
        for d in c.details:
            console.print(f"     {d}", style="dim", highlight=False)
        console.print(f"     confirm: {c.command}", highlight=False, soft_wrap=True)
    console.print(report.summary, highlight=False)


__all__ = ["SYMPTOMS", "DoctorReport", "diagnose", "diagnose_scrapes", "open_view", "parse_window", "render", "view_from_scrapes"]
