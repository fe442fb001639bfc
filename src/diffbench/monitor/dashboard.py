"""The Grafana dashboard of a diffbench-instrumented service, generated from the metric table.

``monitoring/dashboard.json`` is build output of :func:`build_dashboard` (vLLM's generate-then-check
pattern, vllm-project/vllm ``tools/generate_grafana_dashboards.py``):
``diffbench monitor dashboard -o monitoring/dashboard.json`` writes it,
``--check`` fails when the committed file is stale, and tests run the offline checks of
:mod:`diffbench.monitor.lint` on it. Never edit the JSON by hand.

The model is Grafana's classic dashboard JSON (``schemaVersion`` 39, as vLLM's file), built from plain
dicts. Every panel queries the templated ``${datasource}``, states a unit and a description, filters on
the ``job`` / ``instance`` / ``model`` (and where it applies ``shape``) variables, and uses
``$__rate_interval`` in every ``rate()`` / ``increase()``. Metric names come from
:mod:`diffbench.metrics.names` (via :func:`_m`, which raises KeyError on a name not in the table);
the burn-rate and rank-spread panels read recording rules of ``monitoring/alerts.yaml``.
"""

from __future__ import annotations

import json
from typing import Any

from diffbench.metrics import names

SCHEMA_VERSION = 39
UID = "diffbench-serving"
DS = {"type": "prometheus", "uid": "${datasource}"}
RI = "$__rate_interval"
ERRORS = "|".join(names.ERROR_OUTCOMES)
# Label matchers of the template variables.
T = 'job=~"$job", instance=~"$instance"'
TM = T + ', model=~"$model"'
TMS = TM + ', shape=~"$shape"'
USER = 'traffic="user", ' + TM
USER_FAILED = f'outcome=~"{ERRORS}", ' + USER
USER_S = USER + ', shape=~"$shape"'


def _m(sample: str) -> str:
    """``sample`` after checking that the metric table writes it (KeyError otherwise)."""
    if sample not in names.sample_names():
        raise KeyError(f"{sample} is not a sample of diffbench.metrics.names.METRICS")
    return sample


def _rate(sample: str, sel: str, fn: str = "rate") -> str:
    return f"{fn}({_m(sample)}{{{sel}}}[{RI}])"


def _mean(family: str, sel: str, by: str) -> str:
    """Mean of a histogram over the rate interval: sum of rate(_sum) / sum of rate(_count)."""
    return (f"sum by ({by}) ({_rate(family + '_sum', sel)}) / "
            f"sum by ({by}) ({_rate(family + '_count', sel)})")


def _quantile(q: float, family: str, sel: str, by: str = "") -> str:
    labels = ", ".join(["le", *([by] if by else [])])
    return f"histogram_quantile({q}, sum by ({labels}) ({_rate(family + '_bucket', sel)}))"


def _target(expr: str, legend: str = "", **extra: Any) -> dict[str, Any]:
    return {"datasource": dict(DS), "expr": expr, "legendFormat": legend, "range": True, **extra}


class _Layout:
    """Assigns panel ids and grid positions (24 columns), one row after another."""

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self._id = 0
        self._x = 0
        self._y = 0
        self._row_h = 0

    def _next_id(self) -> int:
        self._id += 1
        return self._id

    def row(self, title: str) -> None:
        self._newline()
        self.panels.append({"id": self._next_id(), "type": "row", "title": title, "collapsed": False,
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self._y}, "panels": []})
        self._y += 1

    def _newline(self) -> None:
        if self._x:
            self._y += self._row_h
            self._x, self._row_h = 0, 0

    def add(self, kind: str, title: str, description: str, unit: str, targets: list[dict[str, Any]],
            *, w: int = 8, h: int = 8, thresholds: list[tuple[float | None, str]] | None = None,
            options: dict[str, Any] | None = None, custom: dict[str, Any] | None = None,
            max_value: float | None = None) -> None:
        if self._x + w > 24:
            self._newline()
        for i, t in enumerate(targets):
            t["refId"] = chr(ord("A") + i)
        defaults: dict[str, Any] = {"unit": unit}
        steps = thresholds or [(None, "green")]
        defaults["thresholds"] = {"mode": "absolute",
                                  "steps": [{"color": c, "value": v} for v, c in steps]}
        if kind == "timeseries":
            defaults["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 0,
                                  "showPoints": "never", "spanNulls": False, **(custom or {})}
        if max_value is not None:
            defaults["max"] = max_value
        if kind == "timeseries" and thresholds:
            defaults["custom"]["thresholdsStyle"] = {"mode": "line"}
        panel = {
            "id": self._next_id(), "type": kind, "title": title, "description": description,
            "datasource": dict(DS),
            "gridPos": {"h": h, "w": w, "x": self._x, "y": self._y},
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": options or {},
            "targets": targets,
        }
        self.panels.append(panel)
        self._x += w
        self._row_h = max(self._row_h, h)


def _variables() -> list[dict[str, Any]]:
    def query(name: str, label: str, q: str) -> dict[str, Any]:
        return {"name": name, "label": label, "type": "query", "datasource": dict(DS),
                "query": {"query": q, "refId": f"{name}-var"}, "definition": q, "refresh": 2,
                "multi": True, "includeAll": True, "allValue": ".*", "sort": 1,
                "current": {"selected": True, "text": ["All"], "value": ["$__all"]}}

    return [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "current": {}, "hide": 0, "refresh": 1, "regex": ""},
        query("job", "Job", 'label_values({__name__=~"diffusion_.*"}, job)'),
        query("instance", "Instance", 'label_values({__name__=~"diffusion_.*", job=~"$job"}, instance)'),
        query("model", "Model", f'label_values({_m("diffusion_requests_total")}{{{T}}}, model)'),
        query("shape", "Shape",
              f'label_values({_m("diffusion_denoise_step_duration_seconds_count")}{{{TM}}}, shape)'),
    ]


def _service_health(L: _Layout) -> None:
    L.row("Service health")
    L.add("timeseries", "User requests/s by outcome",
          "Finished user requests per second by outcome (probe and warmup traffic excluded).", "reqps",
          [_target(f"sum by (outcome) ({_rate('diffusion_requests_total', USER)})", "{{outcome}}")],
          custom={"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 30})
    L.add("stat", "Failed share",
          f"Share of user requests ending {', '.join(names.ERROR_OUTCOMES)}: what the error budget is "
          "charged (rejected = deliberate shedding, not charged).", "percentunit",
          [_target(f'sum({_rate("diffusion_requests_total", USER_FAILED)}) / '
                   f'sum({_rate("diffusion_requests_total", USER)})', "failed")],
          w=4, thresholds=[(None, "green"), (0.01, "red")])
    L.add("stat", "Error-budget burn rate",
          "Failed share over 1h and 6h divided by the 1 % budget of the 99 % availability SLO; the "
          "burn-rate alerts page at 14.4 (1h) and 6 (6h).", "none",
          [_target('max(model:diffusion_requests_failed:ratio_rate1h{model=~"$model"}) / 0.01', "1h"),
           _target('max(model:diffusion_requests_failed:ratio_rate6h{model=~"$model"}) / 0.01', "6h")],
          w=6, thresholds=[(None, "green"), (6, "orange"), (14.4, "red")])
    L.add("stat", "Targets up", "Prometheus scrape health of each selected target (1 = up).", "none",
          [_target(f"up{{{T}}}", "{{instance}}")], w=6, thresholds=[(None, "red"), (1, "green")])
    L.add("table", "Deployment", "Deployment configuration of each instance (diffusion_deployment_info); "
          "the fingerprint must match the calibration's (diffusion_baseline_info); build versions.", "none",
          [_target(f"{_m('diffusion_deployment_info')}{{{TM}}}", "", format="table", instant=True,
                   range=False),
           _target(f"{_m('diffusion_baseline_info')}{{{TM}}}", "", format="table", instant=True,
                   range=False),
           _target(f"{_m('diffusion_build_info')}{{{T}}}", "", format="table", instant=True, range=False)],
          w=24, h=5)


def _latency_queue(L: _Layout) -> None:
    L.row("Latency & queue")
    fam = "diffusion_request_duration_seconds"
    L.add("timeseries", "End-to-end latency",
          "Arrival to response ready for user requests: p50/p90/p99 from the histogram, the mean, and "
          "the latency SLO (diffusion_latency_slo_seconds).", "s",
          [_target(_quantile(0.5, fam, USER), "p50"), _target(_quantile(0.9, fam, USER), "p90"),
           _target(_quantile(0.99, fam, USER), "p99"),
           _target(f"sum({_rate(fam + '_sum', USER)}) / sum({_rate(fam + '_count', USER)})", "mean"),
           _target(f"max({_m('diffusion_latency_slo_seconds')}{{{TM}}})", "SLO")])
    L.add("timeseries", "p99 latency by shape", "p99 end-to-end latency of user requests per shape class.",
          "s", [_target(_quantile(0.99, fam, USER_S, "shape"), "{{shape}}")])
    L.add("heatmap", "Latency distribution", "User requests per latency bucket per interval.", "s",
          [_target(f"sum by (le) ({_rate(fam + '_bucket', USER_S, 'increase')})",
                   "{{le}}", format="heatmap")],
          options={"calculate": False, "yAxis": {"unit": "s"}, "cellGap": 1})
    L.add("timeseries", "Queue depth and running", "Requests waiting for the device and running on it.",
          "short", [_target(f"sum({_m('diffusion_queue_depth')}{{{TM}}})", "waiting"),
                    _target(f"sum({_m('diffusion_requests_running')}{{{TM}}})", "running")])
    L.add("timeseries", "Estimated wait vs half the SLO",
          "Work-weighted estimate of the wait of a request arriving now; DiffusionQueueWaitOverHalfSLO "
          "fires above half the SLO for 2m.", "s",
          [_target(f"max by (instance) ({_m('diffusion_queue_estimated_wait_seconds')}{{{TM}}})",
                   "estimate {{instance}}"),
           _target(f"0.5 * max({_m('diffusion_latency_slo_seconds')}{{{TM}}})", "half SLO")])
    L.add("timeseries", "Observed queue wait", "p95 and mean of the observed admission-to-start wait.", "s",
          [_target(_quantile(0.95, "diffusion_queue_wait_seconds", TM), "p95"),
           _target(_mean("diffusion_queue_wait_seconds", TM, "model"), "mean {{model}}")])


def _steps_stages(L: _Layout) -> None:
    L.row("Per-step and stages")
    fam = "diffusion_denoise_step_duration_seconds"
    base = f"max by (shape) ({_m('diffusion_denoise_step_baseline_seconds')}{{{TMS}}})"
    L.add("timeseries", "Denoise step mean vs baseline",
          "Mean device time of one denoise step per shape against its calibrated baseline; "
          "DiffusionDenoiseStepRegression fires above 1.2 x baseline for 10m.", "s",
          [_target(_mean(fam, TMS, "shape"), "mean {{shape}}"), _target(base, "baseline {{shape}}"),
           _target(f"1.2 * {base}", "limit {{shape}}")], w=12)
    L.add("timeseries", "Denoise step p95", "p95 of the per-step device time per shape.", "s",
          [_target(_quantile(0.95, fam, TMS, "shape"), "p95 {{shape}}")], w=6)
    L.add("heatmap", "Denoise step distribution", "Denoise steps per duration bucket per interval.", "s",
          [_target(f"sum by (le) ({_rate(fam + '_bucket', TMS, 'increase')})", "{{le}}", format="heatmap")],
          w=6, options={"calculate": False, "yAxis": {"unit": "s"}, "cellGap": 1})
    sfam = "diffusion_stage_duration_seconds"
    L.add("timeseries", "Stage p50", "Median device time of each pipeline stage (stacked): shows whether "
          "text encode, denoise or VAE decode moved.", "s",
          [_target(_quantile(0.5, sfam, TMS, "stage"), "{{stage}}")],
          custom={"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 30}, w=12)
    L.add("timeseries", "Stage mean vs baseline",
          "Mean stage time against the calibrated stage baselines the wait estimate uses.", "s",
          [_target(_mean(sfam, TMS, "stage"), "mean {{stage}}"),
           _target(f"max by (stage) ({_m('diffusion_stage_baseline_seconds')}{{{TMS}}})", "baseline {{stage}}")],
          w=6)
    L.add("timeseries", "Model FLOP/s", "Model FLOPs executed per second (ledger count), per device; MFU = "
          "this / the device's dense peak.", "flops",
          [_target(f"sum by (gpu) ({_rate('diffusion_model_flops_total', TM)})", "{{gpu}}")], w=6)
    L.add("timeseries", "Generation power", "Energy the devices used during generations per second of wall "
          "time (rate of the energy counter read around each generation: NVML on a GPU, RAPL on a CPU); empty "
          "where no counter is readable.", "watt",
          [_target(f"sum by (gpu) ({_rate('diffusion_energy_joules_total', TM)})", "{{gpu}}")], w=6)


def _cache(L: _Layout) -> None:
    L.row("Cache")
    sel = TMS
    ratio = (f"sum by (shape) ({_rate('diffusion_cache_hits_total', sel)}) / "
             f"sum by (shape) ({_rate('diffusion_cache_lookups_total', sel)})")
    base = f"max by (shape) ({_m('diffusion_cache_hit_ratio_baseline')}{{{sel}}})"
    L.add("timeseries", "Cache hit ratio vs baseline band",
          "Step-cache hits / lookups per shape, with the +-30 % band around the calibrated baseline; "
          "DiffusionCacheHitRatioDrift fires outside it for 15m.", "percentunit",
          [_target(ratio, "hit ratio {{shape}}"), _target(f"0.7 * {base}", "low {{shape}}"),
           _target(f"1.3 * {base}", "high {{shape}}")], w=16, max_value=1)
    L.add("timeseries", "Cache decisions/s", "Step-cache lookups per second by cache.", "ops",
          [_target(f"sum by (cache) ({_rate('diffusion_cache_lookups_total', sel)})", "{{cache}}")])


def _memory(L: _Layout) -> None:
    L.row("Memory")
    peak, total = _m("diffusion_gpu_memory_peak_bytes"), _m("diffusion_gpu_memory_total_bytes")
    L.add("bargauge", "Peak memory / capacity",
          "Allocator high-water mark over the interval divided by device capacity, per GPU; "
          "DiffusionGPUPeakMemoryHigh fires above 0.9 (over 5m).", "percentunit",
          [_target(f"max by (instance, gpu) (max_over_time({peak}{{{T}}}[{RI}])) / on (instance, gpu) "
                   f"max by (instance, gpu) ({total}{{{T}}} > 0)", "{{instance}} {{gpu}}")],
          thresholds=[(None, "green"), (0.75, "orange"), (0.9, "red")], max_value=1,
          options={"orientation": "horizontal", "displayMode": "gradient"})
    L.add("timeseries", "Peak memory", "Peak reserved and allocated bytes per GPU (max over the last 60 s of requests) and capacity.",
          "bytes", [_target(f"max by (gpu) ({peak}{{{T}}})", "reserved {{gpu}}"),
                    _target(f"max by (gpu) ({_m('diffusion_gpu_memory_peak_allocated_bytes')}{{{T}}})",
                            "allocated {{gpu}}"),
                    _target(f"max by (gpu) ({total}{{{T}}})", "capacity {{gpu}}")])
    L.add("timeseries", "Peak memory by stage", "Peak memory of the last request by the stage that held "
          "it (VAE decode at large sizes is the usual OOM).", "bytes",
          [_target(f"max by (stage) ({_m('diffusion_stage_memory_peak_bytes')}{{{TM}}})", "{{stage}}")])
    L.add("timeseries", "Failed requests by shape", "User requests that did not end ok, per shape class and "
          "outcome: an OOM at shape=\"other\" is a size outside the warmup list.", "reqps",
          [_target(f"sum by (shape, outcome) (rate({_m('diffusion_shape_requests_total')}{{{TM},outcome!=\"ok\"}}"
                   f"[{RI}]))", "{{shape}} {{outcome}}")])


def _quality(L: _Layout) -> None:
    L.row("Quality probe")
    L.add("timeseries", "Probe PSNR vs threshold - 3 dB",
          "PSNR of each probe answer against its reference; DiffusionQualityPSNRDrop fires below the "
          "strictest threshold - 3 dB.", "dB",
          [_target(f"min by (probe) ({_m('diffusion_quality_psnr_decibels')}{{{TM}}})", "PSNR {{probe}}"),
           _target(f"max by (probe) ({_m('diffusion_quality_psnr_threshold_decibels')}{{{TM}}}) - 3",
                   "alert below {{probe}}")])
    L.add("timeseries", "Probe SSIM", "SSIM of each probe answer against its reference (1 = identical).",
          "none", [_target(f"min by (probe) ({_m('diffusion_quality_ssim_ratio')}{{{TM}}})", "{{probe}}")],
          w=5)
    L.add("stat", "Probe age", "Seconds since each probe's last finished replay, and twice its interval: "
          "DiffusionProbeStale fires when the age is over it.", "s",
          [_target(f"time() - max by (probe) ({_m('diffusion_quality_probe_timestamp_seconds')}{{{TM}}})",
                   "age {{probe}}"),
           _target(f"2 * max by (probe) ({_m('diffusion_quality_probe_interval_seconds')}{{{TM}}})",
                   "stale after {{probe}}")], w=5)
    L.add("timeseries", "Probe replays by outcome", "Probe replays per interval by outcome.", "short",
          [_target(f"sum by (outcome) ({_rate('diffusion_quality_probe_runs_total', TM, 'increase')})",
                   "{{outcome}}")], w=6)


def _compile(L: _Layout) -> None:
    L.row("Compile")
    rc = "diffusion_compile_recompiles_total"
    L.add("timeseries", "Recompiles per interval", "torch.compile compilations after warmup per interval; "
          "DiffusionRecompileDetected fires on any.", "short",
          [_target(f"sum by (instance) ({_rate(rc, TM, 'increase')})", "{{instance}}")],
          custom={"drawStyle": "bars", "fillOpacity": 80}, w=16)
    L.add("stat", "Recompiles since start", "Recompile counter of each instance since it started serving.",
          "short", [_target(f"sum by (instance) ({_m(rc)}{{{TM}}})", "{{instance}}")],
          thresholds=[(None, "green"), (1, "orange")])


def _startup(L: _Layout) -> None:
    L.row("Start-up")
    st = "diffusion_startup_duration_seconds"
    L.add("stat", "Start-up by phase",
          "Each instance's last start: load (the engine's start: weights from disk to the device), warmup (its "
          "--warmup requests: compile, autotuning) and ready (process start to serving): what an autoscaler "
          "pays for a new replica.", "s",
          [_target(f"max by (instance, phase) ({_m(st)}{{{TM}}})", "{{instance}} {{phase}}")], w=24)


def _ranks(L: _Layout) -> None:
    L.row("Ranks")
    L.add("timeseries", "Per-rank step compute",
          "Mean compute time of one step per rank: the step's time minus the rank's waits in collectives, "
          "so a rank slow anywhere in the step shows (wall time would hide a straggler).", "s",
          [_target(_mean("diffusion_rank_step_compute_seconds", TM, "rank"), "rank {{rank}}")], w=16)
    L.add("stat", "Rank spread", "(slowest - fastest) / fastest per-rank mean over 5m (recording rule); "
          "DiffusionRankStepSkew fires above 10 % when the slowest is also over 2 ms a step slower, for 10m.",
          "percentunit",
          [_target('max by (instance) (instance_model:diffusion_rank_step_compute_seconds:spread_ratio5m'
                   '{job=~"$job", instance=~"$instance", model=~"$model"})', "{{instance}}")],
          thresholds=[(None, "green"), (0.1, "red")])


def _adapters(L: _Layout) -> None:
    L.row("LoRA adapters")
    swaps = "diffusion_adapter_swaps_total"
    L.add("timeseries", "Adapter swaps per second",
          "Switches of the active LoRA adapter by the adapter switched to (none: the base model); a mix that "
          "alternates adapters pays a swap per switch (serve --lora).", "ops",
          [_target(f"sum by (adapter) ({_rate(swaps, TM)})", "{{adapter}}")], w=16)
    L.add("timeseries", "Adapter swap time",
          "Mean time to switch the active adapter before a request (set_adapters / disable_lora, synchronized).",
          "s", [_target(_mean("diffusion_adapter_swap_duration_seconds", TM, "model"), "mean {{model}}")])


def _abandoned(L: _Layout) -> None:
    L.row("Abandoned work")
    wasted = "diffusion_cancelled_seconds_total"
    L.add("timeseries", "Device time spent on cancelled generations",
          "Share of device time spent on generations whose answer nobody took, by reason: disconnect (the "
          "client went away), deleted (its video job was deleted), drain (the server stopped); each stops at "
          "its next denoising step.", "percentunit",
          [_target(f"sum by (reason) ({_rate(wasted, TM)})", "{{reason}}")], w=16)
    L.add("timeseries", "Cancel to worker released",
          "Mean time from the cancel of a running generation to its worker released: at most one denoise "
          "step when the cancel lands in the denoising loop.", "s",
          [_target(_mean("diffusion_cancel_release_seconds", TM, "model"), "mean {{model}}")])


def build_dashboard() -> dict[str, Any]:
    """The dashboard model as plain dicts (Grafana classic JSON, ``schemaVersion`` 39)."""
    L = _Layout()
    for section in (_service_health, _latency_queue, _steps_stages, _cache, _memory, _quality, _compile,
                    _startup, _ranks, _abandoned, _adapters):
        section(L)
    return {
        "uid": UID,
        "title": "diffbench: diffusion serving",
        "description": "Generated by `diffbench monitor dashboard` from diffbench.metrics.names; do not edit.",
        "tags": ["diffbench", "diffusion"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "links": [],
        "annotations": {"list": []},
        "templating": {"list": _variables()},
        "panels": L.panels,
    }


def render_dashboard() -> str:
    """The dashboard as the exact text of ``monitoring/dashboard.json`` (2-space indent, trailing newline)."""
    return json.dumps(build_dashboard(), indent=2, ensure_ascii=False) + "\n"
