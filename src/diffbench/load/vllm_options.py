"""The ``vllm bench serve``-named options of ``diffbench load`` as given, as one model: kept apart from
:mod:`diffbench.load.client.vllm_compat` (which maps them) so that :mod:`diffbench.load.spec` can extend it without
importing the client package."""

from __future__ import annotations

from pydantic import BaseModel


class VllmOptions(BaseModel):
    """The vLLM-named options as given (None / False: not given). :class:`~diffbench.load.spec.LoadSpec`
    extends it, so a load spec is its own ``VllmOptions``."""

    base_url: str | None = None
    model: str | None = None
    backend: str | None = None
    endpoint: str | None = None
    save_result: bool = False
    result_dir: str | None = None
    result_filename: str | None = None
    percentile_metrics: str | None = None
    metric_percentiles: str | None = None
