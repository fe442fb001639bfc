"""The single-request protocol: per-shape warmup, device sync, timed runs, stage split, peak memory,
reproducibility check. Sees only the engine protocol (:mod:`diffbench.engines.base`)."""
