"""Engines behind one protocol (see :mod:`diffbench.engines.base`).

Concrete engines are imported lazily through :func:`diffbench.engines.registry.create_engine` (the one module that knows every engine;
engines import their configuration from :mod:`diffbench.engines.config`), so that
importing this package never imports torch or diffusers.

Beside the engines: :mod:`~diffbench.engines.instrument` (hooks that measure a pipeline, reported to any
observer), :mod:`~diffbench.engines.knobs` (step caches and pipeline options: values, checks, diffusers
configs), :mod:`~diffbench.engines.quantize` and :mod:`~diffbench.engines.fusion` (quantized linear layers and
fused QKV projections: where each can run, and applying it) and :mod:`~diffbench.engines.fingerprint` (what a
fixed-seed baseline depends on).
"""
