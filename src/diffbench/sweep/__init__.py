"""Prove an optimization: speed-up and quality against a baseline of the same deployment.

Modules: ``axes`` (the one axis a sweep varies; the knobs, value checks and diffusers cache configs are in
:mod:`diffbench.engines.knobs`), ``engine`` (cache on/off, reset and skipped computations around a diffusers
engine), ``bootstrap`` (speed-up intervals,
independent and paired), ``warmth`` (warm = no downward trend), ``interleave`` (warmup until stable, seeded
interleaved blocks, the timing noise floor), ``pairs`` (per-image quality vs the baseline),
``working_point`` (gates, the speed verdict and the choice), ``compare`` (fingerprint refusal, stored-run
comparison), ``runner`` (the sweep, stored and resumable).

Importing this package is light; use ``from diffbench.sweep.runner import run_sweep``.
"""
