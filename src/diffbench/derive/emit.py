"""What the chosen configuration leaves with: the ``diffbench serve`` command line and the monitoring
calibration (``monitor calibrate`` from the final configuration's bench)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from diffbench.derive.models import DeriveConfig
from diffbench.engines.config import EngineConfig


def serve_command(e: EngineConfig, cfg: DeriveConfig, steps: int, calibration: Path) -> str:
    """The exact ``diffbench serve`` command that starts configuration ``e`` with its calibration, the
    derivation's shape as the default and warmup size, and its steps as the default steps."""
    size = f"{cfg.width}x{cfg.height}"
    args = ["diffbench", "serve", "--model", e.model, "--device", e.device, "--dtype", e.dtype]
    if e.attention_backend:
        args += ["--attention-backend", e.attention_backend]
    if e.compile:
        args.append("--compile")
    if getattr(e, "fuse_projections", False):
        args.append("--fuse-projections")
    quant = getattr(e, "quantization", "none")
    if quant != "none":
        args += ["--quantization", str(quant)]
    if e.cache:
        args += ["--cache", e.cache]
    if e.vae_tiling:
        args.append("--vae-tiling")
    if e.offload != "none":
        args += ["--offload", e.offload]
    args += ["--default-size", size, "--default-steps", str(steps), "--warmup", size,
             "--calibration", str(calibration), "--slo", f"{cfg.slo_p99_s:g}"]
    return shlex.join(args)


def write_calibration(cfg: DeriveConfig, bench_json: Path, path: Path) -> str:
    """``monitor calibrate`` from the final configuration's bench with the derivation's SLO; returns a
    one-line description."""
    from diffbench.core.jsonio import write_json_atomic
    from diffbench.monitor.calibration import calibrate

    data = json.loads(bench_json.read_text())
    cal = calibrate([(bench_json.name, data)], slo_s=cfg.slo_p99_s)
    write_json_atomic(path, cal.model_dump(mode="json"))
    return f"{len(cal.shapes)} shape(s), SLO {cfg.slo_p99_s:g} s"
