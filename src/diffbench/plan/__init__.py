"""The planner: an ordered derivation from the ledger to a serving configuration (``diffbench plan``).

Importing this package never imports torch, diffusers or an HTTP client.
"""

from diffbench.plan.capacity import Capacity, capacity
from diffbench.plan.derive import plan
from diffbench.plan.models import Alert, Alternative, PlanConfig, PlanResult, PlanStep, Signal
from diffbench.plan.quality import combine_psnr, within_budget

__all__ = [
    "Alert",
    "Alternative",
    "Capacity",
    "PlanConfig",
    "PlanResult",
    "PlanStep",
    "Signal",
    "capacity",
    "combine_psnr",
    "plan",
    "within_budget",
]
