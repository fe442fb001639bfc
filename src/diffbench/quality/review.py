"""Blind A/B review: choose the pairs, shuffle order and sides, and write the key (torch-free).

Pairs are the ones ``diffbench quality`` compares: the same :func:`~diffbench.quality.pairing.pair_outputs`
(manifest keys, else relative paths) and the same per-pair scoring (:func:`~diffbench.quality.compare.
compare_dirs`), so a pair id in the key names exactly a ``quality`` pair and its metric.

Selection (:func:`select_pairs`), reproducible from ``seed`` alone:

1. rank every compared pair by the review metric, worst first (PSNR ascending, ties by key; LPIPS
   descending); identical pairs (PSNR = +inf, LPIPS 0) rank last; take the first ``worst`` pairs;
2. ``rng = numpy.random.default_rng(seed)``; ``rng.choice`` draws ``random`` further pairs without
   replacement from the remaining ones (in key order); fewer remain → all of them, and a note says so;
3. ``rng.permutation`` shuffles the page order of the chosen pairs (worst and random mixed);
4. ``rng.integers(0, 2)`` per pair (in page order) puts the candidate on the left (0) or the right (1).

The key (:class:`ReviewKey`) holds everything that maps the page back: pair id → pairing key, the side
of the candidate, why it was chosen, the metric value, both files with their sha256, both directories,
their ``manifest.json`` sha256 and the seed. The review id is the first 16 hex digits of the sha256 of
the seed and every (key, candidate side, file sha256) in page order, so a verdict file can only be scored
against the key of the very page it came from. The page itself gets only the opaque ids ``r01``, ``r02``,
... and re-encoded pixels (:func:`page_images`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel

from diffbench.core.manifest import MANIFEST_NAME
from diffbench.errors import InputError, UsageError
from diffbench.quality.models import PairResult, QualityOptions, QualityReport

KEY_KIND = "diffbench-review-key"
KEY_SCHEMA_VERSION = 1
BY = ("psnr", "lpips")
MAX_PX = 768  # images whose long side exceeds this are downscaled (Lanczos) for the page


class ReviewPair(BaseModel):
    """One pair on the page, in page order. ``value`` is the review metric (PSNR dB / LPIPS)."""

    id: str
    key: str
    selection: Literal["worst", "random"]
    candidate_side: Literal["left", "right"]
    value: float | None
    frame: int | None = None  # the frame shown for a video / animated pair (its worst frame)
    frames: int | None = None
    baseline_file: str
    candidate_file: str
    baseline_sha256: str
    candidate_sha256: str


class ReviewKey(BaseModel):
    """``review.key.json``: keep it away from the reviewer; ``review --score`` needs it."""

    schema_version: int = KEY_SCHEMA_VERSION
    kind: str = KEY_KIND
    review_id: str
    seed: int
    by: Literal["psnr", "lpips"]
    metric_source: str
    worst: int
    random_asked: int
    random_taken: int
    n_compared: int
    baseline: str
    candidate: str
    baseline_manifest_sha256: str | None
    candidate_manifest_sha256: str | None
    max_px: int
    pairs: list[ReviewPair]
    notes: list[str] = []


@dataclass
class Candidate:
    """A compared pair with its review metric (internal)."""

    pair: PairResult
    value: float | None
    frame: int | None


def _manifest_sha(d: Path) -> str | None:
    p = d / MANIFEST_NAME
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None


def _metric_of(pr: PairResult, by: str) -> tuple[float | None, int | None]:
    """The pair's review metric (as ``quality`` reports it) and, for a video, its worst frame by it."""
    v = pr.metrics.get(by)
    frame = None
    if pr.video is not None:
        frame = pr.video.psnr_worst_frame if by == "psnr" else pr.video.lpips_worst_frame
    return v, frame


def _rank(c: Candidate, by: str) -> tuple[float, str]:
    v = c.value
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return (math.inf, c.pair.key)
    return ((v if by == "psnr" else -v), c.pair.key)


def scored_pairs(baseline: Path, candidate: Path, by: str, quality_json: Path | None = None,
                 lpips_backbone: Path | None = None, workers: int = 2, alpha: str = "reject",
                 progress: Callable[[int, int], None] | None = None,
                 read_quality: Callable[[Path], QualityReport] | None = None,
                 ) -> tuple[list[Candidate], str, list[str]]:
    """Every pair ``quality`` compares, with its review metric.

    Without ``quality_json``: :func:`~diffbench.quality.compare.compare_dirs` scores the pairs here
    (PSNR and SSIM in numpy; LPIPS, torch and its weights only when ``by == "lpips"``). With it: the
    per-pair metrics of that saved ``quality --json`` result, after checking it lists exactly the pairs
    that pairing finds now. ``read_quality`` reads that file into a report (the caller's result loader,
    which knows every result kind; it raises InputError on a file that is not a quality result); it is
    required with ``quality_json``.

    Returns:
        (pairs, description of where the metric came from, notes).

    Raises:
        InputError: pairs that cannot be compared (listed), no pair at all, or a ``quality_json`` that does
            not match these directories or lacks the metric. MissingWeightsError: LPIPS weights absent.
    """
    from diffbench.quality.compare import compare_dirs
    from diffbench.quality.pairing import pair_outputs

    notes: list[str] = []
    if quality_json is None:
        opts = QualityOptions(alpha=alpha, ms_ssim=False, lpips=by == "lpips",  # type: ignore[arg-type]
                              lpips_backbone=lpips_backbone, worst=0, workers=workers)
        report = compare_dirs(baseline, candidate, opts, progress=progress)
        source = f"{by} computed here by the quality code (diffbench.quality.compare_dirs)"
    else:
        if read_quality is None:
            raise ValueError("scored_pairs: quality_json needs read_quality")
        report = read_quality(quality_json)
        pairing = pair_outputs(baseline, candidate)
        have = {p.key for p in report.pairs}
        want = {s.key for s in pairing.pairs}
        if have != want:
            extra, missing = sorted(have - want), sorted(want - have)
            raise InputError(
                f"--quality {quality_json} does not match {baseline} and {candidate}: "
                + (f"{len(missing)} pair(s) found now are not in it (e.g. {missing[0]})" if missing else "")
                + ("; " if missing and extra else "")
                + (f"{len(extra)} pair(s) in it are not found now (e.g. {extra[0]})" if extra else "")
                + "; rerun diffbench quality --json on these two directories")
        for label, mine, theirs in (("baseline", baseline, report.baseline), ("candidate", candidate, report.candidate)):
            if Path(theirs).resolve() != Path(mine).resolve():
                notes.append(f"--quality was made with {label} {theirs}, not {mine} (same pair keys; check it is "
                             "the same run)")
        missing_metric = [p.key for p in report.pairs if p.metrics.get(by) is None]
        if missing_metric:
            hint = " (run quality with --lpips)" if by == "lpips" else ""
            raise InputError(f"--quality {quality_json}: no {by} for {len(missing_metric)} pair(s), e.g. "
                             f"{missing_metric[0]}{hint}")
        source = f"{by} from {quality_json} (quality --json)"
    if report.errors:
        listed = "; ".join(f"{e.key}: {e.problem}" for e in report.errors[:5])
        more = f" (+{len(report.errors) - 5} more)" if len(report.errors) > 5 else ""
        raise InputError(f"{len(report.errors)} pair(s) could not be compared: {listed}{more}; a blind review "
                         "needs every pair: fix the outputs first (diffbench quality lists them)")
    if not report.pairs:
        raise InputError(f"no pair could be compared between {baseline} and {candidate}")
    out = []
    for pr in report.pairs:
        v, frame = _metric_of(pr, by)
        out.append(Candidate(pair=pr, value=v, frame=frame))
    return out, source, notes


def select_pairs(pairs: list[Candidate], by: str, worst: int, random: int, seed: int
                 ) -> tuple[list[tuple[Candidate, str, str]], int, list[str]]:
    """Choose, order and side the pairs (rules in the module docstring).

    Returns:
        ([(pair, selection "worst"|"random", candidate side "left"|"right")] in page order,
         how many random pairs were taken, notes).

    Raises:
        UsageError: nothing to review (``worst + random == 0``).
    """
    if worst < 0 or random < 0:
        raise UsageError("--worst and --random must be >= 0")
    if worst + random == 0:
        raise UsageError("--worst 0 and --random 0 select nothing; ask for at least one pair")
    notes: list[str] = []
    ranked = sorted(pairs, key=lambda c: _rank(c, by))
    chosen = [(c, "worst") for c in ranked[:worst]]
    if worst > len(ranked):
        notes.append(f"--worst {worst}: only {len(ranked)} pair(s) exist; all are shown")
    rest = sorted(ranked[worst:], key=lambda c: c.pair.key)
    rng = np.random.default_rng(seed)
    take = min(random, len(rest))
    if take < random:
        notes.append(f"--random {random}: only {len(rest)} pair(s) left after the worst {min(worst, len(ranked))}; "
                     f"{take} taken")
    if take:
        idx = rng.choice(len(rest), size=take, replace=False)
        chosen += [(rest[int(i)], "random") for i in idx]
    same = sum(c.pair.identical for c, _ in chosen)
    if same:
        notes.append(f"{same} of the {len(chosen)} chosen pair(s) are pixel-identical (PSNR +inf): a reviewer can "
                     "only call them the same")
    order = rng.permutation(len(chosen))
    sides = rng.integers(0, 2, size=len(chosen))
    placed = [(chosen[int(i)][0], chosen[int(i)][1], "left" if int(s) == 0 else "right")
              for i, s in zip(order, sides, strict=True)]
    return placed, take, notes


def build_key(baseline: Path, candidate: Path, placed: list[tuple[Candidate, str, str]], *, seed: int, by: str,
              source: str, worst: int, random_asked: int, random_taken: int, n_compared: int,
              max_px: int = MAX_PX, notes: list[str] | None = None) -> ReviewKey:
    """The key of a review: ids ``r01``... in page order, file hashes, manifest hashes and the review id."""
    from diffbench.quality.pairing import sha256_of

    width = max(2, len(str(len(placed))))
    rows: list[ReviewPair] = []
    for i, (c, selection, side) in enumerate(placed, 1):
        pr = c.pair
        rows.append(ReviewPair(
            id=f"r{i:0{width}d}", key=pr.key, selection=selection, candidate_side=side,  # type: ignore[arg-type]
            value=c.value, frame=c.frame, frames=pr.frames, baseline_file=pr.baseline, candidate_file=pr.candidate,
            baseline_sha256=sha256_of(Path(pr.baseline)), candidate_sha256=sha256_of(Path(pr.candidate))))
    digest = hashlib.sha256(json.dumps(
        {"seed": seed, "pairs": [[r.key, r.candidate_side, r.baseline_sha256, r.candidate_sha256] for r in rows]},
        sort_keys=True).encode()).hexdigest()
    return ReviewKey(review_id=digest[:16], seed=seed, by=by, metric_source=source, worst=worst,  # type: ignore[arg-type]
                     random_asked=random_asked, random_taken=random_taken, n_compared=n_compared,
                     baseline=str(Path(baseline).resolve()), candidate=str(Path(candidate).resolve()),
                     baseline_manifest_sha256=_manifest_sha(Path(baseline)),
                     candidate_manifest_sha256=_manifest_sha(Path(candidate)), max_px=max_px, pairs=rows,
                     notes=list(notes or []))


def read_key(path: Path) -> ReviewKey:
    """Read and validate a key file.

    Raises:
        InputError: missing, not JSON, not a review key, a newer schema, or invalid fields.
    """
    from pydantic import ValidationError

    data = _read_json(path, "--key")
    if not isinstance(data, dict) or data.get("kind") != KEY_KIND:
        raise InputError(f"--key {path} is not a review key (kind {KEY_KIND!r}); give the .key.json that "
                         "diffbench review wrote next to the page")
    if int(data.get("schema_version", 1)) > KEY_SCHEMA_VERSION:
        raise InputError(f"--key {path}: schema {data.get('schema_version')} is newer than this diffbench; upgrade")
    try:
        return ReviewKey.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(f"--key {path}: invalid key: {err['loc']}: {err['msg']}") from exc


def _read_json(path: Path, option: str) -> object:
    if not path.is_file():
        raise InputError(f"{option} {path}: no such file")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{option} {path}: not JSON ({exc})") from exc


# ---------------------------------------------------------------------------------------------- pixels

def _to_uint8(arr: np.ndarray, data_range: float) -> np.ndarray:
    if arr.dtype == np.uint8:
        return arr
    return np.clip(np.rint(arr.astype(np.float64) * (255.0 / data_range)), 0, 255).astype(np.uint8)


def _encode(arr: np.ndarray, max_px: int) -> tuple[bytes, tuple[int, int], bool]:
    """PNG bytes (no metadata: pixels only), the (width, height) encoded, and whether it was downscaled."""
    import io

    from PIL import Image

    img = Image.fromarray(arr[..., 0] if arr.shape[-1] == 1 else arr)
    w, h = img.size
    scaled = max(w, h) > max_px
    if scaled:
        f = max_px / max(w, h)
        img = img.resize((max(1, round(w * f)), max(1, round(h * f))), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=False)
    return buf.getvalue(), img.size, scaled


@dataclass
class PageImages:
    """What the page shows of one pair: left and right PNGs (already placed by side) and a neutral caption."""

    id: str
    left_png: bytes
    right_png: bytes
    width: int
    height: int
    caption: str


def page_images(key: ReviewKey, prompts: dict[str, str] | None = None, alpha: str = "reject") -> list[PageImages]:
    """Decode each pair of the key again and place it by side, re-encoded as PNG (no file metadata).

    A video or animated pair shows one frame, its worst by the review metric (``ReviewPair.frame``); a
    still image shows itself. Float ``.npy`` images are rounded to 8 bit; images whose long side exceeds
    ``key.max_px`` are downscaled with Lanczos (both sides alike; the caption says so).

    Raises:
        InputError: a file changed since the key was written (sha256) or cannot be decoded.
    """
    from diffbench.quality.io import load_any
    from diffbench.quality.pairing import sha256_of

    out = []
    for r in key.pairs:
        imgs = {}
        for side, f, sha in (("baseline", r.baseline_file, r.baseline_sha256),
                             ("candidate", r.candidate_file, r.candidate_sha256)):
            if sha256_of(Path(f)) != sha:
                raise InputError(f"{f} changed while the review was being written; run diffbench review again")
            ld = load_any(Path(f), alpha)
            arr = ld.array[r.frame if r.frame is not None else 0] if ld.is_video else ld.array
            imgs[side] = _encode(_to_uint8(arr, ld.data_range), key.max_px)
        (bpng, size, scaled), (cpng, _, _) = imgs["baseline"], imgs["candidate"]
        left, right = (cpng, bpng) if r.candidate_side == "left" else (bpng, cpng)
        parts = []
        if prompts and prompts.get(r.key):
            parts.append(f"prompt: {prompts[r.key]}")
        if r.frames is not None and r.frame is not None:
            parts.append(f"frame {r.frame + 1} of {r.frames} (this pair's worst frame by {key.by})")
        if scaled:
            parts.append(f"downscaled to {size[0]}x{size[1]} for the page")
        out.append(PageImages(id=r.id, left_png=left, right_png=right, width=size[0], height=size[1],
                              caption=" · ".join(parts)))
    return out


def prompts_of(baseline: Path) -> dict[str, str]:
    """Pairing key → prompt from the baseline's manifest (empty without one)."""
    from diffbench.core.manifest import read_manifest

    m = read_manifest(baseline)
    if m is None:
        return {}
    return {f"{e.prompt_id}/seed{e.seed}/{e.index}": e.prompt for e in m.entries if e.prompt}
