"""The numeric options of ``diffbench ledger`` and ``plan``: one table of flags, ranges and meanings.

Every value must be finite and inside its range; nan, inf and negative values are refused with a message
that names the real flag (``--slo-p99``, not the field ``slo_p99_s``). The ranges are wide enough for any
real deployment and narrow enough that the arithmetic stays meaningful:

==================  ================  ====================================================================
flag                range             why
==================  ================  ====================================================================
--steps             [1, 1000]         DDPM's full schedule is 1000 steps; deployed samplers use 1-100
--frames            [1, 1025]         4·256+1; the longest published settings are 129 (HunyuanVideo)
--cfg               [0, 50]           guidance scales in use are 1-20; ≤ 1 means no CFG
--text-tokens       [1, 8192]         text encoders in the catalog take ≤ 1024 tokens; ledger and plan
                                      also refuse more than the model takes (tokens.check_text_tokens)
--eta-gemm/-attn/-vae  (0, 1]         an efficiency is a fraction of the peak
--margin            [0, 1)            a fraction of GPU memory kept free
--measured-s        (0, 1e6]          seconds per request
--gpus-per-node     [1, 72]           the largest NVLink domain (GB200 NVL72) has 72 GPUs
--slo-p99           (0, 86400]        seconds (one day)
--qps               [1e-4, 1e6]       requests per second; slower, the queue simulation's arrival times
                                      lose the service time's precision (MIN_QPS, checked by plan)
--quality-budget    (0, 100]          dB PSNR; 100 dB is bitwise-identical for 8-bit images in practice
--headroom          [1, 10]           capacity headroom factor
--batch             [1, 256]          requests run as one batch (ledger); far past the batches engines serve (MLPerf SDXL: 8)
--max-batch         [1, 256]          largest batch the planner tries
--size              sides ≤ 16384 px  4× the largest native resolution in the catalog
==================  ================  ====================================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from diffbench.errors import UsageError

MAX_SIDE_PX = 16384
MIN_QPS = 1e-4
"""Lowest ``plan --qps`` (one request every ~2.8 h): the queue simulation runs ~44,000 arrivals, whose times at
lower rates grow so large that a float64 loses the service time added to them (a p99 of 0 s once)."""


@dataclass(frozen=True)
class Bound:
    """A closed or half-open range ``lo .. hi`` for one flag; ``what`` says what the number is."""

    flag: str
    lo: float
    hi: float
    what: str
    lo_open: bool = False
    hi_open: bool = False

    def text(self) -> str:
        def num(v: float) -> str:
            return f"{v:g}" if abs(v) < 1e5 else f"{v:.0e}"

        return f"{'(' if self.lo_open else '['}{num(self.lo)}, {num(self.hi)}{')' if self.hi_open else ']'}"

    def check(self, value: float | None) -> None:
        """Raise :class:`UsageError` unless ``value`` is None or a finite number inside the range."""
        if value is None:
            return
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        if not math.isfinite(value):
            raise UsageError(f"{self.flag} {shown}: must be a finite number in {self.text()} ({self.what})")
        low_ok = value > self.lo if self.lo_open else value >= self.lo
        high_ok = value < self.hi if self.hi_open else value <= self.hi
        if not (low_ok and high_ok):
            must = "must be > 0, in" if self.lo == 0 and self.lo_open else "must be in"
            raise UsageError(f"{self.flag} {shown}: {must} {self.text()} ({self.what})")


BOUNDS: dict[str, Bound] = {
    "steps": Bound("--steps", 1, 1000, "denoising steps"),
    "frames": Bound("--frames", 1, 1025, "frames of a video"),
    "cfg": Bound("--cfg", 0, 50, "guidance scale; > 1 runs CFG"),
    "text_tokens": Bound("--text-tokens", 1, 8192, "text tokens of the prompt"),
    "eta_gemm": Bound("--eta-gemm", 0, 1, "GEMM efficiency, a fraction of peak", lo_open=True),
    "eta_attn": Bound("--eta-attn", 0, 1, "attention efficiency, a fraction of peak", lo_open=True),
    "eta_vae": Bound("--eta-vae", 0, 1, "VAE efficiency, a fraction of peak", lo_open=True),
    "margin": Bound("--margin", 0, 1, "fraction of GPU memory kept free", hi_open=True),
    "measured_s": Bound("--measured-s", 0, 1e6, "measured seconds per request", lo_open=True),
    "gpus_per_node": Bound("--gpus-per-node", 1, 72, "GPUs per node; NVL72 is the largest domain"),
    "slo_p99_s": Bound("--slo-p99", 0, 86400, "latency SLO, p99 seconds", lo_open=True),
    "qps": Bound("--qps", 0, 1e6, "requests per second", lo_open=True),
    "quality_budget_db": Bound("--quality-budget", 0, 100, "lowest PSNR in dB", lo_open=True),
    "headroom": Bound("--headroom", 1, 10, "capacity headroom factor"),
    "batch": Bound("--batch", 1, 256, "requests run as one batch"),
    "max_batch": Bound("--max-batch", 1, 256, "largest batch the planner tries"),
}

# model field -> the flag that sets it (for pydantic errors and messages); the rest are --field-name
FLAGS: dict[str, str] = {
    **{k: b.flag for k, b in BOUNDS.items()},
    "width": "--size",
    "height": "--size",
    "compile": "--compile",
    "allow_lossy": "--lossy/--no-lossy",
    "allow_model_swap": "--allow-model-swap",
}


def flag_of(field: str) -> str:
    """The CLI flag of a config field (``slo_p99_s`` → ``--slo-p99``)."""
    return FLAGS.get(field, "--" + field.replace("_", "-"))


def check_numbers(**values: float | int | None) -> None:
    """Check each named value (a key of :data:`BOUNDS`) against its range; None means "not given".

    Raises:
        UsageError: the first value that is nan, inf or outside its range, naming the flag and the range.
    """
    for name, value in values.items():
        BOUNDS[name].check(value)


def check_size(size: str, width: int, height: int) -> None:
    """Refuse a side above :data:`MAX_SIDE_PX` (the arithmetic would describe no real request)."""
    if max(width, height) > MAX_SIDE_PX:
        raise UsageError(
            f"--size {size}: each side must be at most {MAX_SIDE_PX} px (4× the largest native resolution "
            "in the catalog)"
        )
