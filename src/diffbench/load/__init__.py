"""Load testing of diffusion services: open/closed-loop runners, summaries, knee, saturation, rate sweeps.

Modules (import what you need; this package imports nothing heavy and never torch, diffusers, httpx or aiohttp):

- :mod:`diffbench.load.spec`: :class:`~diffbench.load.spec.LoadSpec`, what ``diffbench load`` is asked to do.
- :mod:`diffbench.load.run`: :func:`~diffbench.load.run.run_load`, the one entry point of a load run.
- :mod:`diffbench.load.client.profile`: the profile driver (a rate sweep: warm-up, rates or user counts).
- :mod:`diffbench.load.summary`: :class:`~diffbench.load.summary.RateSummary` per rate and divergence check.
- :mod:`diffbench.load.knee`: knee, capacity estimate and :class:`~diffbench.load.knee.LoadResult` (a profile's result).
- :mod:`diffbench.load.simulator`: ``diffbench simulate``'s rate sweeps over the queueing engine.

Arrival schedules, service-time distributions and the FCFS simulator itself live in :mod:`diffbench.queueing`,
below both this package and the planner.
"""
