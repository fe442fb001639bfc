"""Joint fit of the time model's efficiencies over the catalog's published anchors.

Free parameters (all positive; every η in (0, 1]):

* ``eta_gemm``: compute-bound GEMM efficiency (unless the catalog fixes it for both modes);
* ``eta_attn[backend@arch]``: attention efficiency of each (backend, architecture) pair the anchors ran,
  with a log-normal prior around the sourced value (σ = ``efficiency.prior_sigma``), so a pair few anchors
  constrain stays near its source; ``eta_gemm`` has the same kind of prior around ``efficiency.eta_gemm_prior``
  (GEMM FLOPs and elementwise bytes both grow with tokens × blocks, so only the GPUs' different
  FLOPs-to-bandwidth ratios tell them apart);
* ``passes_eager`` / ``passes_compiled``: elementwise activation passes per block (see
  :mod:`diffbench.ledger.timing`);
* ``launch_eager_s``: launch overhead per forward in eager mode (compiled: 0, CUDA graphs);
* ``gemm_arch[arch]`` / ``elem_arch[arch]``: per-architecture factors on ``eta_gemm`` and on the elementwise
  passes, each with a log-normal prior around 1 (σ = ``efficiency.arch_sigma``), so an architecture with few
  anchors keeps the shared values while one whose anchors disagree (Ada's 72-96 MB L2 keeps a block's
  activations on chip, so its elementwise passes cost less than HBM bandwidth suggests) gets its own.
* ``tflops_per_watt[arch]``: the dense BF16 tensor rate an architecture sustains per watt of datasheet board power
  (``GpuSpec.board_power_w``). A GPU whose peak needs more (``bf16_tflops ÷ board_power_w`` above it) runs its GEMMs
  and attention core at ``power_fraction = k ÷ (bf16_tflops ÷ board_power_w)`` of its peak (clocks drop to stay
  within the board power; the L40S's 362 TF in 350 W), one under it at its peak (the RTX 4090's 165 TF in 450 W). A
  log-normal prior around ``efficiency.tflops_per_watt_prior`` (σ = ``prior_sigma``; None: no power term). Fitted only
  for an architecture whose anchors ran on two or more GPUs with a board power and different peak-per-watt ratios:
  on one GPU it would be one more factor on that architecture's η_gemm.

A parameter no anchor depends on is not fitted (it keeps its default). The objective is the sum of squared
``log(predicted / measured)`` over the anchors not marked ``outlier`` plus the prior terms; it is minimised by
a projected Levenberg-Marquardt iteration on the log-parameters with an analytic Jacobian, in plain Python
(a handful of parameters and anchors: milliseconds; ``ledger``/``plan`` keep their cold start, where
importing scipy.optimize alone takes ≈0.4 s and numpy ≈0.1 s).

Each anchor's prediction is linear in the inverse efficiencies: ``max(a_g/(η_g·f), b_w) + a_a/(η_a·f) + passes·c_e
+ launch·n + serial`` (``f`` the power fraction, 1 where the term is off) with coefficients from
:func:`diffbench.ledger.timing.denoise_work`, the GPU's peaks and bandwidth, and the fixed text-encoder/VAE time
for end-to-end anchors, so a fitted prediction is exactly
what :func:`diffbench.ledger.account.evaluate` returns for the anchor's configuration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from diffbench.errors import InputError, UsageError
from diffbench.ledger.schema import Anchor, Catalog
from diffbench.ledger.timing import power_fraction_of

ETA_MIN = 1e-3
TARGET = (0.8, 1.25)  # ledger --validate: leave-one-out predicted ÷ published must lie inside
# starting values (near the built-in fit); a parameter no anchor depends on keeps its starting value
DEFAULTS = {"eta_gemm": 0.7, "passes_eager": 150.0, "passes_compiled": 40.0, "launch_eager_s": 1e-4}
BOUNDS = {"eta_gemm": (ETA_MIN, 1.0), "passes_eager": (1e-3, 1e3), "passes_compiled": (1e-3, 1e3),
          "launch_eager_s": (1e-6, 1.0)}
ARCH_FACTOR_BOUNDS = (0.05, 20.0)  # gemm_arch[...] / elem_arch[...]: a factor, not an efficiency
POWER_BOUNDS = (0.01, 100.0)  # tflops_per_watt[...]: sustained dense BF16 TF per board watt


_power_fraction = power_fraction_of


@dataclass(frozen=True)
class Case:
    """One anchor as the coefficients of its predicted seconds (see the module docstring)."""

    anchor: Anchor
    a_gemm: float       # linear FLOPs ÷ effective peak (s at η_gemm = 1)
    b_weights: float    # weight bytes ÷ (bandwidth × η_mem) (s)
    a_attn: float       # attention FLOPs ÷ BF16 peak (s at η_attn = 1)
    c_elem: float       # activation bytes ÷ (bandwidth × η_mem) (s per pass)
    launches: float
    serial_s: float     # text encode + VAE decode for end-to-end anchors, else 0
    pair: str           # "backend@group" (the group is the architecture unless the GPU names a fit_group)
    compiled: bool
    gemm_fixed: float | None
    group: str = ""      # the GPU's fit group (its arch unless the catalog names one)
    peak_per_watt: float | None = None  # BF16 dense TF ÷ board power W (None: no board power, no power term)
    accumulate: float = 1.0  # the GEMMs' FP16-accumulate speed factor (timing.gemm_accumulate); their power term
    # is taken against peak_per_watt × accumulate


@dataclass(frozen=True)
class FitResult:
    """Fitted parameters. ``eta_attn`` maps (backend, arch) → η; ``passes``/``launch`` map compiled → value."""

    eta_gemm: float
    eta_attn: dict[tuple[str, str], float]
    passes: dict[bool, float]
    launch: dict[bool, float]
    n_anchors: int
    free: list[str] = field(default_factory=list)
    rms_log_residual: float = 0.0
    iterations: int = 0
    gemm_arch: dict[str, float] = field(default_factory=dict)
    elem_arch: dict[str, float] = field(default_factory=dict)
    tflops_per_watt: dict[str, float] = field(default_factory=dict)

    def power_fraction(self, group: str, peak_per_watt: float | None) -> float:
        """Fraction of the datasheet tensor rate a GPU of fit group ``group`` sustains within its board power:
        ``min(1, k ÷ peak_per_watt)`` with ``k`` the group's fitted ``tflops_per_watt`` and ``peak_per_watt``
        the GPU's BF16 dense TF ÷ board W; 1 where either is unknown (the term is off)."""
        return _power_fraction(self.tflops_per_watt.get(group), peak_per_watt)

    def gemm_eta(self, group: str, cap: float = 1.0) -> float:
        """GEMM η on a fit group (an architecture): the shared η times the group's factor, at most ``cap``."""
        return min(self.eta_gemm * self.gemm_arch.get(group, 1.0), cap)

    def passes_for(self, compiled: bool, group: str) -> float:
        """Elementwise passes per block (eager or compiled) on a fit group (an architecture)."""
        return self.passes[compiled] * self.elem_arch.get(group, 1.0)


def anchor_case(catalog: Catalog, a: Anchor) -> Case:
    """Coefficients of one anchor's predicted time (its precision, single GPU, no cache)."""
    from diffbench.ledger import timing as tm
    from diffbench.ledger.flops import forwards_per_step, text_encode_flops, vae_decode_flops
    from diffbench.ledger.tokens import check_shape, count_tokens

    model, gpu = catalog.models[a.model], catalog.gpus[a.gpu]
    frames = check_shape(model, a.width, a.height, a.frames)
    tokens = count_tokens(model, a.width, a.height, frames)
    fps = forwards_per_step(model, a.cfg)
    work = tm.denoise_work(catalog, model, tokens, a.width, a.height, a.steps, fps, a.precision)
    peak = gpu.bf16_tflops * tm.TERA
    gemm_peak = peak  # the GEMM rate at η_gemm = 1 for this precision (timing.denoise_time)
    if tm.fp8_effective(gpu, a.precision):
        assert gpu.fp8_tflops is not None
        gemm_peak = (gpu.fp8_tflops * tm.TERA * catalog.optimizations.fp8_linear.gemm_retention
                     * tm.accumulate_factor(gpu, a.accumulate))
    elif tm.int4_effective(catalog, gpu, a.precision):
        gemm_peak = peak * catalog.optimizations.int4_linear.gemm_speedup
    else:
        gemm_peak = peak / (tm.nf4_factor(catalog, gpu, a.precision) * tm.int8_factor(catalog, gpu, a.precision, a.compile))
        if a.precision in ("bf16", "fp8"):
            gemm_peak *= tm.accumulate_factor(gpu, a.accumulate)
    bw = gpu.mem_bw_gbps * 1e9 * catalog.efficiency.eta_mem
    serial = 0.0
    if a.covers == "end_to_end":
        fixed = tm.Etas(gemm=1, attention=1, vae=catalog.efficiency.eta_vae, text=catalog.efficiency.eta_text,
                        fp8_gemm_retention=1)
        serial = (tm.text_time(text_encode_flops(model, fps), gpu, fixed)
                  + tm.vae_time(catalog, model, vae_decode_flops(model, a.width, a.height, tokens.latent_frames),
                                gpu, fixed))
    eff = catalog.efficiency
    return Case(anchor=a, a_gemm=work.linear_flops / gemm_peak, b_weights=work.weight_bytes / bw,
                a_attn=work.attention_flops / peak, c_elem=work.activation_bytes / bw,
                launches=float(work.launches), serial_s=serial, pair=f"{a.attention}@{gpu.group}",
                compiled=a.compile, gemm_fixed=eff.eta_gemm_compiled if a.compile else eff.eta_gemm_eager,
                group=gpu.group,
                peak_per_watt=gpu.peak_per_watt, accumulate=tm.gemm_accumulate(gpu, a.precision, a.accumulate))


def predict(case: Case, fr: FitResult) -> float:
    """Predicted seconds of an anchor under fitted parameters."""
    backend, arch = case.pair.split("@")
    group = _arch(case)
    eta_g = case.gemm_fixed if case.gemm_fixed is not None else fr.gemm_eta(group)
    eta_a = fr.eta_attn[(backend, arch)]
    f = fr.power_fraction(group, case.peak_per_watt)
    f_g = fr.power_fraction(group, _gemm_ppw(case))
    return (max(case.a_gemm / (eta_g * f_g), case.b_weights) + case.a_attn / (eta_a * f)
            + fr.passes_for(case.compiled, group) * case.c_elem + fr.launch[case.compiled] * case.launches
            + case.serial_s)


def _priors(catalog: Catalog, cases: list[Case]) -> dict[str, float]:
    from diffbench.ledger.timing import attention_eta_prior

    out: dict[str, float] = {}
    for c in cases:
        b, g = c.pair.split("@")
        gpus = [x for x in catalog.gpus.values() if x.group == g]
        arch = gpus[0].arch if gpus else g
        out[c.pair] = attention_eta_prior(catalog, b, arch) if b in catalog.optimizations.attention_backends else 0.35
    return out


def fit_cases(catalog: Catalog, cases: list[Case], priors: dict[str, float] | None = None,
              max_iter: int = 200, free_only: set[str] | None = None, base: FitResult | None = None) -> FitResult:
    """Least squares on log(predicted/measured) over ``cases`` (plus the priors).

    ``free_only``: fit only these parameter names (``eta_gemm``, ``eta_attn[backend@arch]``, ...), the others
    keep their values in ``base``, and no prior applies (a calibration against one GPU's measurements).

    Raises:
        UsageError: no case to fit.
    """
    if not cases:
        raise UsageError("the time-model fit needs at least one anchor that is not an outlier")
    priors = priors if priors is not None else _priors(catalog, cases)
    pairs = sorted({c.pair for c in cases} | set(priors))
    archs = sorted({_arch(c) for c in cases})
    arch_names = [f"gemm_arch[{a}]" for a in archs] + [f"elem_arch[{a}]" for a in archs]
    names = (["eta_gemm", "passes_eager", "passes_compiled", "launch_eager_s"] + [f"eta_attn[{p}]" for p in pairs]
             + arch_names + [f"tflops_per_watt[{a}]" for a in archs])
    init = dict(DEFAULTS)
    init.update({f"eta_attn[{p}]": priors.get(p, 0.35) for p in pairs})
    init.update({n: 1.0 for n in arch_names})
    k_prior = catalog.efficiency.tflops_per_watt_prior
    init.update({f"tflops_per_watt[{a}]": k_prior or 1.0 for a in archs})
    if base is not None:
        init.update({"eta_gemm": base.eta_gemm, "passes_eager": base.passes[False],
                     "passes_compiled": base.passes[True], "launch_eager_s": base.launch[False]})
        init.update({f"eta_attn[{b}@{a}]": v for (b, a), v in base.eta_attn.items() if f"{b}@{a}" in pairs})
        init.update({f"gemm_arch[{a}]": v for a, v in base.gemm_arch.items() if a in archs})
        init.update({f"elem_arch[{a}]": v for a, v in base.elem_arch.items() if a in archs})
    lo = {n: BOUNDS.get(n, (ETA_MIN, 1.0))[0] for n in names}
    hi = {n: BOUNDS.get(n, (ETA_MIN, _attn_upper(catalog, n)))[1] for n in names}
    for n in arch_names:
        lo[n], hi[n] = ARCH_FACTOR_BOUNDS
    for a in archs:
        lo[f"tflops_per_watt[{a}]"], hi[f"tflops_per_watt[{a}]"] = POWER_BOUNDS
    used = {"eta_gemm": any(c.gemm_fixed is None for c in cases),
            "passes_eager": any(not c.compiled for c in cases),
            "passes_compiled": any(c.compiled for c in cases),
            "launch_eager_s": any(not c.compiled for c in cases)}
    used.update({f"eta_attn[{p}]": True for p in pairs})
    used.update({f"gemm_arch[{a}]": any(c.gemm_fixed is None and _arch(c) == a for c in cases) for a in archs})
    used.update({f"elem_arch[{a}]": True for a in archs})
    used.update({f"tflops_per_watt[{a}]": k_prior is not None and free_only is None and _power_identified(cases, a)
                 for a in archs})
    if free_only is not None:
        used = {n: n in free_only for n in names}
        priors = {}
    free = [n for n in names if used[n]]
    if not free:
        raise UsageError("nothing to fit: every parameter is fixed")
    idx = {n: i for i, n in enumerate(free)}
    sigma = catalog.efficiency.prior_sigma
    arch_sigma = catalog.efficiency.arch_sigma
    prior_rows = [(idx[f"eta_attn[{p}]"], math.log(v)) for p, v in priors.items() if f"eta_attn[{p}]" in idx]
    if "eta_gemm" in idx and catalog.efficiency.eta_gemm_prior is not None and free_only is None:
        init["eta_gemm"] = catalog.efficiency.eta_gemm_prior
        prior_rows.append((idx["eta_gemm"], math.log(catalog.efficiency.eta_gemm_prior)))
    arch_rows = [(idx[n], 0.0) for n in arch_names if n in idx and free_only is None]
    power_rows = [(idx[f"tflops_per_watt[{a}]"], math.log(k_prior)) for a in archs
                  if f"tflops_per_watt[{a}]" in idx and k_prior is not None and free_only is None]
    z = [math.log(init[n]) for n in free]
    zlo = [math.log(lo[n]) for n in free]
    zhi = [math.log(hi[n]) for n in free]
    n_free = len(free)

    def unpack(zv: list[float]) -> dict[str, float]:
        vals = dict(init)
        vals.update({n: math.exp(zv[i]) for n, i in idx.items()})
        return vals

    keys = [(c, _arch(c)) for c in cases]
    keys = [(c, arch, f"gemm_arch[{arch}]", f"elem_arch[{arch}]", f"tflops_per_watt[{arch}]", f"eta_attn[{c.pair}]",
             "passes_compiled" if c.compiled else "passes_eager") for c, arch in keys]

    def residuals(zv: list[float]) -> tuple[list[float], list[list[float]]]:
        v = unpack(zv)
        r: list[float] = []
        jac: list[list[float]] = []
        for c, arch, g_key, e_key, k_key, att_key, pas_key in keys:
            raw_g = v["eta_gemm"] * v[g_key]
            eta_g = c.gemm_fixed if c.gemm_fixed is not None else min(raw_g, 1.0)
            kp = v[k_key] if k_key in idx else (base.tflops_per_watt.get(arch) if base is not None else None)
            f = _power_fraction(kp, c.peak_per_watt)
            f_g = _power_fraction(kp, _gemm_ppw(c))
            gemm_t = c.a_gemm / (eta_g * f_g)
            att_t = c.a_attn / (v[att_key] * f)
            elem_t = v[pas_key] * v[e_key] * c.c_elem
            lau_t = 0.0 if c.compiled else v["launch_eager_s"] * c.launches
            t = max(gemm_t, c.b_weights) + att_t + elem_t + lau_t + c.serial_s
            if not 0 < t < math.inf:  # the schema's ranges keep GPU figures away from this; a model with no work
                a = c.anchor
                raise InputError(f"catalog anchors: {a.id} ({a.model} on {a.gpu}) is predicted at {t:g} s, which "
                                 f"cannot be fitted; fix the figures of models.{a.model} or gpus.{a.gpu}, or drop it")
            r.append(math.log(t / c.anchor.measured_s))
            row = [0.0] * n_free
            gemm_live = c.gemm_fixed is None and gemm_t >= c.b_weights and raw_g < 1.0
            if gemm_live and "eta_gemm" in idx:
                row[idx["eta_gemm"]] = -gemm_t / t
            if gemm_live and g_key in idx:
                row[idx[g_key]] = -gemm_t / t
            if att_key in idx:
                row[idx[att_key]] = -att_t / t
            if pas_key in idx:
                row[idx[pas_key]] = elem_t / t
            if e_key in idx:
                row[idx[e_key]] = elem_t / t
            if not c.compiled and "launch_eager_s" in idx:
                row[idx["launch_eager_s"]] = lau_t / t
            if k_key in idx and (f < 1.0 or f_g < 1.0):
                row[idx[k_key]] = -((gemm_t if gemm_t >= c.b_weights and f_g < 1.0 else 0.0)
                                    + (att_t if f < 1.0 else 0.0)) / t
            jac.append(row)
        for j, mu in prior_rows:
            r.append((zv[j] - mu) / sigma)
            row = [0.0] * n_free
            row[j] = 1.0 / sigma
            jac.append(row)
        for j, mu in arch_rows:
            r.append((zv[j] - mu) / arch_sigma)
            row = [0.0] * n_free
            row[j] = 1.0 / arch_sigma
            jac.append(row)
        for j, mu in power_rows:
            r.append((zv[j] - mu) / sigma)
            row = [0.0] * n_free
            row[j] = 1.0 / sigma
            jac.append(row)
        return r, jac

    r, jac = residuals(z)
    cost = sum(x * x for x in r)
    lam = 1e-3
    it = 0
    normal: tuple[list[float], list[list[float]]] | None = None  # Jᵀr and JᵀJ at z (kept while steps are rejected)
    for it in range(1, max_iter + 1):  # noqa: B007 - the count is reported
        if normal is None:
            normal = _normal_equations(jac, r, n_free)
        g, jtj = normal
        # a parameter at a bound whose gradient pushes it outward stays there (projected step)
        pinned = [(z[i] <= zlo[i] + 1e-12 and g[i] > 0) or (z[i] >= zhi[i] - 1e-12 and g[i] < 0)
                  for i in range(n_free)]
        h = [[0.0 if pinned[i] or pinned[j] else jtj[i][j] for j in range(n_free)] for i in range(n_free)]
        g = [0.0 if pinned[i] else g[i] for i in range(n_free)]
        if max(abs(x) for x in g) < 1e-14:
            break
        for i in range(n_free):
            h[i][i] += lam * h[i][i] + 1e-12 + (1.0 if pinned[i] else 0.0)
        step = _solve(h, [-x for x in g])
        z_new = [min(max(z[i] + step[i], zlo[i]), zhi[i]) for i in range(n_free)]
        r_new, jac_new = residuals(z_new)
        cost_new = sum(x * x for x in r_new)
        if cost_new <= cost:
            small = cost - cost_new <= 1e-13 * cost + 1e-30
            z, r, jac, cost = z_new, r_new, jac_new, cost_new
            normal = None
            lam = max(lam / 3, 1e-12)
            if small:
                break
        else:
            lam *= 4
            if lam > 1e12:
                break
    v = unpack(z)
    fr = FitResult(
        eta_gemm=v["eta_gemm"],
        eta_attn={tuple(p.split("@")): v[f"eta_attn[{p}]"] for p in pairs},  # type: ignore[misc]
        passes={False: v["passes_eager"], True: v["passes_compiled"]},
        launch={False: v["launch_eager_s"], True: 0.0},
        n_anchors=len(cases), free=free, iterations=it,
        gemm_arch={a: v[f"gemm_arch[{a}]"] for a in archs}, elem_arch={a: v[f"elem_arch[{a}]"] for a in archs},
        tflops_per_watt={a: v[f"tflops_per_watt[{a}]"] for a in archs if f"tflops_per_watt[{a}]" in idx}
        or (dict(base.tflops_per_watt) if base is not None else {}))
    logs = [math.log(predict(c, fr) / c.anchor.measured_s) for c in cases]
    return FitResult(**{**fr.__dict__, "rms_log_residual": math.sqrt(sum(x * x for x in logs) / len(logs))})


def _power_identified(cases: list[Case], group: str) -> bool:
    """Whether a fit group's ``tflops_per_watt`` can be fitted: its cases ran on at least two GPUs with a board
    power and different peak-per-watt ratios (on one GPU the power cap is one more factor on its η_gemm)."""
    return len({round(c.peak_per_watt, 9) for c in cases if c.peak_per_watt is not None and _arch(c) == group}) >= 2


def _gemm_ppw(case: Case) -> float | None:
    """TF per board W of the rate the case's GEMMs run on (its BF16 rate × the FP16-accumulate factor)."""
    return case.peak_per_watt * case.accumulate if case.peak_per_watt is not None else None


def _arch(case: Case) -> str:
    """The fit group of a case: its GPU's ``fit_group``, else the architecture of its backend pair."""
    return case.group or case.pair.split("@")[1]


def _attn_upper(catalog: Catalog, name: str) -> float:
    """Upper bound of a fitted attention η: 1 (of the BF16 peak), or the backend's ``max_eta`` for an 8-bit
    kernel that runs on the INT8/FP8 tensor cores."""
    if not name.startswith("eta_attn["):
        return 1.0
    pair = name[len("eta_attn["):-1]
    be = catalog.optimizations.attention_backends.get(pair.split("@")[0])
    return be.max_eta if be is not None else 1.0


def _normal_equations(jac: list[list[float]], r: list[float], n: int) -> tuple[list[float], list[list[float]]]:
    """Jᵀr and JᵀJ of an ``len(r)`` × ``n`` Jacobian, summing only the non-zero entries of each row (each anchor
    depends on a handful of the parameters)."""
    g = [0.0] * n
    jtj = [[0.0] * n for _ in range(n)]
    for row, rk in zip(jac, r, strict=True):
        nz = [(i, x) for i, x in enumerate(row) if x]
        for i, xi in nz:
            g[i] += xi * rk
            hi = jtj[i]
            for j, xj in nz:
                hi[j] += xi * xj
    return g, jtj


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Solve a·x = b for a small symmetric positive definite ``a`` (the damped normal equations) by Cholesky
    factorisation, a = L·Lᵀ; falls back to Gaussian elimination with partial pivoting if a pivot is not positive."""
    n = len(b)
    low: list[list[float]] = []
    for i in range(n):
        ai, li = a[i], [0.0] * n
        for j in range(i + 1):
            lj = li if j == i else low[j]
            d = ai[j]
            for k in range(j):
                d -= li[k] * lj[k]
            if j < i:
                li[j] = d / lj[j]
            elif d <= 0:
                return _solve_pivot(a, b)
            else:
                li[i] = math.sqrt(d)
        low.append(li)
    y = [0.0] * n
    for i in range(n):
        li, d = low[i], b[i]
        for k in range(i):
            d -= li[k] * y[k]
        y[i] = d / li[i]
    x = [0.0] * n
    for i in range(n - 1, -1, -1):
        d = y[i]
        for k in range(i + 1, n):
            d -= low[k][i] * x[k]
        x[i] = d / low[i][i]
    return x


def _solve_pivot(a: list[list[float]], b: list[float]) -> list[float]:
    """Solve a·x = b by Gaussian elimination with partial pivoting."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda i: abs(m[i][col]))
        m[col], m[piv] = m[piv], m[col]
        d = m[col][col]
        for i in range(col + 1, n):
            f = m[i][col] / d
            if f:
                for j in range(col, n + 1):
                    m[i][j] -= f * m[col][j]
    x = [0.0] * n
    for i in range(n - 1, -1, -1):
        x[i] = (m[i][n] - sum(m[i][j] * x[j] for j in range(i + 1, n))) / m[i][i]
    return x


def catalog_cases(catalog: Catalog) -> list[Case]:
    """Every anchor of the catalog as a :class:`Case` (outliers included)."""
    return [anchor_case(catalog, a) for a in catalog.anchors]


_FIT_CACHE: dict[int, tuple[Catalog, FitResult]] = {}


def fitted_params(catalog: Catalog) -> FitResult:
    """The fit over the catalog's non-outlier anchors, cached per catalog object."""
    hit = _FIT_CACHE.get(id(catalog))
    if hit is not None and hit[0] is catalog:
        return hit[1]
    cases = [c for c in catalog_cases(catalog) if c.anchor.outlier is None]
    fr = fit_cases(catalog, cases, _priors(catalog, catalog_cases(catalog)))
    _FIT_CACHE[id(catalog)] = (catalog, fr)
    return fr


POOR_FIT = 0.2
"""RMS of log(predicted ÷ published) over the fitted anchors above which ``ledger`` and ``plan`` warn (≈ 22 %)."""


def fit_warning(fr: FitResult) -> str | None:
    """A sentence when the anchor fit cannot be trusted (residual above :data:`POOR_FIT`, a cost parameter pinned at
    the upper bound of :data:`BOUNDS`, or η_gemm at its lower bound), else None. A launch overhead at its lower
    bound is a finding (no overhead), not a failure."""
    pinned = [n for n, v in (("passes_eager", fr.passes.get(False)), ("passes_compiled", fr.passes.get(True)),
                             ("launch_eager_s", fr.launch.get(False)), ("eta_gemm", fr.eta_gemm))
              if v is not None and n in fr.free
              and (v >= BOUNDS[n][1] * 0.999 or (n == "eta_gemm" and v <= BOUNDS[n][0] * 1.001))]
    if fr.rms_log_residual <= POOR_FIT and not pinned:
        return None
    why = [f"RMS log residual {fr.rms_log_residual:.2f} over {fr.n_anchors} anchor(s)"] + [f"{n} at its bound"
                                                                                           for n in pinned]
    return ("the time model's fit to the catalog's anchors is poor (" + ", ".join(why) + "): its seconds are not "
            "trustworthy; run `diffbench ledger --validate` and fix or mark the outlying anchors")


@dataclass(frozen=True)
class ValidationRow:
    """One anchor of ``ledger --validate``: published, leave-one-out and in-sample predictions (seconds)."""

    anchor: Anchor
    loo_s: float
    in_sample_s: float

    @property
    def ratio(self) -> float:
        """Leave-one-out predicted ÷ published."""
        return self.loo_s / self.anchor.measured_s


def validate(catalog: Catalog) -> list[ValidationRow]:
    """Leave-one-out table: each anchor predicted by a fit over the other non-outlier anchors (an outlier
    by the fit over all non-outliers, which already leaves it out)."""
    cases = catalog_cases(catalog)
    priors = _priors(catalog, cases)
    fit_set = [c for c in cases if c.anchor.outlier is None]
    full = fit_cases(catalog, fit_set, priors)
    rows = []
    for c in cases:
        if c.anchor.outlier is not None:
            loo = full
        else:
            rest = [o for o in fit_set if o is not c]
            if not rest:  # no other anchor to fit: there is no leave-one-out prediction (nan fails the target)
                rows.append(ValidationRow(anchor=c.anchor, loo_s=math.nan, in_sample_s=predict(c, full)))
                continue
            loo = fit_cases(catalog, rest, priors)
        rows.append(ValidationRow(anchor=c.anchor, loo_s=predict(c, loo), in_sample_s=predict(c, full)))
    return rows


@dataclass(frozen=True)
class GroupSummary:
    """``ledger --validate`` by architecture (fit group): leave-one-out ratios of its non-outlier anchors."""

    group: str
    anchors: int
    within: int
    min_ratio: float
    max_ratio: float
    gemm_factor: float
    elementwise_factor: float


def by_group(catalog: Catalog, rows: list[ValidationRow], fr: FitResult) -> list[GroupSummary]:
    """One :class:`GroupSummary` per fit group (architecture) with anchors, sorted by group name."""
    groups: dict[str, list[float]] = {}
    for r in rows:
        g = catalog.gpus[r.anchor.gpu].group
        ratios = groups.setdefault(g, [])
        if r.anchor.outlier is None:
            ratios.append(r.ratio)
    out = []
    for g, ratios in sorted(groups.items()):
        ok = [x for x in ratios if TARGET[0] <= x <= TARGET[1]]
        out.append(GroupSummary(group=g, anchors=len(ratios), within=len(ok),
                                min_ratio=min(ratios) if ratios else math.nan,
                                max_ratio=max(ratios) if ratios else math.nan,
                                gemm_factor=fr.gemm_arch.get(g, 1.0), elementwise_factor=fr.elem_arch.get(g, 1.0)))
    return out
