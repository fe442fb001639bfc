"""The ``diffbench`` command that would confirm each plan step, using only flags that exist.

The plan speaks the ledger's vocabulary (catalog ids, ``--size WxH``, ``--gpu``); measuring needs the real
commands: ``bench``/``sweep`` take a local model directory and pixel sizes, ``quality`` compares saved
outputs, ``load`` drives a running service. Where no diffbench command can measure a step on its own
(FP8 and sparse attention need the serving engine's implementation; multi-GPU needs a parallel service),
the command says which comparison to run on outputs or on the service.
"""

from __future__ import annotations

from diffbench.ledger.account import LedgerConfig
from diffbench.plan.models import PlanConfig

# ledger attention ids -> diffusers attention backend names (diffusers.models.attention_dispatch)
ATTENTION_BACKENDS = {"sdpa": None, "fa3": "_flash_3", "sage8": "sage", "sage": "sage", "flash2": "flash",
                      "cudnn": "_native_cudnn", "aiter": "aiter", "ck": "flash"}


def _shape(cfg: PlanConfig, frames: int) -> str:
    out = f"--height {cfg.height} --width {cfg.width}"
    return out + (f" --frames {frames}" if frames > 1 else "")


def ledger_cmd(cfg: PlanConfig, frames: int, steps: int, lc: LedgerConfig | None = None) -> str:
    """``diffbench ledger`` for this configuration (catalog ids; no model files needed)."""
    out = f"diffbench ledger --model {cfg.model} --size {cfg.width}x{cfg.height}"
    out += f" --frames {frames}" if frames > 1 else ""
    out += f" --steps {steps} --gpu {cfg.gpu}"
    if lc is not None:
        out += f" --attention {lc.attention} --precision {lc.precision}"
        out += " --compile" if lc.compile else ""
        out += " --vae-tiling" if lc.vae_tiling else ""
        out += f" --offload {lc.offload}" if lc.offload != "none" else ""
    return out


def _engine_flags(cfg: PlanConfig, frames: int, steps: int, lc: LedgerConfig) -> str:
    out = f"--model /path/to/{cfg.model} --device cuda --dtype bfloat16 {_shape(cfg, frames)} --steps {steps}"
    backend = ATTENTION_BACKENDS.get(lc.attention)
    out += f" --attention-backend {backend}" if backend else ""
    out += " --compile" if lc.compile else ""
    return out


def bench_cmd(cfg: PlanConfig, frames: int, steps: int, lc: LedgerConfig, extra: str = "") -> str:
    """``diffbench bench`` on the local model directory (bf16; attention backend, compile, tiling, offload)."""
    out = f"diffbench bench {_engine_flags(cfg, frames, steps, lc)}"
    out += " --vae-tiling" if lc.vae_tiling else ""
    if lc.offload == "model":
        out += " --offload model"
    elif lc.offload != "none":
        out += f"  # {lc.offload} offload: configure it in the serving engine (bench offers model|sequential)"
    return out + (f" {extra}" if extra else "")


def sweep_cmd(cfg: PlanConfig, frames: int, steps: int, lc: LedgerConfig, axis: str) -> str:
    """``diffbench sweep`` over a cache threshold or a pipeline option, gated on the quality budget."""
    budget = f" --budget {cfg.quality_budget_db:g}" if cfg.quality_budget_db is not None else ""
    return f"diffbench sweep {_engine_flags(cfg, frames, steps, lc)} {axis}{budget}"


def quality_cmd(cfg: PlanConfig, baseline: str, candidate: str) -> str:
    """``diffbench quality`` between outputs saved by ``bench --save-outputs`` on two deployments."""
    gate = f" --gate 'psnr.p10>={cfg.quality_budget_db:g}'" if cfg.quality_budget_db is not None else ""
    return (f"diffbench quality {baseline} {candidate}{gate}  # outputs from `diffbench bench --save-outputs` "
            "on each deployment")


def load_cmd(cfg: PlanConfig, frames: int, steps: int, closed: bool = False) -> str:
    """``diffbench load`` against the deployed service (open loop with the SLO, or closed loop 1 user)."""
    shape = f"--size {cfg.width}x{cfg.height} --steps {steps}" + (f" --frames {frames}" if frames > 1 else "")
    if closed:
        return f"diffbench load --url http://SERVICE:PORT --mode closed --users 1 {shape} --duration 120"
    return (f"diffbench load --url http://SERVICE:PORT --mode open --rates auto --slo {cfg.slo_p99_s:g} {shape} "
            "--duration 600")
