"""The calibration file: baselines, thresholds and the SLO a deployment's alerts compare against.

Written by ``diffbench monitor calibrate`` from ``bench --json`` and ``sweep`` results, loaded by
``serve --calibration`` (and by anyone's server through :meth:`Exporter.load_calibration
<diffbench.monitor.exporter.Exporter.load_calibration>`), which publishes every value as a gauge with the
same ``model``/``shape``/``probe`` labels as the live series (docs/guides/after-launch.md): rules hold no magic
numbers and one rule covers every shape.

JSON layout (seconds, ratios 0–1, decibels)::

    {"schema_version": 1, "kind": "diffbench.calibration", "model": "tiny-flux",
     "fingerprint": {...deployment_fingerprint...}, "fingerprint_id": "<16 hex>", "slo_s": 2.0,
     "shapes": {"256x256": {"step_s": 0.012, "steps": 8,
                            "stages": {"text_encode": 0.004, "denoise": 0.096, "vae_decode": 0.02},
                            "cache_hit_ratio": 0.35}},
     "probes": {"256x256": {"psnr_threshold_db": 32.0}}, "sources": [...], "notes": [...]}

A baseline is valid only for the deployment it was measured on: ``fingerprint`` is the
:func:`~diffbench.engines.fingerprint.deployment_fingerprint` of the measured runs and ``fingerprint_id`` its
hash (:func:`fingerprint_id`). A cache hit-ratio baseline is never 0 (the drift alert divides by it).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
        (the work-weighted queue-wait prediction, docs/reference/metrics.md)."""
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
        from diffbench.metrics.shapes import parse_label

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


# -- building a calibration from bench / sweep results ---------------------------------------------------
_HUMAN_SHAPE = re.compile(r"^(\d+)x(\d+)(?: f(\d+))? s(\d+) b(\d+)$")


def bench_fingerprint(conditions: Any, packages: dict[str, str] | None) -> dict[str, object]:
    """The :func:`~diffbench.engines.fingerprint.deployment_fingerprint` of a result from its ``conditions``
    block (``torch``/``diffusers`` from the result's ``env.packages``; None when the result has no env, as
    a sweep result)."""
    from diffbench.engines.fingerprint import FINGERPRINT_FIELDS

    c = conditions
    fp: dict[str, object] = {
        "model": c.model, "model_hash": c.model_hash, "pipeline": c.pipeline, "precision": c.precision,
        "parallelism": c.parallelism, "engine": c.engine, "engine_version": c.engine_version,
        "compile": c.compile, "attention_backend": c.attention_backend, "cache": c.cache,
        "torch": (packages or {}).get("torch"), "diffusers": (packages or {}).get("diffusers"),
        "device": c.device, "hardware": c.hardware,
    }
    assert tuple(fp) == FINGERPRINT_FIELDS
    if getattr(c, "quantization", None):  # optional fields: present only when used, as in the live fingerprint
        fp["quantization"] = c.quantization
    if getattr(c, "fused_projections", None):
        fp["fused_projections"] = True
    return fp


def _label_of(shape: str) -> str:
    """``"256x256 s8 b1"`` (a result's shape) → the exporter's label ``256x256``."""
    from diffbench.metrics.shapes import shape_label

    m = _HUMAN_SHAPE.match(shape)
    if not m:
        raise InputError(f"shape {shape!r} is not WIDTHxHEIGHT [fF] sS bB")
    w, h, f, _, b = m.groups()
    return shape_label(int(w), int(h), int(f) if f else None, int(b))


@dataclass
class _Source:
    path: str
    kind: str
    fingerprint: dict[str, object]


_COLD_CODES = ("warmup_insufficient", "slower_than_warmup", "unstable_timing")


def calibrate(
    results: list[tuple[str, dict[str, Any]]],
    *,
    slo_s: float | None = None,
    psnr_thresholds: dict[str, float] | None = None,
    sweep_point: str | None = None,
) -> Calibration:
    """Build a :class:`Calibration` from parsed ``bench --json`` and ``sweep`` result files.

    Args:
        results: (file name, parsed JSON) pairs; ``kind`` ``diffbench.bench`` gives per-shape step and stage
            baselines (medians: ``step_s.median``, ``stages_s.median``; a mean would carry a cold start
            that leaked into the timed runs, 35x the median in one case, and hide a 2.6x regression),
            ``diffbench.sweep`` gives the working point's
            cache hit ratio (``skipped_detail.fraction``: skipped share of the cache decisions) and, as a
            PSNR threshold suggestion for a probe named by the sweep's shape label, the working point's worst
            per-image PSNR (dB; rounded down to 0.1 dB).
        slo_s: the latency SLO (seconds).
        psnr_thresholds: probe name → threshold (dB); wins over a sweep's suggestion.
        sweep_point: the sweep value to calibrate from instead of the sweep's working point (it must have
            passed its quality gates); for a sweep where no point was measurably faster.

    Raises:
        InputError: a file that is neither result kind, a partial or invalid bench result, a sweep without a
            working point, a shape measured twice, no step baseline at all, or results from different
            deployments (the message names the differing fingerprint fields and the files).
    """
    from diffbench.bench.result import BenchResult
    from diffbench.engines.fingerprint import fingerprint_diff
    from diffbench.sweep.models import SweepResult

    shapes: dict[str, ShapeBaseline] = {}
    ratios: dict[str, float] = {}
    probes: dict[str, ProbeThreshold] = {}
    sources: list[_Source] = []
    notes: list[str] = []
    where: dict[str, str] = {}
    duplicate: str | None = None  # raised after the fingerprint check, which names the real difference
    model: str | None = None
    for name, data in results:
        kind = data.get("kind") if isinstance(data, dict) else None
        try:
            if kind == "diffbench.bench":
                bench = BenchResult.model_validate(data)
            elif kind == "diffbench.sweep":
                sweep = SweepResult.model_validate(data)
            else:
                raise InputError(f"{name}: kind {kind!r} is neither a bench --json result (diffbench.bench) nor a "
                                 "sweep result (diffbench.sweep)")
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(x) for x in first.get("loc", ()))
            raise InputError(f"{name}: not a valid {kind} result ({loc}: {first.get('msg')})") from None
        if kind == "diffbench.bench":
            if bench.partial or bench.interrupted:
                raise InputError(f"{name}: a partial (interrupted or running) bench result; calibrate from a "
                                 "finished run")
            if not bench.valid:
                raise InputError(f"{name}: the bench result is marked invalid (protocol violated, see its "
                                 "warnings); rerun bench")
            model = model or bench.conditions.model
            sources.append(_Source(name, "bench", bench_fingerprint(bench.conditions, bench.env.packages)))
            for s in bench.shapes:
                label = _label_of(s.shape)
                if s.error or s.step_s is None or s.step_s.median <= 0:
                    notes.append(f"{label} from {name}: no step times ({s.error or 'no timed steps'}); not calibrated")
                    continue
                if label in where:
                    duplicate = duplicate or f"shape {label} is in both {where[label]} and {name}; pass one result per shape"
                    continue
                where[label] = name
                cold = [w.code for w in s.warnings if w.code in _COLD_CODES]
                if cold:
                    notes.append(f"{label} from {name}: bench warned {', '.join(cold)} (a cold start in the timed "
                                 "runs); the baselines are medians, which one cold run cannot move, but rerun bench "
                                 "with more --warmup to be sure")
                st = s.stages_s
                stages = (StageBaselines(**{k: st.median.get(k, getattr(st, k))
                                            for k in ("text_encode", "denoise", "vae_decode")})
                          if st is not None else None)
                shapes[label] = ShapeBaseline(step_s=s.step_s.median, steps=s.steps, stages=stages)
                if s.cache is not None:
                    if s.cache.hits > 0:
                        ratios[label] = s.cache.hit_ratio
                        notes.append(f"{label}: cache hit ratio {s.cache.hit_ratio:.4g} = {s.cache.hits} of "
                                     f"{s.cache.lookups} {s.cache.cache} decisions skipped over bench's timed runs")
                    else:
                        notes.append(f"{label} from {name}: the {s.cache.cache} cache skipped nothing in "
                                     f"{s.cache.lookups} decisions; no hit-ratio baseline is published (a baseline "
                                     "of 0 makes the drift alert divide by 0), so DiffusionBaselineMissing fires "
                                     "for this shape: raise the cache threshold (or more steps) or serve without it")
        else:
            wp = sweep.working_point
            chosen = sweep_point if sweep_point is not None else (wp.value if wp is not None else None)
            point = next((p for p in sweep.points if chosen is not None and p.value == chosen), None)
            if sweep_point is not None and (point is None or not point.passed):
                values = ", ".join(p.value for p in sweep.points if p.passed) or "none"
                why = "is not a value of this sweep" if point is None else "failed its quality gates"
                raise InputError(f"{name}: --sweep-point {sweep_point} {why}; values that passed: {values}")
            if point is None:
                why = wp.message if wp is not None else "the sweep did not finish"
                raise InputError(f"{name}: the sweep has no working point ({why}); choose a point that passed its "
                                 "gates with --sweep-point VALUE")
            model = model or point.conditions.model
            sources.append(_Source(name, "sweep", bench_fingerprint(point.conditions, None)))
            label = _label_of(point.conditions.shape)
            skip = point.skipped_detail
            if skip is None or skip.fraction <= 0:
                notes.append(f"{label} from {name}: cache hit ratio 0 at the working point {point.value}; "
                             "not published (a baseline of 0 makes the drift alert divide by 0: never publish 0)")
            elif label in ratios:
                notes.append(f"{label}: cache hit ratio from bench kept; {name}'s working point "
                             f"{point.value} skipped {skip.fraction:.4g}")
            else:
                ratios[label] = skip.fraction
                notes.append(f"{label}: cache hit ratio {skip.fraction:.4g} = {skip.total - skip.computed} of "
                             f"{skip.total} {skip.unit} skipped at {sweep.axis}={point.value} ({skip.method})")
            worst = point.quality.psnr.worst
            if math.isfinite(worst):
                probes[label] = ProbeThreshold(psnr_threshold_db=math.floor(worst * 10) / 10)
                notes.append(f"probe {label}: PSNR threshold {probes[label].psnr_threshold_db:g} dB suggested from "
                             f"the working point's worst image (an alert fires 3 dB below it)")
    # one deployment: compare every pair of sources on the fields both carry
    base = next((s for s in sources if s.kind == "bench"), sources[0] if sources else None)
    if base is None:
        raise InputError("no results given; pass bench --json and/or sweep result files")
    for s in sources:
        ignore = tuple(k for k in ("torch", "diffusers") if base.fingerprint.get(k) is None or s.fingerprint.get(k) is None)
        diff = fingerprint_diff(base.fingerprint, s.fingerprint, ignore=ignore)
        if diff:
            detail = "; ".join(f"{k}: {base.fingerprint.get(k)!r} vs {s.fingerprint.get(k)!r}" for k in diff)
            raise InputError(f"{base.path} and {s.path} were measured on different deployments ({detail}); a "
                             "calibration holds one deployment: pass results of the same configuration")
    if duplicate is not None:
        raise InputError(duplicate)
    if not shapes:
        raise InputError("no step baseline: pass at least one finished bench --json result with timed steps "
                         "(a sweep gives only cache hit ratios and PSNR thresholds)")
    for label, ratio in ratios.items():
        if label in shapes:
            shapes[label] = shapes[label].model_copy(update={"cache_hit_ratio": ratio})
        else:
            notes.append(f"{label}: a cache hit ratio but no bench result for the shape; not calibrated")
    for probe, db in (psnr_thresholds or {}).items():
        probes[probe] = ProbeThreshold(psnr_threshold_db=db)
    fp = base.fingerprint
    return Calibration(model=model or str(fp.get("model")), fingerprint=fp, fingerprint_id=fingerprint_id(fp),
                       slo_s=slo_s, shapes=shapes, probes=probes, sources=[s.path for s in sources], notes=notes)
