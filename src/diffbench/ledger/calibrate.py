"""``--calibrate BENCH.json``: fit one GPU's efficiencies to a measured ``diffbench bench`` run.

For every shape of the run that has step timings, the measured seconds per denoise step (the median of
``step_s.per_step_median``) is compared with the time model's prediction for one step of that shape
(:func:`diffbench.ledger.timing.denoise_work` with ``denoiser_calls_per_step`` forwards). The GEMM η of
the GPU is fitted by least squares on log(predicted/measured); the attention η of the run's backend too
when the run has shapes with different token counts (otherwise the two are not separable). Elementwise
passes and launch overhead keep their anchor-fit values. The result is a ``per_gpu`` entry of the catalog.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diffbench.errors import InputError, UsageError
from diffbench.ledger.schema import Anchor, Catalog, GpuEfficiency

_GPU_TOKENS = {  # catalog GPU id → tokens that must all appear in the device name nvidia-smi reports
    "h100-sxm": ["h100"], "h100-pcie": ["h100", "pcie"], "h100-nvl": ["h100", "nvl"], "h200": ["h200"],
    "b200": ["b200"], "a100-sxm-80gb": ["a100"], "l40s": ["l40s"], "l20": ["l20"], "rtx-4090": ["4090"],
    "l4": ["l4"], "a10g": ["a10g"],
}


@dataclass(frozen=True)
class ShapeFit:
    """One shape of the bench: measured and predicted seconds per step after the calibration."""

    shape: str
    measured_step_s: float
    predicted_step_s: float

    @property
    def residual(self) -> float:
        """log(predicted / measured)."""
        return math.log(self.predicted_step_s / self.measured_step_s)


@dataclass(frozen=True)
class Calibration:
    """What ``--calibrate`` fitted: the catalog entry, the per-shape fit and the RMS log residual."""

    gpu_id: str
    model_id: str
    backend: str
    compiled: bool
    efficiency: GpuEfficiency
    shapes: list[ShapeFit]
    fitted: list[str]

    @property
    def rms_residual(self) -> float:
        return math.sqrt(sum(s.residual ** 2 for s in self.shapes) / len(self.shapes))


def read_bench(path: str | Path) -> dict[str, Any]:
    """The JSON of a ``diffbench bench`` result. Raises InputError naming the file and the fix."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"--calibrate {p}: file not found; pass the --json file of a diffbench bench run")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"--calibrate {p}: not a readable JSON file ({exc}); pass a diffbench bench --json "
                         "result") from None
    if not isinstance(data, dict) or data.get("kind") != "diffbench.bench":
        got = data.get("kind") if isinstance(data, dict) else type(data).__name__
        raise InputError(f"--calibrate {p}: not a diffbench bench result (kind {got!r}, expected "
                         "'diffbench.bench')")
    return data


POOR_FIT = 0.2
"""RMS of log(predicted ÷ measured) per-step time above which a calibration is flagged (≈ 22 % off)."""


def device_name(data: dict[str, Any]) -> str:
    """The device a saved bench result ran on: its first GPU's name, else ``"DEVICE (HARDWARE)"`` from its
    conditions (``?`` for a missing field)."""
    gpus = (data.get("env") or {}).get("gpus") or []
    if gpus and isinstance(gpus[0], dict) and gpus[0].get("name"):
        return str(gpus[0]["name"])
    cond = data.get("conditions") or {}
    return f"{cond.get('device', '?')} ({cond.get('hardware', '?')})"


def _tokens(name: str) -> set[str]:
    return set(re.split(r"[^a-z0-9]+", name.lower())) - {""}


def gpu_matches(gpu_id: str, device: str) -> bool:
    """True when the bench's device name is the catalog GPU ``gpu_id`` (token test, e.g. "NVIDIA H100 80GB
    HBM3" is h100-sxm, "NVIDIA H100 PCIe" is h100-pcie)."""
    toks = _tokens(device)
    need = _GPU_TOKENS.get(gpu_id, [gpu_id.split("-")[0]])
    if not all(n in toks for n in need):
        return False
    if gpu_id == "h100-sxm":  # the PCIe and NVL parts also say H100
        return not ({"pcie", "nvl"} & toks)
    return True


_MODEL_ALIASES = {  # hub repository names that do not contain the catalog id or display name
    "sdxl-base": ["stable-diffusion-xl-base"], "sd3.5-large": ["stable-diffusion-3.5-large"],
    "sd3.5-medium": ["stable-diffusion-3.5-medium"],
}


def model_matches(model_id: str, display: str, bench_model: str) -> bool:
    """True when the bench's model (a local path or hub id) names the catalog model: its last path part
    contains the catalog id, the display name (spaces as dashes) or a known hub name."""
    base = bench_model.rstrip("/").split("/")[-1].lower()
    names = [model_id.lower(), display.lower().replace(" ", "-"), *_MODEL_ALIASES.get(model_id.lower(), [])]
    return any(n in base for n in names)


def _backend(cond: dict[str, Any]) -> str:
    name = str(cond.get("attention_backend") or "").lower()
    if "flash_3" in name or "fa3" in name:
        return "fa3"
    if "sage" in name:
        return "sage8"
    return "sdpa"


def _precision(cond: dict[str, Any], path: str) -> str:
    prec = str(cond.get("precision") or "").lower()
    if "8" in prec and ("fp8" in prec or "float8" in prec):
        return "fp8"
    if prec in ("bfloat16", "bf16", "float16", "fp16", "half"):
        return "bf16"
    raise InputError(f"--calibrate {path}: the run used precision {prec or '(unknown)'!r}; the time model is "
                     "calibrated from a 16-bit (bfloat16/float16) or fp8 run — rerun bench with --dtype bfloat16")


def calibrate(catalog: Catalog, path: str | Path, model_id: str, gpu_id: str, force: bool = False) -> Calibration:
    """Fit ``gpu_id``'s GEMM (and, with several token counts, attention) η to a bench result.

    Raises:
        InputError: unreadable file, a run of another GPU or model (unless ``force``), no timed shape.
        UsageError: unknown model or GPU id.
    """
    from diffbench.ledger import fit as ft
    from diffbench.ledger import timing as tm
    from diffbench.ledger.catalog import get_gpu, get_model
    from diffbench.ledger.tokens import count_tokens

    data = read_bench(path)
    model = get_model(catalog, model_id)
    gpu = get_gpu(catalog, gpu_id)
    mid, gid = model_id.strip().lower(), gpu_id.strip().lower()
    cond = data.get("conditions") or {}
    device = device_name(data)
    bench_model = str(cond.get("model") or "?")
    wrong = []
    if not gpu_matches(gid, device):
        wrong.append(f"it ran on {device!r}, not on --gpu {gid} ({gpu.display_name})")
    if not model_matches(mid, model.display_name, bench_model):
        wrong.append(f"it ran model {bench_model!r}, not --model {mid} ({model.display_name})")
    if wrong and not force:
        raise InputError(f"--calibrate {path}: " + "; ".join(wrong) + ". Calibrate from a bench of the planned model "
                         "on the planned GPU (or --calibrate-force to use this one anyway)")
    precision = _precision(cond, str(path))
    backend = _backend(cond)
    tm.check_backend(catalog, gpu, backend)
    compiled = bool(cond.get("compile"))
    cases: list[ft.Case] = []
    labels: list[str] = []
    token_counts: set[int] = set()
    for s in data.get("shapes") or []:
        st = s.get("step_s") or {}
        per_step = [x for x in st.get("per_step_median") or [] if isinstance(x, (int, float)) and x > 0]
        if s.get("error") or not per_step:
            continue
        width, height, frames = int(s["width"]), int(s["height"]), s.get("frames")
        calls = float(st.get("denoiser_calls_per_step") or 1.0)
        fps = 2 if calls >= 1.5 or (st.get("denoiser_batch") or 1) >= 2 else 1
        tokens = count_tokens(model, width, height, frames or 1)
        token_counts.add(tokens.seq)
        work = tm.denoise_work(catalog, model, tokens, width, height, 1, fps, precision)
        if fps == 2 and calls < 1.5:  # CFG batched into one forward of batch 2
            work = work.model_copy(update={"launches": 1})
        peak = (gpu.fp8_tflops if tm.fp8_effective(gpu, precision) and gpu.fp8_tflops else gpu.bf16_tflops) * tm.TERA
        retention = catalog.optimizations.fp8_linear.gemm_retention if tm.fp8_effective(gpu, precision) else 1.0
        bw = gpu.mem_bw_gbps * 1e9 * catalog.efficiency.eta_mem
        anchor = Anchor(id=s.get("shape", f"{width}x{height}"), model=mid, gpu=gid, width=width, height=height,
                        frames=frames, steps=1, attention=backend, compile=compiled,
                        measured_s=statistics.median(per_step), covers="denoise", source=str(path))
        cases.append(ft.Case(anchor=anchor, a_gemm=work.linear_flops / (peak * retention),
                             b_weights=work.weight_bytes / bw, a_attn=work.attention_flops / (gpu.bf16_tflops * tm.TERA),
                             c_elem=work.activation_bytes / bw, launches=float(work.launches), serial_s=0.0,
                             pair=f"{backend}@{gpu.group}", compiled=compiled, gemm_fixed=None, group=gpu.group,
                             peak_per_watt=gpu.peak_per_watt))
        labels.append(str(s.get("shape")))
    if not cases:
        raise InputError(f"--calibrate {path}: no shape with step timings (per_step_median); pass a completed "
                         "diffbench bench run")
    base = ft.fitted_params(catalog)
    pair = f"{backend}@{gpu.group}"
    attn_key = (backend, gpu.group)
    if attn_key not in base.eta_attn:
        base = ft.FitResult(**{**base.__dict__, "eta_attn": {**base.eta_attn,
                                                             attn_key: tm.attention_eta_prior(catalog, backend, gpu.arch)}})
    free = {"eta_gemm"} | ({f"eta_attn[{pair}]"} if len(token_counts) >= 2 else set())
    try:
        fr = ft.fit_cases(catalog, cases, priors={pair: base.eta_attn[attn_key]}, free_only=free, base=base)
    except UsageError as exc:  # pragma: no cover - free is never empty
        raise InputError(f"--calibrate {path}: {exc}") from None
    shapes = [ShapeFit(shape=lab, measured_step_s=c.anchor.measured_s, predicted_step_s=ft.predict(c, fr))
              for lab, c in zip(labels, cases, strict=True)]
    eff = GpuEfficiency(gemm=fr.gemm_eta(gpu.group), attention=fr.eta_attn[attn_key] if len(token_counts) >= 2 else None,
                        attention_backend=backend,
                        source=f"{Path(path).name}: {len(cases)} shape(s) on {device}")
    return Calibration(gpu_id=gid, model_id=mid, backend=backend, compiled=compiled, efficiency=eff,
                       shapes=shapes, fitted=sorted(free))


def with_calibration(catalog: Catalog, cal: Calibration) -> Catalog:
    """A copy of ``catalog`` with ``cal`` as its ``efficiency.per_gpu`` entry for the calibrated GPU."""
    per_gpu = {**catalog.efficiency.per_gpu, cal.gpu_id: cal.efficiency}
    eff = catalog.efficiency.model_copy(update={"per_gpu": per_gpu})
    return catalog.model_copy(update={"efficiency": eff})


def apply_calibration(catalog: Catalog, path: str | Path | None, model_id: str, gpu_id: str,
                      force: bool = False) -> tuple[Catalog, Calibration | None]:
    """``(catalog with the calibration, the calibration)``; ``(catalog, None)`` when ``path`` is None."""
    if path is None:
        return catalog, None
    cal = calibrate(catalog, path, model_id, gpu_id, force)
    return with_calibration(catalog, cal), cal


def describe(cal: Calibration) -> str:
    """One line: what was fitted and the residual."""
    e = cal.efficiency
    parts = [f"η_gemm {e.gemm:.3f}"]
    if e.attention is not None:
        parts.append(f"η_attn[{cal.backend}] {e.attention:.3f}")
    warn = ""
    at_bound = [n for n, v in (("η_gemm", e.gemm), ("η_attn", e.attention)) if v is not None and (v >= 0.999 or v <= 0.011)]
    if cal.rms_residual > POOR_FIT or at_bound:
        warn = ("; WARNING: the fit does not describe this run ("
                + ", ".join(([f"RMS log residual {cal.rms_residual:.2f} > {POOR_FIT}"] if cal.rms_residual > POOR_FIT
                             else []) + [f"{n} at its bound" for n in at_bound])
                + "): is it a bench of the planned model on the planned GPU, warm and at low load?")
    return (f"calibrated {cal.gpu_id} from {e.source}: {', '.join(parts)} "
            f"({'compiled' if cal.compiled else 'eager'}); RMS log residual {cal.rms_residual:.4f}"
            + ("" if e.attention is not None else "; attention η kept (one token count cannot separate it)") + warn)
