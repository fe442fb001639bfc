"""The planner: an ordered derivation from the ledger to a serving configuration (``diffbench plan``).

Importing this package never imports torch, diffusers or an HTTP client.
"""

from diffbench.plan.capacity import Capacity, capacity
from diffbench.plan.derive import plan
from diffbench.plan.lossy import LossySet
from diffbench.plan.models import (
    Alert,
    Alternative,
    LayoutRow,
    PlanConfig,
    PlanResult,
    PlanStep,
    PoolRow,
    PoolsSummary,
    Signal,
)
from diffbench.plan.pools import plan_pools
from diffbench.plan.quality import combine_psnr, within_budget
from diffbench.plan.sizing import LayoutSizing, size_layout

__all__ = [
    "Alert",
    "Alternative",
    "Capacity",
    "LayoutRow",
    "LayoutSizing",
    "LossySet",
    "PlanConfig",
    "PlanResult",
    "PlanStep",
    "PoolRow",
    "PoolsSummary",
    "Signal",
    "capacity",
    "combine_psnr",
    "plan",
    "plan_pools",
    "size_layout",
    "within_budget",
]
