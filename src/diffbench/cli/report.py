"""``diffbench report``: one self-contained HTML page (or Markdown + PNGs) from saved results."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report(
        results: list[Path] = typer.Argument(..., help="Result files: the --json of bench, quality, sweep, "
                                             "load, simulate, plan or ledger, or the derive.json of derive "
                                             "(several of one kind overlay)."),
        output: Path = typer.Option(..., "-o", "--output", help="The page to write (report.html, or "
                                    "report.md with --format markdown)."),
        fmt: str = typer.Option("html", "--format", help="html (one self-contained file) or markdown "
                                "(tables + PNG files in <stem>_files/ beside it, for a PR comment)."),
        title: str | None = typer.Option(None, "--title", help="Page title (default: the kinds and files)."),
        worst: int = typer.Option(8, "--worst", min=0, help="Quality: how many worst pairs (by PSNR) to show."),
        amplify: float = typer.Option(10.0, "--amplify", min=1.0,
                                      help="Quality: gain of the difference heat map (|cand - base| x gain)."),
        mkdir: bool = typer.Option(False, "--mkdir", help="Create the missing parent directories of -o."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress line on stderr."),
    ) -> None:
        """Render saved results as a page people look at: plots, tables, worst images.

        The HTML has every style, plot and image inline and no script: it opens with no network access.
        """
        import math
        import os

        from diffbench.core.jsonio import write_text_atomic
        from diffbench.core.outpath import check_not_an_input, check_output_file
        from diffbench.core.progress import LiveLine
        from diffbench.errors import UsageError
        from diffbench.report.build import build_document
        from diffbench.report.kinds import ReportOptions

        if fmt not in ("html", "markdown"):
            raise UsageError(f"--format {fmt!r}: use html or markdown")
        if not math.isfinite(amplify):
            raise UsageError(f"--amplify {amplify}: a finite gain >= 1, e.g. 10")
        suffix = output.suffix.lower()
        if (fmt == "html" and suffix in (".md", ".markdown")) or (fmt == "markdown" and suffix in (".html", ".htm")):
            raise UsageError(f"-o {output} with --format {fmt}: the suffix says the other format; use "
                             f"{'--format markdown' if fmt == 'html' else 'an .md name'}")
        check_output_file(output, "-o", mkdir=mkdir)
        check_not_an_input(output, "-o", files=results)
        seen: dict[str, Path] = {}
        for r in results:
            real = os.path.realpath(r)
            if real in seen:
                raise UsageError(f"{r} is given twice (also as {seen[real]}); a report overlays different results")
            seen[real] = r
        opts = ReportOptions(worst=worst, amplify=amplify)
        with LiveLine.for_cli(quiet) as line:
            doc = build_document(results, opts, title=title, on_step=line.update)
            line.update(f"rendering {fmt}")
            if fmt == "html":
                from diffbench.report.html_render import render_html

                text = render_html(doc)
                write_text_atomic(output, text)
                written = [output]
            else:
                from diffbench.report.markdown_render import render_markdown

                written = render_markdown(doc, output)
        size = sum(p.stat().st_size for p in written)
        extra = f" and {len(written) - 1} PNG files" if len(written) > 1 else ""
        typer.echo(f"wrote {output}{extra} ({size / 1e6:.2f} MB)")
