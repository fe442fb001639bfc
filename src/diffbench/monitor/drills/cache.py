"""Drill P1 (docs/guides/after-launch.md): the step-cache threshold pushed outside the quality budget.

1. **Budget** (in this process, the same tiny pipeline): the probe request (prompt, seed, size, steps)
   without a cache and with each FirstBlockCache threshold of :data:`GRID`; PSNR of each against the
   uncached output. The served threshold T0 is the largest with ``budget ≤ PSNR < inf`` (inside the
   budget, and some steps skipped, so the hit-ratio baseline is not 0); the injected one T1 is the largest
   with ``PSNR < budget − 3 dB`` (outside the budget by the alert's margin).
2. **Serve** ``--cache first-block=T0 --enable-faults``; the probe records its references, then replays
   them every 2 s (threshold = the budget); user traffic at the probe's shape; a local Prometheus
   evaluates the real rule file (shortened ``for``).
3. **Calibrate** under that load: step, stage and hit-ratio means of the service's own ``/metrics`` over
   :data:`CALIBRATION_WINDOW_S` of traffic, written as a calibration file with the service's fingerprint
   and loaded in place (``POST /admin/faults {"calibration": FILE}``), so the baselines are measured in
   the conditions the alerts then compare against; every alert stays silent for longer than its ``for``.
4. **Inject** ``POST /admin/faults {"cache": "first-block=T1"}`` (the fingerprint does not change).
5. **Expect** ``DiffusionCacheHitRatioDrift`` and ``DiffusionQualityPSNRDrop`` firing; the performance
   alerts (step regression, queue wait, peak memory) never pending or firing; after restoring T0 the
   quality alert resolves (the drift alert resolves later, once its 30 s window holds only restored
   requests; the drill does not wait for it).
"""

from __future__ import annotations

import math
import time
from typing import Any

from diffbench.monitor.drills.common import (
    PROBE_JOB,
    SERVICE_JOB,
    Traffic,
    baselines_between,
    prometheus_for,
    write_calibration,
)
from diffbench.monitor.drills.core import (
    AlertTiming,
    AlertWatcher,
    DrillOptions,
    DrillReport,
    rule_for_s,
    start_drill,
)
from diffbench.monitor.drills.harness import (
    DrillError,
    record_probe_references,
    start_probe,
    start_serve,
    wait_until,
)
from diffbench.monitor.promserver import Target

GRID = (0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 1.0)
PROMPT = "a lighthouse at dusk"
SEED = 7
CALIBRATION_WINDOW_S = 10.0
EXPECTED = ["DiffusionCacheHitRatioDrift", "DiffusionQualityPSNRDrop"]
SILENT = ["DiffusionDenoiseStepRegression", "DiffusionQueueWaitOverHalfSLO", "DiffusionGPUPeakMemoryHigh"]
QUERIES = {
    "hit_ratio": "instance_model_shape:diffusion_cache_hits_per_lookups:ratio_rate15m",
    "hit_ratio_baseline": "diffusion_cache_hit_ratio_baseline",
    "psnr": "diffusion_quality_psnr_decibels",
    "psnr_threshold": "diffusion_quality_psnr_threshold_decibels",
    "step_mean": "instance_model_shape:diffusion_denoise_step_duration_seconds:mean5m",
    "step_baseline": "diffusion_denoise_step_baseline_seconds",
    "queue_estimated_wait": "diffusion_queue_estimated_wait_seconds",
}


def budget_grid(size: str, steps: int, *, grid: tuple[float, ...] = GRID) -> dict[float, float]:
    """PSNR (dB, vs the uncached output) of the probe request at each FirstBlockCache threshold of
    ``grid``, with tiny-flux on the CPU in this process."""
    from diffbench.core.psnr import psnr_uint8
    from diffbench.engines.base import GenerationRequest
    from diffbench.engines.knobs import build_cache_config
    from diffbench.engines.registry import EngineConfig, create_engine

    w, h = (int(x) for x in size.split("x"))
    eng = create_engine(EngineConfig(engine="diffusers", model="tiny-flux", device="cpu", threads=1))
    eng.start()
    try:
        req = GenerationRequest(prompt=PROMPT, width=w, height=h, steps=steps, seed=SEED)
        ref = eng.generate(req).images
        den = eng.pipe.transformer
        out = {}
        for t in grid:
            den.enable_cache(build_cache_config("first-block", str(t), eng.pipe, steps))
            out[t] = psnr_uint8(ref, eng.generate(req).images)
            den.disable_cache()
        return out
    finally:
        eng.stop()


def pick_thresholds(psnr: dict[float, float], budget_db: float) -> tuple[float, float]:
    """(T0, T1): the largest threshold with ``budget ≤ PSNR < inf`` and the largest with
    ``PSNR < budget − 3``.

    Raises:
        DrillError: the grid has no threshold inside the budget that skips a step, or none outside it.
    """
    inside = [t for t, p in psnr.items() if budget_db <= p < math.inf]
    outside = [t for t, p in psnr.items() if p < budget_db - 3]
    if not inside or not outside:
        raise DrillError(f"no first-block threshold in {sorted(psnr)} is inside the {budget_db:g} dB budget with "
                         f"skipped steps, or none is 3 dB outside it (PSNR by threshold: {psnr}); change "
                         "--budget-db")
    t0 = max(inside)
    t1 = max(t for t in outside if t > t0) if any(t > t0 for t in outside) else max(outside)
    return t0, t1


def run(opts: DrillOptions, report: DrillReport) -> None:
    work, rec, rules = start_drill(opts, report, "cache", EXPECTED, SILENT)
    size, steps = opts.size, opts.steps

    psnr = budget_grid(size, steps)
    t0, t1 = pick_thresholds(psnr, opts.budget_db)
    report.values.update(budget_db=opts.budget_db, psnr_by_threshold={str(k): v for k, v in psnr.items()},
                         served_threshold=t0, injected_threshold=t1)
    report.event("setup", f"budget {opts.budget_db:g} dB vs no cache: serve first-block={t0:g} "
                          f"({psnr[t0]:.1f} dB), inject first-block={t1:g} ({psnr[t1]:.1f} dB)")

    svc = start_serve(work, ["--engine", "diffusers", "--model", "tiny-flux", "--device", "cpu",
                             "--default-size", size, "--default-steps", str(steps), "--shapes", size,
                             "--warmup", size, "--cache", f"first-block={t0:g}", "--slo", "30",
                             "--enable-faults"])
    probe = None
    try:
        card_before = svc.card()
        refs = work / "refs"
        record_probe_references(work, svc.url, refs, size=size, steps=steps, seed=SEED, prompt=PROMPT)
        probe = start_probe(work, svc.url, refs, interval_s=2.0, psnr_threshold_db=opts.budget_db)
        targets = [Target(SERVICE_JOB, svc.address), Target(PROBE_JOB, probe.address)]
        with prometheus_for(opts, rules, targets) as prom, \
                Traffic(lambda: svc.generate(size, steps=steps, seed=SEED), gap_s=0.3), \
                AlertWatcher(prom, rules, EXPECTED) as watch:
            prom.wait_scraped()
            wait_until(lambda: prom.query(QUERIES["hit_ratio"]) and prom.query(QUERIES["psnr"]), 60,
                       "the hit ratio and the probe PSNR in Prometheus")
            # Calibrate under the drill's own load: the service's means over a window of its traffic.
            first = svc.metrics()
            time.sleep(CALIBRATION_WINDOW_S)
            base = baselines_between(first, svc.metrics(), size)
            if not base["cache_hit_ratio"]:
                raise DrillError(f"the service reported no cache hits at first-block={t0:g} ({base}); the "
                                 "hit-ratio baseline cannot be 0")
            cal_path = work / "calibration.json"
            write_calibration(cal_path, svc, size=size, steps=steps, base=base, slo_s=30.0,
                              psnr_threshold_db=opts.budget_db)
            svc.faults(calibration=str(cal_path))
            report.values["calibration"] = base
            report.event("setup", f"calibrated {size} over {CALIBRATION_WINDOW_S:g} s of traffic: step "
                                  f"{base['step_s'] * 1e3:.2f} ms, hit ratio {base['cache_hit_ratio']:.3f} "
                                  f"({base['requests']:g} requests); probe threshold {opts.budget_db:g} dB")
            time.sleep(opts.max_for_s + 3 * opts.scrape_s)  # healthy for longer than any (shortened) `for`
            quiet = [a for a in EXPECTED + SILENT if watch.seen(a)]
            report.check("silent before injection", not quiet, f"active before injection: {quiet or 'none'}")
            rec.scrape("before", svc.metrics())
            rec.scrape("before_probe", probe.metrics())
            rec.query("before", prom, QUERIES)
            # Counters through Prometheus, not by scraping the service: a scrape resets the memory peaks
            # (reset on read), which would hide a DiffusionGPUPeakMemoryHigh this drill must prove silent.
            sel = f'{{job="{SERVICE_JOB}", shape="{size}"}}'
            lk_q, ht_q = f"sum(diffusion_cache_lookups_total{sel})", f"sum(diffusion_cache_hits_total{sel})"
            lk0, ht0 = prom.query_value(lk_q) or 0.0, prom.query_value(ht_q) or 0.0

            report.mark_inject(f'POST /admin/faults {{"cache": "first-block={t1:g}"}}')
            inject_t = time.monotonic()
            svc.faults(cache=f"first-block={t1:g}")
            base_ratio = float(base["cache_hit_ratio"])

            def ratio_moved() -> bool:
                lk = (prom.query_value(lk_q) or 0.0) - lk0
                ht = (prom.query_value(ht_q) or 0.0) - ht0
                moved = lk > 0 and abs(ht / lk - base_ratio) / base_ratio > 0.3
                if moved:
                    report.values["hit_ratio_after"] = ht / lk
                return moved

            def psnr_moved() -> bool:
                v = prom.query_value(f'min(diffusion_quality_psnr_decibels{{job="{PROBE_JOB}"}})')
                if v is not None and v < opts.budget_db - 3:
                    report.values["psnr_after_db"] = v
                    return True
                return False

            wait_until(ratio_moved, opts.fire_timeout_s, "the hit ratio to move", poll_s=0.25)
            report.event("metric", f"cache hit ratio {base_ratio:.3f} -> {report.values['hit_ratio_after']:.3f} "
                                   "(requests since the injection, counters in Prometheus)")
            wait_until(psnr_moved, opts.fire_timeout_s, "the probe PSNR to fall", poll_s=0.25)
            report.event("metric", f"probe PSNR {report.values['psnr_after_db']:.2f} dB < threshold "
                                   f"{opts.budget_db:g} - 3 dB (probe gauge in Prometheus)")
            watch.wait_fired(EXPECTED, opts.fire_timeout_s + opts.max_for_s)
            finish_alerts(report, watch, rules, EXPECTED, inject_t, opts)
            time.sleep(opts.scrape_s * 2)
            rec.scrape("after", svc.metrics())
            rec.scrape("after_probe", probe.metrics())
            rec.query("after", prom, QUERIES)
            silent_check(report, watch, SILENT)
            report.check("fingerprint unchanged", svc.card() == card_before,
                         "GET /v1/models is the same before and after the injection (a silent config push)")
            # Restore: the probe's next replay matches its reference again and the quality alert resolves.
            # (The hit-ratio drift resolves once the 30 s ratio window holds only restored requests; not awaited.)
            svc.faults(cache=f"first-block={t0:g}")
            report.event("restore", f'POST /admin/faults {{"cache": "first-block={t0:g}"}}')
            restored_t = time.monotonic()
            try:
                wait_until(lambda: "DiffusionQualityPSNRDrop" not in prom.firing(), opts.fire_timeout_s,
                           "DiffusionQualityPSNRDrop to resolve")
                ok = True
            except DrillError:
                ok = False
            report.check("restoring the threshold clears the quality alert", ok,
                         f"DiffusionQualityPSNRDrop {'resolved' if ok else 'still firing'} "
                         f"{time.monotonic() - restored_t:.1f} s after the restore")
    finally:
        if probe is not None:
            probe.proc.stop()
        svc.proc.stop()


def finish_alerts(report: DrillReport, watch: AlertWatcher, rules: dict[str, Any], names: list[str],
                  inject_t: float, opts: DrillOptions) -> None:
    """Fill ``report.alerts`` for ``names`` and check that each fired within its bound."""
    for name in names:
        for_s = rule_for_s(rules, name)
        timing = AlertTiming(name, for_s=for_s, bound_s=for_s + 2 * opts.scrape_s)
        cond, fired = watch.first_condition.get(name), watch.fired_at(name)
        timing.condition_s = None if cond is None else max(0.0, cond - inject_t)
        timing.fired_s = None if fired is None else fired - inject_t
        report.alerts[name] = timing
        if fired is None:
            report.check(f"{name} fired", False, f"not firing {opts.fire_timeout_s:g} s after the injection")
            continue
        report.event("alert", f"{name} firing {timing.fired_s:.1f} s after the injection "
                              f"(condition held at {timing.condition_s if cond is not None else float('nan'):.1f} s)")
        report.check(f"{name} fired in time", timing.within_bound,
                     f"fired {timing.latency_s if timing.latency_s is not None else float('nan'):.2f} s after its "
                     f"condition held; bound for {for_s:g} s + 2 x {opts.scrape_s:g} s scrape = {timing.bound_s:g} s")


def silent_check(report: DrillReport, watch: AlertWatcher, names: list[str]) -> None:
    """Check that none of ``names`` was ever pending or firing during the drill."""
    active = {n: watch.seen(n) for n in names if watch.seen(n)}
    report.seen_alerts = {n: s for (n, s), _ in sorted(watch.first_state.items(), key=lambda kv: kv[1])}
    report.check("performance alerts silent", not active,
                 f"{', '.join(names)}: {active or 'never pending or firing'}")
