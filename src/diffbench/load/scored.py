"""Per-row quality of the requests that replayed a reference (``load --reference DIR``).

:func:`quality_row` reads the records of one row: those with ``reference`` set were sent to replay a
reference; of them, those with a ``psnr_db`` were scored (ok answers, compared in the checker processes by
:mod:`diffbench.load.client.scoring`). The row reports:

- ``n_reference``: reference requests sent; ``n_scored``: of them, scored;
- ``psnr_p50_db``, ``psnr_p10_db`` (the low tail: 10 % of scored answers are at or below it; numpy's linear
  percentile), ``psnr_worst_db``; ``ssim_p50``, ``ssim_worst``;
- ``gate_psnr_db`` (the ``psnr:`` floor of ``--goodput``, None without one) and ``fraction_under_gate``:
  scored answers below it;
- ``goodput``: the quality goodput over the reference requests (:func:`~diffbench.load.goodput.count_quality_good`)
  with its n and Clopper-Pearson interval.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel

from diffbench.core.records import RequestRecord
from diffbench.load.goodput import GoodputConstraint, QualityFloor, QualityGoodput, count_quality_good


class QualityRow(BaseModel):
    """The quality of one row's reference requests (module docstring; PSNR in dB)."""

    n_reference: int
    n_scored: int
    psnr_p50_db: float | None = None
    psnr_p10_db: float | None = None
    psnr_worst_db: float | None = None
    ssim_p50: float | None = None
    ssim_worst: float | None = None
    gate_psnr_db: float | None = None
    fraction_under_gate: float | None = None
    goodput: QualityGoodput


def quality_row(records: Sequence[RequestRecord], constraints: Sequence[GoodputConstraint] = (),
                floors: Sequence[QualityFloor] = ()) -> QualityRow | None:
    """The :class:`QualityRow` of ``records``; None when no record replayed a reference."""
    refs = [r for r in records if r.reference is not None]
    if not refs:
        return None
    psnr = np.array([r.psnr_db for r in refs if r.psnr_db is not None], dtype=np.float64)
    ssim = np.array([r.ssim for r in refs if r.ssim is not None], dtype=np.float64)
    gate = next((f.min for f in floors if f.name == "psnr"), None)
    out: dict[str, object] = {}
    if psnr.size:
        out.update(psnr_p50_db=float(np.percentile(psnr, 50)), psnr_p10_db=float(np.percentile(psnr, 10)),
                   psnr_worst_db=float(psnr.min()))
        if gate is not None:
            out["fraction_under_gate"] = float(np.mean(psnr < gate))
    if ssim.size:
        out.update(ssim_p50=float(np.percentile(ssim, 50)), ssim_worst=float(ssim.min()))
    return QualityRow(n_reference=len(refs), n_scored=int(psnr.size), gate_psnr_db=gate,
                      goodput=count_quality_good(refs, constraints, floors), **out)  # type: ignore[arg-type]


__all__ = ["QualityRow", "quality_row"]
