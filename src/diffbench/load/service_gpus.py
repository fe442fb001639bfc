"""The GPU count a service reports (``GET /v1/models``), for ``load``'s per-GPU figures when ``--gpus`` is not
given.

diffbench's own ``serve`` states ``gpus`` on each model card (the devices its engine runs on; absent on a
CPU or simulated engine); another server that adds the same integer field is read the same way. Nothing is
guessed: a service that does not state it, does not answer, or answers something else leaves the count
unknown, and the rows then carry no per-GPU figure. ``--gpu-hour-price`` still needs an explicit ``--gpus``:
what is paid for (replicas, idle spares) is the deployment's fact, not one server's.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from diffbench.core.httpget import request

if TYPE_CHECKING:
    from diffbench.load.client.http import Target
    from diffbench.load.run import LoadPlan
    from diffbench.load.spec import LoadSpec


def service_gpus(base_url: str, timeout_s: float = 10.0, headers: dict[str, str] | None = None) -> int | None:
    """The ``gpus`` of the first model card of ``{base_url}/v1/models`` (an int >= 1), else None (not stated,
    not an int >= 1, not a 200, not JSON, or no answer within ``timeout_s``)."""
    try:
        resp = request(base_url.rstrip("/") + "/v1/models", deadline_s=timeout_s, headers=headers)
        if resp.status != 200:
            return None
        cards = json.loads(resp.body).get("data")
        n = cards[0].get("gpus") if isinstance(cards, list) and cards and isinstance(cards[0], dict) else None
    except (OSError, ValueError, AttributeError, http.client.HTTPException):  # DeadlineExceeded is an OSError
        return None
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else None


def with_service_gpus(spec: LoadSpec, plan: LoadPlan, target: Target,
                      say: Callable[[str], object]) -> tuple[LoadSpec, LoadPlan]:
    """``spec`` and ``plan`` with ``gpus`` from the service (:func:`service_gpus`, with the target's headers)
    when ``--gpus`` was not given and the service states it (``say`` tells where the count came from)."""
    if spec.gpus is not None:
        return spec, plan
    n = service_gpus(target.base_url, headers=dict(target.headers) or None)
    if n is None:
        return spec, plan
    say(f"GPUs: {n} (the service's /v1/models; --gpus overrides)")
    return (spec.model_copy(update={"gpus": n}),
            dataclasses.replace(plan, cfg=plan.cfg.model_copy(update={"gpus": n})))


__all__ = ["service_gpus", "with_service_gpus"]
