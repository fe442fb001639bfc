"""After launch: the signals a diffusion service must export, and the tools that read them.

- :mod:`diffbench.monitor.names`: the one table of metric names, types, units, labels and buckets
  (monitoring.md §3). The exporter, the alert rules, the dashboard, ``plan`` and ``doctor`` all read it.
- :mod:`diffbench.monitor.signals`: what one generation reports beyond its stage times (cache decisions,
  recompiles, per-rank compute, FLOPs, device memory).

Importing this package imports neither torch nor prometheus_client.
"""
