"""What one generation reports to the exporter beyond :class:`~diffbench.engines.base.StageTimes` and
:class:`~diffbench.engines.base.MemoryStats` (no torch import here)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CacheCounts:
    """Step-cache decisions of one generation: ``lookups`` decisions taken, ``hits`` of them skipped compute.

    ``cache`` is the cache's short name (``fbcache``, ``teacache``, ``taylorseer``, ``magcache``, ``pab``,
    ``fastercache``), a bounded label value.
    """

    cache: str
    lookups: int
    hits: int


@dataclass
class RequestSignals:
    """Per-generation signals (see docs/reference/metrics.md).

    - ``cache``: step-cache decisions, None when no cache is enabled or it exposes no decisions;
    - ``recompiles``: torch.compile compilations that started during this generation after the warmup
      snapshot (0 before the snapshot is taken: warmup compiles are expected, not exported);
    - ``rank_compute_s``: per rank (this process's), the compute time (seconds) of each denoise step: the
      step's time minus the time this rank waited inside collectives during it
      (:mod:`diffbench.engines.instrument.ranks`); empty when no collective ran (a single device);
    - ``flops``: model FLOPs of the generation: from the ledger when the model is in the catalog, else the
      denoiser forwards measured with ``FlopCounterMode`` (see :mod:`diffbench.engines.instrument.flops`); None when
      neither is available;
    - ``device``: the device label (``"0"`` for cuda:0, ``"cpu"``), the ``gpu`` label value;
    - ``device_total_bytes``: the device's memory capacity in bytes (``torch.cuda.mem_get_info`` total, or an
      injected budget on CPU); None when unknown;
    - ``stage_peak_bytes``: peak memory by stage (``text_encode``, ``denoise``, ``vae_decode``, ``other``) in
      bytes: allocator bytes on CUDA, resident-set growth over the request's start on the CPU.
    """

    cache: CacheCounts | None = None
    recompiles: int = 0
    rank_compute_s: dict[int, list[float]] = field(default_factory=dict)
    flops: float | None = None
    device: str = "cpu"
    device_total_bytes: int | None = None
    stage_peak_bytes: dict[str, int] = field(default_factory=dict)
