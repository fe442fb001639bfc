"""The queueing model shared by ``load``, ``simulate`` and ``plan`` (depends on :mod:`diffbench.core` only).

- :mod:`diffbench.queueing.schedules`: seeded arrival schedules as absolute times, and the shared CLI syntax.
- :mod:`diffbench.queueing.service_time`: service-time expressions and measured-run distributions.
- :mod:`diffbench.queueing.simulator`: the FCFS multi-device discrete-event simulator (open and closed loop).
- :mod:`diffbench.queueing.sizing`: Erlang C and the smallest instance count meeting a p99 SLO with queueing.
- :mod:`diffbench.queueing.batching`: workers serving up to B queued requests per batch (M/G^[B]/c): the
  simulator, the M/M^[B]/1 closed form, and the smallest worker count meeting a p99 SLO.
"""
