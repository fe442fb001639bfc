"""Sanity limits on a bench request: sizes no real deployment uses are refused before anything runs.

A typo such as ``--steps 1000000`` or ``--shapes 100000x100000`` would otherwise run silently for hours,
exhaust memory, or overflow inside a scheduler ("OverflowError: math range error" from the FLUX
resolution-dependent shift). The limits sit well above what published models sample:

- steps ≤ 1000 (DDPM's full schedule; deployed samplers use 1-100),
- pixels per frame ≤ 4096 × 4096 = 16,777,216 (the largest native resolutions are about 2048²),
- frames ≤ 1025 (4·256 + 1; HunyuanVideo's longest setting is 129, Wan's 81),
- batch ≤ 64 images or videos per call.

``--allow-large`` lifts them for a deliberate stress test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from diffbench.errors import UsageError

MAX_STEPS = 1000
MAX_SIDE_PX = 4096
MAX_PIXELS = MAX_SIDE_PX * MAX_SIDE_PX
MAX_FRAMES = 1025
MAX_BATCH = 64
OVERRIDE = "--allow-large"


class ShapeSpec(BaseModel):
    """One requested shape as the user gave it. ``size_option``/``frames_option`` quote it in messages
    (``--shapes 64x64x2000``, or ``--width 8192 --height 8192`` and ``--frames 4097``)."""

    model_config = ConfigDict(frozen=True)

    size_option: str
    frames_option: str
    width: int | None = None
    height: int | None = None
    frames: int | None = None


def _refuse(what: str, limit: str) -> UsageError:
    return UsageError(
        f"{what} is above the limit of {limit}, which no real deployment exceeds (a typo would run for "
        f"hours or exhaust memory); pass {OVERRIDE} to run it anyway"
    )


def check_limits(
    *, steps: int | None, batch: int, shapes: Sequence[ShapeSpec], allow_large: bool = False
) -> None:
    """Refuse steps, batch, pixels per frame or frames above the limits unless ``allow_large``.

    ``None`` values stand for the model defaults, which are within the limits. With only one side given,
    that side alone is checked against the pixel limit divided by 64 (the other side at least 64 px).

    Raises:
        UsageError: a value above a limit; the message names the option, the limit and ``--allow-large``.
    """
    if allow_large:
        return
    if steps is not None and steps > MAX_STEPS:
        raise _refuse(f"--steps {steps}", f"{MAX_STEPS} steps")
    if batch > MAX_BATCH:
        raise _refuse(f"--batch {batch}", f"{MAX_BATCH} outputs per call")
    for s in shapes:
        sides = [v for v in (s.width, s.height) if v is not None]
        pixels = sides[0] * sides[1] if len(sides) == 2 else (sides[0] * 64 if sides else 0)
        if pixels > MAX_PIXELS:
            raise _refuse(
                f"{s.size_option} ({pixels:,} pixels per frame)",
                f"{MAX_SIDE_PX}x{MAX_SIDE_PX} = {MAX_PIXELS:,} pixels per frame",
            )
        if s.frames is not None and s.frames > MAX_FRAMES:
            raise _refuse(s.frames_option, f"{MAX_FRAMES} frames")


def check_number(flag: str, value: float | None, lo: float, hi: float, what: str) -> None:
    """Refuse a nan, inf or out-of-range float option (``None`` means not given).

    Raises:
        UsageError: naming the flag, the closed range [lo, hi] and what the number is.
    """
    if value is None:
        return
    if not math.isfinite(value) or not lo <= value <= hi:
        kind = "a finite number" if not math.isfinite(value) else "a number"
        raise UsageError(f"{flag} {value:g}: must be {kind} in [{lo:g}, {hi:g}] ({what})")
