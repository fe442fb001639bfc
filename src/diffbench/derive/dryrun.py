"""``derive --dry-run``: the ordered plan with the ledger's predictions and what would be measured, in
seconds, without loading the model (no torch import: candidates are checked from the device string, the
PATH and the installed packages; a CUDA device's compute capability is checked when the run starts)."""

from __future__ import annotations

from diffbench.derive.candidates import (
    Candidate,
    lossless_candidates,
    lossy_i_candidates,
    pipeline_class,
    skipped_by_user,
    unavailable,
)
from diffbench.derive.models import LOSSLESS_DB, LOSSY_I_DB, STAGES, DeriveConfig
from diffbench.derive.predict import Ledger


def _line(stage: int, text: str) -> str:
    return f"{'①②③④⑤⑥⑦⑧'[stage - 1]} {STAGES[stage]:<15} {text}"


def dry_run(cfg: DeriveConfig) -> list[str]:
    """The ordered plan as lines of text."""
    ledger = Ledger(cfg)
    pipe = pipeline_class(cfg.engine.model)
    e = cfg.engine
    n_img = (cfg.num_prompts or 4) * len(cfg.seeds) if not cfg.prompts_file else None
    imgs = f"{n_img} fixed-seed images" if n_img else f"the prompts of {cfg.prompts_file} × {len(cfg.seeds)} seed(s)"
    out = [f"derive {e.model} on {e.device} at {cfg.width}x{cfg.height}"
           + (f"x{cfg.frames}" if cfg.frames else "") + f", {cfg.steps} steps; SLO p99 {cfg.slo_p99_s:g} s at "
           f"{cfg.qps:g} QPS; budget PSNR p10 >= {cfg.budget_db:g} dB; baseline: {imgs} per comparison",
           "every comparison: the current deployment's baseline outputs, the quality noise floor, then each "
           "candidate warm until stable and timed in interleaved blocks (paired bootstrap CI beside the noise floor)"]
    base = ledger.account()
    out.append(_line(1, "bench the start configuration; " + (
        f"the ledger predicts {base.total_time_s:.3f} s on {base.gpu_name} ({'fits' if base.fits else 'does NOT fit'} "
        f"one GPU, peak {base.peak_memory_bytes / 2**30:.1f} GiB), calibrated on that bench" if base is not None
        else f"no ledger prediction: {ledger.reason}")))
    out.append(_line(2, "memory measures (VAE tiling, then model offload) only if the measured peak does not fit"))

    def cands(cs: list[Candidate], stage: int, gate: str) -> None:
        for c in cs:
            why = "skipped by --skip" if skipped_by_user(c, cfg.skip) else unavailable(c, e, pipe, probe_gpu=False)
            pred = ledger.speedup({}, c.ledger) if why is None else None
            what = f"skip: {why}" if why else f"measure against the current deployment; keep if {gate}"
            out.append(_line(stage, f"{c.name}: {what}" + (f" (ledger predicts {pred:.2f}x)" if pred else "")))

    cands(lossless_candidates(e, cfg.attention_backends), 2,
          f"measurably faster and lossless (identical or PSNR p10 >= {LOSSLESS_DB:g} dB), else reclassify as lossy")
    cands(lossy_i_candidates(e), 3, f"measurably faster and PSNR p10 > {LOSSY_I_DB:g} dB")
    if "step" in cfg.skip or "cache" in cfg.skip:
        out.append(_line(4, "step cache: skipped by --skip"))
    else:
        out.append(_line(4, f"step cache {cfg.cache_axis} at {', '.join(cfg.cache_values)}: measure against the "
                            f"lossless deployment; keep the best set of lossy options within {cfg.budget_db:g} dB "
                            "(combined as independent errors), measured once more together"))
    out.append(_line(4, "the final configuration measured against the start in one interleaved session"))
    out.append(_line(5, "p99 with queueing at the planned instance count from the measured latency distribution; "
                        "if missed, the ledger's multi-GPU layouts (predicted, not measured)"))
    out.append(_line(6, f"few-step model {cfg.few_step_model}: ② and ③ redone on it, no step cache (only if the "
                        "SLO is missed)" if cfg.few_step_model else "no --few-step-model: not considered"))
    out.append(_line(7, f"capacity: {cfg.qps:g} QPS × measured GPU·s × headroom {cfg.headroom:g}"))
    out.append(_line(8, "bench the final configuration: calibration.json, probe references, serve.sh"))
    return out
