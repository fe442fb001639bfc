"""``diffbench doctor {p99,artifacts,oom}``: the triage runbook as a command (see :mod:`diffbench.monitor.doctor`).

Exit 0 after a diagnosis (whatever the verdicts), 2 for bad input (no or several sources, an unreachable
URL, an unreadable file, not a metrics text, a bad ``--window``). Imports nothing heavy at module level.
"""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Register ``diffbench doctor`` on ``app``."""

    @app.command("doctor")
    def doctor(
        symptom: str = typer.Argument(..., help="p99 | artifacts | oom."),
        metrics: list[str] = typer.Option([], "--metrics", help="A service's /metrics URL (a base URL gets "
                                          "/metrics appended); repeat it for the probe's /metrics (merged, "
                                          "the first is the service)."),
        prometheus: str | None = typer.Option(None, "--prometheus", help="A Prometheus server's base URL "
                                              "(queries /api/v1/query over --window)."),
        scrape: list[Path] = typer.Option([], "--scrape", help="A saved scrape (repeat for before/after), or "
                                          "one directory of scrapes (first and last by name)."),
        window: str = typer.Option("15m", "--window", help="PromQL window with --prometheus (e.g. 5m, 1h)."),
        interval: float = typer.Option(0.0, "--interval", help="With --metrics: scrape twice this many "
                                       "seconds apart and use the deltas (default: one scrape, totals)."),
        json_out: Path | None = typer.Option(None, "--json", help="Write every check (JSON)."),
        mkdir: bool = typer.Option(False, "--mkdir", help="Create a missing parent directory of --json."),
    ) -> None:
        """Walk the runbook's first checks for a symptom and say what the metrics show for each."""
        import math

        from diffbench.core.console import make_console
        from diffbench.core.jsonio import write_json_atomic
        from diffbench.core.outpath import check_output_file
        from diffbench.errors import UsageError
        from diffbench.metrics.scrape import read_scrapes
        from diffbench.monitor.doctor import SYMPTOMS, diagnose, open_view, parse_window, render

        if symptom not in SYMPTOMS:
            raise UsageError(f"unknown symptom {symptom!r}; choose one of {', '.join(SYMPTOMS)}")
        if not math.isfinite(interval) or interval < 0 or interval > 3600:
            raise UsageError(f"--interval must be between 0 and 3600 seconds, got {interval:g}")
        if interval and not metrics:
            raise UsageError("--interval applies to --metrics (two scrapes of a live endpoint)")
        if len(scrape) > 2:
            raise UsageError(f"--scrape: give one or two scrapes (before, after), got {len(scrape)}")
        w = parse_window(window)
        if json_out is not None:
            check_output_file(json_out, "--json", mkdir=mkdir)
        scrapes = read_scrapes(scrape) if scrape else []
        view, source, url = open_view(metrics=metrics or None, prometheus=prometheus, scrapes=scrapes, window=w,
                                      interval_s=interval)
        report = diagnose(symptom, view, url=url, source=source)
        render(report, make_console(highlight=False))
        if json_out is not None:
            write_json_atomic(json_out, report.model_dump(mode="json"))
            typer.echo(f"doctor report written to {json_out}")
