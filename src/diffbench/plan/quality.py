"""Quality budget arithmetic. Independent errors add in MSE, so PSNRs combine as
PSNR = −10·log10(Σ 10^(−PSNR_i/10)) (PSNR = 10·log10(MAX²/MSE) with a common MAX; docs/concepts/quality-metrics.md)."""

from __future__ import annotations

import math


def combine_psnr(values: list[float]) -> float | None:
    """Combined PSNR (dB) of independent lossy changes; ``None`` for no change (lossless)."""
    if not values:
        return None
    return -10.0 * math.log10(sum(10.0 ** (-v / 10.0) for v in values))


def within_budget(values: list[float], budget_db: float | None) -> bool:
    """True when the combined PSNR stays at or above the budget (no budget: only lossless passes)."""
    combined = combine_psnr(values)
    if combined is None:
        return True
    return budget_db is not None and combined >= budget_db
