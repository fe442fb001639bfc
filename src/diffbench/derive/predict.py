"""The ledger's predictions beside the measurements (① account, and a predicted speed-up per candidate).

The ledger accounts catalog models on catalog GPUs (``diffbench ledger``). Once the starting deployment has
been benched, the ledger is calibrated on that bench (``ledger --calibrate``: this GPU's GEMM and attention
efficiency fitted to its per-step times) so every later prediction is for this machine. A model or device
outside the catalog (an embedded tiny model, a CPU) gets no prediction, and the record says so.
"""

from __future__ import annotations

from pathlib import Path

from diffbench.derive.models import DeriveConfig
from diffbench.errors import DiffbenchError
from diffbench.ledger.account import LedgerConfig, LedgerResult, evaluate
from diffbench.ledger.schema import Catalog


class Ledger:
    """The ledger for the derivation's model, shape, steps and GPU, or a reason why there is none."""

    def __init__(self, cfg: DeriveConfig) -> None:
        from diffbench.ledger.catalog import load_catalog

        self.cfg = cfg
        self.catalog: Catalog | None = None
        self.reason: str | None = None
        self.model = cfg.ledger_model or cfg.engine.model
        self.calibrated = ""
        if cfg.gpu is None:
            self.reason = "no --gpu: the ledger predicts catalog GPUs only (see diffbench ledger --help)"
            return
        catalog = load_catalog()
        if self.model not in catalog.models:
            self.reason = (f"{self.model} is not in the ledger's catalog; pass --ledger-model ID for its "
                           f"architecture (e.g. flux.1-dev) to get predictions")
            return
        if cfg.gpu not in catalog.gpus:
            self.reason = f"--gpu {cfg.gpu} is not in the ledger's catalog"
            return
        self.catalog = catalog

    def config(self, **update: object) -> LedgerConfig:
        c = self.cfg
        return LedgerConfig(model=self.model, width=c.width, height=c.height, frames=c.frames, steps=c.steps,
                            gpu=c.gpu or "", **update)  # type: ignore[arg-type]

    def account(self, **update: object) -> LedgerResult | None:
        """The ledger's result for the deployment with ``update`` (LedgerConfig fields), or None."""
        if self.catalog is None:
            return None
        try:
            return evaluate(self.catalog, self.config(**update))
        except DiffbenchError as exc:
            self.reason = str(exc)
            return None

    def speedup(self, base: dict[str, object], change: dict[str, object]) -> float | None:
        """Predicted speed-up of ``change`` over ``base`` (LedgerConfig fields), or None without a ledger
        or when the ledger has no such option (an empty ``change``)."""
        if not change:
            return None
        a, b = self.account(**base), self.account(**{**base, **change})
        if a is None or b is None or b.total_time_s <= 0:
            return None
        return a.total_time_s / b.total_time_s

    def calibrate(self, bench_json: Path) -> str:
        """Fit this machine's efficiencies to the start deployment's bench; returns a description or why not."""
        if self.catalog is None:
            return self.reason or "no ledger"
        from diffbench.ledger.calibrate import calibrate, describe, with_calibration

        try:
            cal = calibrate(self.catalog, bench_json, self.model, self.cfg.gpu or "")
        except DiffbenchError as exc:
            return f"not calibrated: {exc}"
        self.catalog = with_calibration(self.catalog, cal)
        self.calibrated = describe(cal)
        return self.calibrated
