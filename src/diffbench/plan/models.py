"""Typed inputs and results of the planner (``diffbench plan``). Seconds, bytes and dB throughout."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from diffbench.ledger.multigpu import ParallelPlan
from diffbench.plan.cost import PlanCost
from diffbench.plan.lossy import LossySet
from diffbench.plan.sizing import LayoutSizing

SCHEMA_VERSION = 1


class PlanConfig(BaseModel):
    """What to plan for. ``quality_budget_db`` is the lowest PSNR (dB) against the lossless output that the
    lossy steps may reach together; ``None`` allows no lossy step."""

    model_config = ConfigDict(extra="forbid")

    model: str
    width: int = Field(gt=0)
    height: int = Field(gt=0)
    frames: int | None = Field(default=None, ge=1)
    steps: int | None = Field(default=None, ge=1)
    cfg: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    text_tokens: int | None = Field(default=None, gt=0)
    gpu: str
    gpus_per_node: int = Field(default=8, ge=1)
    slo_p99_s: float = Field(gt=0, allow_inf_nan=False)
    qps: float = Field(gt=0, allow_inf_nan=False)
    quality_budget_db: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    allow_lossy: bool = True
    allow_model_swap: bool = False
    headroom: float = Field(default=1.3, ge=1.0, allow_inf_nan=False)
    assume_fp8: bool = Field(default=False, description="plan FP8 on GPUs outside fp8_linear.archs (e.g. Ada)")
    service_cv: float = Field(default=0.05, ge=0.0, le=1.0, allow_inf_nan=False,
                              description="coefficient of variation of the service time (no --service-from)")
    service_from: str | None = Field(default=None, description="bench JSON whose latency spread is used")
    max_batch: int = Field(default=1, ge=1, le=256, description="largest batch of requests one GPU serves at once")


class PlanStep(BaseModel):
    """One step of the derivation. ``latency_s``/``gpu_s`` are the values after the step (whether applied
    or not, they describe the plan so far); ``quality_cost_db`` is this step's own PSNR estimate against the
    lossless output (None = lossless); ``psnr_db`` the combined estimate after it."""

    stage: int
    name: str
    applied: bool
    reason: str
    assumption: str
    latency_s: float
    gpu_s: float
    quality_cost_db: float | None = None
    psnr_db: float | None = None
    command: str


class Alternative(BaseModel):
    name: str
    latency_s: float
    per_request_gpu_s: float
    total_gpus: int
    nodes: int
    note: str


class Signal(BaseModel):
    """A dashboard series to set or watch (names from :mod:`diffbench.metrics.names`)."""

    name: str
    value: float | None = None
    unit: str = ""
    note: str = ""


class Alert(BaseModel):
    """An alert rule to enable (from monitoring/alerts.yaml) and the threshold this plan implies."""

    name: str
    condition: str
    threshold: str


class LayoutRow(BaseModel):
    """One layout compared in ⑤: its latency, the p99 with queueing at its instance count, and GPUs."""

    label: str
    strategy: str
    gpus_per_instance: int
    link: str
    latency_s: float
    p99_s: float
    instances: int
    total_gpus: int
    meets_slo: bool
    chosen: bool = False
    note: str = ""


class BatchRow(BaseModel):
    """One batch size tried by ``plan --max-batch``: the ledger's batch time and the queue's GPU count.

    ``batch_s``: seconds of a full batch (every output ready together); ``saturation_per_gpu``: outputs per
    second per GPU serving back-to-back full batches (batch ÷ batch_s ÷ GPUs per instance);
    ``throughput_per_gpu``: the plan's rate ÷ its GPUs at this batch limit; ``mean_batch``: mean size of the
    batches the queue forms at that count (greedy batching, :mod:`diffbench.queueing.batching`)."""

    batch: int
    batch_s: float
    saturation_per_gpu: float
    fits: bool
    peak_memory_bytes: int
    instances: int | None = None
    total_gpus: int | None = None
    p99_s: float | None = None
    mean_batch: float | None = None
    throughput_per_gpu: float | None = None
    meets_slo: bool = False
    chosen: bool = False


class BatchPlan(BaseModel):
    """``plan --max-batch``: the batch limit that maximises throughput per GPU under the p99 SLO with queueing.

    ``max_qps_per_gpu``: the highest request rate one instance serves within the SLO at the chosen limit
    (simulated, :func:`diffbench.queueing.batching.max_rate_one_worker`); ``policy``: the batching policy."""

    max_batch: int
    chosen_batch: int
    rows: list[BatchRow]
    max_qps_per_gpu: float
    policy: str


class PoolRow(BaseModel):
    """One shape pool of a ``--workload`` mix, planned at its own shape and share of the rate."""

    shape: str
    width: int
    height: int
    frames: int
    steps: int
    weight_share: float
    qps: float
    latency_s: float
    p99_s: float | None
    layout: str
    instances: int
    gpus_per_instance: int
    total_gpus: int
    slo_met: bool


class PoolsSummary(BaseModel):
    """Every pool of a workload and their total (GPUs summed, nodes of the summed GPUs)."""

    workload: str
    qps: float
    rows: list[PoolRow]
    total_gpus: int
    nodes: int
    all_slo_met: bool


class PlanResult(BaseModel):
    schema_version: int = SCHEMA_VERSION
    kind: str = "diffbench.plan"
    config: PlanConfig
    model_name: str
    gpu_name: str
    frames: int
    steps_count: int
    steps: list[PlanStep]
    latency_s: float
    slo_met: bool
    stopped_at: str | None = None
    per_request_gpu_s: float
    occupied_gpu_s: float
    gpus_per_instance: int
    instances: int
    total_gpus: int
    nodes: int
    total_gpus_occupied_bound: int
    parallel: ParallelPlan | None = None
    psnr_db: float | None = None
    api: str
    pools: str
    alternatives: list[Alternative] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)  # e.g. a --service-from run that cannot stand for this plan
    lossy_sets: list[LossySet] = Field(default_factory=list, description="chosen lossy set first, then runners-up")
    sizing: LayoutSizing | None = None
    layouts: list[LayoutRow] = Field(default_factory=list)
    pool_plan: PoolsSummary | None = None
    signals: list[Signal] = Field(default_factory=list)
    alerts: list[Alert] = Field(default_factory=list)
    batching: BatchPlan | None = None
    """With ``plan --max-batch`` > 1: each batch limit tried and the one chosen."""
    cost: PlanCost | None = None
    """With ``plan --gpu-hour-price``: the plan's GPUs priced (:mod:`diffbench.plan.cost`)."""
