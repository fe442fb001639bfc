"""The run store: runs, outputs manifests, fingerprints, timing and quality summaries (SQLite).

Public API: :class:`RunStore` (open / put_run / get_run / list_runs / find_done / put_sweep / get_sweep /
list_sweeps), the records :class:`RunRecord`, :class:`SweepRecord`, :class:`RunTiming`,
:class:`RunQuality`, :class:`MetricStats`, :class:`SkipStats`, and :func:`default_store_path`.
"""

from diffbench.store.db import SCHEMA_VERSION, STORE_ENV, default_store_path, open_db
from diffbench.store.models import (
    MetricStats,
    RunQuality,
    RunRecord,
    RunTiming,
    SkipStats,
    SweepRecord,
    fingerprint_hash,
)
from diffbench.store.runs import RunStore, new_run_id

__all__ = [
    "SCHEMA_VERSION",
    "STORE_ENV",
    "MetricStats",
    "RunQuality",
    "RunRecord",
    "RunStore",
    "RunTiming",
    "SkipStats",
    "SweepRecord",
    "default_store_path",
    "fingerprint_hash",
    "new_run_id",
    "open_db",
]
