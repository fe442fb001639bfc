"""Pipeline instrumentation: hooks that measure a diffusers pipeline without editing it.

- :mod:`~diffbench.engines.instrument.pipeline` (``attach``, ``detach``, ``Instrumentation``): stage and step
  times, memory, cache decisions, recompiles, per-rank compute and FLOPs of one pipeline, reported per request
  to an optional observer (the exporter of ``serve``, or anything with ``observe_generation``).
- :mod:`~diffbench.engines.instrument.signals`: what one generation reports beyond its stage times.
- :mod:`~diffbench.engines.instrument.memory`, :mod:`~diffbench.engines.instrument.cache_counter`,
  :mod:`~diffbench.engines.instrument.skips`, :mod:`~diffbench.engines.instrument.compile_counter`,
  :mod:`~diffbench.engines.instrument.ranks`, :mod:`~diffbench.engines.instrument.flops`: one counter each.

Importing this package imports neither torch nor diffusers; the hooks import torch when they are attached.
"""
