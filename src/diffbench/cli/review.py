"""``diffbench review``: a blind A/B page for a baseline and a candidate, and the scoring of its verdicts.

Two modes of one command:

- ``diffbench review BASELINE CANDIDATE -o review.html``: pick the worst-N pairs by PSNR (or LPIPS) plus a
  seeded random sample, write the key (``--key``, default ``<output stem>.key.json``) and the page
  (:mod:`diffbench.quality.review`, :mod:`diffbench.report.review_page`).
- ``diffbench review --score verdicts.json --key review.key.json [--max-worse 0.1]``: worse / same /
  better counts, Clopper–Pearson intervals and the gate (:mod:`diffbench.quality.review_score`).

Exit codes: 0 ok; 1 the ``--max-worse`` gate failed (outputs written first); 2 bad input (option
combinations, missing directories, unwritable outputs: checked before any work; pairs that cannot be
compared; a verdict file that does not match its key); 3 LPIPS weights missing for ``--by lpips``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from collections.abc import Callable

    from diffbench.quality.models import QualityReport
    from diffbench.quality.review import ReviewKey


def register(app: typer.Typer) -> None:
    @app.command("review")
    def review(
        baseline: Path | None = typer.Argument(None, help="Baseline outputs dir (as diffbench quality takes)."),
        candidate: Path | None = typer.Argument(None, help="Candidate outputs dir."),
        output: Path | None = typer.Option(None, "-o", "--output", help="The review page to write (HTML)."),
        worst: int = typer.Option(10, "--worst", help="How many worst pairs (by --by) to show."),
        by: str = typer.Option("psnr", "--by", help="psnr | lpips: the metric that ranks the worst pairs."),
        random: int = typer.Option(10, "--random", help="How many other pairs to add, drawn at random."),
        seed: int = typer.Option(0, "--seed", help="Seed of the random sample, the order and the sides."),
        key: Path | None = typer.Option(None, "--key", help="The key file: written by a review (default "
                                        "<output stem>.key.json), read by --score."),
        quality_json: Path | None = typer.Option(None, "--quality", help="Take per-pair metrics from this saved "
                                                 "quality --json result instead of computing them."),
        lpips_backbone: Path | None = typer.Option(None, "--lpips-backbone", help="alexnet-owt-7be5be79.pth for "
                                                   "--by lpips without --quality."),
        max_px: int = typer.Option(768, "--max-px", help="Downscale images whose long side exceeds this."),
        alpha: str = typer.Option("reject", "--alpha", help="RGBA policy: reject | drop | composite-white."),
        workers: int = typer.Option(2, "--workers", help="Threads scoring pairs."),
        score_path: Path | None = typer.Option(None, "--score", help="Score this verdict file (saved by the "
                                               "page) against --key."),
        max_worse: float | None = typer.Option(None, "--max-worse", help="With --score: fail (exit 1) unless the "
                                               "upper confidence bound of the share judged worse is <= this."),
        confidence: float = typer.Option(0.95, "--confidence", help="With --score: confidence of the "
                                         "Clopper-Pearson intervals."),
        json_out: Path | None = typer.Option(None, "--json", help="With --score: write the result as JSON "
                                             "('-' for stdout, instead of the table)."),
        mkdir: bool = typer.Option(False, "--mkdir", help="Create missing parent directories of the outputs."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress line on stderr."),
    ) -> None:
        """Blind A/B review: a page to judge left/right pairs, then --score the saved verdicts."""
        if score_path is not None:
            _score(baseline, candidate, output, score_path, key, max_worse, confidence, json_out, mkdir)
            return
        if max_worse is not None or json_out is not None:
            from diffbench.errors import UsageError

            raise UsageError("--max-worse and --json apply to --score VERDICTS (scoring a finished review)")
        _review(baseline, candidate, output, worst, by, random, seed, key, quality_json, lpips_backbone, max_px,
                alpha, workers, mkdir, quiet)


def _review(baseline: Path | None, candidate: Path | None, output: Path | None, worst: int, by: str, random: int,
            seed: int, key: Path | None, quality_json: Path | None, lpips_backbone: Path | None, max_px: int,
            alpha: str, workers: int, mkdir: bool, quiet: bool) -> None:
    from diffbench.core.console import make_console
    from diffbench.core.outpath import check_not_an_input, check_output_file
    from diffbench.core.progress import LiveLine
    from diffbench.errors import InputError, UsageError
    from diffbench.quality.io import ALPHA_POLICIES
    from diffbench.quality.review import BY

    if baseline is None or candidate is None:
        raise UsageError("give BASELINE and CANDIDATE output directories (or --score VERDICTS to score a review)")
    if output is None:
        raise UsageError("-o/--output: name the review page to write, e.g. -o review.html")
    if by not in BY:
        raise UsageError(f"--by {by!r}: choose one of {', '.join(BY)}")
    if worst < 0 or random < 0:
        raise UsageError("--worst and --random must be >= 0")
    if worst + random == 0:
        raise UsageError("--worst 0 and --random 0 select nothing; ask for at least one pair")
    if max_px < 16:
        raise UsageError(f"--max-px {max_px}: must be >= 16")
    if workers < 1:
        raise UsageError("--workers must be >= 1")
    if alpha not in ALPHA_POLICIES:
        raise UsageError(f"--alpha {alpha!r}: choose one of {', '.join(ALPHA_POLICIES)}")
    output = check_output_file(output, "-o", mkdir=mkdir)
    key = check_output_file(key if key is not None else output.with_name(output.stem + ".key.json"), "--key",
                            mkdir=mkdir)
    if key.resolve() == output.resolve():
        raise UsageError(f"-o and --key both name {output}; the key must be a separate file")
    for opt, path in (("-o", output), ("--key", key)):
        check_not_an_input(path, opt, files=[p for p in (quality_json, lpips_backbone) if p is not None],
                           dirs=[baseline, candidate])
    for side, d in (("BASELINE", baseline), ("CANDIDATE", candidate)):
        if not d.is_dir():
            what = "does not exist" if not d.exists() else "is not a directory"
            raise InputError(f"{side} {d} {what}; give a run's output directory (bench --save-outputs DIR) "
                             "or a folder of images")
    if quality_json is not None and not quality_json.is_file():
        raise InputError(f"--quality {quality_json}: no such file; give the JSON of diffbench quality --json")
    with LiveLine.for_cli(quiet) as line:
        k, html, n_compared, taken = write_review(baseline, candidate, output, key, worst=worst, by=by,
                                                  random=random, seed=seed, quality_json=quality_json,
                                                  lpips_backbone=lpips_backbone, max_px=max_px, alpha=alpha,
                                                  workers=workers, status=line.update)
    n_worst = sum(p.selection == "worst" for p in k.pairs)
    out = make_console()
    out.print(f"review {k.review_id}: {len(k.pairs)} of {n_compared} pairs ({n_worst} worst by {by}, {taken} at "
              f"random; seed {seed}); metric: {k.metric_source}", soft_wrap=True)
    for note in k.notes:
        out.print(f"note: {note}", soft_wrap=True)
    out.print(f"page: {output} ({len(html) / 1e6:.2f} MB)", soft_wrap=True)
    out.print(f"key:  {key} (keep it away from the reviewer; diffbench review --score VERDICTS --key {key})",
              soft_wrap=True)


def write_review(baseline: Path, candidate: Path, output: Path, key: Path, *, worst: int = 10, by: str = "psnr",
                 random: int = 10, seed: int = 0, quality_json: Path | None = None,
                 lpips_backbone: Path | None = None, max_px: int = 768, alpha: str = "reject", workers: int = 2,
                 status: Callable[[str], None] | None = None) -> tuple[ReviewKey, str, int, int]:
    """Score the pairs, select the worst-N by ``by`` plus a seeded random sample, write the key and the
    blind page (``diffbench review`` and ``diffbench derive`` for its chosen lossy point).

    Returns:
        (key, page HTML, pairs compared, random pairs taken).
    """
    from diffbench.core.jsonio import write_json_atomic, write_text_atomic
    from diffbench.quality.review import build_key, page_images, prompts_of, scored_pairs, select_pairs
    from diffbench.report.review_page import render_review_page

    say = status or (lambda _m: None)

    def progress(i: int, n: int) -> None:
        say(f"review: scoring pairs {i}/{n}")

    pairs, source, notes = scored_pairs(baseline, candidate, by, quality_json, lpips_backbone, workers, alpha,
                                        progress=progress, read_quality=_load_quality)
    placed, taken, sel_notes = select_pairs(pairs, by, worst, random, seed)
    k = build_key(baseline, candidate, placed, seed=seed, by=by, source=source, worst=worst,
                  random_asked=random, random_taken=taken, n_compared=len(pairs), max_px=max_px,
                  notes=notes + sel_notes)
    say(f"review: encoding {len(k.pairs)} pairs")
    html = render_review_page(k.review_id, page_images(k, prompts_of(baseline), alpha))
    write_json_atomic(key, k.model_dump(mode="json"))
    write_text_atomic(output, html)
    return k, html, len(pairs), taken


def _load_quality(path: Path) -> QualityReport:
    """The quality report saved at ``path`` (``--quality``). Raises InputError for any other result kind."""
    from diffbench.errors import InputError
    from diffbench.report.loader import load_result

    res = load_result(path)
    if res.kind != "quality":
        raise InputError(f"--quality {path} is a {res.kind} result; give the JSON of diffbench quality --json")
    return res.model  # type: ignore[no-any-return]


def _score(baseline: Path | None, candidate: Path | None, output: Path | None, score_path: Path, key: Path | None,
           max_worse: float | None, confidence: float, json_out: Path | None, mkdir: bool) -> None:
    import json

    from diffbench.core.console import make_console
    from diffbench.core.jsonio import strict_json_value, write_json_atomic
    from diffbench.core.outpath import check_not_an_input, check_output_file
    from diffbench.errors import GateFailed, UsageError
    from diffbench.quality.review import read_key
    from diffbench.quality.review_score import score

    if baseline is not None or candidate is not None or output is not None:
        raise UsageError("--score takes no BASELINE/CANDIDATE/-o: score with --score VERDICTS --key KEY")
    if key is None:
        raise UsageError("--score needs --key: the .key.json that diffbench review wrote next to the page")
    if max_worse is not None and not 0.0 < max_worse <= 1.0:
        raise UsageError(f"--max-worse {max_worse}: a share of pairs in (0, 1], e.g. 0.1")
    if not 0.0 < confidence < 1.0:
        raise UsageError(f"--confidence {confidence}: must be in (0, 1), e.g. 0.95")
    to_stdout = json_out is not None and str(json_out) == "-"
    if json_out is not None and not to_stdout:
        json_out = check_output_file(json_out, "--json", mkdir=mkdir)
        check_not_an_input(json_out, "--json", files=[score_path, key])
    res = score(score_path, key, read_key(key), max_worse=max_worse, confidence=confidence)
    if to_stdout:
        typer.echo(json.dumps(strict_json_value(res.model_dump(mode="json")), indent=2))
    else:
        _table(res, make_console())
        if json_out is not None:
            write_json_atomic(json_out, res.model_dump(mode="json"))
    if res.passed is False:
        raise GateFailed(res.message)


def _table(res: object, console: object) -> None:
    from rich.console import Console
    from rich.table import Table

    from diffbench.quality.review_score import ReviewScore

    assert isinstance(res, ReviewScore) and isinstance(console, Console)
    pct = f"{res.confidence:.0%}"
    t = Table(title=f"blind review {res.review_id}: candidate vs baseline, n={res.counts.n} pairs")
    for h in ("candidate judged", "pairs", "share", f"{pct} CI ({res.ci_method})"):
        t.add_column(h, justify="left" if h == "candidate judged" else "right")
    for name, s in (("worse", res.worse), ("same", res.same), ("better", res.better)):
        t.add_row(name, str(s.k), f"{s.share:.1%}", f"{s.ci_low:.1%} - {s.ci_high:.1%}")
    console.print(t)
    sel = "; ".join(f"{k}: {c.worse} worse / {c.same} same / {c.better} better of {c.n}"
                    for k, c in sorted(res.by_selection.items()))
    console.print(f"by selection: {sel} (the worst pairs were chosen to be the worst; the random ones estimate "
                  "all outputs)", soft_wrap=True)
    if res.time_ms_median is not None:
        console.print(f"time per pair: median {res.time_ms_median / 1000:.1f} s, total "
                      f"{(res.time_ms_total or 0) / 1000:.1f} s", soft_wrap=True)
    if res.passed is None:
        console.print("no gate (pass --max-worse SHARE to fail when the candidate is judged worse too often)")
    else:
        console.print(f"{'PASS' if res.passed else 'FAIL'}: {res.message}", soft_wrap=True)
