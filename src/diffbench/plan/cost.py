"""The cost of a plan at a price per GPU-hour (``plan --gpu-hour-price P``).

The plan pays its GPUs all the time, busy or not: ``gpus`` is the plan's GPU count (the pools' total with
``--workload``), serving ``qps`` requests (one output each) per second. So each output costs
``gpus / qps`` GPU·seconds (headroom and queueing margin included, which is what the deployment pays), and

    cost per 1,000 outputs = P x (gpus / qps) x 1000 / 3600
    cost per hour          = P x gpus

(:func:`diffbench.core.workcost.cost_per_1000`; currency-neutral: the price's currency).
"""

from __future__ import annotations

from pydantic import BaseModel

from diffbench.core.workcost import cost_per_1000


class PlanCost(BaseModel):
    """The plan's price (module docstring): ``gpu_hour_price`` per GPU-hour, the ``gpus`` paid, the ``qps``
    served, ``gpu_s_per_output`` (``gpus / qps``), ``cost_per_1000`` outputs and ``cost_per_hour``."""

    gpu_hour_price: float
    gpus: int
    qps: float
    gpu_s_per_output: float
    cost_per_1000: float
    cost_per_hour: float


def plan_cost(gpus: int, qps: float, gpu_hour_price: float) -> PlanCost:
    """The cost of ``gpus`` GPUs serving ``qps`` requests per second (> 0) at ``gpu_hour_price``."""
    per_output = gpus / qps
    return PlanCost(gpu_hour_price=gpu_hour_price, gpus=gpus, qps=qps, gpu_s_per_output=per_output,
                    cost_per_1000=cost_per_1000(gpu_hour_price, per_output), cost_per_hour=gpu_hour_price * gpus)


__all__ = ["PlanCost", "plan_cost"]
