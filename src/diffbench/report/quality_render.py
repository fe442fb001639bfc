"""Render a :class:`~diffbench.quality.models.QualityReport`: rich console tables, JSON and CSV."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from rich.console import Console
from rich.table import Table

from diffbench.core.console import make_console
from diffbench.core.jsonio import write_json_atomic, write_text_atomic
from diffbench.quality.models import MetricSummary, QualityReport

_ORDER = ("psnr", "ssim", "ms_ssim", "lpips", "frame_psnr", "frame_ssim", "frame_lpips", "flicker_delta",
          "motion_ratio", "clip_baseline", "clip_candidate", "clip_delta", "pickscore_baseline", "pickscore_candidate",
          "pickscore_delta", "clip_iqa_baseline", "clip_iqa_candidate", "clip_iqa_delta")
CSV_COLUMNS = ("key", "frame", "kind", "baseline", "candidate", "height", "width", "psnr", "ssim", "ms_ssim",
               "lpips", "identical", "flicker_delta", "motion_ratio", "notes", "border_only_difference")


def _f(v: float | None, digits: int = 4) -> str:
    if v is None:
        return "-"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.{digits}f}"


def _c(v: float | None) -> str:
    """CSV cell: empty for None, 'inf' for +inf, full precision otherwise."""
    if v is None:
        return ""
    return _f(v, 6) if math.isinf(v) else repr(float(v))


def write_json(report: QualityReport, path: Path) -> Path:
    """Strict JSON (``+inf`` written as the string "inf")."""
    return write_json_atomic(path, report.model_dump(mode="python"))


def write_csv(report: QualityReport, path: Path) -> Path:
    """One row per image pair; one row per frame for video pairs (video-level fields on every frame row)."""
    p = Path(path)  # the parent was checked (diffbench.core.outpath) before the run; nothing is created here
    frames_by_key: dict[str, list] = {}
    for fr in report.frames:
        frames_by_key.setdefault(fr.key, []).append(fr)
    fh = io.StringIO()  # the rows go to memory, then one atomic write (no .tmp left when it fails)
    w = csv.writer(fh)
    w.writerow(CSV_COLUMNS)
    for pr in report.pairs:
        base = [pr.key, "", pr.kind, pr.baseline, pr.candidate, pr.height, pr.width]
        notes = "; ".join(pr.notes)
        if pr.kind == "video" and pr.video is not None:
            for fr in frames_by_key.get(pr.key, []):
                w.writerow([pr.key, fr.frame, pr.kind, pr.baseline, pr.candidate, pr.height, pr.width,
                            _c(fr.psnr), _c(fr.ssim), "", _c(fr.lpips), fr.identical,
                            _c(pr.video.flicker_delta), _c(pr.video.motion_ratio), notes,
                            fr.border_only_difference])
            continue
        m = pr.metrics
        w.writerow(base + [_c(m.get("psnr")), _c(m.get("ssim")), _c(m.get("ms_ssim")),
                           _c(m.get("lpips")), pr.identical, "", "", notes, pr.border_only_difference])
    write_text_atomic(p, fh.getvalue(), newline="")
    return p


def n_of_pairs(s: MetricSummary) -> str:
    """``n`` of a summary, as ``n/N`` when the metric is undefined for some of the ``N`` pairs it applies to."""
    return str(s.n) if s.n_pairs is None or s.n_pairs == s.n else f"{s.n}/{s.n_pairs}"


def render_console(report: QualityReport, console: Console | None = None) -> None:
    """Summary table, worst pairs, errors, distribution metrics and gate results."""
    c = console or make_console()
    title = "noise floor (baseline vs baseline re-run)" if report.noise_floor else "quality vs baseline"
    c.print(f"[bold]{title}[/]: {report.candidate} vs {report.baseline} — paired by {report.pairing}, "
            f"{report.n_pairs} pairs, {report.n_identical} identical, "
            + (f"{report.n_border_only} differ only in SSIM's 5-px border, " if report.n_border_only else "")
            + f"{len(report.errors)} errors")
    if report.distributed is not None:
        r = report.distributed
        if r.actors == 0:  # everything was kept by an earlier run: nothing was scored, no actor started
            c.print(f"distributed: all {r.resumed} pair(s) kept from an earlier run in {r.state}; no actor started "
                    f"(--ray {r.address})")
        else:
            c.print(f"distributed: {r.actors} Ray actor(s) x {r.threads_per_actor} thread(s) on {len(r.nodes)} "
                    f"node(s) ({', '.join(r.nodes)}), {r.shards} shards, --ray {r.address}"
                    + (f"; {r.resumed} pair(s) kept from an earlier run in {r.state}" if r.resumed else ""))
    if report.settings_diff:
        st = Table(title=f"{len(report.settings_diff)} generation setting(s) differ between the two manifests "
                         "(expected only for the option under test)")
        for col in ("setting", "baseline", "candidate", "why it matters"):
            st.add_column(col)
        for d in report.settings_diff:
            st.add_row(f"{d.field}" + (f" ({d.source})" if d.source != "conditions" else ""), str(d.baseline),
                       str(d.candidate), d.note)
        c.print(st)
    # never cut a metric name or a number at 80 columns: the metric column is as wide as its longest name
    # (a " (lower better)" suffix wraps under it), numbers never wrap, only the long headers fold; no outer
    # edge, so that 8 columns fit in 80
    t = Table(title="per-pair metrics (worst is direction-aware)", show_edge=False, pad_edge=False,
              collapse_padding=True)
    names = [k for k in _ORDER if k in report.summaries] + sorted(set(report.summaries) - set(_ORDER))
    t.add_column("metric", justify="left", min_width=max((len(k) for k in names), default=6), overflow="fold")
    t.add_column("n", justify="right", no_wrap=True)
    t.add_column("identical", justify="right", overflow="fold", max_width=5)
    for col in ("mean (non-identical)", "p50", "p10", "p90", "worst"):  # _f: at most 8 characters
        t.add_column(col, justify="right", min_width=8, max_width=8, overflow="fold")
    for k in names:
        s = report.summaries[k]
        t.add_row(k + ("" if s.higher_is_better else " (lower better)"), n_of_pairs(s), str(s.n_identical), _f(s.mean),
                  _f(s.p50), _f(s.p10), _f(s.p90), _f(s.worst))
    c.print(t)
    border_only = {p.key for p in report.pairs if p.border_only_difference}
    for k in names:
        s = report.summaries[k]
        if not s.worst_pairs or k.startswith("frame_"):
            continue
        wt = Table(title=f"worst {len(s.worst_pairs)} by {k}")
        wt.add_column("key", overflow="fold")
        wt.add_column(k, justify="right", no_wrap=True)
        wt.add_column("candidate", overflow="fold")  # a path cut with an ellipsis cannot be opened
        for wp in s.worst_pairs:
            flag = " (differs only in the 5-px border)" if wp.key in border_only else ""
            wt.add_row(wp.key + flag, _f(wp.value), wp.candidate)
        c.print(wt)
    vids = [p for p in report.pairs if p.video is not None]
    if vids:
        vt = Table(title="videos")
        for col in ("key", "frames", "worst PSNR (frame)", "worst SSIM (frame)", "flicker Δ", "motion ratio"):
            vt.add_column(col)
        for p in vids:
            v = p.video
            assert v is not None
            vt.add_row(p.key + (" (animated image)" if p.animated else ""), str(v.frames), f"{_f(v.psnr_worst, 2)} ({v.psnr_worst_frame})",
                       f"{_f(v.ssim_worst)} ({v.ssim_worst_frame})", _f(v.flicker_delta, 5), _f(v.motion_ratio))
        c.print(vt)
    if report.paired:
        pt = Table(title="paired scores: Δ = candidate − baseline on the same prompt and seed", show_edge=False,
                   pad_edge=False, collapse_padding=True)
        for col in ("score", "n", "mean Δ", "SEM", "z", "95 % CI", "verdict"):  # side means: in the JSON
            left = col in ("score", "verdict", "95 % CI")
            pt.add_column(col, justify="left" if left else "right", overflow="fold",
                          min_width=13 if col == "verdict" else None, no_wrap=col != "95 % CI")
        for name, r in report.paired.items():
            ci = "-" if r.ci95 is None else f"[{_f(r.ci95[0])}, {_f(r.ci95[1])}]"
            pt.add_row(name, str(r.n), _f(r.mean_delta), _f(r.sem), "undefined" if r.z is None else f"{r.z:.2f}",
                       ci, r.verdict)
        c.print(pt)
    if report.distribution is not None:
        d = report.distribution
        c.print(f"FID = {_f(d.fid, 3)} (N = {d.n_baseline} baseline / {d.n_candidate} candidate, {d.extractor}); "
                f"KID = {_f(d.kid_mean, 5)} ± {_f(d.kid_std, 5)} (subset size {d.kid_subset_size})")
        for w in d.warnings:
            c.print(f"[yellow]warning:[/] {w}")
    for w in report.warnings:
        c.print(f"[yellow]warning:[/] {w}")
    if report.settings.lpips_calibrated is False:
        c.print("[yellow]warning:[/] LPIPS is UNCALIBRATED (random backbone)")
    if report.errors:
        et = Table(title=f"{len(report.errors)} pair errors")
        et.add_column("key")
        et.add_column("problem")
        for e in report.errors:
            et.add_row(e.key, e.problem)
        c.print(et)
    if report.noise_floor and report.summaries:
        c.print("[bold]noise floor[/] (two runs of one configuration): a gate stricter than these values "
                "fails the baseline against itself; calibrate gates with a margin beyond them.")
        for k in names:
            s = report.summaries[k]
            op = ">=" if s.higher_is_better else "<="
            c.print(f"  {k}: worst {_f(s.worst)}, p10 {_f(s.p10)}, p90 {_f(s.p90)} "
                    f"-> a gate '{k}.worst{op}T' needs T {'below' if s.higher_is_better else 'above'} "
                    f"{_f(s.worst)}")
    for g in report.gates:
        c.print(("[green]" if g.passed else "[red]") + g.message + "[/]")
