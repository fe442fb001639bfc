"""Read plotted values back from a matplotlib SVG in the browser (sweep, plan and ledger report tests).

A value's screen position is mapped back through the axis' own tick labels: the ticks' screen positions
and their printed numbers give a least-squares linear map pixel → value, so a test checks what a reader
sees (a line at the budget reads as the budget on the printed axis), not matplotlib's internal numbers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_TICKS_JS = """
const root = arguments[0], axes = arguments[1], which = arguments[2];
const g = root.querySelector(`g[id="axes_${axes}"]`);
return [...g.querySelectorAll(`g[id^="${which}tick_"]`)].map(t => {
  const r = t.querySelector('use').getBoundingClientRect();
  const txt = t.querySelector('text');
  return [txt ? txt.textContent : '', r.left + r.width / 2, r.top + r.height / 2];
});
"""

_RECTS_JS = """
const root = arguments[0], sel = arguments[1];
return [...root.querySelectorAll(sel)].map(e => {
  const r = e.getBoundingClientRect();
  return [r.left, r.top, r.right, r.bottom];
});
"""


def _num(label: str) -> float | None:
    try:
        return float(label.replace("−", "-").replace("×", "").strip())
    except ValueError:
        return None


def axis_map(driver: Any, block: Any, axes: int, which: str) -> tuple[float, float]:
    """(slope, intercept) of value = slope × pixel + intercept for axis ``which`` ("x" or "y") of the
    ``axes``-th axes (1-based, matplotlib's ``axes_N`` SVG group) of the plot in ``block``."""
    ticks = driver.execute_script(_TICKS_JS, block, axes, which)
    pts = [(_num(lbl), x if which == "x" else y) for lbl, x, y in ticks]
    pts = [(v, p) for v, p in pts if v is not None]
    assert len(pts) >= 2, f"axis {which} of axes_{axes} has fewer than 2 numeric tick labels: {ticks}"
    values, pix = np.array([v for v, _ in pts]), np.array([p for _, p in pts])
    slope, intercept = np.polyfit(pix, values, 1)
    resid = np.abs(slope * pix + intercept - values).max()
    assert resid <= 1e-3 * max(1.0, float(np.abs(values).max())), f"tick labels not linear: {pts}"
    return float(slope), float(intercept)


def rects(driver: Any, block: Any, selector: str) -> list[tuple[float, float, float, float]]:
    """Screen rectangles (left, top, right, bottom) of the elements matching ``selector`` in ``block``."""
    return [tuple(r) for r in driver.execute_script(_RECTS_JS, block, selector)]  # type: ignore[misc]


def centre(r: tuple[float, float, float, float]) -> tuple[float, float]:
    return (r[0] + r[2]) / 2, (r[1] + r[3]) / 2


def value_at(m: tuple[float, float], pixel: float) -> float:
    return m[0] * pixel + m[1]
