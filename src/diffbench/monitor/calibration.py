"""The calibration file: baselines, thresholds and the SLO a deployment's alerts compare against.

Written by ``diffbench monitor calibrate`` from ``bench --json`` and ``sweep`` results, loaded by
``serve --calibration`` (and by anyone's server through :meth:`Exporter.load_calibration
<diffbench.monitor.exporter.Exporter.load_calibration>`), which publishes every value as a gauge with the
same ``model``/``shape``/``probe`` labels as the live series (monitoring.md §3.9): rules hold no magic
numbers and one rule covers every shape.

JSON layout (seconds, ratios 0–1, decibels)::

    {"schema_version": 1, "kind": "diffbench.calibration", "model": "tiny-flux",
     "fingerprint": {...deployment_fingerprint...}, "fingerprint_id": "<16 hex>", "slo_s": 2.0,
     "shapes": {"256x256": {"step_s": 0.012, "steps": 8,
                            "stages": {"text_encode": 0.004, "denoise": 0.096, "vae_decode": 0.02},
                            "cache_hit_ratio": 0.35}},
     "probes": {"256x256": {"psnr_threshold_db": 32.0}}, "sources": [...], "notes": [...]}

A baseline is valid only for the deployment it was measured on: ``fingerprint`` is the
:func:`~diffbench.core.fingerprint.deployment_fingerprint` of the measured runs and ``fingerprint_id`` its
hash (:func:`fingerprint_id`). A cache hit-ratio baseline is never 0 (the drift alert divides by it).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError, field_validator

from diffbench.errors import InputError

SCHEMA_VERSION = 1
KIND = "diffbench.calibration"


def fingerprint_id(fp: dict[str, object]) -> str:
    """sha256 (first 16 hex digits) of the fingerprint as sorted-key JSON (values through ``str`` if needed).

    Equal to :func:`diffbench.store.models.fingerprint_hash` without ignored fields.
    """
    return hashlib.sha256(json.dumps(fp, sort_keys=True, default=str).encode()).hexdigest()[:16]


class StageBaselines(BaseModel):
    """Mean seconds of each stage for one shape at the calibrated step count."""

    text_encode: float = Field(ge=0, allow_inf_nan=False)
    denoise: float = Field(ge=0, allow_inf_nan=False)
    vae_decode: float = Field(ge=0, allow_inf_nan=False)


class ShapeBaseline(BaseModel):
    """Baselines of one ``shape`` label: mean step time (s), the steps it was measured at, stage means
    (s) and the cache hit ratio (skipped share of cache decisions, 0 < r ≤ 1; None without a cache)."""

    step_s: float = Field(gt=0, allow_inf_nan=False)
    steps: int | None = Field(default=None, ge=1)
    stages: StageBaselines | None = None
    cache_hit_ratio: float | None = Field(default=None, gt=0, le=1)

    def predict_s(self, steps: int) -> float:
        """Predicted service time (s) at ``steps``: steps × step baseline + text encode + VAE decode
        (monitoring.md §3.4)."""
        fixed = self.stages.text_encode + self.stages.vae_decode if self.stages is not None else 0.0
        return steps * self.step_s + fixed


class ProbeThreshold(BaseModel):
    """PSNR threshold (dB) of one quality probe."""

    psnr_threshold_db: float = Field(gt=0, allow_inf_nan=False)


class Calibration(BaseModel):
    """A calibration file (see module docstring)."""

    schema_version: int = SCHEMA_VERSION
    kind: str = KIND
    model: str
    fingerprint: dict[str, object]
    fingerprint_id: str
    slo_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    shapes: dict[str, ShapeBaseline] = {}
    probes: dict[str, ProbeThreshold] = {}
    sources: list[str] = []
    notes: list[str] = []

    @field_validator("shapes")
    @classmethod
    def _labels(cls, v: dict[str, ShapeBaseline]) -> dict[str, ShapeBaseline]:
        from diffbench.monitor.shapes import parse_label

        for label in v:
            parse_label(label)  # ValueError → ValidationError naming the label
        return v


def read_calibration(path: str | Path) -> Calibration:
    """Load and check a calibration file.

    Raises:
        InputError: the file is missing or unreadable, not JSON, not a calibration (``kind``), or a field
            is out of range; the message names the file and the field.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{p}: calibration file not found; write one with diffbench monitor calibrate") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{p}: cannot read the calibration file ({exc})") from None
    except ValueError as exc:
        raise InputError(f"{p}: not JSON ({exc}); a calibration file is written by diffbench monitor calibrate") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        got = data.get("kind") if isinstance(data, dict) else type(data).__name__
        raise InputError(f"{p}: not a calibration file (kind {got!r}, expected {KIND!r}); write one with "
                         "diffbench monitor calibrate")
    try:
        cal = Calibration.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first.get("loc", ()))
        raise InputError(f"{p}: {loc}: {first.get('msg')}") from None
    if cal.fingerprint_id != fingerprint_id(cal.fingerprint):
        raise InputError(f"{p}: fingerprint_id {cal.fingerprint_id} does not match the fingerprint it carries "
                         f"({fingerprint_id(cal.fingerprint)}); the file was edited: recalibrate")
    return cal
