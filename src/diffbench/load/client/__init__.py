"""The HTTP load client of ``diffbench load``: open- and closed-loop runners, serving-API dialects,
workload files, outcome classification and the sweep driver.

Importing this package does not import aiohttp (it is imported inside the functions that send requests).
"""

from __future__ import annotations

from diffbench.load.client.base import Attempt, Backend
from diffbench.load.client.control import JsonlSink, RunControl, read_jsonl
from diffbench.load.client.http import HttpBackend, Target, parse_headers
from diffbench.load.client.outcomes import classify_exception, classify_status, parse_retry_after
from diffbench.load.client.profile import ProfileConfig, ProfileRun, auto_rates, run_profile
from diffbench.load.client.runners import RunResult, run_closed_loop, run_open_loop
from diffbench.load.client.workload import (
    RequestPlanner,
    RequestSpec,
    ShapeMix,
    Workload,
    default_workload,
    load_prompts,
    load_workload,
)

__all__ = [
    "Attempt",
    "Backend",
    "HttpBackend",
    "JsonlSink",
    "RequestPlanner",
    "RequestSpec",
    "RunControl",
    "RunResult",
    "ShapeMix",
    "ProfileConfig",
    "ProfileRun",
    "Target",
    "Workload",
    "auto_rates",
    "classify_exception",
    "classify_status",
    "default_workload",
    "load_prompts",
    "load_workload",
    "parse_headers",
    "parse_retry_after",
    "read_jsonl",
    "run_closed_loop",
    "run_open_loop",
    "run_profile",
]
