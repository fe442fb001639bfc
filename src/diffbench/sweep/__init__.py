"""Prove an optimization: speed-up and quality against a baseline of the same deployment.

Modules: ``axes`` (what can be swept, value checks, diffusers cache configs), ``engine`` (cache on/off and
reset around a diffusers engine), ``probe`` (skipped computations), ``bootstrap`` (speed-up intervals,
independent and paired), ``warmth`` (warm = no downward trend), ``interleave`` (warmup until stable, seeded
interleaved blocks, the timing noise floor), ``pairs`` (per-image quality vs the baseline),
``working_point`` (gates, the speed verdict and the choice), ``compare`` (fingerprint refusal, stored-run
comparison), ``runner`` (the sweep, stored and resumable).

Importing this package is light; use ``from diffbench.sweep.runner import run_sweep``.
"""
