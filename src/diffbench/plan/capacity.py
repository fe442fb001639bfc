"""Capacity: instances = QPS × GPU-seconds per request × headroom (docs/guides/plan-a-deployment.md).

Each instance holds ``gpus_per_instance`` GPUs; sequence parallelism lowers latency, not GPU-seconds, so the
GPU count follows GPU-seconds, not latency. Nodes = ⌈GPUs ÷ GPUs per node⌉.
"""

from __future__ import annotations

import math

from pydantic import BaseModel


class Capacity(BaseModel):
    instances: int
    gpus_per_instance: int
    total_gpus: int
    nodes: int


def capacity(qps: float, gpu_s: float, headroom: float, gpus_per_instance: int, gpus_per_node: int) -> Capacity:
    """GPUs and nodes for a request rate. ``gpu_s`` in GPU-seconds per request (all GPUs of the request)."""
    gpus_needed = qps * gpu_s * headroom
    instances = max(1, math.ceil(gpus_needed / gpus_per_instance - 1e-9))
    total = instances * gpus_per_instance
    return Capacity(instances=instances, gpus_per_instance=gpus_per_instance, total_gpus=total,
                    nodes=math.ceil(total / gpus_per_node))
