"""Multi-GPU strategies for one request: Ulysses, Ring, USP, CFG parallel, PipeFusion, tensor parallel.

Communication per GPU per forward, b = 2 bytes (from the strategy table of
PipeFusion/PipeFusion@6d0d12b:README.md, also in arXiv 2405.14430):
Ulysses 4·(p/N)·hs·b·(N−1)/N·L; Ring 2·p·hs·b·(N−1)/N·L; TP 2·[2·p·hs·b·(N−1)/N]·L; PipeFusion 2·p·hs·b
(not × L); CFG parallel: the latent once per step. Link: NVLink per direction when the GPU has it, else
PCIe (effective), times the catalog's communication efficiency.

Latency: denoise/N × (1 + α·(N−1)) + exposed communication, where α (parallel inefficiency per extra
rank) is solved from the catalog's Ulysses anchor (xDiT, H100). Ring and PipeFusion overlap their traffic
with compute. GPU-seconds follow the planning rule "sequence parallelism lowers latency, not GPU-seconds":
single-GPU GPU-seconds plus every rank's exposed communication; ``occupied_gpu_s`` (latency × GPUs) is
reported as the upper bound.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from diffbench.ledger.account import LedgerResult
from diffbench.ledger.schema import Catalog, GpuSpec, ModelSpec

Strategy = Literal["ulysses", "ring", "usp", "cfg", "pipefusion", "tp", "cfg+usp"]
BYTES = 2


class ParallelPlan(BaseModel):
    """One multi-GPU layout for one request and its predicted cost."""

    model_config = ConfigDict(frozen=True)

    strategy: str
    label: str
    gpus: int
    ulysses: int = 1
    ring: int = 1
    cfg: int = 1
    link: Literal["nvlink", "pcie"]
    valid: bool
    reason: str = ""
    comm_bytes_per_forward: float = 0.0
    comm_bytes_per_step: float = 0.0
    comm_s_per_request: float = 0.0
    exposed_comm_s: float = 0.0
    latency_s: float = 0.0
    gpu_s: float = 0.0
    occupied_gpu_s: float = 0.0
    weights_per_gpu_bytes: int = 0
    peak_per_gpu_bytes: int = 0
    fits: bool = True


def link_of(gpu: GpuSpec) -> tuple[Literal["nvlink", "pcie"], float]:
    """(link kind, usable bytes/s per direction)."""
    if gpu.nvlink_gbps:
        return "nvlink", gpu.nvlink_gbps * 1e9
    return "pcie", gpu.pcie_gbps * 1e9


def layers(model: ModelSpec) -> int:
    if model.denoiser.arch == "unet" and model.denoiser.unet is not None:
        return sum(lvl.layers for lvl in model.denoiser.unet.attention_levels)
    return sum(g.count for g in model.denoiser.blocks)


def ulysses_bytes(p: float, hs: int, n: int, n_layers: int) -> float:
    return 4 * (p / n) * hs * BYTES * (n - 1) / n * n_layers


def ring_bytes(p: float, hs: int, n: int, n_layers: int) -> float:
    return 2 * p * hs * BYTES * (n - 1) / n * n_layers


def tp_bytes(p: float, hs: int, n: int, n_layers: int) -> float:
    return 2 * (2 * p * hs * BYTES * (n - 1) / n) * n_layers


def usp_bytes(p: float, hs: int, u: int, r: int, n_layers: int) -> float:
    """Ulysses all-to-all within groups of u on a p/r shard, then ring K/V passing across r groups."""
    b = ulysses_bytes(p / r, hs, u, n_layers) if u > 1 else 0.0
    if r > 1:
        b += 2 * (p / r) * (hs / u) * BYTES * (r - 1) * n_layers
    return b


def latent_bytes(model: ModelSpec, visual_tokens: int) -> float:
    return visual_tokens * 64 * BYTES  # 16 latent channels × 2×2 patch per token


_ALPHA: dict[int, tuple[Catalog, float]] = {}


def sp_alpha(catalog: Catalog) -> float:
    """Parallel inefficiency per extra rank, solved from the catalog's sequence-parallel anchor.

    T_N = T_1/N·(1 + α(N−1)) + comm_N with T_1 the same source's compiled single-GPU time
    (xdit-project/xDiT@175e0bf:docs/performance/flux.md)."""
    hit = _ALPHA.get(id(catalog))
    if hit is not None and hit[0] is catalog:
        return hit[1]
    sp = catalog.sp_anchor
    model = catalog.models[sp.model]
    gpu = catalog.gpus[sp.gpu]
    from diffbench.ledger.tokens import count_tokens

    tok = count_tokens(model, sp.width, sp.height, 1)
    n = sp.degree
    _, bw = link_of(gpu)
    comm = ulysses_bytes(tok.seq, model.denoiser.hidden, n, layers(model)) * sp.steps / (
        bw * catalog.efficiency.comm_efficiency)
    alpha = ((sp.compiled_s - comm) * n / sp.single_gpu_s - 1) / (n - 1)
    alpha = max(alpha, 0.0)
    _ALPHA[id(catalog)] = (catalog, alpha)
    return alpha


def _ulysses_split(heads: int, degree: int) -> tuple[int, int]:
    """Largest Ulysses degree dividing both the heads and the SP degree; the rest goes to Ring."""
    for u in range(degree, 0, -1):
        if degree % u == 0 and heads % u == 0:
            return u, degree // u
    return 1, degree


def evaluate_parallel(catalog: Catalog, model: ModelSpec, gpu: GpuSpec, base: LedgerResult,
                      strategy: Strategy, degree: int, gpus_per_node: int) -> ParallelPlan:
    """Cost of running one request of ``base`` (a single-GPU ledger) across ``degree`` GPUs.

    ``degree`` counts all GPUs of the request (for ``cfg+usp``: 2 × SP degree). Invalid layouts come back
    with ``valid=False`` and the reason (e.g. Ulysses degree not dividing the heads)."""
    link, bw = link_of(gpu)
    bw *= catalog.efficiency.comm_efficiency
    heads = model.denoiser.heads
    hs = model.denoiser.hidden
    p = base.tokens.seq
    n_layers = layers(model)
    fps = base.forwards_per_step
    forwards = base.steps * fps / base.config.cache_speedup  # forwards actually computed
    alpha = sp_alpha(catalog)
    stages = {s.name: s for s in base.stages}
    den = stages["denoise"].time_s
    serial = stages["text_encode"].time_s + stages["vae_decode"].time_s + base.offload_time_s
    weights_den = next(w.bytes for w in base.weights if w.component == "denoiser")
    weights_other = base.weights_bytes - weights_den
    overhead = int(catalog.memory.runtime_overhead_gib * 2**30)

    def bad(label: str, why: str, **kw: int) -> ParallelPlan:
        return ParallelPlan(strategy=strategy, label=label, gpus=degree, link=link, valid=False, reason=why, **kw)

    if degree < 2:
        return bad(f"{strategy}-{degree}", "degree must be ≥ 2")
    if degree > gpus_per_node or gpus_per_node % degree:
        return bad(f"{strategy}-{degree}", f"degree {degree} must divide the {gpus_per_node} GPUs per node "
                   "(one request stays inside a node, instances pack whole nodes)")
    cfg_deg = 2 if strategy.startswith("cfg") else 1
    if cfg_deg == 2 and fps != 2:
        return bad(f"{strategy}-{degree}", f"CFG parallel needs 2 forwards per step; {model.display_name} runs 1")
    sp = degree // cfg_deg
    u, r = 1, 1
    if strategy == "ulysses":
        u = sp
        if heads % u:
            return bad(f"ulysses-{sp}", f"Ulysses degree {u} must divide the {heads} attention heads; use ring or usp")
    elif strategy == "ring":
        r = sp
    elif strategy in ("usp", "cfg+usp"):
        u, r = _ulysses_split(heads, sp)
    elif strategy == "tp" and heads % sp:
        return bad(f"tp-{sp}", f"tensor-parallel degree {sp} must divide the {heads} heads")
    reason = ""
    if r > 1 and p % r:  # Wan's code requires divisibility; xDiT-style runtimes pad the sequence
        reason = f"sequence {p} padded to a multiple of the ring degree {r}"
        p = -(-p // r) * r

    den_cfg = den / cfg_deg
    comm_fwd = 0.0
    exposed_per_fwd = 0.0
    fwd_compute = den_cfg / max(forwards / cfg_deg, 1e-9)  # one rank's forward time before the SP split
    if sp > 1:
        if strategy == "pipefusion":
            comm_fwd = 2 * p * hs * BYTES
        elif strategy == "tp":
            comm_fwd = tp_bytes(p, hs, sp, n_layers)
        else:
            comm_fwd = usp_bytes(p, hs, u, r, n_layers)
        t_comm = comm_fwd / bw
        if strategy == "pipefusion":
            exposed_per_fwd = max(0.0, t_comm - fwd_compute / sp)
        elif strategy == "ring":
            att_fwd = base.denoise_attention_s / max(forwards, 1e-9) / sp
            exposed_per_fwd = max(0.0, t_comm - att_fwd)
        else:
            exposed_per_fwd = t_comm
    den_par = den_cfg / sp * (1 + alpha * (sp - 1)) if sp > 1 else den_cfg
    comm_req = comm_fwd * forwards / cfg_deg / bw
    exposed = exposed_per_fwd * forwards / cfg_deg
    comm_step = comm_fwd * fps / cfg_deg
    if cfg_deg == 2:
        comm_step += latent_bytes(model, base.tokens.visual) / 2
        cfg_comm = latent_bytes(model, base.tokens.visual) / 2 * base.steps / bw
        comm_req += cfg_comm
        exposed += cfg_comm
    latency = serial + den_par + exposed
    gpu_s = base.total_time_s + degree * exposed
    # Memory per GPU
    if strategy in ("tp", "pipefusion"):
        w_gpu = int(weights_den / sp + weights_other)
    else:
        w_gpu = int(weights_den + weights_other)
    act = base.activation_bytes / (2 if cfg_deg == 2 and not model.cfg_sequential else 1)
    act_gpu = act * (2 / sp if sp > 1 else 1)
    if strategy == "pipefusion":
        act_gpu += 2 * (n_layers / sp) * 2 * p * hs * BYTES  # stale K/V of this stage's layers
    peak = int(w_gpu + max(act_gpu, base.vae_decode_peak_bytes) + overhead)
    label = {"ulysses": f"Ulysses-{u}", "ring": f"Ring-{r}", "usp": f"USP-{sp} (Ulysses {u} × Ring {r})",
             "cfg": "CFG parallel-2", "pipefusion": f"PipeFusion-{sp}", "tp": f"TP-{sp}",
             "cfg+usp": f"CFG-2 × USP-{sp} (Ulysses {u} × Ring {r})"}[strategy]
    return ParallelPlan(
        strategy=strategy, label=label, gpus=degree, ulysses=u, ring=r, cfg=cfg_deg, link=link, valid=True,
        reason=reason,
        comm_bytes_per_forward=comm_fwd, comm_bytes_per_step=comm_step, comm_s_per_request=comm_req, exposed_comm_s=exposed,
        latency_s=latency, gpu_s=gpu_s, occupied_gpu_s=latency * degree, weights_per_gpu_bytes=w_gpu,
        peak_per_gpu_bytes=peak, fits=peak <= base.usable_bytes,
    )


def parallel_options(catalog: Catalog, base: LedgerResult, gpus_per_node: int = 8) -> list[ParallelPlan]:
    """Every strategy at every degree that divides ``gpus_per_node`` (valid or not, with the reason)."""
    model = catalog.models[base.config.model.strip().lower()]
    gpu = catalog.gpus[base.config.gpu.strip().lower()]
    out: list[ParallelPlan] = []
    strategies: tuple[Strategy, ...] = ("ulysses", "ring", "usp", "cfg", "cfg+usp", "pipefusion", "tp")
    for d in (d for d in range(2, gpus_per_node + 1) if gpus_per_node % d == 0):
        for s in strategies:
            if (s == "cfg" and d != 2) or (s == "cfg+usp" and d < 4) or (s == "usp" and d < 4):
                continue
            out.append(evaluate_parallel(catalog, model, gpu, base, s, d, gpus_per_node))
    return out
