"""``diffbench monitor``: the monitoring assets of a deployment (calibration file, dashboard, rules).

Each subcommand lives in its own module and registers itself on the ``monitor`` sub-app.
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    sub = typer.Typer(
        name="monitor",
        help="Monitoring assets: calibrate baselines from bench/sweep results, generate the dashboard.",
        no_args_is_help=True,
    )
    __import__("diffbench.cli.monitor_calibrate", fromlist=["register"]).register(sub)
    __import__("diffbench.cli.monitor_dashboard", fromlist=["register"]).register(sub)
    app.add_typer(sub, name="monitor")
