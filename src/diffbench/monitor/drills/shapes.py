"""Drill P2 (docs/guides/after-launch.md): a burst of resolutions outside the shape allowlist on a compiled service.

1. ``serve --compile --warmup SIZE --shapes SIZE`` (the warmup compiles the allowlisted shape; the
   instrumentation's warm snapshot is taken after it, so warmup compiles are not exported).
2. A local Prometheus evaluates the real rule file; allowlisted requests give the "before" latencies.
3. **Inject** :data:`BURST` requests at sizes outside the allowlist (multiples of 16, as FLUX needs).
4. **Expect** each burst request either served (200) or refused with a 4xx; their series under
   ``shape="other"``; the set of exported series unchanged (no new label values);
   ``diffusion_compile_recompiles_total`` up and ``DiffusionRecompileDetected`` firing; the p99 rise
   visible in the client's latencies and in ``histogram_quantile(0.99, …)``; afterwards an allowlisted
   request succeeds and adds no recompile (the server is not poisoned).

On a CPU an Inductor recompile of tiny-flux takes seconds (about 10 s measured on 2 busy cores; the first
compile about 22 s), so the burst is two small sizes.
"""

from __future__ import annotations

import time

from diffbench.monitor.drills.cache import finish_alerts
from diffbench.monitor.drills.common import SERVICE_JOB, client_p99, prometheus_for
from diffbench.monitor.drills.core import (
    AlertWatcher,
    DrillOptions,
    DrillReport,
    parse_scrape,
    sample_sum,
    series_keys,
    start_drill,
)
from diffbench.monitor.drills.harness import start_serve, wait_until
from diffbench.monitor.promserver import Target

BURST = ("80x48", "48x80")
EXPECTED = ["DiffusionRecompileDetected"]
P99 = ('histogram_quantile(0.99, sum by (le) (rate(diffusion_request_duration_seconds_bucket'
       '{traffic="user"}[30s])))')
QUERIES = {
    "recompiles": "diffusion_compile_recompiles_total",
    "recompiles_increase": "increase(diffusion_compile_recompiles_total[15m])",
    "p99_30s": P99,
    "requests_by_shape": 'sum by (shape) (diffusion_request_duration_seconds_count{traffic="user"})',
}


def run(opts: DrillOptions, report: DrillReport) -> None:
    work, rec, rules = start_drill(opts, report, "shapes", EXPECTED)
    size, steps = opts.size, opts.steps
    svc = start_serve(work, ["--engine", "diffusers", "--model", "tiny-flux", "--device", "cpu", "--compile",
                             "--warmup", size, "--shapes", size, "--default-size", size,
                             "--default-steps", str(steps)], timeout_s=400)
    try:
        with prometheus_for(opts, rules, [Target(SERVICE_JOB, svc.address)]) as prom, \
                AlertWatcher(prom, rules, EXPECTED) as watch:
            prom.wait_scraped()
            before_lat = []
            for i in range(8):
                r = svc.generate(size, steps=steps, seed=i)
                report.check(f"allowlisted {size} #{i + 1} ok", r.ok, f"HTTP {r.status}") if not r.ok else None
                before_lat.append(r.latency_s)
            time.sleep(2 * opts.scrape_s)
            text_before = svc.metrics()
            s_before = parse_scrape(text_before)
            rec.scrape("before", text_before)
            q_before = rec.query("before", prom, QUERIES)
            recompiles_before = sample_sum(s_before, "diffusion_compile_recompiles_total")
            report.check("no recompile after warmup", recompiles_before == 0 and not watch.seen(EXPECTED[0]),
                         f"diffusion_compile_recompiles_total = {recompiles_before:g} before the burst")

            report.mark_inject(f"burst of {len(BURST)} requests at {', '.join(BURST)} (not in --shapes {size})")
            inject_t = time.monotonic()
            burst = []
            for i, other in enumerate(BURST):
                r = svc.generate(other, steps=steps, seed=50 + i, timeout=300)
                burst.append(r)
                report.event("request", f"{other}: HTTP {r.status} in {r.latency_s:.2f} s")
            served = [r for r in burst if r.ok]
            refused = [r for r in burst if 400 <= r.status < 500]
            report.check("each burst request served or refused with 4xx", len(served) + len(refused) == len(burst),
                         f"{len(served)} served, {len(refused)} refused, statuses {[r.status for r in burst]}")

            def recompiled() -> bool:
                return sample_sum(parse_scrape(svc.metrics()), "diffusion_compile_recompiles_total") > 0

            wait_until(recompiled, 30, "diffusion_compile_recompiles_total to rise")
            s_mid = parse_scrape(svc.metrics())
            report.values["recompiles_after_burst"] = sample_sum(s_mid, "diffusion_compile_recompiles_total")
            report.event("metric", f"diffusion_compile_recompiles_total {recompiles_before:g} -> "
                                   f"{report.values['recompiles_after_burst']:g}")
            other_count = (sample_sum(s_mid, "diffusion_request_duration_seconds_count", shape="other",
                                      traffic="user")
                           - sample_sum(s_before, "diffusion_request_duration_seconds_count", shape="other",
                                        traffic="user"))
            report.check('burst lands under shape="other"', other_count == len(served),
                         f'{other_count:g} user requests counted under shape="other" for {len(served)} served')
            watch.wait_fired(EXPECTED, opts.fire_timeout_s)
            finish_alerts(report, watch, rules, EXPECTED, inject_t, opts)
            time.sleep(2 * opts.scrape_s)
            q_after = rec.query("after_burst", prom, QUERIES)

            after = svc.generate(size, steps=steps, seed=99)
            s_after = parse_scrape(svc.metrics())
            rec_after = sample_sum(s_after, "diffusion_compile_recompiles_total")
            report.check("allowlisted request after the burst ok, no new recompile",
                         after.ok and rec_after == report.values["recompiles_after_burst"],
                         f"{size}: HTTP {after.status}; recompiles {rec_after:g} (was "
                         f"{report.values['recompiles_after_burst']:g})")
            text_after = svc.metrics()
            rec.scrape("after", text_after)
            new = series_keys(parse_scrape(text_after)) - series_keys(s_before)
            gone = series_keys(s_before) - series_keys(parse_scrape(text_after))
            report.check("series set unchanged", not new and not gone,
                         f"{len(series_keys(s_before))} series before; new {sorted(new)[:5]}, gone {sorted(gone)[:5]}")

            p99_before = client_p99(before_lat)
            p99_burst = client_p99(before_lat + [r.latency_s for r in served])
            prom_before = _first(q_before.get("p99_30s"))
            prom_after = _first(q_after.get("p99_30s"))
            report.values.update(client_p99_before_s=p99_before, client_p99_with_burst_s=p99_burst,
                                 prom_p99_before_s=prom_before, prom_p99_after_s=prom_after,
                                 burst_latency_s=[r.latency_s for r in burst],
                                 before_latency_s=before_lat)
            pb, pa = _fmt_s(prom_before), _fmt_s(prom_after)
            report.event("metric", f"client p99 {p99_before:.3f} s -> {p99_burst:.3f} s; Prometheus "
                                   f"histogram_quantile(0.99) {pb} -> {pa}")
            report.check("p99 rise visible", p99_burst is not None and p99_before is not None
                         and p99_burst > p99_before and prom_after is not None
                         and (prom_before is None or prom_after > prom_before),
                         f"client {p99_before:.3f} -> {p99_burst:.3f} s, histogram_quantile {pb} -> {pa}")
    finally:
        svc.proc.stop()


def _first(q: dict | None) -> float | None:
    if not q or not q.get("result"):
        return None
    v = float(q["result"][0]["value"][1])
    return None if v != v else v


def _fmt_s(value: float | None) -> str:
    """Seconds with 3 decimals for the report line (``none`` when Prometheus returned nothing)."""
    return "none" if value is None else f"{value:.3f} s"
