"""Load testing of diffusion services: arrival schedules, open/closed-loop runners, summaries, knee, simulator.

Modules (import what you need; this package imports nothing heavy and never torch, diffusers, httpx or aiohttp):

- :mod:`diffbench.load.schedules`: seeded arrival schedules as absolute times, and the shared CLI syntax.
- :mod:`diffbench.load.summary`: :class:`~diffbench.load.summary.RateSummary` per rate and divergence check.
- :mod:`diffbench.load.knee`: knee, capacity estimate and :class:`~diffbench.load.knee.SweepResult`.
- :mod:`diffbench.load.service_time`: service-time expressions and measured-run distributions.
- :mod:`diffbench.load.simulator`: FCFS multi-device discrete-event simulator (open and closed loop).
"""
