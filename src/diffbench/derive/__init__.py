"""``diffbench derive``: the configuration derivation executed on the pipeline the team will serve.

Each step (① account … ⑧ signals; :data:`diffbench.derive.models.STAGES`) is measured against the fixed-seed
baseline of the current deployment with the sweep's protocol (warm until stable, interleaved blocks, paired
bootstrap beside the timing noise floor) and recorded with its decision and reason in ``derive.json``.
"""
