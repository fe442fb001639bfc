"""The efficiencies (η) the time model uses for one configuration: the anchor fit
(:mod:`diffbench.ledger.fit`), a per-GPU calibration, the catalog's fixed values and the command line.

Kept apart from :mod:`diffbench.ledger.timing` (the time per kernel class given the η) because it needs the
fit, and the fit needs the timing model: here both are imported in one direction.
"""

from __future__ import annotations

from diffbench.errors import UsageError
from diffbench.ledger.fit import fitted_params
from diffbench.ledger.schema import Catalog, GpuSpec
from diffbench.ledger.timing import Etas, attention_eta_prior, check_backend


def resolve_etas(catalog: Catalog, gpu: GpuSpec, attention: str, compiled: bool,
                 eta_gemm: float | None = None, eta_attn: float | None = None,
                 eta_vae: float | None = None, gpu_id: str | None = None) -> Etas:
    """Efficiencies for a configuration: the anchor fit, then a ``per_gpu`` calibration of ``gpu_id``,
    then the catalog's fixed GEMM η, then explicit arguments (each overrides the previous).

    Raises:
        UsageError: unknown attention backend, one this GPU cannot run, or an η outside (0, 1].
    """
    check_backend(catalog, gpu, attention)
    for name, v in (("--eta-gemm", eta_gemm), ("--eta-attn", eta_attn), ("--eta-vae", eta_vae)):
        if v is not None and not 0 < v <= 1:
            raise UsageError(f"{name} {v}: must be in (0, 1]")
    fp = fitted_params(catalog)
    gemm = fp.gemm_eta(gpu.group)
    attn = fp.eta_attn.get((attention, gpu.group), attention_eta_prior(catalog, attention, gpu.arch))
    source = f"fit over {fp.n_anchors} anchors"
    cal = catalog.efficiency.per_gpu.get(gpu_id or "")
    if cal is not None:
        if cal.gemm is not None:
            gemm = cal.gemm
        if cal.attention is not None and cal.attention_backend == attention:
            attn = cal.attention
        source = f"calibrated: {cal.source}"
    fixed = catalog.efficiency.eta_gemm_compiled if compiled else catalog.efficiency.eta_gemm_eager
    if fixed is not None:
        gemm = fixed
    if eta_gemm is not None or eta_attn is not None:
        source += "; overridden on the command line"
    return Etas(
        gemm=eta_gemm if eta_gemm is not None else gemm,
        attention=eta_attn if eta_attn is not None else attn,
        vae=eta_vae if eta_vae is not None else catalog.efficiency.eta_vae,
        text=catalog.efficiency.eta_text,
        fp8_gemm_retention=catalog.optimizations.fp8_linear.gemm_retention,
        mem=catalog.efficiency.eta_mem,
        elementwise_passes=fp.passes_for(compiled, gpu.group),
        launch_s=fp.launch[compiled],
        power_fraction=fp.power_fraction(gpu.group, gpu.peak_per_watt),
        tflops_per_watt=fp.tflops_per_watt.get(gpu.group),
        source=source,
    )
