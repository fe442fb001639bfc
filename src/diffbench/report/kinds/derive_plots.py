"""Figures of a derive result: the latency waterfall per step and the quality spent against the budget.

Waterfall: the starting deployment's median latency (a bar from 0), then one bar per step that was
measured and kept, spanning the latency before the step to the latency after it (the cumulative
``latency_s`` of the records), with the ledger's prediction beside it where the step has one (the latency
before the step ÷ ``predicted_speedup``, hatched), ending at the final configuration's latency (measured
against the start in one session when the result has that measurement, else the last step's). Budget:
the combined PSNR p10 after each lossy step kept (``psnr_spent_db``) and the final configuration's, against
the budget line ``config.budget_db`` (higher PSNR = less quality spent; below the line is over budget).

SVG ids (``gid``) for DOM checks: ``derive-{i}-start``, ``derive-{i}-measured-{j}``,
``derive-{i}-predicted-{j}`` (j = the step's index in ``steps``), ``derive-{i}-final``; ``derive-{i}-budget``,
``derive-{i}-spent-{j}``, ``derive-{i}-spent-final``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from diffbench.derive.models import DeriveResult
from diffbench.report.kinds.plan import circled

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class WaterfallBar:
    """One kept, measured step: latency before and after it (s), and the predicted latency after it."""

    index: int
    label: str
    before_s: float
    after_s: float
    predicted_s: float | None


@dataclass(frozen=True)
class Waterfall:
    """What the waterfall draws: the start, the kept steps in order, the end (seconds)."""

    start_s: float
    bars: list[WaterfallBar]
    final_s: float
    final_measured: bool
    """True when ``final_s`` is the final configuration measured against the start, else the last step's."""


def waterfall(result: DeriveResult) -> Waterfall | None:
    """The bars of the latency waterfall, or None when no latency was measured (a dry run, an early stop)."""
    bars: list[WaterfallBar] = []
    prev: float | None = None
    first: float | None = None
    for j, s in enumerate(result.steps):
        m = s.measured
        if first is None:
            first = m.baseline_latency_s if m is not None else s.latency_s
        if s.decision == "kept" and m is not None:
            before = prev if prev is not None else m.baseline_latency_s
            after = s.latency_s if s.latency_s is not None else m.latency_s
            pred = before / s.predicted_speedup if s.predicted_speedup and s.predicted_speedup > 0 else None
            bars.append(WaterfallBar(j, f"{circled(s.stage)} {s.candidate}", before, after, pred))
            prev = after
        elif s.latency_s is not None:
            prev = s.latency_s
    fm = result.final.measured if result.final is not None else None
    start = bars[0].before_s if bars else (first if first is not None else
                                            fm.baseline_latency_s if fm is not None else None)
    if start is None:
        return None
    if fm is not None:
        return Waterfall(start, bars, fm.latency_s, True)
    return Waterfall(start, bars, prev if prev is not None else start, False)


def waterfall_figure(i: int, result: DeriveResult, wf: Waterfall) -> Figure:
    """The latency waterfall of result ``i`` (see the module docstring)."""
    from matplotlib.patches import Patch

    from diffbench.report.figures import COLORS, new_figure

    n = len(wf.bars)
    fig = new_figure(max(6.4, 1.6 + 0.9 * (n + 2)), 4.4)
    ax = fig.axes[0]
    ax.bar([0], [wf.start_s], 0.6, color="#7f7f7f", gid=f"derive-{i}-start")
    ax.annotate(f"{wf.start_s:.3f}", (0, wf.start_s), xytext=(0, 2), textcoords="offset points", ha="center",
                va="bottom", fontsize=7)
    level = wf.start_s
    for k, b in enumerate(wf.bars, start=1):
        w = 0.38 if b.predicted_s is not None else 0.6
        xm = k - 0.2 if b.predicted_s is not None else k
        ax.hlines([level], k - 1 + 0.3, xm - w / 2, color="#999999", lw=0.8, ls=":")
        ax.bar([xm], [abs(b.before_s - b.after_s)], w, bottom=[min(b.before_s, b.after_s)], color=COLORS[0],
               gid=f"derive-{i}-measured-{b.index}")
        ax.annotate(f"{b.after_s:.3f}", (xm, b.after_s), xytext=(0, -2), textcoords="offset points",
                    ha="center", va="top", fontsize=7)
        if b.predicted_s is not None:
            xp = k + 0.2
            ax.bar([xp], [abs(b.before_s - b.predicted_s)], w, bottom=[min(b.before_s, b.predicted_s)],
                   color=COLORS[1], alpha=0.55, hatch="//", edgecolor="white", gid=f"derive-{i}-predicted-{b.index}")
            ax.annotate(f"{b.predicted_s:.3f}", (xp, b.predicted_s), xytext=(0, -2), textcoords="offset points",
                        ha="center", va="top", fontsize=7, color="#a0522d")
        level = b.after_s
    x_end = n + 1
    ax.hlines([level], x_end - 1 + 0.3, x_end - 0.3, color="#999999", lw=0.8, ls=":")
    ax.bar([x_end], [wf.final_s], 0.6, color=COLORS[2], gid=f"derive-{i}-final")
    ax.annotate(f"{wf.final_s:.3f}", (x_end, wf.final_s), xytext=(0, 2), textcoords="offset points",
                ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(n + 2), ["start", *(b.label for b in wf.bars), "final"], rotation=25, ha="right",
                  fontsize=8)
    ax.set_ylabel("median latency per request (s)")
    ax.set_ylim(bottom=0)
    ax.margins(y=0.12)
    handles = [Patch(color="#7f7f7f", label="starting deployment"),
               Patch(color=COLORS[0], label="kept step, measured"),
               Patch(facecolor=COLORS[1], alpha=0.55, hatch="//", edgecolor="white", label="ledger prediction"),
               Patch(color=COLORS[2], label="final, measured vs start" if wf.final_measured
                     else "final (last step's latency)")]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return fig


@dataclass(frozen=True)
class SpentPoint:
    """The combined PSNR p10 (dB) after a lossy step kept (``index`` in ``steps``; None: the final)."""

    index: int | None
    label: str
    psnr_db: float


def spent_points(result: DeriveResult) -> list[SpentPoint]:
    """The combined PSNR p10 after each lossy step kept, then the final configuration's (finite values only)."""
    pts = [SpentPoint(j, f"{circled(s.stage)} {s.candidate}", s.psnr_spent_db) for j, s in enumerate(result.steps)
           if s.decision == "kept" and s.psnr_spent_db is not None and math.isfinite(s.psnr_spent_db)]
    f = result.final
    if f is not None and f.psnr_spent_db is not None and math.isfinite(f.psnr_spent_db):
        pts.append(SpentPoint(None, "final", f.psnr_spent_db))
    return pts


def budget_figure(i: int, result: DeriveResult) -> Figure:
    """The quality spent against the budget of result ``i`` (see the module docstring)."""
    from diffbench.report.figures import COLORS, new_figure

    pts = spent_points(result)
    budget = result.config.budget_db
    fig = new_figure(max(6.4, 1.6 + 0.9 * (len(pts) + 1)), 4.0)
    ax = fig.axes[0]
    vals = [p.psnr_db for p in pts] + [budget]
    lo, hi = min(vals) - 3.0, max(vals) + 3.0
    ax.axhspan(lo, budget, color="#d62728", alpha=0.08, lw=0)
    ax.axhline(budget, color="#d62728", ls="--", lw=1.4, gid=f"derive-{i}-budget",
               label=f"budget: combined PSNR p10 ≥ {budget:g} dB (shaded: over budget)")
    if pts:
        xs = list(range(len(pts)))
        ax.plot(xs, [p.psnr_db for p in pts], color=COLORS[0], lw=1.2, label="combined PSNR p10 after the step")
        for x, p in zip(xs, pts, strict=True):
            gid = f"derive-{i}-spent-final" if p.index is None else f"derive-{i}-spent-{p.index}"
            ax.plot([x], [p.psnr_db], "o", color=COLORS[2] if p.index is None else COLORS[0], ms=7, gid=gid)
            ax.annotate(f"{p.psnr_db:.2f} dB", (x, p.psnr_db), xytext=(6, 4), textcoords="offset points",
                        fontsize=7)
        ax.set_xticks(xs, [p.label for p in pts], rotation=25, ha="right", fontsize=8)
        ax.set_xlim(-0.6, len(pts) - 0.4)
    else:
        ax.set_xticks([])
        ax.set_xlim(0, 1)
        ax.text(0.5, budget + 1.5, "no lossy step kept: no quality spent (lossless)", ha="center", fontsize=9)
    ax.set_ylim(lo, hi)
    ax.set_ylabel("combined PSNR p10 vs the start (dB)\nhigher = less quality spent")
    ax.legend(fontsize=7, loc="upper right")
    return fig
