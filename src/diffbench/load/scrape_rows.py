"""``diffbench load --scrape URL``: the scraped server view put beside each row of a profile.

A :class:`~diffbench.load.scrape.MetricsScraper` keeps one window per run, named by the profile driver
(:func:`~diffbench.load.summary.run_label`); each row finds its window with
:meth:`~diffbench.load.summary.RateSummary.made_by`, in order, so rows and windows share one label.
"""

from __future__ import annotations

from collections.abc import Mapping

from diffbench.load.client.profile import ProfileRun
from diffbench.load.coldstart import recompile_cold_start
from diffbench.load.knee import LoadResult
from diffbench.load.scrape import MAX_ERRORS, MetricsScraper, ServerSide, coverage_warning, mismatch_warning
from diffbench.load.summary import RateSummary


def ok_outputs(row: RateSummary, per_request: Mapping[str, int | None]) -> int | None:
    """Outputs (images, or videos) of the row's ok requests: ``n_ok`` × the images per request when the
    workload has one value for all its shapes (``per_request``: shape label → images per request; empty
    reads 1), else per shape from ``row.per_shape``; None when a shape with ok requests has no known value."""
    values = set(per_request.values())
    if not values:
        return row.n_ok
    if len(values) == 1 and None not in values:
        return row.n_ok * int(next(iter(values)))  # type: ignore[arg-type]
    total = 0
    for label, shape in row.per_shape.items():
        ok = shape.outcomes.get("ok", 0)
        n = per_request.get(label)
        if ok and n is None:
            return None
        total += ok * (n or 0)
    return total


def attach(result: LoadResult, scraper: MetricsScraper, *, probe: bool = False,
           used: set[int] | None = None, outputs_per_request: Mapping[str, int | None] | None = None) -> LoadResult:
    """``result`` with each row's ``server`` view and a mismatch warning where it applies.

    Rows are matched to the scraper's windows by label, in order (``used``: window indexes already taken,
    updated); a row without a window keeps None. ``probe``: the rows of a capacity probe. Where the server
    exported an energy counter, the view gets joules per ok output (:func:`ok_outputs`; ``outputs_per_request``:
    shape label → images per request, None for a label the workload gives two values). A row in which the
    server's recompile counter rose gets a ``cold_start_in_measurement`` finding and row warning
    (:func:`~diffbench.load.coldstart.recompile_cold_start`)."""
    used = used if used is not None else set()
    rows, warnings = [], list(result.warnings)
    for row in result.rates:
        idx = next((i for i, w in enumerate(scraper.windows) if i not in used and row.made_by(w.label, probe=probe)),
                   None)
        if idx is None:
            rows.append(row)
            continue
        used.add(idx)
        win = scraper.windows[idx]
        view = win.view
        if view is None:  # the end scrape failed: no deltas, keep the errors
            view = ServerSide(url=scraper.url, scrapes=len(win.periodic), errors=win.errors[:MAX_ERRORS])
        outputs = ok_outputs(row, outputs_per_request or {})
        if view.energy_j is not None and outputs:
            view = view.model_copy(update={"energy_per_ok_output_j": view.energy_j / outputs})
        update: dict[str, object] = {"server": view}
        w = coverage_warning(row.n_ok, view) or mismatch_warning(
            row.latency_from_arrival_s.mean if row.n_ok else None, row.lag_s.mean, view)
        row_warnings = list(row.warnings)
        if w is not None:
            row_warnings.append(f"server mismatch: {w}")
            label = "burst" if row.mode == "open" and row.schedule == "burst" else row.label
            warnings.append(f"{label}: {w}")
        cold = recompile_cold_start(view.recompiles)
        if cold is not None:
            update["cold_start"] = [*row.cold_start, cold]
            row_warnings.append(cold.message())
        if row_warnings != row.warnings:
            update["warnings"] = row_warnings
        rows.append(row.model_copy(update=update))
    return result.model_copy(update={"rates": rows, "warnings": warnings})


def attach_profile(run: ProfileRun, scraper: MetricsScraper,
                   outputs_per_request: Mapping[str, int | None] | None = None) -> ProfileRun:
    """``run`` with :func:`attach` applied to its capacity probe (if any) and its result."""
    used: set[int] = set()
    per = outputs_per_request
    probe = (attach(run.probe, scraper, probe=True, used=used, outputs_per_request=per)
             if run.probe is not None else None)
    if run.probe is not None and run.result is run.probe:
        return run.model_copy(update={"result": probe, "probe": probe})
    result = attach(run.result, scraper, used=used, outputs_per_request=per)
    return run.model_copy(update={"result": result, "probe": probe})


__all__ = ["attach", "attach_profile", "ok_outputs"]
