"""Per-image quality of a candidate's outputs against the baseline's, paired by (prompt_id, seed, index).

Kernels and summaries come from :mod:`diffbench.quality` (PSNR: 10·log10(255²/MSE) on uint8, +inf for
identical images; SSIM: Gaussian 11×11, σ = 1.5, as in diffbench.quality.kernels); summaries are
:func:`diffbench.quality.summary.summarize_metric` (p10/p50/p90 by numpy 'linear', worst = minimum).
Videos get one PSNR per video (MSE over all frames, frames stacked) and the mean SSIM over frames.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from diffbench.core.manifest import read_manifest
from diffbench.engines.base import GenerationRequest
from diffbench.errors import InputError, require
from diffbench.quality.models import MetricSummary
from diffbench.store.models import MetricStats, RunQuality

Images = dict[str, np.ndarray]


def image_key(prompt_id: str, seed: int, index: int) -> str:
    """The pairing key ``<prompt_id>_s<seed>_i<index>`` (the stem OutputWriter uses)."""
    return f"{prompt_id}_s{seed}_i{index}"


def add_images(store: Images, request: GenerationRequest, images: np.ndarray) -> None:
    """Keep each image of a (B, H, W, 3) or (B, F, H, W, 3) uint8 batch under its key."""
    for i in range(images.shape[0]):
        store.setdefault(image_key(request.prompt_id, request.seed, i), images[i].copy())


def stats_of(s: MetricSummary) -> MetricStats:
    """The stored form of a quality summary."""
    return MetricStats(n=s.n, n_inf=s.n_inf, mean=s.mean, p10=s.p10, p50=s.p50, p90=s.p90, min=s.min,
                       max=s.max, worst=s.worst)


def summary_of(metric: str, s: MetricStats) -> MetricSummary:
    """Back from the stored form to :class:`MetricSummary` (for gate evaluation)."""
    return MetricSummary(metric=metric, higher_is_better=True, n=s.n, n_inf=s.n_inf, mean=s.mean, p10=s.p10,
                         p50=s.p50, p90=s.p90, min=s.min, max=s.max, worst=s.worst)


def summaries_of(q: RunQuality) -> dict[str, MetricSummary]:
    """Metric name → summary, as :func:`diffbench.quality.evaluate_gates` expects."""
    out = {"psnr": summary_of("psnr", q.psnr)}
    if q.ssim is not None:
        out["ssim"] = summary_of("ssim", q.ssim)
    return out


def compare_images(baseline: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray], against_run: str,
                   ssim: bool = True) -> RunQuality:
    """PSNR (and SSIM) of every candidate image against the baseline image with the same key.

    Raises:
        InputError: a key is missing on one side, or shapes differ.
    """
    ps, ss = pair_values(baseline, candidate, ssim)
    return quality_of(ps, ss, against_run)


def pair_values(baseline: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray], ssim: bool = True,
                ) -> tuple[dict[str, float], dict[str, float]]:
    """Per-image PSNR (dB) and SSIM of every candidate image against the baseline image with the same key,
    as ``{key: value}`` (SSIM empty when ``ssim`` is false).

    Raises:
        InputError: a key is missing on one side, or shapes differ.
    """
    from diffbench.quality.kernels import psnr
    from diffbench.quality.kernels import ssim as ssim_fn

    missing = sorted(set(baseline) ^ set(candidate))
    if missing:
        raise InputError(f"outputs do not pair: {len(missing)} key(s) on one side only, e.g. {missing[0]}")
    ps: dict[str, float] = {}
    ss: dict[str, float] = {}
    for key in sorted(baseline):
        a, b = baseline[key], candidate[key]
        if a.shape != b.shape:
            raise InputError(f"output {key}: baseline shape {a.shape} vs candidate {b.shape}")
        flat_a, flat_b = (a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:])) if a.ndim == 4 else (a, b)
        ps[key] = float(psnr(flat_a, flat_b))
        if ssim:
            ss[key] = _ssim(ssim_fn, a, b)
    return ps, ss


def quality_of(psnr_by_key: Mapping[str, float], ssim_by_key: Mapping[str, float], against_run: str,
               ) -> RunQuality:
    """The :class:`RunQuality` of per-image values (``{key: value}``, see :func:`pair_values`); the values of
    disjoint image sets (shards of a workload) may be merged into one mapping first.

    Raises:
        InputError: no values.
    """
    from diffbench.quality.summary import Sample, summarize_metric

    ps = [Sample(value=v, key=k, baseline=k, candidate=k) for k, v in sorted(psnr_by_key.items())]
    ss = [Sample(value=v, key=k, baseline=k, candidate=k) for k, v in sorted(ssim_by_key.items())]
    p = summarize_metric("psnr", ps, worst_n=1)
    s = summarize_metric("ssim", ss, worst_n=1) if ss else None
    if p is None:
        raise InputError("no outputs to compare")
    return RunQuality(
        against_run=against_run,
        psnr=stats_of(p),
        ssim=stats_of(s) if s is not None else None,
        worst_key=p.worst_pairs[0].key if p.worst_pairs else None,
    )


def _ssim(fn: object, a: np.ndarray, b: np.ndarray) -> float:
    if a.ndim == 4:  # video: mean over frames
        return float(np.mean([fn(a[f], b[f], 255.0) for f in range(a.shape[0])]))  # type: ignore[operator]
    return float(fn(a, b, 255.0))  # type: ignore[operator]


def load_images(directory: Path) -> Images:
    """Images of a saved output directory (``manifest.json`` + PNGs / PNG-frame folders), by key.

    Raises:
        InputError: no manifest, or an unreadable file.
    """
    manifest = read_manifest(Path(directory))
    if manifest is None:
        raise InputError(f"{directory}: no manifest.json; the outputs of this run are gone")
    pil = require("PIL.Image", "diffusers")
    out: Images = {}
    for e in manifest.entries:
        path = Path(directory) / e.file
        try:
            if path.is_dir():
                frames = sorted(path.glob("frame_*.png"))
                out[image_key(e.prompt_id, e.seed, e.index)] = np.stack([np.asarray(pil.open(f).convert("RGB")) for f in frames])
            else:
                out[image_key(e.prompt_id, e.seed, e.index)] = np.asarray(pil.open(path).convert("RGB"))
        except OSError as exc:
            raise InputError(f"{path}: cannot read ({exc})") from exc
    return out
