"""Interleaved timing of several configurations ("arms") in one process, after each is warm.

Protocol (what ``diffbench sweep`` and ``runs compare`` of one sweep rely on):

1. **Warmup until stable, every arm** (baseline included): rounds in a seeded shuffled order over the arms
   that are not warm yet, one generation each, until each arm's last ``window`` samples show no downward
   trend (:func:`diffbench.core.warmth.is_warm`) and it has at least ``min_warmup`` samples, or
   ``max_warmup`` rounds have passed (the arm is then reported as not stable). Warmup samples are kept
   apart and never enter a ratio.
2. **Timed blocks**: ``blocks`` blocks; each block runs every arm once, in an order drawn from
   ``numpy.random.Generator(PCG64(seed))`` (a fresh permutation per block), all on the same request
   (block *b* uses request ``(b // 2) mod len(requests)``, so blocks 2i and 2i+1 share one). Slow drift and
   a neighbour's load therefore hit every arm alike; sample *b* of every arm comes from block *b*.
3. **Noise floor**: the baseline's even blocks against its odd blocks (pairs (2i, 2i+1): same request,
   adjacent in time), with the paired bootstrap: the speed-up of the baseline against itself, i.e. how far
   from 1 a ratio moves by timing noise alone at this sample size.

Switching arms: an arm's ``apply`` makes its configuration current (for caches: enable this arm's cache on
the one shared pipeline, or disable it; well under 1 ms on tiny-flux) *outside* the timed window; the
engine wrapper resets the cache state before every generation. Option arms each hold their own engine.
The clock is read through :class:`~diffbench.core.clock.Timer` with the arm's engine's ``sync``/``clock``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel

from diffbench.core.clock import Timer
from diffbench.core.warmth import DEFAULT_WINDOW, is_warm
from diffbench.engines.base import CLIENT_LATENCY, Engine, GenerationRequest, GenerationResult, StageTimes
from diffbench.sweep.bootstrap import DEFAULT_RESAMPLES, SpeedupCI, paired_speedup_ci

DEFAULT_MAX_WARMUP = 20


@dataclass
class Arm:
    """One configuration to time: its label, the engine that runs it and how to make it current."""

    name: str
    engine: Engine
    apply: Callable[[], None] = lambda: None
    on_output: Callable[[GenerationRequest, GenerationResult], None] | None = None
    warmup_s: list[float] = field(default_factory=list)
    samples_s: list[float] = field(default_factory=list)
    stages: list[StageTimes] = field(default_factory=list)
    stable: bool = False


@dataclass(frozen=True)
class Tick:
    """One finished generation of :func:`run_interleaved`, for a progress line.

    phase: ``"warmup"`` or ``"timed"``. arm / arm_index (1-based) / arms: the configuration just run and
    its place in this round or block (the order is random per block). run / runs: the warmup round (of at
    most ``runs`` rounds, the cap) or the timed block (of ``runs`` blocks), 1-based.
    """

    phase: str
    arm: str
    arm_index: int
    arms: int
    run: int
    runs: int


class ScheduleInfo(BaseModel):
    """How the timed runs were ordered (stored with every run of the session)."""

    session_id: str
    seed: int
    blocks: int
    arms: list[str]
    orders: list[list[int]]
    window: int
    max_warmup: int


def block_orders(n_arms: int, blocks: int, seed: int) -> list[list[int]]:
    """One seeded random permutation of ``range(n_arms)`` per block."""
    rng = np.random.Generator(np.random.PCG64(seed))
    return [[int(i) for i in rng.permutation(n_arms)] for _ in range(blocks)]


def request_for_block(reqs: Sequence[GenerationRequest], block: int) -> GenerationRequest:
    """Blocks 2i and 2i+1 share a request (so the floor's halves pair like for like)."""
    return reqs[(block // 2) % len(reqs)]


def _time_one(arm: Arm, req: GenerationRequest) -> tuple[float, StageTimes | None]:
    arm.apply()
    timer = Timer(sync=arm.engine.sync, clock=arm.engine.clock)
    t0 = timer.now_ns()
    res = arm.engine.generate(req)
    t1 = timer.now_ns()
    if arm.on_output is not None:  # after the end read: outside the timed window
        arm.on_output(req, res)
    own = res.extra.get(CLIENT_LATENCY)  # a remote engine's send -> last byte, as bench takes it
    return (float(own) if own is not None else (t1 - t0) / 1e9), res.stages


def run_interleaved(
    arms: Sequence[Arm],
    reqs: Sequence[GenerationRequest],
    blocks: int,
    *,
    seed: int = 0,
    min_warmup: int = 1,
    max_warmup: int = DEFAULT_MAX_WARMUP,
    window: int = DEFAULT_WINDOW,
    on_event: Callable[[str], None] | None = None,
    on_tick: Callable[[Tick], None] | None = None,
) -> ScheduleInfo:
    """Warm every arm until stable, then time ``blocks`` interleaved blocks; fills each arm's lists.

    Args:
        arms: the configurations (the first is the baseline by convention).
        reqs: the workload (cycled).
        blocks: timed runs per arm.
        seed: seed of the warmup and block orders.
        min_warmup: at least this many warmup runs per arm.
        max_warmup: at most this many warmup rounds.
        window: the trend test's window (see :mod:`diffbench.core.warmth`).
        on_event: progress messages.
        on_tick: called after every warmup and timed generation (see :class:`Tick`).

    Raises:
        whatever an engine raises (the caller records the failure); KeyboardInterrupt passes through.
    """
    event = on_event or (lambda _m: None)
    tick = on_tick or (lambda _t: None)
    rng = np.random.Generator(np.random.PCG64(seed + 1))
    need = max(min_warmup, window)
    rounds = max(max_warmup, need)
    for rnd in range(rounds):
        todo = [a for a in arms if not (len(a.warmup_s) >= need and is_warm(a.warmup_s, window))]
        if not todo:
            break
        for pos, i in enumerate(rng.permutation(len(todo))):
            arm = todo[int(i)]
            t, _ = _time_one(arm, reqs[rnd % len(reqs)])
            arm.warmup_s.append(t)
            tick(Tick("warmup", arm.name, pos + 1, len(todo), rnd + 1, rounds))
        event(f"warmup round {rnd + 1}: {len(todo)} configuration(s) not yet stable")
    for a in arms:
        a.stable = len(a.warmup_s) >= need and is_warm(a.warmup_s, window)
    orders = block_orders(len(arms), blocks, seed)
    for b, order in enumerate(orders):
        req = request_for_block(reqs, b)
        for pos, i in enumerate(order):
            t, st = _time_one(arms[i], req)
            arms[i].samples_s.append(t)
            if st is not None:
                arms[i].stages.append(st)
            tick(Tick("timed", arms[i].name, pos + 1, len(arms), b + 1, blocks))
        event(f"timed block {b + 1}/{blocks}")
    return ScheduleInfo(session_id=uuid.uuid4().hex[:12], seed=seed, blocks=blocks, arms=[a.name for a in arms],
                        orders=orders, window=window, max_warmup=max_warmup)


def noise_floor_ci(baseline_s: Sequence[float], resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                   ) -> SpeedupCI | None:
    """The baseline against itself: even blocks vs odd blocks, paired (None with fewer than 2 blocks)."""
    n = len(baseline_s) // 2
    if n < 1:
        return None
    even = [baseline_s[2 * i] for i in range(n)]
    odd = [baseline_s[2 * i + 1] for i in range(n)]
    ci = paired_speedup_ci(even, odd, resamples=resamples, seed=seed)
    return ci.model_copy(update={"statistic": "baseline vs itself: even / odd interleaved blocks, ratio of "
                                              "medians, paired by block"})
