"""Typed results of ``diffbench quality`` (pydantic): options, per-pair rows, summaries, report.

Units: PSNR in dB; SSIM, MS-SSIM in [-1, 1]; LPIPS ≥ 0 (lower is better); flicker in [0, 1]; motion in
8-bit levels (mean absolute frame difference, 0-255). Non-finite floats (PSNR of identical images =
+inf) are written to JSON as the string "inf" by :func:`diffbench.core.jsonio.write_json_atomic`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from diffbench.quality.preference import PairedDelta

REPORT_SCHEMA_VERSION = 1

# Direction per metric: True when higher is better. Gates and "worst" use it.
HIGHER_IS_BETTER: dict[str, bool] = {
    "psnr": True,
    "ssim": True,
    "ms_ssim": True,
    "lpips": False,
    "frame_psnr": True,
    "frame_ssim": True,
    "frame_lpips": False,
    "flicker_delta": True,  # candidate - baseline: negative means more flicker than the baseline
    "motion_ratio": True,  # candidate / baseline motion: below 1 means motion shrank
    "clip_baseline": True,
    "clip_candidate": True,
    "clip_delta": True,  # candidate - baseline CLIP score (same prompt)
    "pickscore_baseline": True,
    "pickscore_candidate": True,
    "pickscore_delta": True,  # candidate - baseline PickScore (same prompt and seed)
    "clip_iqa_baseline": True,
    "clip_iqa_candidate": True,
    "clip_iqa_delta": True,  # candidate - baseline CLIP-IQA probability of "Good photo."
}

# Scores of each side (not pair distances): identical pairs carry no special value for them.
SIDE_SCORES: tuple[str, ...] = ("clip_", "pickscore_", "clip_iqa_")


class QualityOptions(BaseModel):
    """What to compute and how. ``workers`` threads decode and score pairs (bounded in flight)."""

    alpha: Literal["reject", "drop", "composite-white"] = "reject"
    allow_missing: bool = False
    ms_ssim: bool = True
    lpips: bool = False
    lpips_backbone: Path | None = None
    fid: bool = False
    inception: Path | None = None
    clip: Path | None = None
    pickscore: Path | None = None
    clip_iqa: Path | None = None
    worst: int = Field(5, ge=0)
    workers: int = Field(2, ge=1)
    verify_sha256: bool = True
    allow_large: bool = False  # score pairs above the memory bound, and images above Pillow's bomb limit
    max_memory: int | None = Field(None, ge=1)  # bytes one pair may take (None: a share of available memory)


class PairError(BaseModel):
    """One pair (or file) that could not be compared; ``problem`` names what is wrong."""

    key: str
    baseline: str | None = None
    candidate: str | None = None
    problem: str


class VideoStats(BaseModel):
    """Per video pair: per-frame worst values, flicker (VBench) and motion for both sides."""

    frames: int
    psnr_mean: float | None = None  # mean of finite per-frame PSNRs (identical frames counted apart)
    psnr_worst: float
    psnr_worst_frame: int
    identical_frames: int
    ssim_mean: float  # mean over the non-identical frames, as psnr_mean (all identical: 1.0)
    ssim_worst: float
    ssim_worst_frame: int
    lpips_mean: float | None = None  # mean over the non-identical frames, as psnr_mean
    lpips_worst: float | None = None
    lpips_worst_frame: int | None = None
    flicker_baseline: float | None = None
    flicker_candidate: float | None = None
    flicker_delta: float | None = None
    motion_baseline: float | None = None
    motion_candidate: float | None = None
    motion_ratio: float | None = None


class PairResult(BaseModel):
    """One compared pair. For a video, ``metrics`` hold means over its non-identical frames (PSNR, SSIM and
    LPIPS alike; ``video.identical_frames`` counts the others), so they agree with the frame_* summaries."""

    key: str
    baseline: str
    candidate: str
    kind: Literal["image", "video"]
    height: int
    width: int
    channels: int
    frames: int | None = None
    identical: bool
    metrics: dict[str, float | None]
    notes: list[str] = []
    video: VideoStats | None = None
    animated: bool = False  # an animated image (GIF/APNG/WebP) read frame by frame as a video
    # Differing pixel positions in the 5-px ring that SSIM's valid region excludes, and inside it.
    border_diff_pixels: int = 0
    interior_diff_pixels: int = 0
    # True when the pair differs only in that ring: SSIM stays near 1 (window tails only), PSNR counts it.
    border_only_difference: bool = False


class FrameRow(BaseModel):
    """One frame of one video pair (CSV rows for video)."""

    key: str
    frame: int
    psnr: float
    ssim: float
    lpips: float | None = None
    identical: bool = False
    border_only_difference: bool = False


class WorstPair(BaseModel):
    key: str
    value: float
    baseline: str
    candidate: str
    frame: int | None = None


class MetricSummary(BaseModel):
    """Direction-aware summary of one metric over pairs (or frames).

    Every row describes the same pairs: ``n`` counts all of them, identical ones included, and
    ``n_identical`` counts the identical ones for every metric (PSNR +inf, SSIM 1, LPIPS 0), so the PSNR,
    SSIM and MS-SSIM rows of one report agree. ``mean`` is over the non-identical pairs in every row
    (+inf cannot be averaged; the other metrics follow the same rule); None when all are identical.
    Percentiles by linear interpolation between order statistics (numpy 'linear') over all ``n``
    values; +inf sorts last; ``n_inf`` counts +inf values. ``worst`` is the minimum when higher is
    better, else the maximum.

    ``n_pairs``: the pairs the metric applies to (video pairs for ``flicker_delta`` and ``motion_ratio``,
    frames for ``frame_*``); ``n`` of them have a value, and ``undefined`` counts the others by reason (e.g.
    ``motion_ratio`` of a pair whose baseline does not move). None for a summary written before it was kept.
    """

    metric: str
    higher_is_better: bool
    n: int
    n_pairs: int | None = None
    undefined: dict[str, int] = {}
    n_inf: int = 0
    n_identical: int = 0
    mean: float | None
    p10: float
    p50: float
    p90: float
    min: float
    max: float
    worst: float
    worst_pairs: list[WorstPair] = []


class GateResult(BaseModel):
    """One gate: ``value op threshold``; ``margin`` > 0 passes by that much, < 0 fails by that much."""

    expr: str
    metric: str
    stat: str
    op: str
    threshold: float
    value: float | None
    passed: bool
    margin: float | None
    message: str


class DistributionResult(BaseModel):
    """Set-level metrics; FID always travels with its sample sizes and feature extractor."""

    extractor: str
    feature_dim: int
    n_baseline: int
    n_candidate: int
    fid: float | None = None
    kid_mean: float | None = None
    kid_std: float | None = None
    kid_subsets: int | None = None
    kid_subset_size: int | None = None
    warnings: list[str] = []


class MetricSettings(BaseModel):
    """Everything needed to reproduce the numbers."""

    psnr: str = "10*log10(R^2/MSE), R = 255 for uint8 (1.0 for float .npy), RGB, per image; identical -> +inf"
    ssim: str = (
        "Gaussian window sigma=1.5 (11 taps), K1=0.01, K2=0.03, population covariance, per channel on RGB, "
        "mean over the 5-px-cropped map; equals skimage.metrics.structural_similarity(baseline, candidate, "
        "gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=R, channel_axis=-1)"
    )
    ms_ssim: str | None = None
    lpips: str | None = None
    lpips_calibrated: bool | None = None
    clip: str | None = None
    pickscore: str | None = None
    clip_iqa: str | None = None
    paired: str = ("preference/alignment scores: per-pair delta = candidate - baseline (same prompt, seed); mean "
                   "delta, SEM = sd(ddof=1)/sqrt(n), z = mean/SEM, 95 % CI with Student's t(n-1)")
    alpha_policy: str = "reject"
    percentile_method: str = ""
    identical_policy: str = (
        "identical pairs give PSNR=+inf (SSIM 1): counted in n_identical in every metric's row and in n, sorted "
        "last (best) for percentiles, excluded from every metric's mean"
    )
    border: str = (
        "SSIM averages only window centres >= 5 px from every edge (scikit-image crop); a pair whose pixels "
        "differ only in that 5-px ring is flagged border_only_difference (SSIM stays near 1; PSNR counts it)"
    )
    animated: str = (
        "animated GIF/APNG/WebP are read as video: every frame (Pillow seek, disposal applied), per-frame "
        "PSNR/SSIM, worst frame; animated vs still and frame-count mismatches are pair errors"
    )
    video: str = (
        "per-frame PSNR/SSIM; a video's PSNR/SSIM/LPIPS = mean over its non-identical frames; flicker = 1 - mean|f_t - f_t+1|/255 (VBench temporal flickering); motion = mean "
        "absolute difference of consecutive frames in 8-bit levels; frame-count mismatch is an error"
    )


class SettingDiff(BaseModel):
    """A generation setting recorded differently in the two manifests (``conditions`` / ``fingerprint``)."""

    field: str
    source: Literal["conditions", "fingerprint", "entries"]
    baseline: object = None
    candidate: object = None
    note: str = ""


class DistributedRun(BaseModel):
    """Where the pairs of a ``quality --ray`` run were scored and how the results were merged."""

    address: str
    actors: int
    threads_per_actor: int
    shards: int
    nodes: list[str] = []  # IPs of the nodes the actors ran on
    cluster_nodes: int = 0
    ray_version: str = ""
    resumed: int = 0  # pairs whose results --ray-state kept from an earlier run (not scored again)
    state: str | None = None  # the --ray-state directory
    merge: str = (
        "pairing on the driver; per-pair rows returned to the driver and reported in pairing order; FID from "
        "per-actor float64 sufficient statistics (n, sum x, sum x x^T, compensated sums) merged on the driver; "
        "KID from the float64 feature rows returned per pair (8*d bytes per image, 16 KiB at d=2048); CLIP, "
        "PickScore and CLIP-IQA from the per-pair scores"
    )


class QualityReport(BaseModel):
    """Result of comparing a candidate run with its baseline."""

    model_config = ConfigDict(protected_namespaces=())

    schema_version: int = REPORT_SCHEMA_VERSION
    kind: str = "diffbench-quality"
    baseline: str
    candidate: str
    pairing: Literal["manifest", "path"]
    settings: MetricSettings
    n_pairs: int = 0
    n_identical: int = 0
    n_border_only: int = 0  # pairs that differ only in SSIM's cropped 5-px border (never counted identical)
    settings_diff: list[SettingDiff] = []  # generation settings that differ between the two manifests
    pairs: list[PairResult] = []
    frames: list[FrameRow] = []
    errors: list[PairError] = []
    summaries: dict[str, MetricSummary] = {}
    distribution: DistributionResult | None = None
    gates: list[GateResult] = []
    warnings: list[str] = []
    clip_truncated: list[str] = []  # pair keys whose prompt was truncated at the CLIP token limit
    paired: dict[str, PairedDelta] = {}  # per score with both sides (clip, pickscore, clip_iqa): paired Δ stats
    noise_floor: bool = False
    distributed: DistributedRun | None = None  # set by ``--ray``: actors, nodes, how results were merged
