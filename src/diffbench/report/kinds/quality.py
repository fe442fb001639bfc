"""Report sections of quality results (``diffbench quality --json``).

Sections: an overview of every result (pairs, identical, errors, gates), overlaid per-metric histograms
(one series per result), then per result: its summaries, gates, distribution metrics (FID/KID with n),
generation settings that differ, pair errors, warnings, the worst-N grid (baseline | candidate | amplified
difference heat map, lowest PSNR first, identical pairs last) with each pair's numbers, per-frame curves of
its video pairs, and a table of every pair's numbers (what the histograms plot).

The grid decodes the pair's files again (see :mod:`diffbench.report.kinds.quality_images`); when they are
gone, building the report fails with :class:`~diffbench.errors.InputError` naming the missing file, never
a blank grid.
"""

from __future__ import annotations

import math
from pathlib import Path

from diffbench.quality.models import PairResult, QualityReport
from diffbench.report.document import Block, Facts, ImageCell, ImageGrid, ImageRow, Note, Section, Table
from diffbench.report.kinds import ReportOptions
from diffbench.report.kinds import quality_images as qi
from diffbench.report.kinds.quality_plots import frame_curves, histograms, worst_frame
from diffbench.report.loader import LoadedResult
from diffbench.report.quality_render import n_of_pairs

MAX_PAIR_ROWS = 500
MAX_VIDEO_CURVES = 8
PROMPT_CHARS = 40  # a grid row shows the prompt's start (the pairs table and manifest hold it whole)


def fmt(v: float | None, digits: int = 4) -> str:
    """A metric value as text: ``+inf`` for identical pairs, ``-`` when absent."""
    if v is None:
        return "-"
    if math.isinf(v):
        return "+inf" if v > 0 else "-inf"
    return f"{v:.{digits}f}"


def _psnr_key(p: PairResult) -> tuple[float, str]:
    v = p.metrics.get("psnr")
    return (math.inf if v is None else float(v), p.key)


def worst_pairs(report: QualityReport, n: int) -> list[PairResult]:
    """The ``n`` pairs of lowest PSNR (identical pairs, +inf, last; ties by key)."""
    return sorted(report.pairs, key=_psnr_key)[:n]


def _seed_of(key: str) -> str | None:
    parts = key.split("/")
    if len(parts) == 3 and parts[1].startswith("seed"):
        return parts[1].removeprefix("seed")
    return None


def _prompts(report: QualityReport, result_path: Path) -> dict[str, str]:
    """Prompt per pair key from the baseline's manifest, when it can be found (else empty)."""
    from diffbench.core.manifest import read_manifest
    from diffbench.errors import InputError

    base = Path(report.baseline)
    for d in ([base] if base.is_absolute() else [base, result_path.resolve().parent / base]):
        if d.is_dir():
            try:
                m = read_manifest(d)
            except InputError:
                return {}
            if m is None:
                return {}
            return {f"{e.prompt_id}/seed{e.seed}/{e.index}": e.prompt for e in m.entries if e.prompt}
    return {}


def _row_numbers(p: PairResult, frame: int | None, prompt: str | None) -> list[tuple[str, str]]:
    m = p.metrics
    nums = [("PSNR (dB)", fmt(m.get("psnr"), 2) + (" (identical)" if p.identical else "")),
            ("SSIM", fmt(m.get("ssim")))]
    if m.get("ms_ssim") is not None:
        nums.append(("MS-SSIM", fmt(m.get("ms_ssim"))))
    if m.get("lpips") is not None:
        nums.append(("LPIPS", fmt(m.get("lpips"))))
    if p.video is not None and frame is not None:
        nums.append(("frames", str(p.video.frames)))
        nums.append((f"frame {frame} PSNR (dB)", fmt(p.video.psnr_worst, 2)))
    if (seed := _seed_of(p.key)) is not None:
        nums.append(("seed", seed))
    if prompt:
        nums.append(("prompt", prompt if len(prompt) <= PROMPT_CHARS else prompt[:PROMPT_CHARS - 3] + "..."))
    nums.append(("size", f"{p.width}x{p.height}"))
    return nums


def grid(result: LoadedResult, opts: ReportOptions, block_id: str) -> ImageGrid | None:
    """The worst-N grid of one result (None when ``opts.worst`` is 0 or there are no pairs).

    Raises:
        InputError: a pair's file cannot be found or decoded (names it and what to do).
    """
    report: QualityReport = result.model
    chosen = worst_pairs(report, opts.worst)
    if not chosen:
        return None
    prompts = _prompts(report, result.path)
    frames_by_key: dict[str, list] = {}
    for fr in report.frames:
        frames_by_key.setdefault(fr.key, []).append(fr)
    rows = []
    for p in chosen:
        frame = None
        if p.kind == "video":
            frs = frames_by_key.get(p.key)
            frame = worst_frame(frs) if frs else (p.video.psnr_worst_frame if p.video else 0)
        pb = qi.resolve_pair_path(p.baseline, result.path, "baseline")
        pc = qi.resolve_pair_path(p.candidate, result.path, "candidate")
        a = qi.load_frame(pb, report.settings.alpha_policy, frame)
        b = qi.load_frame(pc, report.settings.alpha_policy, frame)
        if a.shape != b.shape:
            from diffbench.errors import InputError

            raise InputError(f"{pb} and {pc}: sizes differ now ({a.shape} vs {b.shape}); the files changed "
                             "after diffbench quality ran: run it again")
        mag, heat = qi.heat_map(a, b, opts.amplify)
        where = f" frame {frame}" if frame is not None else ""
        cells = [ImageCell(qi.png(qi.thumbnail(a, opts.thumb_px)), f"baseline{where}", f"baseline {p.key}{where}"),
                 ImageCell(qi.png(qi.thumbnail(b, opts.thumb_px)), f"candidate{where}", f"candidate {p.key}{where}"),
                 ImageCell(qi.png(qi.thumbnail(heat, opts.thumb_px, block_max=True)),
                           f"|diff| x{opts.amplify:g} (max {int(mag.max())}/255)", f"difference heat map {p.key}")]
        rows.append(ImageRow(title=p.key, cells=cells, numbers=_row_numbers(p, frame, prompts.get(p.key))))
    down, up = qi.scale_factor(chosen[0].height, chosen[0].width, opts.thumb_px)
    scale = (f"downscaled x1/{down} (box average; heat map: block maximum)" if down > 1 else
             f"enlarged x{up} nearest-neighbour" if up > 1 else "at full size")
    cap = (f"{len(rows)} of {report.n_pairs} pairs, lowest PSNR first (identical pairs last). Heat map: mean over "
           f"channels of |candidate - baseline| in 8-bit levels x {opts.amplify:g}, clipped at 255, inferno "
           f"colormap (black = equal; yellow = a difference of {255 / opts.amplify:.3g} levels or more). Images "
           f"{scale}. A video shows its worst frame (lowest PSNR).")
    return ImageGrid(id=block_id, title=f"worst {len(rows)} pairs by PSNR", rows=rows, caption=cap)


def _summaries(report: QualityReport, bid: str) -> Table:
    heads = ["metric", "better", "n", "identical", "+inf", "mean (non-identical)", "p10", "p50", "p90", "min",
             "max", "worst"]
    rows = [[k, "higher" if s.higher_is_better else "lower", n_of_pairs(s), str(s.n_identical), str(s.n_inf),
             fmt(s.mean), fmt(s.p10), fmt(s.p50), fmt(s.p90), fmt(s.min), fmt(s.max), fmt(s.worst)]
            for k, s in report.summaries.items()]
    undefined = "; ".join(f"{k}: undefined for {s.n_pairs - s.n} of {s.n_pairs} ("
                          + ", ".join(f"{r}: {c}" for r, c in s.undefined.items()) + ")"
                          for k, s in report.summaries.items() if s.n_pairs is not None and s.undefined)
    return Table(id=bid, title="summaries", headers=heads, rows=rows,
                 caption=f"PSNR in dB. Percentiles: {report.settings.percentile_method}. "
                         f"{report.settings.identical_policy}."
                         + (f" n/N: defined for n of the N pairs the metric applies to; {undefined}." if undefined
                            else ""))


def _pairs_table(report: QualityReport, bid: str) -> Table:
    metrics = [m for m in ("psnr", "ssim", "ms_ssim", "lpips", "clip_delta", "pickscore_delta", "clip_iqa_delta")
               if any(p.metrics.get(m) is not None for p in report.pairs)]
    ordered = sorted(report.pairs, key=_psnr_key)
    rows = [[p.key, p.kind, "yes" if p.identical else ""] + [fmt(p.metrics.get(m)) for m in metrics]
            for p in ordered[:MAX_PAIR_ROWS]]
    more = f" Showing {MAX_PAIR_ROWS} of {len(ordered)}." if len(ordered) > MAX_PAIR_ROWS else ""
    return Table(id=bid, title="every pair (lowest PSNR first)", headers=["key", "kind", "identical"]
                 + [("psnr (dB)" if m == "psnr" else m) for m in metrics], rows=rows,
                 caption="The values the histograms plot; a video's values are means over its non-identical "
                         f"frames.{more}")


def _result_blocks(r: LoadedResult, opts: ReportOptions, pre: str) -> list[Block]:
    rep: QualityReport = r.model
    blocks: list[Block] = [Facts(id=f"{pre}-facts", title="comparison", items=[
        ("baseline", rep.baseline), ("candidate", rep.candidate), ("pairing", rep.pairing),
        ("pairs", f"{rep.n_pairs} compared, {rep.n_identical} identical, {rep.n_border_only} border-only, "
                  f"{len(rep.errors)} error(s)"),
        ("noise floor run", "yes" if rep.noise_floor else "no")])]
    if rep.n_identical:
        blocks.append(Note(id=f"{pre}-identical", text=(
            f"{rep.n_identical} of {rep.n_pairs} pairs are identical (PSNR = +inf): counted in every n, "
            "sorted as best, not drawn in the PSNR histogram and excluded from the means.")))
    if rep.summaries:
        blocks.append(_summaries(rep, f"{pre}-summaries"))
    if rep.gates:
        blocks.append(Table(id=f"{pre}-gates", title="gates", headers=["gate", "value", "margin", "result"],
                            rows=[[g.expr, fmt(g.value), fmt(g.margin), "pass" if g.passed else "FAIL"]
                                  for g in rep.gates]))
    if rep.paired:
        blocks.append(Table(
            id=f"{pre}-paired", title="paired scores (Δ = candidate − baseline, same prompt and seed)",
            headers=["score", "n", "baseline mean", "candidate mean", "mean Δ", "SEM", "z", "95 % CI", "verdict"],
            rows=[[k, str(v.n), fmt(v.mean_baseline), fmt(v.mean_candidate), fmt(v.mean_delta), fmt(v.sem),
                   "undefined" if v.z is None else f"{v.z:.2f}",
                   "-" if v.ci95 is None else f"[{fmt(v.ci95[0])}, {fmt(v.ci95[1])}]", v.verdict]
                  for k, v in rep.paired.items()],
            caption=rep.settings.paired))
    if rep.distribution is not None:
        d = rep.distribution
        blocks.append(Table(id=f"{pre}-distribution", title="distribution metrics",
                            headers=["extractor", "n baseline", "n candidate", "FID", "KID mean", "KID std",
                                     "KID subsets x size"],
                            rows=[[d.extractor, str(d.n_baseline), str(d.n_candidate), fmt(d.fid), fmt(d.kid_mean, 6),
                                   fmt(d.kid_std, 6), f"{d.kid_subsets or '-'} x {d.kid_subset_size or '-'}"]],
                            caption="FID/KID between the two sets; unreliable at small n (see warnings)."))
        blocks += [Note(id=f"{pre}-dist-warn-{i}", text=w, level="warn") for i, w in enumerate(d.warnings)]
    if rep.settings_diff:
        blocks.append(Table(id=f"{pre}-settings-diff", title="generation settings that differ",
                            headers=["setting", "source", "baseline", "candidate", "why it matters"],
                            rows=[[s.field, s.source, str(s.baseline), str(s.candidate), s.note]
                                  for s in rep.settings_diff]))
    if rep.errors:
        blocks.append(Table(id=f"{pre}-errors", title=f"pair errors ({len(rep.errors)})",
                            headers=["key", "baseline", "candidate", "problem"],
                            rows=[[e.key, e.baseline or "-", e.candidate or "-", e.problem] for e in rep.errors]))
    blocks += [Note(id=f"{pre}-warn-{i}", text=w, level="warn") for i, w in enumerate(rep.warnings)]
    if rep.n_pairs == 0:
        blocks.append(Note(id=f"{pre}-empty", text="no pair was compared: nothing to show", level="warn"))
        return blocks
    g = grid(r, opts, f"{pre}-grid")
    if g is not None:
        blocks.insert(2 if rep.n_identical else 1, g)
    blocks += _video_blocks(rep, pre)
    blocks.append(_pairs_table(rep, f"{pre}-pairs"))
    s = rep.settings
    blocks.append(Facts(id=f"{pre}-settings", title="metric settings", items=[
        ("PSNR", s.psnr), ("SSIM", s.ssim)] + ([("MS-SSIM", s.ms_ssim)] if s.ms_ssim else [])
        + ([("LPIPS", s.lpips + ("" if s.lpips_calibrated else " (uncalibrated)"))] if s.lpips else [])
        + ([("CLIP", s.clip)] if s.clip else []) + ([("PickScore", s.pickscore)] if s.pickscore else [])
        + ([("CLIP-IQA", s.clip_iqa)] if s.clip_iqa else []) + [("alpha", s.alpha_policy), ("video", s.video)]))
    return blocks


def _video_blocks(rep: QualityReport, pre: str) -> list[Block]:
    by_key: dict[str, list] = {}
    for fr in rep.frames:
        by_key.setdefault(fr.key, []).append(fr)
    videos = [p for p in sorted(rep.pairs, key=_psnr_key) if p.kind == "video" and p.key in by_key]
    out: list[Block] = []
    for i, p in enumerate(videos[:MAX_VIDEO_CURVES]):
        rows = sorted(by_key[p.key], key=lambda f: f.frame)
        out.append(frame_curves(p.key, rows, f"{pre}-frames-{i}"))
        w = worst_frame(rows)
        out.append(Table(id=f"{pre}-frames-{i}-table", title=f"per frame: {p.key}",
                         headers=["frame", "psnr (dB)", "ssim", "lpips", "identical", "worst"],
                         rows=[[str(f.frame), fmt(f.psnr, 2), fmt(f.ssim), fmt(f.lpips), "yes" if f.identical else "",
                                "<- worst" if f.frame == w else ""] for f in rows]))
    if len(videos) > MAX_VIDEO_CURVES:
        out.append(Note(id=f"{pre}-frames-more", text=f"per-frame curves of the {MAX_VIDEO_CURVES} worst of "
                        f"{len(videos)} video pairs shown; every frame is in the result's frames / --csv"))
    return out


def build(results: list[LoadedResult], opts: ReportOptions) -> list[Section]:
    """Sections of one or several quality results (histograms overlaid, one grid per result).

    Raises:
        InputError: a pair's image or video file is gone or unreadable (see :func:`grid`).
    """
    over = Table(id="quality-overview-table", title="results",
                 headers=["result", "baseline", "candidate", "pairs", "identical", "errors", "psnr p50 (dB)",
                          "gates"],
                 rows=[[r.label, r.model.baseline, r.model.candidate, str(r.model.n_pairs), str(r.model.n_identical),
                        str(len(r.model.errors)),
                        fmt(r.model.summaries["psnr"].p50, 2) if "psnr" in r.model.summaries else "-",
                        _gates_word(r.model)] for r in results])
    hist = histograms(results, "quality-hist")
    sections = [Section(id="quality-overview", title="quality: overview",
                        blocks=[over] + ([hist] if hist is not None else []))]
    for i, r in enumerate(results, 1):
        pre = f"quality-{i}"
        sections.append(Section(id=pre, title=f"quality: {r.label}", blocks=_result_blocks(r, opts, pre)))
    return sections


def _gates_word(rep: QualityReport) -> str:
    if not rep.gates:
        return "none"
    failed = sum(not g.passed for g in rep.gates)
    return f"{len(rep.gates) - failed} pass, {failed} FAIL" if failed else f"{len(rep.gates)} pass"
