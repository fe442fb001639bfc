"""Engines behind one protocol (see :mod:`diffbench.engines.base`).

Concrete engines are imported lazily through :func:`diffbench.engines.registry.create_engine`, so that
importing this package never imports torch or diffusers.
"""
