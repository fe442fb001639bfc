"""Saved results → one :class:`~diffbench.report.document.Document` → an HTML page or Markdown + PNGs.

Results are grouped by kind (in :data:`~diffbench.report.loader.KINDS` order); several results of one kind
go to its builder together and are overlaid (two bench runs, two load sweeps). Mixed kinds give one page
with each kind's sections.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from diffbench.report.document import Document
from diffbench.report.kinds import ReportOptions, builder
from diffbench.report.loader import KINDS, LoadedResult, load_result


def build_document(paths: Sequence[str | Path], opts: ReportOptions, *, title: str | None = None,
                   on_step: Callable[[str], None] | None = None) -> Document:
    """Load every result and build the report's content.

    Args:
        paths: result files (``--json`` of bench, quality, sweep, load, simulate, plan, ledger; ``derive.json``).
        opts: builder options.
        title: page title; default names the kinds and files.
        on_step: progress callback, called with a short text before each file and each kind.

    Raises:
        InputError: a file is not a readable, valid result (see :func:`load_result`), or a builder
            cannot find what it needs (e.g. the images of a quality result).
        UsageError: no paths.
    """
    from diffbench.errors import UsageError

    if not paths:
        raise UsageError("give at least one result file (the --json of bench, quality, sweep, load, ...)")
    loaded: list[LoadedResult] = []
    for p in paths:
        if on_step:
            on_step(f"reading {p}")
        loaded.append(load_result(p))
    _disambiguate(loaded)
    doc = Document(title=title or _default_title(loaded), sources=[str(r.path) for r in loaded])
    for kind in KINDS:
        group = [r for r in loaded if r.kind == kind]
        if not group:
            continue
        if on_step:
            on_step(f"building the {kind} sections ({len(group)} result{'s' if len(group) > 1 else ''})")
        doc.sections.extend(builder(kind)(group, opts))
    doc.check_ids()
    return doc


def _disambiguate(loaded: list[LoadedResult]) -> None:
    """Results whose file names collide are labelled with as many parent folders as tell them apart."""
    names = [r.label for r in loaded]
    for i, r in enumerate(loaded):
        if names.count(names[i]) < 2:
            continue
        parts = r.path.resolve().with_suffix("").parts
        others = [o.path.resolve().with_suffix("").parts for o in loaded if o is not r and o.label == names[i]]
        for depth in range(2, len(parts) + 1):
            tail = parts[-depth:]
            if all(tuple(o[-depth:]) != tuple(tail) for o in others):
                r.display = "/".join(tail)
                break


def _kind_name(r: LoadedResult) -> str:
    return "simulate" if r.kind == "load" and getattr(r.model, "source", "") == "simulate" else r.kind


def _default_title(loaded: list[LoadedResult]) -> str:
    order = [*KINDS, "simulate"]
    kinds = sorted({_kind_name(r) for r in loaded}, key=order.index)
    names = ", ".join(r.label for r in loaded[:3]) + (" ..." if len(loaded) > 3 else "")
    return f"diffbench {' + '.join(kinds)} report: {names}"
