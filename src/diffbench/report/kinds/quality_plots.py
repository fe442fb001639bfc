"""Plots of the quality report: per-metric histograms (overlaid per result) and per-frame curves of videos.

Identical pairs have PSNR = +inf: they are never drawn at a made-up value. Each histogram plots the
finite values only and states the +inf count in its legend and caption (they are counted in ``n``).
Per-frame curves skip identical frames the same way and mark the worst frame (lowest finite PSNR).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from diffbench.quality.models import FrameRow, QualityReport
from diffbench.report.document import Plot
from diffbench.report.figures import COLORS, new_figure

if TYPE_CHECKING:
    from diffbench.report.loader import LoadedResult

# Per-pair metrics shown as histograms, in this order, when any result has them.
HIST_METRICS: dict[str, str] = {
    "psnr": "PSNR (dB, higher is better)",
    "ssim": "SSIM (higher is better)",
    "ms_ssim": "MS-SSIM (higher is better)",
    "lpips": "LPIPS (lower is better)",
    "clip_delta": "CLIP score Δ candidate − baseline",
}
MAX_BINS = 40


@dataclass
class MetricValues:
    """One result's per-pair values of a metric: the finite ones, and how many are +inf (identical)."""

    label: str
    finite: np.ndarray
    n_inf: int

    @property
    def n(self) -> int:
        return int(self.finite.size) + self.n_inf


def metric_values(report: QualityReport, metric: str, label: str) -> MetricValues | None:
    """The per-pair values of ``metric`` in ``report`` (None when no pair has it)."""
    vals = [p.metrics.get(metric) for p in report.pairs]
    present = [float(v) for v in vals if v is not None]
    if not present:
        return None
    arr = np.asarray(present, dtype=np.float64)
    return MetricValues(label=label, finite=arr[np.isfinite(arr)], n_inf=int(np.isinf(arr).sum()))


def bin_edges(series: list[MetricValues]) -> np.ndarray:
    """Common bin edges of every series (numpy ``'auto'``, at most :data:`MAX_BINS` bins)."""
    allv = np.concatenate([s.finite for s in series]) if series else np.empty(0)
    if allv.size == 0:
        return np.asarray([0.0, 1.0])
    lo, hi = float(allv.min()), float(allv.max())
    if lo == hi:
        half = max(abs(lo) * 1e-3, 1e-6)
        return np.asarray([lo - half, lo + half])
    edges = np.histogram_bin_edges(allv, bins="auto")
    if edges.size - 1 > MAX_BINS:
        edges = np.linspace(lo, hi, MAX_BINS + 1)
    return edges


def _draw_histogram(ax, metric: str, series: list[MetricValues]) -> str:  # type: ignore[no-untyped-def]
    """Draw one metric's histogram on ``ax`` (bars for one result, outlines for several); return its caption."""
    from matplotlib.ticker import MaxNLocator

    edges = bin_edges(series)
    for i, s in enumerate(series):
        extra = f", {s.n_inf} identical +inf not drawn" if s.n_inf else ""
        label = f"{s.label} (n={s.n}{extra})"
        color = COLORS[i % len(COLORS)]
        if len(series) == 1:
            ax.hist(s.finite, bins=edges, color=color, edgecolor="white", label=label)
        else:
            ax.hist(s.finite, bins=edges, histtype="step", linewidth=1.6, color=color, label=label)
    ax.set_xlabel(HIST_METRICS.get(metric, metric))
    # Narrow ranges (SSIM 0.99836-0.99842) would print long colliding tick labels: few ticks, short labels.
    ax.xaxis.set_major_locator(MaxNLocator(nbins=4, min_n_ticks=2))
    ax.ticklabel_format(axis="x", style="plain", useOffset=True)
    ax.set_ylabel("pairs")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="best", fontsize=7)
    ns = ", ".join(f"{s.label} n={s.n}" for s in series)
    cap = f"{metric}: {len(edges) - 1} bins of width {edges[1] - edges[0]:.4g} ({ns})"
    n_inf = sum(s.n_inf for s in series)
    if n_inf:
        cap += (f"; {n_inf} identical pair(s) have PSNR = +inf: counted in n, not drawn (no finite position; "
                "they are the best possible value)")
    return cap


def histograms(results: list[LoadedResult], block_id: str) -> Plot | None:
    """Per-pair histograms, one panel per metric present in any result, a series per result (file label).

    Bins are common to the series of a panel (numpy ``'auto'``, at most :data:`MAX_BINS`). None when no
    result has a pair.
    """
    panels = []
    for metric in HIST_METRICS:
        series = [mv for r in results if (mv := metric_values(r.model, metric, r.label)) is not None]
        if series:
            panels.append((metric, series))
    if not panels:
        return None
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig = new_figure(3.3 * ncols, 2.7 * nrows, ncols=ncols, nrows=nrows)
    caps = [_draw_histogram(ax, m, s) for ax, (m, s) in zip(fig.axes, panels, strict=False)]
    for ax in fig.axes[len(panels):]:
        ax.set_visible(False)
    return Plot(id=block_id, title="per-pair metrics", figure=fig,
                caption="Per-pair values. " + ". ".join(caps) + ".")


def worst_frame(rows: list[FrameRow]) -> int:
    """Index (``FrameRow.frame``) of the lowest PSNR among ``rows``; +inf frames rank last."""
    psnr = np.asarray([r.psnr for r in rows], dtype=np.float64)
    return int(rows[int(np.argmin(psnr))].frame)


def frame_curves(key: str, rows: list[FrameRow], block_id: str) -> Plot:
    """PSNR and SSIM per frame of one video pair, the worst frame (lowest PSNR) marked."""
    rows = sorted(rows, key=lambda r: r.frame)
    fig = new_figure(6.4, 3.0, ncols=2)
    ax_p, ax_s = fig.axes
    idx = np.asarray([r.frame for r in rows])
    p = np.asarray([r.psnr for r in rows], dtype=np.float64)
    s = np.asarray([r.ssim for r in rows], dtype=np.float64)
    fin = np.isfinite(p)
    ax_p.plot(idx[fin], p[fin], marker="o", ms=3, color=COLORS[0])
    ax_s.plot(idx, s, marker="o", ms=3, color=COLORS[1])
    w = worst_frame(rows)
    wp = float(p[list(idx).index(w)])
    for ax in (ax_p, ax_s):
        ax.axvline(w, color=COLORS[3], linestyle="--", linewidth=1)
        ax.set_xlabel("frame")
    ax_p.set_ylabel("PSNR (dB)")
    ax_s.set_ylabel("SSIM")
    if math.isfinite(wp):
        ax_p.annotate(f"worst frame {w}: {wp:.2f} dB", xy=(w, wp), xytext=(4, 4), textcoords="offset points",
                      fontsize=8, color=COLORS[3])
    else:  # every frame identical: nothing to draw on the PSNR axis, say so instead of inventing a height
        ax_p.text(0.5, 0.5, "all frames identical (PSNR +inf)", transform=ax_p.transAxes, ha="center",
                  fontsize=8, color=COLORS[3])
    skipped = [int(i) for i in idx[~fin]]
    cap = (f"{key}: {len(rows)} frames; dashed line = worst frame {w} (lowest PSNR; the grid shows this frame).")
    if skipped:
        cap += f" Identical frames (PSNR +inf) not drawn on the PSNR axis: {skipped}."
    return Plot(id=block_id, title=f"per frame: {key}", figure=fig, caption=cap)
