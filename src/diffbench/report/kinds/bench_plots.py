"""The figures of the bench report (matplotlib, no pyplot): latency CDF, histogram, runs in order (warmups
marked apart), per-step timeline, stage bars, memory by stage.

Every function takes plain numbers (seconds, bytes) and returns a :class:`~matplotlib.figure.Figure` made
with :func:`diffbench.report.figures.new_figure`; the builder (``kinds/bench.py``) puts the same numbers
in tables beside each plot.

CDF convention: the curve joins the points ``(x_(k), k / (n − 1))``, k = 0 … n−1, of the sorted samples
with straight lines. That is the inverse of the project's percentile method (linear interpolation between
order statistics, numpy ``linear`` / Hyndman–Fan type 7, :mod:`diffbench.core.stats`), so the curve
crosses 0.5 exactly at ``stats.p50`` and 0.9 at ``stats.p90``: what is read off the plot is what the
tables say.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from diffbench.core.stats import Summary, min_n_for
from diffbench.report.figures import new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

STAGES = (("text_encode", "text encode"), ("denoise", "denoise"), ("vae_decode", "VAE decode"),
          ("other", "other"))
STAGE_COLORS = ("#8c564b", "#1f77b4", "#2ca02c", "#7f7f7f")
IMAGE_ENCODE = (("image_encode", "image encode"), "#ff7f0e")
"""The VAE encode of an edit's input image: shown only when a series ran edits (:func:`time_stages`)."""


def time_stages(with_image_encode: bool) -> tuple[tuple[tuple[str, str], str], ...]:
    """((key, name), colour) of the time stages in plotting order; the image encode (after the text encode)
    only when ``with_image_encode`` (some series is an edit), so text-to-image reports are unchanged."""
    base = tuple(zip(STAGES, STAGE_COLORS, strict=True))
    return (base[0], IMAGE_ENCODE, *base[1:]) if with_image_encode else base
MIB = 2**20
LOG_RATIO = 20.0  # a value axis spanning more than this factor goes logarithmic (no tail squeezed flat)


@dataclass
class LatencySeries:
    """One result × shape: timed samples and warmups (seconds, run order), its summary, legend, colour."""

    legend: str
    samples_s: list[float]
    warmup_s: list[float]
    stats: Summary
    color: str


@dataclass
class StepSeries:
    """Per-step median and p90 (seconds) by step index."""

    legend: str
    median_s: list[float]
    p90_s: list[float]
    color: str


@dataclass
class MemorySeries:
    """Peak bytes by stage (empty when not measured per stage) and the overall peak with its stage."""

    legend: str
    by_stage: dict[str, int]
    peak: int | None
    peak_stage: str | None
    color: str
    extra: dict[str, int] = field(default_factory=dict)


def cdf_points(samples_s: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Sorted samples and their plotting positions k/(n−1) (type 7; see the module docstring).

    One sample gives a vertical segment from 0 to 1 at its value (its median is itself).
    """
    x = np.sort(np.asarray(samples_s, dtype=np.float64))
    if x.size == 1:
        return np.repeat(x, 2), np.array([0.0, 1.0])
    return x, np.arange(x.size) / (x.size - 1)


def _maybe_log(ax: Axes, values: Sequence[float], axis: str) -> bool:
    pos = [v for v in values if v > 0]
    if pos and max(pos) / min(pos) > LOG_RATIO:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
        return True
    return False


def cdf_figure(series: Sequence[LatencySeries]) -> Figure:
    """Empirical CDF of the timed runs (ms), one line per series, p50/p90/p99 marked where n supports them."""
    fig = new_figure(6.4, 3.0)
    ax = fig.axes[0]
    for s in series:
        x, y = cdf_points(s.samples_s)
        ax.plot(x * 1e3, y, color=s.color, lw=1.4, label=f"{s.legend} (n={s.stats.n})")
        for q, v in ((50, s.stats.p50), (90, s.stats.p90), (99, s.stats.p99)):
            if s.stats.n >= min_n_for(q):
                ax.plot([v * 1e3], [q / 100], "o", color=s.color, ms=4)
                ax.annotate(f"p{q}", (v * 1e3, q / 100), textcoords="offset points", xytext=(4, -9),
                            fontsize=7, color=s.color)
    _maybe_log(ax, [v for s in series for v in s.samples_s], "x")
    ax.set_xlabel("end-to-end latency (ms)")
    ax.set_ylabel("share of timed runs ≤ latency")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(loc="lower right", fontsize=8)
    return fig


def histogram_bins(samples: Sequence[float], max_bins: int = 50) -> np.ndarray:
    """Shared bin edges (seconds): numpy's ``auto`` rule over all series, at most ``max_bins``."""
    arr = np.asarray(samples, dtype=np.float64)
    lo, hi = float(arr.min()), float(arr.max())
    if hi <= lo:
        return np.array([lo - 0.5e-3, hi + 0.5e-3])
    edges = np.histogram_bin_edges(arr, bins="auto")
    return edges if edges.size - 1 <= max_bins else np.linspace(lo, hi, max_bins + 1)


def histogram_figure(series: Sequence[LatencySeries]) -> tuple[Figure, np.ndarray]:
    """Counts of timed runs per latency bin (shared bins, outlined), the p50 of each series dashed.

    Returns the figure and the bin edges (seconds) for the caption.
    """
    fig = new_figure(6.4, 2.6)
    ax = fig.axes[0]
    edges = histogram_bins([v for s in series for v in s.samples_s])
    for s in series:
        counts, _ = np.histogram(s.samples_s, bins=edges)
        ax.stairs(counts, edges * 1e3, color=s.color, lw=1.4, label=f"{s.legend} (n={s.stats.n})",
                  fill=len(series) == 1, alpha=0.35 if len(series) == 1 else 1.0)
        ax.axvline(s.stats.p50 * 1e3, color=s.color, ls="--", lw=1)
    ax.set_xlabel("end-to-end latency (ms); dashed: p50")
    ax.set_ylabel("timed runs per bin")
    ax.legend(loc="upper right", fontsize=8)
    return fig, edges


def runs_figure(series: Sequence[LatencySeries]) -> Figure:
    """Every run in order: warmups (crosses, left of 0, never in the statistics), then the timed runs.

    A warmup far above every timed run (a compile) would squeeze the timed runs flat: the value axis then
    stops above the timed runs and such a warmup is drawn as a triangle at the top edge with its value.
    """
    fig = new_figure(6.4, 3.0)
    ax = fig.axes[0]
    timed = [v for s in series for v in s.samples_s]
    top = max(timed) * 1.15 if timed else None
    clip = top is not None and any(w * 1e3 > 1.5 * top * 1e3 for s in series for w in s.warmup_s)
    for k, s in enumerate(series):
        w = len(s.warmup_s)
        xs = np.arange(-w + 1, 1)
        label = "warmup (not in the statistics)" if k == 0 else None
        for x, v in zip(xs, s.warmup_s, strict=True):
            if clip and top is not None and v > top:
                ax.plot([x], [top * 1e3], "^", color=s.color, ms=6, clip_on=False, label=label)
                ax.annotate(f"{v * 1e3:.0f} ms", (x, top * 1e3), textcoords="offset points", xytext=(4, -10),
                            fontsize=7, color=s.color)
            else:
                ax.plot([x], [v * 1e3], "x", color=s.color, ms=6, label=label)
            label = None
        ax.plot(np.arange(1, len(s.samples_s) + 1), np.asarray(s.samples_s) * 1e3, ".-", color=s.color, lw=0.8,
                ms=4, label=f"{s.legend}: timed")
        ax.axhline(s.stats.p50 * 1e3, color=s.color, ls="--", lw=1)
    ax.axvline(0.5, color="#999999", lw=0.8)
    if clip and top is not None:
        ax.set_ylim(top=top * 1e3)
    else:
        _maybe_log(ax, [v for s in series for v in s.samples_s + s.warmup_s], "y")
    ax.set_xlabel("run (warmups ≤ 0, timed runs 1 … n); dashed: timed p50")
    ax.set_ylabel("end-to-end latency (ms)")
    ax.legend(loc="upper right", fontsize=8)
    return fig


def steps_figure(series: Sequence[StepSeries]) -> Figure:
    """Per-step latency (ms) by step index: median solid, p90 dashed (over the timed runs)."""
    fig = new_figure(6.4, 3.0)
    ax = fig.axes[0]
    for s in series:
        idx = np.arange(1, len(s.median_s) + 1)
        ax.plot(idx, np.asarray(s.median_s) * 1e3, "o-", color=s.color, ms=3, lw=1.3, label=f"{s.legend}: median")
        if s.p90_s:
            ax.plot(idx, np.asarray(s.p90_s) * 1e3, "s--", color=s.color, ms=3, lw=1, label=f"{s.legend}: p90")
    ax.set_xlabel("denoising step")
    ax.set_ylabel("step latency (ms)")
    ax.set_ylim(bottom=0)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(loc="upper right", fontsize=8)
    return fig


def stages_figure(legends: Sequence[str], stages_s: Sequence[dict[str, float]]) -> Figure:
    """Stacked horizontal bars: mean ms per stage, one bar per series (the stages add up to the mean latency);
    the image encode is a stage when any series has it (an edit)."""
    fig = new_figure(6.4, 0.9 + 0.45 * len(legends))
    ax = fig.axes[0]
    y = np.arange(len(legends))
    left = np.zeros(len(legends))
    stages = time_stages(any(st.get("image_encode", 0.0) > 0 for st in stages_s))
    for (key, name), color in stages:
        width = np.array([st.get(key, 0.0) * 1e3 for st in stages_s])
        ax.barh(y, width, left=left, color=color, label=name, height=0.6)
        left += width
    for yi, total in zip(y, left, strict=True):
        ax.annotate(f"{total:.1f} ms", (total, yi), textcoords="offset points", xytext=(3, -3), fontsize=7)
    ax.set_yticks(y, list(legends))
    ax.invert_yaxis()
    ax.set_xlabel("mean time per run (ms)")
    ax.set_xlim(0, float(left.max()) * 1.15 if left.size and left.max() > 0 else 1)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=8, ncols=4 if len(stages) <= 4 else 3, frameon=False)
    return fig


def memory_figure(series: Sequence[MemorySeries], unit_label: str) -> Figure:
    """Grouped bars: peak MiB per stage, one bar per series; a series measured only as an overall peak shows
    that peak at the stage that held it."""
    fig = new_figure(6.4, 3.0)
    ax = fig.axes[0]
    n = max(len(series), 1)
    width = 0.8 / n
    x = np.arange(len(STAGES))
    for k, s in enumerate(series):
        values = [s.by_stage.get(key) for key, _ in STAGES]
        if not s.by_stage and s.peak is not None:
            values = [s.peak if key == s.peak_stage else None for key, _ in STAGES]
        heights = [0.0 if v is None else v / MIB for v in values]
        ax.bar(x - 0.4 + width * (k + 0.5), heights, width=width * 0.95, color=s.color, label=s.legend)
    ax.set_xticks(x, [name for _, name in STAGES])
    ax.set_ylabel(f"{unit_label} (MiB)")
    ax.legend(loc="upper left", fontsize=8)
    return fig
