"""Inputs and the result of ``diffbench derive`` (pydantic; ``derive.json``, schema :data:`SCHEMA_VERSION`).

Seconds, dB and dimensionless speed-ups (> 1 is faster than the configuration the step started from)
throughout. A step's ``latency_s`` and ``gpu_s`` are the deployment's after the step (cumulative), whether
the step changed it or not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from diffbench.engines.config import EngineConfig

SCHEMA_VERSION = 1
KIND = "diffbench.derive"

STAGES = {1: "account", 2: "lossless", 3: "lossy I", 4: "lossy II", 5: "SLO check", 6: "few-step model",
          7: "capacity", 8: "signals"}
"""The derivation's order (docs/guides/derive.md): lossless before lossy, lossy by visibility, more GPUs
before a different model."""

Decision = Literal["kept", "rejected", "skipped", "reclassified", "not combined", "predicted", "info"]
"""kept: applied to the deployment; rejected: measured and not worth it (reason says why); skipped: not
measured (unavailable here, or not needed); reclassified: a lossless candidate that changed pixels, moved to
the lossy steps; not combined: passed its own gate but does not fit the remaining budget with the options
kept; predicted: from the ledger, not measured; info: a figure, no decision."""

LOSSLESS_DB = 40.0
"""A candidate is lossless when every image is identical or its PSNR p10 against the baseline is >= this."""
LOSSY_I_DB = 35.0
"""Gate of a lossy I option (numerics: FP8 / INT8 linear, 8-bit attention, lower precision): PSNR p10 > this."""


class DeriveConfig(BaseModel):
    """Everything ``diffbench derive`` accepts, validated once."""

    model_config = ConfigDict(extra="forbid")

    engine: EngineConfig = Field(description="the starting deployment (model, device, dtype, threads)")
    width: int = Field(gt=0)
    height: int = Field(gt=0)
    frames: int | None = Field(default=None, gt=0)
    steps: int = Field(gt=0)
    guidance: float | None = None
    slo_p99_s: float = Field(gt=0, allow_inf_nan=False, description="p99 latency SLO, seconds")
    qps: float = Field(gt=0, allow_inf_nan=False, description="throughput target, requests per second")
    budget_db: float = Field(default=30.0, gt=0, le=100, allow_inf_nan=False,
                             description="lowest combined PSNR p10 (dB) the lossy steps may reach together")
    headroom: float = Field(default=1.3, ge=1.0, allow_inf_nan=False)
    gpu: str | None = Field(default=None, description="ledger GPU id for predictions and layouts")
    gpus_per_node: int = Field(default=8, ge=1)
    ledger_model: str | None = Field(default=None, description="ledger model id; None: --model if the catalog "
                                     "has it")
    prompts_file: Path | None = None
    num_prompts: int | None = Field(default=None, gt=0)
    seeds: list[int] = Field(default=[0])
    few_step_model: str | None = None
    few_step_steps: int | None = Field(default=None, gt=0)
    cache_axis: str = "first-block"
    cache_values: list[str] = Field(default=["0.05", "0.1", "0.2", "0.3"])
    attention_backends: list[str] = Field(default=[], description="backends to try; [] = those the device "
                                          "offers (flash/FA3 on CUDA, none beyond the default on a CPU)")
    skip: list[str] = Field(default=[], description="candidates not to try (compile, fuse-projections, ...)")
    runs: int | None = Field(default=None, ge=2, description="timed blocks per comparison; None: the sweep's")
    warmup: int = Field(default=1, ge=0)
    max_warmup: int = Field(default=10, ge=1)
    out: Path


class Measured(BaseModel):
    """One interleaved comparison of a candidate against the deployment it would change."""

    sweep_id: str
    run_id: str
    baseline_run_id: str
    speedup: float
    ci: tuple[float, float]
    noise_floor: tuple[float, float] | None = None
    measurably_faster: bool
    verdict: str
    latency_s: float = Field(description="the candidate's median latency, s")
    baseline_latency_s: float = Field(description="the deployment's median latency in the same blocks, s")
    samples_s: list[float] = []
    psnr_p50: float
    psnr_p10: float
    psnr_worst: float
    identical: bool = Field(description="every image bitwise identical to the baseline's")
    ssim_p10: float | None = None
    resumed: bool = False


class StepRecord(BaseModel):
    """One decision of the derivation, with the prediction beside the measurement."""

    stage: int
    stage_name: str
    candidate: str
    predicted_speedup: float | None = None
    prediction_note: str | None = None
    measured: Measured | None = None
    decision: Decision
    reason: str
    latency_s: float | None = Field(default=None, description="the deployment's median latency after the step")
    gpu_s: float | None = Field(default=None, description="GPU-seconds per request after the step")
    psnr_spent_db: float | None = Field(default=None, description="combined PSNR p10 of the lossy options "
                                        "kept so far (None: lossless so far)")
    deployment: dict[str, object] = {}


class Final(BaseModel):
    """The chosen configuration measured against the starting deployment in one interleaved session."""

    engine: EngineConfig
    fingerprint: dict[str, object] = {}
    measured: Measured | None = None
    psnr_spent_db: float | None = None
    message: str


class Sizing(BaseModel):
    """⑤/⑦: instances for the QPS target from the measured latency distribution (queueing included)."""

    layout: str
    gpus_per_instance: int
    latency_s: float
    p99_s: float
    meets_slo: bool
    instances: int
    total_gpus: int
    nodes: int
    gpu_s: float
    spread: str
    predicted: bool = False


class DeriveResult(BaseModel):
    """``derive.json``: every step, the final configuration and what it leaves with."""

    schema_version: int = SCHEMA_VERSION
    kind: str = KIND
    created_unix: float
    partial: bool = True
    interrupted: bool = False
    config: DeriveConfig
    store: str
    start_fingerprint: dict[str, object] = {}
    steps: list[StepRecord] = []
    final: Final | None = None
    sizing: list[Sizing] = []
    serve_command: str | None = None
    outputs: dict[str, str] = Field(default={}, description="what derive wrote: name → path under --out")
    warnings: list[str] = []
    elapsed_s: float | None = None
