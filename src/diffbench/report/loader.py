"""Read any saved diffbench result and recognise it by its ``kind`` and ``schema_version``.

============================  ======================  =====================================
``kind`` in the JSON           report kind             written by
============================  ======================  =====================================
``diffbench.bench``            ``bench``               ``bench --json``
``diffbench-quality``          ``quality``             ``quality --json``
``diffbench.sweep``            ``sweep``               ``sweep --json``
``diffbench.load``             ``load``                ``load --json``, ``simulate --json``
``diffbench.plan``             ``plan``                ``plan --json``
``diffbench.ledger``           ``ledger``              ``ledger --json``
``diffbench.derive``           ``derive``              ``derive`` (``derive.json`` in ``--out``)
============================  ======================  =====================================

Results written before ``kind`` was added to the load, plan and ledger results are recognised by their
fields (``rates`` + ``knee``; ``steps`` + ``total_gpus``; ``stages`` + ``forward``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from diffbench.errors import InputError

KINDS = ("bench", "quality", "sweep", "load", "plan", "ledger", "derive")

_BY_KIND = {
    "diffbench.bench": "bench",
    "diffbench-quality": "quality",
    "diffbench.sweep": "sweep",
    "diffbench.load": "load",
    "diffbench.plan": "plan",
    "diffbench.ledger": "ledger",
    "diffbench.derive": "derive",
}


@dataclass
class LoadedResult:
    """A validated result: its report kind, the file it came from and the typed model."""

    kind: str
    path: Path
    model: Any  # BenchResult | QualityReport | SweepResult | LoadResult | PlanResult | LedgerResult | DeriveResult
    display: str | None = None
    """Set by :func:`~diffbench.report.build.build_document` when two files share a name (``r1/r``)."""

    @property
    def label(self) -> str:
        """A short name for legends: the file name without ``.json`` (with its folder when names collide)."""
        return self.display or self.path.name.removesuffix(".json")


def _model_class(kind: str) -> tuple[type[BaseModel], int]:
    if kind == "bench":
        from diffbench.bench.result import SCHEMA_VERSION, BenchResult
        return BenchResult, SCHEMA_VERSION
    if kind == "quality":
        from diffbench.quality.models import REPORT_SCHEMA_VERSION, QualityReport
        return QualityReport, REPORT_SCHEMA_VERSION
    if kind == "sweep":
        from diffbench.sweep.models import SCHEMA_VERSION as SV
        from diffbench.sweep.models import SweepResult
        return SweepResult, SV
    if kind == "load":
        from diffbench.load.knee import LoadResult as LoadSweep
        from diffbench.load.summary import SCHEMA_VERSION as LV
        return LoadSweep, LV
    if kind == "plan":
        from diffbench.plan.models import SCHEMA_VERSION as PV
        from diffbench.plan.models import PlanResult
        return PlanResult, PV
    if kind == "ledger":
        from diffbench.ledger.account import SCHEMA_VERSION as GV
        from diffbench.ledger.account import LedgerResult
        return LedgerResult, GV
    if kind == "derive":
        from diffbench.derive.models import SCHEMA_VERSION as DV
        from diffbench.derive.models import DeriveResult
        return DeriveResult, DV
    raise ValueError(kind)


def detect_kind(data: object) -> str | None:
    """The report kind of a parsed JSON document, or None when it is not a diffbench result."""
    if not isinstance(data, dict):
        return None
    k = data.get("kind")
    if isinstance(k, str):
        return _BY_KIND.get(k)
    if "rates" in data and "knee" in data:
        return "load"
    if "steps" in data and "total_gpus" in data:
        return "plan"
    if "stages" in data and "forward" in data:
        return "ledger"
    return None


def load_result(path: str | Path) -> LoadedResult:
    """Read and validate one result file.

    Raises:
        InputError: the file is missing or unreadable, not JSON, not a diffbench result (the message lists
            the kinds a report accepts), newer than this diffbench (``schema_version``), or invalid for
            its kind (the first pydantic error, with its field path).
    """
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{p} is a directory; give the result file a command wrote with --json")
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputError(f"{p}: no such file (give the JSON a command wrote with --json)") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{p}: cannot read it as UTF-8 text ({exc})") from exc
    if not text.strip():
        raise InputError(f"{p} is empty; a command that was stopped before its first write leaves an empty "
                         "file: run it again")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        hint = " (a .jsonl of per-request records is not a result; give the --json file)" \
            if p.suffix == ".jsonl" else ""
        raise InputError(f"{p}: not JSON ({exc.msg}; line {exc.lineno}, column {exc.colno}){hint}") from exc
    kind = detect_kind(data)
    if kind is None:
        found = data.get("kind") if isinstance(data, dict) else type(data).__name__
        raise InputError(
            f"{p}: not a diffbench result a report can show (kind {found!r}); reports read the --json of "
            "bench, quality, sweep, load, simulate, plan and ledger, or the derive.json of derive")
    cls, version = _model_class(kind)
    sv = data.get("schema_version", 1)
    if not isinstance(sv, int) or isinstance(sv, bool) or sv < 1:
        raise InputError(f"{p}: schema_version {sv!r} is not a version diffbench writes (an integer >= 1)")
    if sv > version:
        raise InputError(f"{p}: {kind} result schema_version {sv} is newer than this diffbench reads "
                         f"({version}); upgrade diffbench")
    try:
        model = cls.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err.get("loc", ())) or "(top level)"
        raise InputError(f"{p}: not a valid {kind} result: {where}: {err.get('msg')}") from exc
    return LoadedResult(kind=kind, path=p, model=model)
