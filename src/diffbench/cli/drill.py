"""``diffbench drill {cache,shapes,vae,all}``: pre-launch fault drills against ``diffbench serve`` with a
local Prometheus evaluating the real rule file (docs/guides/after-launch.md).

Exit codes: 0 every drill passed; 1 a drill failed (or could not run); 2 bad input (an option value, an
unwritable ``--json``); 3 the ``prometheus`` binary is missing (``apt-get install prometheus``).
"""

from __future__ import annotations

from pathlib import Path

import typer

_NAMES = ("cache", "shapes", "vae", "all")


def register(app: typer.Typer) -> None:
    @app.command()
    def drill(
        name: str = typer.Argument(..., help="Drill: cache | shapes | vae | all (the three in that order)."),
        json_out: Path | None = typer.Option(None, "--json", help="Write the drill reports as one JSON document."),
        record_scrapes: Path | None = typer.Option(
            None, "--record-scrapes", help="Save the /metrics scrapes and Prometheus query results before and "
            "after each injection under DIR/<drill>/ (doctor's fixtures)."),
        max_for: float = typer.Option(5.0, "--max-for", help="Cap every alert's `for` at this many seconds in "
                                      "the drill's copy of monitoring/alerts.yaml."),
        scrape_interval: float = typer.Option(1.0, "--scrape-interval", help="Scrape and rule-evaluation "
                                              "interval of the local Prometheus, seconds."),
        fire_timeout: float = typer.Option(90.0, "--fire-timeout", help="Seconds an expected alert may take "
                                           "to fire before the drill fails."),
        budget_db: float = typer.Option(55.0, "--budget-db", help="cache: quality budget, PSNR (dB) of the "
                                        "probe request against the uncached output; also the probe threshold."),
        size: str = typer.Option("64x64", "--size", help="Allowlisted shape of the drills' traffic (WxH)."),
        steps: int = typer.Option(8, "--steps", help="Denoise steps of the drills' traffic."),
        workdir: Path | None = typer.Option(None, "--workdir", help="Keep logs, references and calibration "
                                            "files here (default: a temporary directory, removed after)."),
        mkdir: bool = typer.Option(False, "--mkdir", help="Create missing parent directories of --json, "
                                   "--record-scrapes and --workdir."),
    ) -> None:
        """Run a pre-launch drill: inject a fault, watch the metric move and the alert fire, pass or fail."""
        import json
        import math
        import re
        import shutil
        import tempfile

        from diffbench.core.jsonio import write_json_atomic
        from diffbench.core.outpath import check_output_dir, check_output_file
        from diffbench.errors import UsageError

        if name not in _NAMES:
            raise UsageError(f"drill {name!r}: choose one of {', '.join(_NAMES)}")
        for flag, value, low in (("--max-for", max_for, 0.0), ("--scrape-interval", scrape_interval, 0.0),
                                 ("--fire-timeout", fire_timeout, 0.0), ("--budget-db", budget_db, 0.0)):
            if not (math.isfinite(value) and value > low):
                raise UsageError(f"{flag} {value}: must be a finite number > {low:g}")
        if not re.fullmatch(r"[1-9]\d*x[1-9]\d*", size):
            raise UsageError(f"--size {size!r}: write it as WIDTHxHEIGHT in pixels, e.g. 64x64")
        w, h = (int(x) for x in size.split("x"))
        if w % 16 or h % 16 or max(w, h) > 512:
            raise UsageError(f"--size {size}: tiny-flux needs multiples of 16, at most 512 (a drill keeps shapes small)")
        if steps < 2:
            raise UsageError(f"--steps {steps}: must be at least 2 (a step cache needs a previous step)")
        if json_out is not None:
            json_out = check_output_file(json_out, "--json", mkdir=mkdir)
        if record_scrapes is not None:
            record_scrapes = check_output_dir(record_scrapes, "--record-scrapes", mkdir=mkdir)
            record_scrapes.mkdir(exist_ok=True)
        if workdir is not None:
            workdir = check_output_dir(workdir, "--workdir", mkdir=mkdir)
            workdir.mkdir(exist_ok=True)

        from diffbench.monitor.drill import DRILLS, run_drills
        from diffbench.monitor.drills.core import DrillOptions

        names = list(DRILLS) if name == "all" else [name]
        tmp = None if workdir is not None else Path(tempfile.mkdtemp(prefix="diffbench-drill-"))
        opts = DrillOptions(workdir=workdir or tmp or Path("."), max_for_s=max_for, scrape_s=scrape_interval,
                            record_dir=record_scrapes, fire_timeout_s=fire_timeout, budget_db=budget_db,
                            size=size, steps=steps)
        reports: list = []
        try:
            run_drills(names, opts, reports)
        finally:
            if json_out is not None and reports:
                doc = {"kind": "diffbench.drill", "passed": all(r.passed for r in reports),
                       "drills": [r.as_dict() for r in reports]}
                write_json_atomic(json_out, json.loads(json.dumps(doc, default=str)))
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
        typer.echo("")
        for r in reports:
            fired = ", ".join(f"{k} {v.fired_s:.1f} s" for k, v in r.alerts.items() if v.fired_s is not None)
            typer.echo(f"drill {r.drill:<7} {'PASS' if r.passed else 'FAIL'}  {r.wall_s:5.0f} s  "
                       f"fired: {fired or 'none'}" + (f"  error: {r.error}" if r.error else ""))
        if not all(r.passed for r in reports):
            raise typer.Exit(1)
