"""Quality against a fixed-seed baseline: pairing, per-image/video metrics, distribution metrics, gates.

Importing this package is light (no torch, scipy or PIL): names resolve lazily on first use.

Public API:
    compare_dirs(baseline, candidate, options) -> QualityReport
    psnr(a, b, data_range), ssim(a, b, data_range), ms_ssim(a, b, data_range): one image each,
        (H, W) or (H, W, C) with C in {1, 3} channel-last (other shapes raise ShapeError)
    ssim_border_difference(a, b) -> (border, interior) differing pixels outside/inside SSIM's valid region
    evaluate_gates(summary, gates) -> list[GateResult], parse_gate, PRESETS
    load_lpips(backbone), LPIPS; distribution_metrics, fid_from_stats, kid, FeatureStats, clip_score
    temporal_flicker, mean_abs_frame_diff
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DistributionResult": "models",
    "FeatureStats": "distribution",
    "GateResult": "models",
    "LPIPS": "lpips",
    "MetricSummary": "models",
    "PRESETS": "gates",
    "PairError": "models",
    "PairResult": "models",
    "QualityOptions": "models",
    "QualityReport": "models",
    "SKIMAGE_SSIM_ARGS": "kernels",
    "SettingDiff": "models",
    "clip_score": "distribution",
    "compare_dirs": "compare",
    "distribution_metrics": "distribution",
    "evaluate_gates": "gates",
    "fid_from_stats": "distribution",
    "kid": "distribution",
    "load_lpips": "lpips",
    "mean_abs_frame_diff": "video",
    "ms_ssim": "kernels",
    "parse_gate": "gates",
    "psnr": "kernels",
    "ssim": "kernels",
    "ssim_border_difference": "kernels",
    "temporal_flicker": "video",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'diffbench.quality' has no attribute {name!r}")
    return getattr(importlib.import_module(f"diffbench.quality.{mod}"), name)
