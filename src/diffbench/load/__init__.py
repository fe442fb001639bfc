"""Load testing of diffusion services: open/closed-loop runners, summaries, knee, saturation, rate sweeps.

Modules (import what you need; this package imports nothing heavy and never torch, diffusers, httpx or aiohttp):

- :mod:`diffbench.load.summary`: :class:`~diffbench.load.summary.RateSummary` per rate and divergence check.
- :mod:`diffbench.load.knee`: knee, capacity estimate and :class:`~diffbench.load.knee.LoadResult`.
- :mod:`diffbench.load.simulator`: ``diffbench simulate``'s rate sweeps over the queueing engine.

Arrival schedules, service-time distributions and the FCFS simulator itself live in :mod:`diffbench.queueing`,
below both this package and the planner.
"""
