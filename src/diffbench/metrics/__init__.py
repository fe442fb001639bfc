"""The metric contract shared by the service, the load client, ``doctor``, ``plan`` and the dashboard.

- :mod:`diffbench.metrics.names`: the one table of metric names, types, units, labels and buckets.
- :mod:`diffbench.metrics.shapes`: the bounded ``shape`` label (an allowlisted class or ``other``).
- :mod:`diffbench.metrics.scrape`: the Prometheus text-format parser and the scrape windows of a load run.
- :mod:`diffbench.metrics.quantile`: histogram quantiles as Prometheus's ``histogram_quantile`` computes them.

Importing this package imports neither torch nor prometheus_client.
"""
