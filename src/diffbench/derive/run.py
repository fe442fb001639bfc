"""The derivation, executed: ① account … ⑧ signals on the pipeline the team will serve.

Order (docs/guides/derive.md): ① bench the starting deployment and put the ledger's prediction beside it
(calibrated on that bench); ② memory measures only when the measured peak does not fit, then the lossless
candidates measured against the current deployment, the fastest kept candidate applied and the rest measured
again on top of it until none is kept (the baseline is regenerated whenever the fingerprint changes);
③ lossy I and ④ lossy II options measured against the lossless deployment, gated, and the best set within
the budget chosen from the measurements and measured once more as one configuration; the final configuration
measured against the starting one; ⑤ p99 with queueing at the planned instance count from the measured
latency distribution, with the ledger's multi-GPU layouts (predicted, not measured) when one GPU misses the
SLO; ⑥ with a few-step model, ② and ③ redone on it; ⑦ capacity from measured GPU-seconds; ⑧ a bench of the
final configuration for the monitoring calibration and the probe references.

``derive.json`` is rewritten after every step. Ctrl-C or SIGTERM keeps every finished step: the partial
result is written (``partial``, ``interrupted``) and :class:`DeriveInterrupted` raised; a rerun finds every
finished comparison in the store (same deployment, workload and protocol) and does not measure it again.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from diffbench.core.jsonio import strict_json_value, write_json_atomic
from diffbench.derive.candidates import (
    Candidate,
    lossless_candidates,
    lossy_i_candidates,
    pipeline_class,
    skipped_by_user,
    unavailable,
)
from diffbench.derive.choose import (
    LossyOption,
    best_set,
    left_out_reason,
    lossless_decision,
    lossy_gate,
    quality_text,
    speed_text,
)
from diffbench.derive.measure import EngineFactory, Event, compare_cache, compare_configs
from diffbench.derive.models import (
    LOSSY_I_DB,
    STAGES,
    DeriveConfig,
    DeriveResult,
    Final,
    Measured,
    Sizing,
    StepRecord,
)
from diffbench.derive.predict import Ledger
from diffbench.engines.config import EngineConfig
from diffbench.engines.registry import create_engine
from diffbench.store.runs import RunStore

DERIVE_JSON = "derive.json"
GROUPS = {"fp8 linear": "numerics", "int8 linear": "numerics", "bfloat16": "numerics", "8-bit attention": "attention"}


def write_result(res: DeriveResult, path: Path) -> None:
    """``res`` as strict JSON (non-finite floats as strings, paths as text), atomically."""
    data = json.loads(json.dumps(res.model_dump(mode="python"), default=str))
    write_json_atomic(path, strict_json_value(data))


class DeriveInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during a derivation: ``result`` holds every finished step (written to disk)."""

    def __init__(self, result: DeriveResult) -> None:
        super().__init__("derive interrupted")
        self.result = result


def _quiet(_: str) -> None:
    return None


def deployment_of(e: EngineConfig) -> dict[str, object]:
    """The fields of a configuration derive may change (for the step records)."""
    keys = ("model", "dtype", "attention_backend", "compile", "cache", "vae_tiling", "offload", "quantization",
            "fuse_projections")
    return {k: getattr(e, k) for k in keys if hasattr(e, k)}


def _ledger_fields(e: EngineConfig) -> dict[str, object]:
    """The ledger options a configuration corresponds to (those the ledger models)."""
    out: dict[str, object] = {"compile": e.compile, "vae_tiling": e.vae_tiling}
    if e.offload != "none":
        out["offload"] = "model" if e.offload == "model" else "sequential"
    if getattr(e, "quantization", "none") == "fp8":
        out["precision"] = "fp8"
    if e.attention_backend == "_flash_3":
        out["attention"] = "fa3"
    elif e.attention_backend == "sage":
        out["attention"] = "sage8"
    return out


class _Derivation:
    def __init__(self, cfg: DeriveConfig, store: RunStore, factory: EngineFactory, event: Event,
                 result: DeriveResult) -> None:
        self.cfg, self.store, self.factory, self.event, self.res = cfg, store, factory, event, result
        self.ledger = Ledger(cfg)
        self.pipeline = pipeline_class(cfg.engine.model)

    # -- records ------------------------------------------------------------------------------
    def save(self) -> None:
        """Write derive.json (atomically) as it stands."""
        self.res.elapsed_s = time.time() - self.res.created_unix
        write_result(self.res, self.cfg.out / DERIVE_JSON)

    def record(self, stage: int, candidate: str, decision: str, reason: str, engine: EngineConfig,
               latency: float | None, measured: Measured | None = None, predicted: float | None = None,
               spent: float | None = None, note: str | None = None) -> StepRecord:
        rec = StepRecord(stage=stage, stage_name=STAGES[stage], candidate=candidate, decision=decision,  # type: ignore[arg-type]
                         reason=reason, measured=measured, predicted_speedup=predicted, prediction_note=note,
                         latency_s=latency, gpu_s=latency, psnr_spent_db=spent, deployment=deployment_of(engine))
        self.res.steps.append(rec)
        self.event(f"{'①②③④⑤⑥⑦⑧'[stage - 1]} {candidate}: {decision} — {reason}")
        self.save()
        return rec

    # -- ① account ----------------------------------------------------------------------------
    def bench(self, engine: EngineConfig, path: Path, runs: int, save_outputs: Path | None = None,
              steps: int | None = None) -> Any:
        """A bench of ``engine`` at the derivation's shape (its JSON at ``path``); returns the BenchResult."""
        from diffbench.bench.protocol import BenchConfig
        from diffbench.bench.session import BenchOptions, Shape, run_session

        c = self.cfg
        opts = BenchOptions(
            engine=engine, shapes=[Shape(height=c.height, width=c.width, frames=c.frames)], steps=steps or c.steps,
            guidance=c.guidance, prompts_file=c.prompts_file, num_prompts=c.num_prompts or 4, seeds=c.seeds,
            protocol=BenchConfig(warmup=c.warmup, warmup_auto=True, max_warmup=c.max_warmup, runs=runs),
            json_path=path, save_outputs=save_outputs,
        )
        self.event(f"bench {path.name}")
        return run_session(opts, self.factory(engine))

    def account(self) -> tuple[EngineConfig, float, list[float]]:
        """① bench the start; the ledger's prediction beside it; memory measures when it does not fit."""
        cfg, engine = self.cfg, self.cfg.engine
        bench = self.bench(engine, cfg.out / "bench-start.json", runs=max(10, cfg.runs or 10))
        shape = bench.shapes[0]
        failed = shape.error
        if failed:
            self.record(1, "account", "info", f"the start configuration fails: {failed}", engine, None)
            engine, shape = self.memory(engine, failed)
        lat = shape.latency_s.p50 if shape.latency_s else float("nan")
        pred = self.ledger.account(**_ledger_fields(engine))
        calibrated = self.ledger.calibrate(cfg.out / "bench-start.json")
        step_ms = shape.step_s.median * 1e3 if shape.step_s else None
        measured = f"measured p50 {lat:.3f} s" + (f", {step_ms:.2f} ms per step" if step_ms else "")
        if pred is None:
            self.record(1, "account", "info", f"{measured}; no ledger prediction: {self.ledger.reason}", engine, lat)
        else:
            after = self.ledger.account(**_ledger_fields(engine))
            text = (f"{measured}; ledger predicts {pred.total_time_s:.3f} s on {pred.gpu_name} "
                    f"({'fits' if pred.fits else 'does not fit'} one GPU, peak {pred.peak_memory_bytes / 2**30:.1f} "
                    f"GiB); calibrated on this bench: {calibrated}"
                    + (f" → {after.total_time_s:.3f} s" if after is not None else ""))
            self.record(1, "account", "predicted", text, engine, lat, predicted=None)
        if not failed:
            peak = shape.memory.peak_allocated_bytes if shape.memory else None
            self.record(2, "memory measures", "skipped", f"not needed: the start configuration runs "
                        f"(peak {peak / 2**20:.0f} MiB measured)" if peak else "not needed: the start "
                        "configuration runs", engine, lat)
        return engine, lat, list(shape.samples_s)

    def memory(self, engine: EngineConfig, error: str) -> tuple[EngineConfig, Any]:
        """② memory: VAE tiling, then model offload (CUDA), until the start configuration runs."""
        tries: list[tuple[str, dict[str, object]]] = [("VAE tiling", {"vae_tiling": True})]
        if engine.device.startswith("cuda"):
            tries.append(("VAE tiling + model offload", {"vae_tiling": True, "offload": "model"}))
        for name, update in tries:
            trial = engine.model_copy(update=update)
            bench = self.bench(trial, self.cfg.out / "bench-start.json", runs=max(10, self.cfg.runs or 10))
            shape = bench.shapes[0]
            if not shape.error:
                self.record(2, name, "kept", f"the start configuration failed ({error}); with {name} it runs",
                            trial, shape.latency_s.p50 if shape.latency_s else None)
                return trial, shape
            self.record(2, name, "rejected", f"still fails: {shape.error}", trial, None)
        from diffbench.errors import DeviceOutOfMemory

        raise DeviceOutOfMemory(f"{engine.model} does not run at {self.cfg.width}x{self.cfg.height} on "
                                f"{engine.device} even with {tries[-1][0]}: {error}")

    # -- ② lossless ---------------------------------------------------------------------------
    def _available(self, cands: list[Candidate], engine: EngineConfig, stage: int, lat: float
                   ) -> list[Candidate]:
        out = []
        for c in cands:
            why = "--skip" if skipped_by_user(c, self.cfg.skip) else unavailable(c, engine, self.pipeline)
            if why is not None:
                self.record(stage, c.name, "skipped", "skipped by --skip" if why == "--skip" else why, engine, lat)
            else:
                out.append(c)
        return out

    def predicted(self, engine: EngineConfig, c: Candidate) -> float | None:
        return self.ledger.speedup(_ledger_fields(engine), c.ledger)

    def lossless(self, engine: EngineConfig, lat: float, stage: int = 2, steps: int | None = None,
                 ) -> tuple[EngineConfig, float, list[Candidate], list[float]]:
        """② the lossless candidates; returns the lossless deployment, its latency, the reclassified
        candidates and the latency samples of its last measurement (empty: none kept)."""
        todo = self._available(lossless_candidates(engine, self.cfg.attention_backends), engine, stage, lat)
        reclassified: list[Candidate] = []
        samples: list[float] = []
        while todo:
            configs = {c.name: c.apply(engine) for c in todo}
            ms, _ = compare_configs(self.cfg, self.store, engine, configs, self.factory, self.event, steps)
            kept: list[tuple[Candidate, Measured]] = []
            for c in todo:
                m = ms[c.name]
                decision, why = lossless_decision(m)
                if decision == "reclassified":
                    reclassified.append(c)
                elif decision == "kept":
                    kept.append((c, m))
                    continue  # recorded below: only the fastest is applied in this round
                self.record(stage, c.name, decision, why, engine, lat, m, self.predicted(engine, c))
            if not kept:
                break
            kept.sort(key=lambda cm: cm[1].speedup, reverse=True)
            best, m = kept[0]
            pred = self.predicted(engine, best)
            engine, lat, samples = best.apply(engine), m.latency_s, m.samples_s
            self.record(stage, best.name, "kept", lossless_decision(m)[1], engine, lat, m, pred)
            todo = [c for c, _ in kept[1:]]  # measured again on top of the kept one (a new baseline)
            for c in todo:
                self.event(f"{c.name}: measured again on top of {best.name}")
        return engine, lat, reclassified, samples

    # -- ③ lossy I, ④ lossy II ------------------------------------------------------------------
    def lossy(self, engine: EngineConfig, lat: float, extra: list[Candidate], stage_i: int = 3,
              cache: bool = True, steps: int | None = None) -> tuple[EngineConfig, float, float | None, list[float]]:
        """③ and ④; returns the deployment with the chosen lossy set, its latency, its combined PSNR p10
        against the lossless deployment (None: lossless) and the latency samples of its measurement."""
        cfg = self.cfg
        options: list[LossyOption] = []
        cands = self._available(lossy_i_candidates(engine), engine, stage_i, lat)
        cands += [Candidate(c.name, 3, c.update, c.ledger) for c in extra]
        by_name: dict[str, Candidate] = {}
        if cands:
            ms, _ = compare_configs(cfg, self.store, engine, {c.name: c.apply(engine) for c in cands}, self.factory,
                                    self.event, steps)
            for c in cands:
                m = ms[c.name]
                ok, why = lossy_gate(m, LOSSY_I_DB, 3)
                if ok:
                    options.append(LossyOption(c.name, GROUPS.get(c.name, c.name), m))
                    by_name[c.name] = c
                else:
                    self.record(stage_i, c.name, "rejected", why, engine, lat, m, self.predicted(engine, c))
        stage_ii = stage_i + 1 if stage_i == 3 else stage_i
        if not cache:
            self.record(stage_ii, "step cache", "skipped", "a few-step model: step caches lose their effect with "
                        "few steps (the cache reuses work between neighbouring steps)", engine, lat)
        elif "step" in cfg.skip or "cache" in cfg.skip:
            self.record(stage_ii, "step cache", "skipped", "skipped by --skip", engine, lat)
        elif engine.cache:
            self.record(stage_ii, "step cache", "skipped", f"the deployment already has a cache ({engine.cache})",
                        engine, lat)
        else:
            from diffbench.errors import UsageError

            try:
                ms, _ = compare_cache(cfg, self.store, engine, self.factory, self.event)
            except UsageError as exc:  # a denoiser without enable_cache (UNets), MagCache off FLUX
                self.record(stage_ii, f"step cache {cfg.cache_axis}", "skipped", str(exc), engine, lat)
                ms = {}
            for v, m in ms.items():
                name = f"{cfg.cache_axis}={v}"
                ok, why = lossy_gate(m, cfg.budget_db, 4)
                if ok:
                    options.append(LossyOption(name, "step cache", m))
                    by_name[name] = Candidate(name, 4, {"cache": name})  # the ledger cannot predict a hit rate
                else:
                    self.record(stage_ii, name, "rejected", why, engine, lat, m)
            if self.cfg.frames:
                self.record(stage_ii, "sparse attention", "skipped", "no sparse-attention backend in the "
                            "diffusers engine", engine, lat)
        chosen = best_set(options, cfg.budget_db)
        for o in options:
            st = 3 if o.group != "step cache" else stage_ii
            if o.name in chosen.names:
                continue
            self.record(st, o.name, "not combined", left_out_reason(o, chosen, options, cfg.budget_db), engine,
                        lat, o.measured, self.predicted(engine, by_name[o.name]))
        if not chosen.names:
            return engine, lat, None, []
        picked = [o for o in options if o.name in chosen.names]
        if len(picked) == 1:
            o = picked[0]
            new = by_name[o.name].apply(engine)
            self.review_pair(o.measured)
            self.record(3 if o.group != "step cache" else stage_ii, o.name, "kept",
                        f"{lossy_gate(o.measured, LOSSY_I_DB if o.group != 'step cache' else cfg.budget_db, 3 if o.group != 'step cache' else 4)[1]}; "
                        f"the best set within the budget ({cfg.budget_db:g} dB)", new, o.measured.latency_s,
                        o.measured, self.predicted(engine, by_name[o.name]), o.measured.psnr_p10)
            return new, o.measured.latency_s, o.measured.psnr_p10, o.measured.samples_s
        # several options: measure them together against the lossless deployment
        new = engine
        for o in picked:
            new = by_name[o.name].apply(new)
        label = " + ".join(chosen.names)
        ms2, _ = compare_configs(cfg, self.store, engine, {label: new}, self.factory, self.event, steps)
        m = ms2[label]
        for o in picked:
            self.record(3 if o.group != "step cache" else stage_ii, o.name, "kept", "in the best set within the "
                        f"budget: {label} (predicted from single measurements {chosen.speedup:.3f}x, combined PSNR "
                        f"p10 {chosen.psnr_db:.1f} dB)", new, m.latency_s, o.measured,
                        self.predicted(engine, by_name[o.name]), chosen.psnr_db)
        if m.measurably_faster and m.psnr_p10 >= cfg.budget_db:
            self.review_pair(m)
            self.record(stage_ii, label, "kept", f"measured together: {speed_text(m)}, {quality_text(m)} within the "
                        f"budget ({cfg.budget_db:g} dB)", new, m.latency_s, m, chosen.speedup, m.psnr_p10,
                        note="product of the single measurements")
            return new, m.latency_s, m.psnr_p10, m.samples_s
        # the combination does not hold up: the best single option instead (already measured alone)
        single = max((o for o in picked), key=lambda o: o.measured.speedup)
        fallback = by_name[single.name].apply(engine)
        self.record(stage_ii, label, "rejected", f"measured together: {speed_text(m)}, {quality_text(m)}; "
                    f"{'not measurably faster' if not m.measurably_faster else 'below the budget'}: falling back "
                    f"to {single.name} alone", fallback, single.measured.latency_s, m, chosen.speedup,
                    single.measured.psnr_p10)
        return fallback, single.measured.latency_s, single.measured.psnr_p10, single.measured.samples_s

    def review_pair(self, m: Measured) -> None:
        """The outputs of the chosen lossy point and of its baseline, for the blind A/B review page."""
        base, cand = self.store.get_run(m.baseline_run_id), self.store.get_run(m.run_id)
        if base.outputs_dir and cand.outputs_dir:
            self.res.outputs["review_baseline_outputs"] = base.outputs_dir
            self.res.outputs["review_candidate_outputs"] = cand.outputs_dir

    # -- the final configuration, ⑤-⑧ -----------------------------------------------------------
    def confirm(self, start: EngineConfig, final: EngineConfig, spent: float | None) -> Final:
        """The final configuration against the start, interleaved in one session."""
        if final == start:
            return Final(engine=final, message="nothing was measurably faster: the final configuration is the "
                         "starting one", psnr_spent_db=None)
        ms, res = compare_configs(self.cfg, self.store, start, {"derived": final}, self.factory, self.event)
        m = ms["derived"]
        run = self.store.get_run(m.run_id)
        msg = (f"measurably faster than the start: {speed_text(m)}, {quality_text(m)}" if m.measurably_faster else
               f"not measurably faster than the start ({m.verdict}: {speed_text(m)}); the steps' own gains did "
               "not add up in one session")
        return Final(engine=final, fingerprint=run.fingerprint, measured=m, psnr_spent_db=spent, message=msg)

    def sizing(self, engine: EngineConfig, lat: float, samples: list[float], stage: int = 5) -> bool:
        """⑤ the p99 with queueing at the planned instance count from the measured distribution."""
        import numpy as np

        from diffbench.plan.sizing import size_layout

        cfg = self.cfg
        arr = np.asarray(samples, dtype=float) if samples else None
        s = size_layout("1 device", cfg.qps, lat, 1, cfg.slo_p99_s, cfg.headroom, cfg.gpus_per_node, samples=arr)
        row = Sizing(layout=s.label, gpus_per_instance=1, latency_s=lat, p99_s=s.p99_s, meets_slo=s.meets_slo,
                     instances=s.instances, total_gpus=s.total_gpus, nodes=s.nodes, gpu_s=lat, spread=s.spread)
        self.res.sizing.append(row)
        verdict = "meets" if s.meets_slo else "misses"
        self.record(stage, "p99 with queueing", "info", f"{verdict} the SLO: p99 {s.p99_s:.3f} s vs {cfg.slo_p99_s:g} s "
                    f"at {s.instances} instance(s) for {cfg.qps:g} QPS (latency {lat:.3f} s, {s.spread})", engine, lat)
        return s.meets_slo

    def layouts(self, engine: EngineConfig, lat: float, samples: list[float]) -> None:
        """⑤ missed: the ledger's multi-GPU layouts, predicted (the diffusers engine runs one device)."""
        from diffbench.errors import DiffbenchError
        from diffbench.plan.derive import plan
        from diffbench.plan.models import PlanConfig

        cfg = self.cfg
        if self.ledger.catalog is None:
            self.record(5, "multi-GPU layouts", "skipped", f"no ledger for them: {self.ledger.reason}", engine, lat)
            return
        try:
            import numpy as np

            p = plan(self.ledger.catalog, PlanConfig(
                model=self.ledger.model, width=cfg.width, height=cfg.height, frames=cfg.frames, steps=cfg.steps,
                gpu=cfg.gpu or "", gpus_per_node=cfg.gpus_per_node, slo_p99_s=cfg.slo_p99_s, qps=cfg.qps,
                quality_budget_db=cfg.budget_db, headroom=cfg.headroom),
                service_samples=np.asarray(samples, dtype=float) if samples else None)
        except DiffbenchError as exc:
            self.record(5, "multi-GPU layouts", "skipped", f"the planner cannot lay this out: {exc}", engine, lat)
            return
        for row in p.layouts:
            lt = row.sizing
            self.res.sizing.append(Sizing(layout=row.label, gpus_per_instance=lt.gpus_per_instance,
                                          latency_s=lt.latency_s, p99_s=lt.p99_s, meets_slo=lt.meets_slo,
                                          instances=lt.instances, total_gpus=lt.total_gpus, nodes=lt.nodes,
                                          gpu_s=lt.latency_s * lt.gpus_per_instance, spread=lt.spread,
                                          predicted=True))
        best = [r for r in p.layouts if r.sizing.meets_slo]
        text = (f"predicted, not measured (the diffusers engine runs one device): {best[0].label} meets the SLO at "
                f"p99 {best[0].sizing.p99_s:.3f} s with {best[0].sizing.total_gpus} GPUs" if best else
                "predicted, not measured: no layout of the ledger meets the SLO")
        self.record(5, "multi-GPU layouts", "predicted", text, engine, lat)

    def capacity(self, engine: EngineConfig, lat: float) -> None:
        """⑦ GPUs for the QPS target from measured GPU-seconds."""
        from diffbench.plan.capacity import capacity

        cfg = self.cfg
        cap = capacity(cfg.qps, lat, cfg.headroom, 1, cfg.gpus_per_node)
        q = self.res.sizing[0] if self.res.sizing else None
        extra = f"; with queueing for the p99: {q.instances} instance(s)" if q is not None else ""
        self.record(7, "capacity", "info", f"{cfg.qps:g} QPS × {lat:.3f} GPU·s × headroom {cfg.headroom:g} → "
                    f"{cap.total_gpus} device(s), {cap.nodes} node(s) of {cfg.gpus_per_node}{extra}", engine, lat)

    def signals(self, engine: EngineConfig, lat: float, steps: int | None) -> None:
        """⑧ bench the final configuration → calibration, probe references; the serve command."""
        from diffbench.derive.emit import serve_command, write_calibration

        cfg = self.cfg
        refs = cfg.out / "references"
        if refs.exists():
            import shutil

            shutil.rmtree(refs)  # the references are the final configuration's: rewritten every run
        self.bench(engine, cfg.out / "bench-final.json", runs=max(10, cfg.runs or 10), save_outputs=refs,
                   steps=steps)
        calib = write_calibration(cfg, cfg.out / "bench-final.json", cfg.out / "calibration.json")
        self.res.outputs.update({"bench_start": "bench-start.json", "bench_final": "bench-final.json",
                                 "calibration": "calibration.json", "references": "references"})
        cmd = serve_command(engine, cfg, steps or cfg.steps, cfg.out / "calibration.json")
        self.res.serve_command = cmd
        (cfg.out / "serve.sh").write_text("#!/bin/sh\n# the configuration chosen by diffbench derive; extra arguments "
                                          "(e.g. --port 8000) are passed on\nexec " + cmd + ' "$@"\n')
        (cfg.out / "serve-config.json").write_text(json.dumps(engine.model_dump(mode="json"), indent=2) + "\n")
        self.res.outputs.update({"serve_command": "serve.sh", "serve_config": "serve-config.json"})
        self.record(8, "signals", "info", f"calibration ({calib}), probe references (the final configuration's "
                    f"fixed-seed outputs) and the serve command written", engine, lat)

    # -- the whole ----------------------------------------------------------------------------
    def run(self) -> None:
        cfg = self.cfg
        start, lat0, samples0 = self.account()
        engine, lat, reclassified, _ = self.lossless(start, lat0)
        engine, lat, spent, samples = self.lossy(engine, lat, reclassified)
        final = self.confirm(start, engine, spent)
        self.res.final = final
        self.record(4, "final configuration", "kept" if final.measured and final.measured.measurably_faster
                    else "info", final.message, engine, final.measured.latency_s if final.measured else lat0,
                    final.measured, spent=spent)
        if final.measured is not None:
            lat, samples = final.measured.latency_s, final.measured.samples_s
        else:
            lat, samples = lat0, samples0
        steps = None
        if not self.sizing(engine, lat, samples):
            self.layouts(engine, lat, samples)
            if cfg.few_step_model:
                engine, lat, samples, steps = self.few_step(engine, lat)
        elif cfg.few_step_model:
            self.record(6, "few-step model", "skipped", "not needed: one device meets the SLO (a few-step model "
                        "changes style and diversity)", engine, lat)
        else:
            self.record(6, "few-step model", "skipped", "not needed: one device meets the SLO", engine, lat)
        self.capacity(engine, lat)
        self.signals(engine, lat, steps)

    def few_step(self, engine: EngineConfig, lat: float) -> tuple[EngineConfig, float, list[float], int]:
        """⑥ ② and ③ redone on the few-step model, the step cache dropped."""
        cfg = self.cfg
        steps = cfg.few_step_steps or 4
        base = cfg.engine.model_copy(update={"model": cfg.few_step_model, "cache": None})
        self.pipeline = pipeline_class(base.model)
        bench = self.bench(base, cfg.out / "bench-few-step.json", runs=max(10, cfg.runs or 10), steps=steps)
        shape = bench.shapes[0]
        flat = shape.latency_s.p50 if shape.latency_s else float("nan")
        self.record(6, f"few-step model {cfg.few_step_model} ({steps} steps)", "info", f"measured p50 {flat:.3f} s "
                    "(changes style and diversity: judge it with a blind A/B against the current deployment)",
                    base, flat)
        fe, flat, reclassified, _ = self.lossless(base, flat, stage=6, steps=steps)
        fe, flat, _, samples = self.lossy(fe, flat, reclassified, stage_i=6, cache=False, steps=steps)
        if not samples:
            samples = list(shape.samples_s)
        self.sizing(fe, flat, samples, stage=6)
        return fe, flat, samples, steps


def run_derive(cfg: DeriveConfig, store: RunStore, *, factory: EngineFactory = create_engine,
               event: Event | None = None) -> DeriveResult:
    """Run (or resume) the derivation; ``derive.json`` in ``cfg.out`` is rewritten after every step.

    Raises:
        DeriveInterrupted: Ctrl-C or SIGTERM; its ``result`` (also written) holds every finished step.
        UsageError, ModelError, GenerationError, StoreError: as the sweep and bench raise them (the partial
            ``derive.json`` is written first).
    """
    cfg.out.mkdir(parents=True, exist_ok=True)
    res = DeriveResult(created_unix=time.time(), config=cfg, store=str(store.path))
    d = _Derivation(cfg, store, factory, event or _quiet, res)
    try:
        d.run()
    except KeyboardInterrupt:
        res.interrupted = True
        d.save()
        raise DeriveInterrupted(res) from None
    except BaseException:
        d.save()
        raise
    res.partial = False
    d.save()
    return res
