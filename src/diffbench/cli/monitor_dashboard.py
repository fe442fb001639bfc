"""``diffbench monitor dashboard``: write the Grafana dashboard, or check that a file is up to date."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command("dashboard")
    def dashboard(
        output: Path | None = typer.Option(None, "-o", "--output", help="Write the dashboard JSON to this file."),
        check: Path | None = typer.Option(
            None, "--check", help="Exit 1 when this file differs from what the generator makes (stale)."),
        mkdir: bool = typer.Option(False, "--mkdir", help="Create the missing parent directories of -o."),
    ) -> None:
        """Generate the Grafana dashboard (monitoring/dashboard.json) from the metric table.

        Import the file into Grafana and pick the Prometheus data source in its `datasource` variable.
        """
        import difflib

        from diffbench.core.jsonio import write_text_atomic
        from diffbench.core.outpath import check_output_file
        from diffbench.errors import GateFailed, InputError, UsageError
        from diffbench.monitor.dashboard import render_dashboard

        if output is None and check is None:
            raise UsageError("give -o FILE to write the dashboard, or --check FILE to test a committed one")
        if output is not None:
            check_output_file(output, "-o", mkdir=mkdir)
        text = render_dashboard()
        if check is not None:
            try:
                current = check.read_text(encoding="utf-8")
            except OSError as exc:
                raise InputError(f"--check {check}: cannot read it ({exc.strerror or exc})") from exc
            if current != text:
                diff = difflib.unified_diff(current.splitlines(), text.splitlines(), str(check), "generated",
                                            lineterm="", n=1)
                for line in list(diff)[:20]:
                    typer.echo(line, err=True)
                raise GateFailed(f"--check {check}: stale; regenerate it with "
                                 f"`diffbench monitor dashboard -o {check}`")
            typer.echo(f"{check}: up to date")
        if output is not None:
            write_text_atomic(output, text)
            typer.echo(f"wrote {output}")
