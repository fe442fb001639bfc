"""Compare a candidate run with its baseline: pair, score per pair (streamed), summarize, gate.

Pairs are decoded and scored in ``options.workers`` threads with at most ``2 × workers`` pairs in
flight, so memory stays bounded by the batch, not by the number of pairs. Every failed pair becomes a
:class:`PairError` (listed, never dropped silently).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from diffbench.core.stats import PERCENTILE_METHOD
from diffbench.errors import DiffbenchError, UsageError
from diffbench.quality import video as vid
from diffbench.quality.distribution import ClipScorer, FeatureExtractor, FeatureStats, fid_from_stats, kid
from diffbench.quality.gates import Gate, evaluate_gates
from diffbench.quality.io import Loaded, load_any
from diffbench.quality.kernels import SSIM_RADIUS, ms_ssim, psnr, ssim, ssim_border_difference
from diffbench.quality.memory import check_pair, pair_budget
from diffbench.quality.models import (
    SIDE_SCORES,
    DistributedRun,
    DistributionResult,
    FrameRow,
    MetricSettings,
    PairError,
    PairResult,
    QualityOptions,
    QualityReport,
    VideoStats,
)
from diffbench.quality.pairing import PairSpec, pair_outputs
from diffbench.quality.preference import ClipIqaScorer, PickScorer, paired_delta
from diffbench.quality.summary import Sample, summarize_metric

MS_SSIM_DESC = (
    "torchmetrics.functional.multiscale_structural_similarity_index_measure(gaussian_kernel=True, sigma=1.5, "
    "kernel_size=11, data_range=R, 5 scales, normalize='relu'); only where H, W >= 176"
)


@dataclass
class PairOutcome:
    """What scoring one pair gives: its ``pair`` row and per-frame ``frames`` rows, or its ``error``; ``feats``
    are the (baseline, candidate) feature rows (each ``(N, d)``, fed to ``FeatureStats.update``) when a
    distribution metric is asked for. Sent between processes and Ray actors as it is."""

    pair: PairResult | None = None
    frames: list[FrameRow] = field(default_factory=list)
    error: PairError | None = None
    feats: tuple[np.ndarray, np.ndarray] | None = None


@dataclass
class Scorers:
    """The models a pair is scored with (each None when not asked for); loaded once per process or actor."""

    lp: Callable | None = None
    fx: FeatureExtractor | None = None
    clip: ClipScorer | None = None
    pick: PickScorer | None = None
    iqa: ClipIqaScorer | None = None
    budget: int | None = None  # bytes one pair may take (quality.memory.pair_budget); None: unbounded


def load_scorers(opt: QualityOptions, pairing_mode: str, lpips_model: Callable | None = None,
                 feature_extractor: FeatureExtractor | None = None) -> Scorers:
    """Load the scorers ``opt`` asks for (given models are used as they are).

    Raises:
        UsageError: ``--clip``/``--pickscore`` without manifests (no prompts). MissingWeightsError: weights absent.
    """
    lp = lpips_model
    if opt.lpips and lp is None:
        from diffbench.quality.lpips import load_lpips

        lp = load_lpips(opt.lpips_backbone)
    fx = feature_extractor
    if opt.fid and fx is None:
        from diffbench.quality.distribution import load_inception

        fx = load_inception(opt.inception)

    def prompted(flag: str, path: Path | None, make: Callable[[Path], Any]) -> Any:
        """A scorer that reads each pair's prompt: it needs manifests on both sides."""
        if path is None:
            return None
        if pairing_mode != "manifest":
            raise UsageError(f"{flag} needs prompts: both directories must hold manifest.json (--save-outputs)")
        return make(path)

    clip = prompted("--clip", opt.clip, ClipScorer)
    pick = prompted("--pickscore", opt.pickscore, PickScorer)
    iqa = ClipIqaScorer(opt.clip_iqa) if opt.clip_iqa is not None else None
    budget = None if opt.allow_large else pair_budget(opt.max_memory, opt.workers)
    return Scorers(lp=lp, fx=fx, clip=clip, pick=pick, iqa=iqa, budget=budget)


def score_pair(spec: PairSpec, opt: QualityOptions, sc: Scorers) -> PairOutcome:
    """One pair's outcome: its row (and frames, and float64 feature rows for FID/KID) or its PairError."""
    return _score(spec, opt, sc.lp, sc.fx, sc.clip, sc.pick, sc.iqa, sc.budget)


def new_stats(sc: Scorers) -> tuple[FeatureStats | None, FeatureStats | None]:
    """Empty FID statistics of both sides (None without a feature extractor); rows are not kept (KID takes
    them from the outcomes, in pairing order)."""
    if sc.fx is None:
        return None, None
    return FeatureStats(sc.fx.dim, keep=False), FeatureStats(sc.fx.dim, keep=False)


def accumulate(out: PairOutcome, st_b: FeatureStats | None, st_c: FeatureStats | None) -> None:
    """Add a scored pair's features to the FID statistics of both sides (the single-process and the Ray paths
    both use this, so their sums are the same compensated float64 sums)."""
    if out.pair is not None and out.feats is not None and st_b is not None and st_c is not None:
        st_b.update(out.feats[0])
        st_c.update(out.feats[1])


class PairExecutor(Protocol):
    """Scores pairs elsewhere (``--ray``: :class:`diffbench.distributed.quality.RayPairs`)."""

    def outcomes(self, specs: Sequence[PairSpec], opt: QualityOptions, pairing_mode: str,
                 lpips_model: Callable | None, feature_extractor: FeatureExtractor | None) -> Iterator[PairOutcome]:
        """Outcomes in the order of ``specs``."""
        ...

    def stats(self) -> tuple[FeatureStats | None, FeatureStats | None]:
        """The merged FID statistics of both sides, once ``outcomes`` is exhausted."""
        ...

    def describe(self) -> DistributedRun:
        """What the run was distributed over (for the report)."""
        ...


def _err(spec: PairSpec, problem: str) -> PairOutcome:
    return PairOutcome(error=PairError(key=spec.key, baseline=str(spec.baseline), candidate=str(spec.candidate),
                                    problem=problem))


def _mismatch(a: Loaded, b: Loaded) -> str | None:
    if a.is_video != b.is_video:
        return (f"kind mismatch: baseline is {a.describe()}, candidate is {b.describe()} "
                "(not compared frame by frame)")
    if a.channels != b.channels:
        names = {1: "grayscale", 3: "RGB"}
        return (f"channel mismatch: baseline {names.get(a.channels, a.channels)}, candidate "
                f"{names.get(b.channels, b.channels)} (not converted)")
    if a.data_range != b.data_range:
        return f"range mismatch: baseline data range {a.data_range:g}, candidate {b.data_range:g} (uint8 vs float)"
    if a.frame_numbers is not None and b.frame_numbers is not None and a.frame_numbers != b.frame_numbers:
        return frame_number_mismatch(a.frame_numbers, b.frame_numbers)
    if a.is_video and a.array.shape[0] != b.array.shape[0]:
        return (f"frame count mismatch: baseline {a.describe()}, candidate {b.describe()} "
                "(not truncated or padded)")
    if a.array.shape != b.array.shape:
        ha, wa = a.array.shape[-3:-1]
        hb, wb = b.array.shape[-3:-1]
        return f"size mismatch: baseline {wa}x{ha}, candidate {wb}x{hb} (not resized)"
    return None


def _spans(numbers: Sequence[int]) -> str:
    """``[3, 4, 5, 9]`` → ``"3-5, 9"`` (at most 10 spans, then the count of the rest)."""
    spans: list[str] = []
    ns = sorted(numbers)
    i = 0
    while i < len(ns):
        j = i
        while j + 1 < len(ns) and ns[j + 1] == ns[j] + 1:
            j += 1
        spans.append(str(ns[i]) if i == j else f"{ns[i]}-{ns[j]}")
        i = j + 1
    return ", ".join(spans[:10]) + (f" (+{len(spans) - 10} more spans)" if len(spans) > 10 else "")


def frame_number_mismatch(nb: Sequence[int], nc: Sequence[int]) -> str:
    """The pair error of two frame folders whose frame numbers differ: the numbers missing on each side."""
    parts = []
    for side, mine, other in (("candidate", nc, nb), ("baseline", nb, nc)):
        missing = sorted(set(other) - set(mine))
        if missing:
            parts.append(f"frame{'s' if len(missing) > 1 else ''} {_spans(missing)} missing in {side}")
    what = "frame count mismatch" if len(nb) != len(nc) else "frame numbers differ"
    return (f"{what}: {'; '.join(parts)} (baseline {len(nb)} frames, candidate {len(nc)}; frames "
            "pair by the number in their file names, never by position: not compared)")


FPS_NOTE = "frame rates differ"


def frame_rate_note(a: Loaded, b: Loaded) -> str | None:
    """A note when two video files have different average frame rates (relative difference above 0.1 %)."""
    if a.fps is None or b.fps is None or abs(a.fps - b.fps) <= 1e-3 * max(a.fps, b.fps):
        return None
    return (f"{FPS_NOTE}: baseline {a.fps:.4g} fps, candidate {b.fps:.4g} fps; frames are paired by index, so frame i "
            f"is at {1 / a.fps * 1e3:.1f}·i ms vs {1 / b.fps * 1e3:.1f}·i ms: the same generated frames if only "
            "the export rate differs, otherwise not time-aligned")


def _score(spec: PairSpec, opt: QualityOptions, lp: Callable | None, fx: FeatureExtractor | None,
           clip: ClipScorer | None = None, pick: PickScorer | None = None,
           iqa: ClipIqaScorer | None = None, budget: int | None = None) -> PairOutcome:
    too_large, ms_note = check_pair(spec.baseline, spec.candidate, opt.ms_ssim, lp is not None, budget,
                                    opt.allow_large)
    if too_large:
        return _err(spec, too_large)  # refused from the headers, before decoding
    try:
        a = load_any(spec.baseline, opt.alpha, opt.allow_large)
        b = load_any(spec.candidate, opt.alpha, opt.allow_large)
    except DiffbenchError as exc:
        return _err(spec, str(exc))
    bad = _mismatch(a, b)
    if bad:
        return _err(spec, bad)
    r = a.data_range
    notes = sorted({f"baseline: {n}" for n in a.notes} | {f"candidate: {n}" for n in b.notes})
    if ms_note and not a.is_video:
        notes.append(ms_note)
    fps_note = frame_rate_note(a, b)
    if fps_note:
        notes.insert(0, fps_note)
    # one pass over the pixels: per frame for a video (its rows need it), summed for the pair
    per_frame_diff = ([ssim_border_difference(a.array[i], b.array[i]) for i in range(a.array.shape[0])]
                      if a.is_video else [ssim_border_difference(a.array, b.array)])
    border = sum(d[0] for d in per_frame_diff)
    interior = sum(d[1] for d in per_frame_diff)
    border_only = border > 0 and interior == 0
    if border_only:
        notes.append(f"border_only_difference: {border} pixel(s) differ, all within the {SSIM_RADIUS}-px border "
                     "SSIM crops (it sees them only through window tails and stays near 1; PSNR counts them); "
                     "not identical")
    common = dict(key=spec.key, baseline=str(spec.baseline), candidate=str(spec.candidate),
                  height=int(a.array.shape[-3]), width=int(a.array.shape[-2]), channels=a.channels, notes=notes,
                  animated=a.animated, border_diff_pixels=border, interior_diff_pixels=interior,
                  border_only_difference=border_only)
    try:
        if not a.is_video:
            m: dict[str, float | None] = {"psnr": psnr(a.array, b.array, r), "ssim": ssim(a.array, b.array, r)}
            if opt.ms_ssim and not ms_note:
                m["ms_ssim"] = ms_ssim(a.array, b.array, r)
            if lp is not None:
                if a.channels == 3:
                    m["lpips"] = float(lp(a.array, b.array, r)[0])
                else:
                    notes.append("LPIPS not computed: needs RGB")
            feats = None
            if fx is not None:
                if a.channels == 3 and a.array.dtype == np.uint8:
                    feats = (fx(a.array[None]), fx(b.array[None]))
                else:
                    notes.append("excluded from FID/KID: needs 8-bit RGB")
            rgb8 = a.channels == 3 and a.array.dtype == np.uint8
            # scores of each side: (metric prefix, scorer, needs the prompt, name in the note)
            for prefix, scorer, prompted, label in (("clip", clip, True, "CLIP score"),
                                                    ("pickscore", pick, True, "PickScore"),
                                                    ("clip_iqa", iqa, False, "CLIP-IQA")):
                if scorer is None:
                    continue
                if rgb8 and (spec.prompt or not prompted):
                    sb, sc = (scorer([a.array, b.array], [spec.prompt, spec.prompt]) if prompted  # type: ignore[call-arg]
                              else scorer([a.array, b.array]))  # type: ignore[call-arg]
                    m.update({f"{prefix}_baseline": sb, f"{prefix}_candidate": sc, f"{prefix}_delta": sc - sb})
                else:
                    notes.append(f"{label} not computed: needs 8-bit RGB" + (" and a manifest prompt" if prompted else ""))
            if any(v is not None and math.isnan(v) for v in m.values()):
                return _err(spec, f"metric produced NaN ({m})")
            pr = PairResult(kind="image", identical=border == 0 and interior == 0, metrics=m, **common)
            return PairOutcome(pair=pr, feats=feats)
        return _score_video(spec, a, b, lp, common, per_frame_diff)
    except DiffbenchError as exc:
        return _err(spec, str(exc))


def _score_video(spec: PairSpec, a: Loaded, b: Loaded, lp: Callable | None, common: dict,
                 diffs: list[tuple[int, int]]) -> PairOutcome:
    r = a.data_range
    p, s = vid.per_frame(a.array, b.array, r)
    lps = None
    if lp is not None and a.channels != 3:
        common["notes"].append("LPIPS not computed: needs RGB")
    if lp is not None and a.channels == 3:
        lps = np.concatenate([lp(a.array[i : i + 8], b.array[i : i + 8], r) for i in range(0, len(a.array), 8)])
    if np.isnan(p).any() or np.isnan(s).any():
        return _err(spec, "per-frame metric produced NaN")
    # Per-pair means over the video's non-identical frames for every metric (PSNR's +inf cannot be
    # averaged; SSIM and LPIPS follow the same rule so a video's metrics describe the same frames);
    # identical_frames counts the rest. An all-identical video keeps the identical values (SSIM 1, LPIPS 0).
    changed = ~np.isinf(p)
    pick = changed if changed.any() else np.ones_like(changed)
    mb, mc = vid.mean_abs_frame_diff(a.array, r), vid.mean_abs_frame_diff(b.array, r)
    fb, fc = vid.temporal_flicker(a.array, r), vid.temporal_flicker(b.array, r)
    stats = VideoStats(
        frames=int(a.array.shape[0]), psnr_mean=vid.finite_mean(p), psnr_worst=float(p.min()),
        psnr_worst_frame=vid.worst_index(p), identical_frames=int(np.isinf(p).sum()),
        ssim_mean=float(s[pick].mean()), ssim_worst=float(s.min()), ssim_worst_frame=vid.worst_index(s),
        lpips_mean=float(lps[pick].mean()) if lps is not None else None,
        lpips_worst=float(lps.max()) if lps is not None else None,
        lpips_worst_frame=vid.worst_index(lps, False) if lps is not None else None,
        flicker_baseline=fb, flicker_candidate=fc,
        flicker_delta=(fc - fb) if fb is not None and fc is not None else None,
        motion_baseline=mb, motion_candidate=mc, motion_ratio=vid.ratio(mc, mb),
    )
    psnr_pair = stats.psnr_mean if stats.psnr_mean is not None else math.inf
    m: dict[str, float | None] = {"psnr": psnr_pair, "ssim": stats.ssim_mean}
    if lps is not None:
        m["lpips"] = stats.lpips_mean
    numbers = a.frame_numbers  # a frame folder's rows carry the numbers in the file names
    if numbers is not None:
        stats.psnr_worst_frame = numbers[stats.psnr_worst_frame]
        stats.ssim_worst_frame = numbers[stats.ssim_worst_frame]
        if stats.lpips_worst_frame is not None:
            stats.lpips_worst_frame = numbers[stats.lpips_worst_frame]
    frames = []
    for i, (fb, fi) in enumerate(diffs):
        frames.append(FrameRow(key=spec.key, frame=numbers[i] if numbers is not None else i, psnr=float(p[i]), ssim=float(s[i]),
                               lpips=float(lps[i]) if lps is not None else None,
                               identical=bool(fb == 0 and fi == 0), border_only_difference=fb > 0 and fi == 0))
    if stats.flicker_delta is None:
        common["notes"].append("flicker_delta undefined: fewer than 2 frames (no frame difference)")
    why = vid.ratio_undefined(mc, mb)
    if why is not None:
        common["notes"].append(f"motion_ratio undefined: {why}")
    pr = PairResult(kind="video", frames=stats.frames, identical=not any(fb or fi for fb, fi in diffs),
                    metrics=m, video=stats, **common)
    return PairOutcome(pair=pr, frames=frames)


def _stream(specs: Sequence[PairSpec], fn: Callable[[PairSpec], PairOutcome], workers: int) -> Iterator[PairOutcome]:
    """Results in input order with at most 2·workers pairs in flight (bounded memory)."""
    if workers <= 1:
        for s in specs:
            yield fn(s)
        return
    with ThreadPoolExecutor(workers) as ex:
        pending: list[Future[PairOutcome]] = []
        it = iter(specs)
        for s in it:
            pending.append(ex.submit(fn, s))
            if len(pending) >= 2 * workers:
                yield pending.pop(0).result()
        for f in pending:
            yield f.result()


def _undefined_reason(metric: str, pr: PairResult) -> str:
    """Why ``metric`` has no value for ``pr``: the pair's own note on it, else "not computed for this pair"."""
    for note in pr.notes:
        if note.startswith(f"{metric} undefined: "):
            return note.removeprefix(f"{metric} undefined: ")
        if metric.startswith("lpips") and note.startswith("LPIPS not computed"):
            return note
    return "not computed for this pair"


def _summaries(report: QualityReport, worst_n: int) -> None:
    samples: dict[str, list[Sample]] = {}
    population: dict[str, int] = {}
    undefined: dict[str, dict[str, int]] = {}

    def add(metric: str, v: float | None, pr: PairResult, frame: int | None = None, same: bool = False) -> None:
        population[metric] = population.get(metric, 0) + 1
        if v is not None:
            samples.setdefault(metric, []).append(Sample(v, pr.key, pr.baseline, pr.candidate, frame, same))
        else:
            reasons = undefined.setdefault(metric, {})
            why = _undefined_reason(metric, pr)
            reasons[why] = reasons.get(why, 0) + 1

    # Identical pairs are flagged in every metric's sample (not only PSNR's +inf), so each row counts them.
    # Every pair counts in the population of each metric any pair of its kind has (a pair without the value:
    # undefined, with the reason), so each summary says n defined of n pairs.
    by_key = {p.key: p for p in report.pairs}
    names = list(dict.fromkeys(k for pr in report.pairs for k in pr.metrics))
    for pr in report.pairs:
        for k in names:
            add(k, pr.metrics.get(k), pr, same=pr.identical and not k.startswith(SIDE_SCORES))
        if pr.video is not None:
            add("flicker_delta", pr.video.flicker_delta, pr)
            add("motion_ratio", pr.video.motion_ratio, pr)
    for fr in report.frames:
        pr = by_key[fr.key]
        add("frame_psnr", fr.psnr, pr, fr.frame, fr.identical)
        add("frame_ssim", fr.ssim, pr, fr.frame, fr.identical)
        add("frame_lpips", fr.lpips, pr, fr.frame, fr.identical)
    for k, total in population.items():
        why = dict(sorted(undefined.get(k, {}).items(), key=lambda kv: (-kv[1], kv[0])))
        ss = samples.get(k, [])
        if why and (ss or not k.startswith("frame_lpips")):
            reasons = "; ".join(f"{r} ({c})" for r, c in why.items())
            report.warnings.append(f"{k}: defined for {len(ss)} of {total} pairs; undefined: {reasons}")
        summ = summarize_metric(k, ss, worst_n)
        if summ is not None:
            report.summaries[k] = summ.model_copy(update={"n_pairs": total, "undefined": why})
            if summ.n < 10 and not k.startswith(("flicker", "motion")):
                report.warnings.append(
                    f"{k}: p10/p90 from n={summ.n} are interpolations toward the min/max (need n >= 10)"
                )


def _paired(report: QualityReport) -> None:
    """Paired Δ statistics of every score computed on both sides of a pair (CLIP, PickScore, CLIP-IQA)."""
    for name in ("clip", "pickscore", "clip_iqa"):
        rows = [(p.metrics[f"{name}_baseline"], p.metrics[f"{name}_candidate"]) for p in report.pairs
                if p.metrics.get(f"{name}_baseline") is not None and p.metrics.get(f"{name}_candidate") is not None]
        if rows:
            res = paired_delta(name, [r[0] for r in rows], [r[1] for r in rows])  # type: ignore[misc]
            report.paired[name] = res
            report.warnings.extend(res.warnings)


def compare_dirs(
    baseline: Path,
    candidate: Path,
    options: QualityOptions | None = None,
    gates: Sequence[Gate | str] = (),
    lpips_model: Callable | None = None,
    feature_extractor: FeatureExtractor | None = None,
    progress: Callable[[int, int], None] | None = None,
    noise_floor: bool = False,
    executor: PairExecutor | None = None,
) -> QualityReport:
    """Compare every candidate output with its baseline counterpart.

    Args:
        baseline, candidate: output directories (with ``manifest.json`` → paired by key; else by path).
        options: :class:`QualityOptions`.
        gates: gate expressions or parsed gates, evaluated on the summaries.
        lpips_model: an LPIPS scorer (default: :func:`~diffbench.quality.lpips.load_lpips` when
            ``options.lpips``); feature_extractor: for FID/KID (default: the Inception TorchScript when
            ``options.fid``).
        progress: called with (done, total) after each pair.
        executor: scores the pairs elsewhere (``--ray``); the pairing, the summaries, gates and FID/KID are
            computed here either way, from the same per-pair outcomes in pairing order.

    Returns:
        A :class:`QualityReport`; pair errors are listed in ``errors`` (the caller decides to fail).

    Raises:
        InputError: a directory is missing or empty. MissingWeightsError: LPIPS/Inception weights absent.
    """
    opt = options or QualityOptions()
    pairing = pair_outputs(Path(baseline), Path(candidate), opt.verify_sha256)
    settings = MetricSettings(alpha_policy=opt.alpha, percentile_method=PERCENTILE_METHOD)
    sc = load_scorers(opt, pairing.mode, lpips_model, feature_extractor)
    lp, fx, clip = sc.lp, sc.fx, sc.clip
    if lp is not None:
        settings.lpips = getattr(lp, "description", repr(lp))
        settings.lpips_calibrated = bool(getattr(lp, "calibrated", False))
    if opt.ms_ssim:
        settings.ms_ssim = MS_SSIM_DESC
    settings.clip = clip.name if clip is not None else None
    settings.pickscore = sc.pick.name if sc.pick is not None else None
    if sc.iqa is not None:
        settings.clip_iqa = sc.iqa.name
    report = QualityReport(baseline=str(baseline), candidate=str(candidate), pairing=pairing.mode,  # type: ignore[arg-type]
                           settings=settings, errors=list(pairing.errors), warnings=list(pairing.warnings),
                           noise_floor=noise_floor, settings_diff=list(pairing.settings_diff))
    st_b: FeatureStats | None = None
    st_c: FeatureStats | None = None
    if executor is None:
        st_b, st_c = new_stats(sc)

        def local() -> Iterator[PairOutcome]:
            for out in _stream(pairing.pairs, lambda s: score_pair(s, opt, sc), opt.workers):
                accumulate(out, st_b, st_c)
                yield out

        outcomes = local()
    else:
        outcomes = executor.outcomes(pairing.pairs, opt, pairing.mode, lpips_model, feature_extractor)
    rows_b: list[np.ndarray] = []
    rows_c: list[np.ndarray] = []
    total = len(pairing.pairs)
    for i, out in enumerate(outcomes, 1):
        if out.error is not None:
            report.errors.append(out.error)
        elif out.pair is not None:
            report.pairs.append(out.pair)
            report.frames.extend(out.frames)
            if out.feats is not None:
                rows_b.append(out.feats[0])
                rows_c.append(out.feats[1])
        if progress is not None:
            progress(i, total)
    if executor is not None:
        st_b, st_c = executor.stats()
        report.distributed = executor.describe()
    if clip is not None:
        report.clip_truncated = [s.key for s in pairing.pairs if s.prompt and clip.is_truncated(s.prompt)]
        if report.clip_truncated:
            report.warnings.append(f"{len(report.clip_truncated)} prompt(s) truncated at {clip.limit} CLIP tokens "
                                   f"(EOS kept): {', '.join(report.clip_truncated[:5])}")
    report.n_pairs = len(report.pairs)
    no_ms = [p.key for p in report.pairs if any(n.startswith("MS-SSIM not computed") for n in p.notes)]
    if no_ms:
        report.warnings.append(f"{len(no_ms)} pair(s) too large for MS-SSIM within the memory bound (PSNR/SSIM "
                               f"computed; --allow-large computes it): {', '.join(no_ms[:5])}"
                               + (f" (+{len(no_ms) - 5} more)" if len(no_ms) > 5 else ""))
    timing = [p.key for p in report.pairs if any(n.startswith(FPS_NOTE) or "variable frame rate" in n
                                                  for n in p.notes)]
    if timing:
        report.warnings.append(
            f"{len(timing)} video pair(s) differ in frame rate or have a variable frame rate: frames are paired by "
            f"index, not by time (see each pair's notes): {', '.join(timing[:5])}"
            + (f" (+{len(timing) - 5} more)" if len(timing) > 5 else ""))
    report.n_identical = sum(p.identical for p in report.pairs)
    report.n_border_only = sum(p.border_only_difference for p in report.pairs)
    if report.n_border_only:
        keys = [p.key for p in report.pairs if p.border_only_difference]
        report.warnings.append(
            f"{report.n_border_only} pair(s) differ only in the {SSIM_RADIUS}-px border SSIM crops (SSIM stays "
            f"near 1 there; judge them by PSNR, they are not identical): {', '.join(keys[:5])}"
            + (f" (+{len(keys) - 5} more)" if len(keys) > 5 else ""))
    _summaries(report, opt.worst)
    _paired(report)
    if fx is not None and st_b is not None and st_c is not None:
        report.distribution = _distribution(fx, st_b, st_c, rows_b, rows_c)
    if gates:
        report.gates = evaluate_gates(report.summaries, gates)
    return report


def _distribution(fx: FeatureExtractor, a: FeatureStats, b: FeatureStats, rows_a: list[np.ndarray],
                  rows_b: list[np.ndarray]) -> DistributionResult:
    """FID from the (merged) sufficient statistics; KID from the float64 feature rows in pairing order (KID's
    pairwise kernel sums over random subsets have no such statistics)."""
    res = DistributionResult(extractor=fx.name, feature_dim=fx.dim, n_baseline=a.n, n_candidate=b.n)
    if min(a.n, b.n) < 2:
        res.warnings.append(f"FID/KID need >= 2 RGB images per side, got {a.n}/{b.n}; not computed")
        return res
    res.fid, w = fid_from_stats(a, b)
    res.warnings.extend(w)
    res.kid_mean, res.kid_std, res.kid_subset_size = kid(np.concatenate(rows_a), np.concatenate(rows_b))
    res.kid_subsets = 100
    return res
