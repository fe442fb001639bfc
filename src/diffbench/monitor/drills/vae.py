"""Drill P3 (docs/guides/after-launch.md): VAE tiling off at 2048² under a memory budget.

On a CPU there is no device memory to run out of, so the budget is injected: ``serve --memory-budget B``
makes the instrumentation raise :class:`~diffbench.errors.DeviceOutOfMemory` for a request whose measured
peak exceeds B, and exports B as ``diffusion_gpu_memory_total_bytes``.

1. **Measure** (``serve --vae-tiling``, no budget): one 2048² request (1 step) with VAE tiling on; its
   ``peak_memory_bytes`` P_on. The budget is :data:`BUDGET_FACTOR` × P_on, and the drill checks afterwards
   that it lay between the tiled and the untiled peak (the untiled one is measured by the injected request
   itself and exported before the OOM is raised), so one 2048² request less is spent (each takes tens of
   seconds on a CPU).
2. **Serve** ``--no-vae-tiling --memory-budget B``; a local Prometheus; a small request succeeds.
3. **Inject** the 2048² request.
4. **Expect** its outcome ``oom`` (HTTP 507 or 5xx with an out-of-memory message,
   ``diffusion_requests_total{outcome="oom"}`` +1), ``DiffusionGPUPeakMemoryHigh`` firing, ``/health``
   staying 200, and the next small request succeeding (the single-device contract, docs/reference/http-routes.md).
"""

from __future__ import annotations

import threading
import time

from diffbench.monitor.drills.cache import finish_alerts
from diffbench.monitor.drills.common import SERVICE_JOB, prometheus_for
from diffbench.monitor.drills.core import (
    AlertWatcher,
    DrillOptions,
    DrillReport,
    start_drill,
)
from diffbench.monitor.drills.harness import DrillError, start_serve, wait_until
from diffbench.monitor.promserver import Target

BIG = "2048x2048"
BUDGET_FACTOR = 2
EXPECTED = ["DiffusionGPUPeakMemoryHigh"]
QUERIES = {
    "peak": "max_over_time(diffusion_gpu_memory_peak_bytes[5m])",
    "total": "diffusion_gpu_memory_total_bytes",
    "oom": 'sum(diffusion_requests_total{outcome="oom"})',
    "stage_peak": "diffusion_stage_memory_peak_bytes",
}


def run(opts: DrillOptions, report: DrillReport) -> None:
    work, rec, rules = start_drill(opts, report, "vae", EXPECTED)
    small = opts.size
    common = ["--engine", "diffusers", "--model", "tiny-flux", "--device", "cpu", "--default-size", small,
              "--default-steps", str(opts.steps), "--shapes", f"{small},{BIG}"]

    svc = start_serve(work, [*common, "--vae-tiling"], name="serve-measure")
    try:
        tiled = svc.generate(BIG, steps=1, seed=1, timeout=900)
    finally:
        svc.proc.stop()
    if not tiled.ok or not tiled.peak_memory_bytes:
        raise DrillError(f"measuring the tiled {BIG} peak failed: HTTP {tiled.status} {tiled.error or tiled.body}")
    p_on = int(tiled.peak_memory_bytes)
    budget = BUDGET_FACTOR * p_on
    report.values.update(peak_tiled_bytes=p_on, latency_tiled_s=tiled.latency_s, memory_budget_bytes=budget)
    report.event("setup", f"{BIG} peak with VAE tiling: {p_on / 2**20:.0f} MiB -> --memory-budget {budget} "
                          f"({BUDGET_FACTOR} x, {budget / 2**20:.0f} MiB)")

    svc = start_serve(work, [*common, "--no-vae-tiling", "--memory-budget", str(budget)])
    try:
        with prometheus_for(opts, rules, [Target(SERVICE_JOB, svc.address)]) as prom, \
                AlertWatcher(prom, rules, EXPECTED) as watch:
            prom.wait_scraped()
            first = svc.generate(small, steps=opts.steps, seed=1)
            report.check(f"small request {small} ok before", first.ok, f"HTTP {first.status}")
            time.sleep(2 * opts.scrape_s + opts.max_for_s)
            report.check("silent before injection", not watch.seen(EXPECTED[0]),
                         f"{EXPECTED[0]}: {watch.seen(EXPECTED[0]) or 'not active'}")
            rec.scrape("before", svc.metrics())
            rec.query("before", prom, QUERIES)
            oom_before = prom.query_value(QUERIES["oom"]) or 0.0

            report.mark_inject(f"{BIG}, VAE tiling off, 1 step, budget {budget / 2**20:.0f} MiB")
            inject_t = time.monotonic()
            health: list[int] = []
            stop = threading.Event()

            def poll_health() -> None:
                while not stop.is_set():
                    health.append(svc.health())
                    stop.wait(0.5)

            th = threading.Thread(target=poll_health, daemon=True)
            th.start()
            try:
                big = svc.generate(BIG, steps=1, seed=1, timeout=600)
            finally:
                stop.set()
                th.join(5)
            msg = str(big.error.get("message", ""))
            report.event("request", f"{BIG}: HTTP {big.status} in {big.latency_s:.1f} s: {msg[:120]}")
            # The peak gauge resets on read: read it through Prometheus, never scrape the service before it.
            wait_until(lambda: (prom.query_value(QUERIES["oom"]) or 0) > oom_before, 30,
                       'diffusion_requests_total{outcome="oom"} to rise in Prometheus')
            oom = (prom.query_value(QUERIES["oom"]) or 0) - oom_before
            report.check("outcome oom", big.status >= 500 and oom == 1 and "memory" in msg.lower(),
                         f"HTTP {big.status}, diffusion_requests_total{{outcome=\"oom\"}} +{oom:g}, message {msg[:80]!r}")
            peak = prom.query_value("max(max_over_time(diffusion_gpu_memory_peak_bytes[5m]))") or 0.0
            report.values["exported_peak_bytes"] = peak
            report.event("metric", f"max_over_time(diffusion_gpu_memory_peak_bytes) {peak / 2**20:.0f} MiB vs "
                                   f"total {budget / 2**20:.0f} MiB")
            report.check("budget between the tiled and untiled peaks", p_on < budget < peak,
                         f"tiled {p_on / 2**20:.0f} MiB < budget {budget / 2**20:.0f} MiB < untiled (exported) "
                         f"{peak / 2**20:.0f} MiB")
            watch.wait_fired(EXPECTED, opts.fire_timeout_s)
            finish_alerts(report, watch, rules, EXPECTED, inject_t, opts)
            # "after" is the scrape in which Prometheus saw the peak (its read reset the peaks in the service,
            # so a direct scrape now would show 0).
            peaks = prom.query(f'diffusion_gpu_memory_peak_bytes{{job="{SERVICE_JOB}"}}[5m]')
            samples = [(float(v), float(t)) for sr in peaks for t, v in sr.get("values", [])]
            rec.prom_scrape("after", prom, SERVICE_JOB, at=max(samples)[1] if samples else None)
            rec.query("after", prom, QUERIES)
            report.check("/health stayed 200", bool(health) and all(h == 200 for h in health),
                         f"{len(health)} polls during the request: {sorted(set(health))}")
            nxt = svc.generate(small, steps=opts.steps, seed=2)
            report.check(f"next small request {small} ok", nxt.ok and svc.health() == 200,
                         f"HTTP {nxt.status}; /health {svc.health()}")
            time.sleep(2 * opts.scrape_s)
            rec.query("recovered", prom, QUERIES)
    finally:
        svc.proc.stop()
