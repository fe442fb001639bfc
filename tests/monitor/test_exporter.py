"""The exporter: zero-initialised series, traffic classes, windowed memory peaks, calibration gauges."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from diffbench.engines.base import EngineInfo, MemoryStats, StageTimes
from diffbench.engines.instrument.signals import CacheCounts, RequestSignals
from diffbench.metrics import names
from diffbench.monitor.calibration import Calibration, ShapeBaseline, StageBaselines, fingerprint_id
from diffbench.monitor.exporter import STATUS_OF, Exporter


def samples(exp: Exporter) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of one scrape: (sample name, labels) → value."""
    body, _ = exp.render()
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(smp: dict, name: str, **labels: str) -> float:
    return smp[(name, frozenset(labels.items()))]


def test_every_label_combination_is_exported_at_zero_before_the_first_request():
    exp = Exporter("m", ["256x256", "128x128f9"], gpus=["0", "1"], caches=["fbcache"], ranks=[0, 1])
    smp = samples(exp)
    assert not [k for k in smp if k[0].endswith("_created")]  # no _created series in this registry
    for traffic in ("user", "probe"):
        for outcome in names.OUTCOMES:
            assert value(smp, "diffusion_requests_total", model="m", outcome=outcome,
                         status=str(STATUS_OF[outcome]), traffic=traffic) == 0
        for shape in ("256x256", "128x128f9", "other"):
            assert value(smp, "diffusion_request_duration_seconds_count", model="m", shape=shape,
                         traffic=traffic) == 0
            for edge in names.REQUEST_BUCKETS:
                assert value(smp, "diffusion_request_duration_seconds_bucket", model="m", shape=shape,
                             traffic=traffic, le=names.le_label(edge)) == 0
    for shape in ("256x256", "128x128f9", "other"):
        for stage in ("text_encode", "denoise", "vae_decode"):
            assert value(smp, "diffusion_stage_duration_seconds_count", model="m", shape=shape, stage=stage) == 0
        assert value(smp, "diffusion_denoise_step_duration_seconds_count", model="m", shape=shape) == 0
        for n in ("diffusion_cache_lookups_total", "diffusion_cache_hits_total"):
            assert value(smp, n, model="m", shape=shape, cache="fbcache") == 0
    for gpu in ("0", "1"):
        assert value(smp, "diffusion_gpu_memory_peak_bytes", gpu=gpu) == 0
        assert value(smp, "diffusion_model_flops_total", model="m", gpu=gpu) == 0
    for rank in ("0", "1"):
        assert value(smp, "diffusion_rank_step_compute_seconds_count", model="m", rank=rank) == 0
    assert value(smp, "diffusion_compile_recompiles_total", model="m") == 0
    assert value(smp, "diffusion_queue_depth", model="m") == 0
    # a total, an SLO or a baseline of 0 would make the ratio alerts fire: absent until known
    assert not [k for k in smp if k[0] in ("diffusion_gpu_memory_total_bytes", "diffusion_latency_slo_seconds",
                                           "diffusion_denoise_step_baseline_seconds")]
    # every family exported is in the metric table, with its declared type
    body, _ = exp.render()
    for fam in text_string_to_metric_families(body.decode()):
        spec = names.spec(fam.name)
        assert fam.type == spec.kind, fam.name
        for s in fam.samples:
            assert s.name in spec.samples, s.name
            assert set(s.labels) - {"le"} == set(spec.labels), (s.name, s.labels)


def test_the_exporter_registers_every_service_family_of_the_table():
    exp = Exporter("m", ["256x256"])
    service = {m.name for m in names.METRICS if not m.name.startswith("diffusion_quality_")}
    assert exp.registered() == service
    assert Exporter("m", ["256x256"], probes=["p"]).registered() == {m.name for m in names.METRICS}


def _stages(steps: list[float]) -> StageTimes:
    return StageTimes(text_encode_s=0.01, denoise_s=sum(steps), vae_decode_s=0.02, total_s=0.03 + sum(steps),
                      step_s=steps)


def test_a_probe_request_stays_out_of_every_traffic_series():
    exp = Exporter("m", ["64x64"], caches=["fbcache"])
    mem = MemoryStats(kind="sim", peak_allocated_bytes=1000, peak_reserved_bytes=1500, peak_stage="denoise")
    sig = RequestSignals(cache=CacheCounts("fbcache", 10, 4), flops=5e9, device="cpu", rank_compute_s={})
    for traffic in ("user", "probe"):
        exp.observe_generation(shape="64x64", stages=_stages([0.1, 0.1]), memory=mem, signals=sig, traffic=traffic)
        exp.observe_queue_wait(0.5, traffic=traffic)
        exp.observe_request(shape="64x64", outcome="ok", status=200, duration_s=0.3, traffic=traffic)
    exp.observe_generation(shape="64x64", stages=_stages([9.0]), memory=mem, signals=sig, traffic="warmup")
    exp.observe_request(shape="64x64", outcome="ok", status=200, duration_s=9.0, traffic="warmup")
    smp = samples(exp)
    assert value(smp, "diffusion_denoise_step_duration_seconds_count", model="m", shape="64x64") == 2  # 1 user request
    assert value(smp, "diffusion_stage_duration_seconds_count", model="m", shape="64x64", stage="denoise") == 1
    assert value(smp, "diffusion_queue_wait_seconds_count", model="m") == 1
    assert value(smp, "diffusion_cache_lookups_total", model="m", shape="64x64", cache="fbcache") == 10
    assert value(smp, "diffusion_cache_hits_total", model="m", shape="64x64", cache="fbcache") == 4
    for traffic in ("user", "probe"):
        assert value(smp, "diffusion_requests_total", model="m", outcome="ok", status="200", traffic=traffic) == 1
        assert value(smp, "diffusion_request_duration_seconds_count", model="m", shape="64x64", traffic=traffic) == 1
    assert not [k for k in smp if ("traffic", "warmup") in k[1]]  # warmups are not exported at all
    assert value(smp, "diffusion_model_flops_total", model="m", gpu="cpu") == 1e10  # device work of both
    with pytest.raises(ValueError, match="traffic"):
        exp.observe_request(shape="64x64", outcome="ok", status=200, duration_s=1, traffic="bot")
    with pytest.raises(ValueError, match="outcome"):
        exp.observe_request(shape="64x64", outcome="fine", status=200, duration_s=1)


def test_shapes_outside_the_allowlist_land_in_other():
    exp = Exporter("m", ["64x64", "64x64b2", "32x32f9"])
    assert exp.shape_label(64, 64) == "64x64"
    assert exp.shape_label(64, 64, None, 2) == "64x64b2"
    assert exp.shape_label(32, 32, 9) == "32x32f9"
    assert exp.shape_label(64, 64, None, 3) == "other"
    assert exp.shape_label(1344, 768) == "other"
    before = len(samples(exp))
    for w in (17, 33, 1344):
        exp.observe_generation(shape=f"{w}x{w}", stages=_stages([0.1]), memory=None, signals=None)
    smp = samples(exp)
    assert len(smp) == before  # no new label values
    assert value(smp, "diffusion_denoise_step_duration_seconds_count", model="m", shape="other") == 3


def test_memory_peaks_are_the_max_over_the_window_and_every_scraper_sees_them():
    now = [100.0]
    exp = Exporter("m", ["64x64"], gpus=["0"], peak_window_s=60.0, clock=lambda: now[0])
    for alloc, stage in ((300, "denoise"), (700, "vae_decode"), (500, "denoise")):
        mem = MemoryStats(kind="cuda", peak_allocated_bytes=alloc, peak_reserved_bytes=alloc + 100, peak_stage=stage)
        exp.observe_generation(shape="64x64", stages=None, memory=mem,
                               signals=RequestSignals(device="0", device_total_bytes=4096))
    first = samples(exp)
    assert value(first, "diffusion_gpu_memory_peak_bytes", gpu="0") == 800
    assert value(first, "diffusion_gpu_memory_peak_allocated_bytes", gpu="0") == 700
    assert value(first, "diffusion_gpu_memory_total_bytes", gpu="0") == 4096
    assert value(first, "diffusion_stage_memory_peak_bytes", model="m", stage="vae_decode") == 700
    assert value(first, "diffusion_stage_memory_peak_bytes", model="m", stage="denoise") == 500
    second = samples(exp)  # a second scraper reads the same peaks (no reset on read)
    assert value(second, "diffusion_gpu_memory_peak_bytes", gpu="0") == 800
    now[0] += 61.0  # the requests left the window
    mem = MemoryStats(kind="cuda", peak_allocated_bytes=200, peak_reserved_bytes=250, peak_stage="denoise")
    exp.observe_generation(shape="64x64", stages=None, memory=mem, signals=RequestSignals(device="0"))
    third = samples(exp)
    assert value(third, "diffusion_gpu_memory_peak_bytes", gpu="0") == 250
    assert value(third, "diffusion_stage_memory_peak_bytes", model="m", stage="vae_decode") == 0
    assert value(third, "diffusion_stage_memory_peak_bytes", model="m", stage="denoise") == 200
    assert value(third, "diffusion_gpu_memory_total_bytes", gpu="0") == 4096


def test_recompiles_ranks_and_queue_source():
    exp = Exporter("m", ["64x64"], ranks=[0, 1])
    sig = RequestSignals(recompiles=2, rank_compute_s={0: [0.1, 0.1], 1: [0.2, 0.3]})
    exp.observe_generation(shape="64x64", stages=None, memory=None, signals=sig)
    exp.set_queue_source(lambda: (3, 1, 4.5))
    smp = samples(exp)
    assert value(smp, "diffusion_compile_recompiles_total", model="m") == 2
    assert value(smp, "diffusion_rank_step_compute_seconds_sum", model="m", rank="1") == pytest.approx(0.5)
    assert value(smp, "diffusion_rank_step_compute_seconds_count", model="m", rank="0") == 2
    assert (value(smp, "diffusion_queue_depth", model="m"), value(smp, "diffusion_requests_running", model="m"),
            value(smp, "diffusion_queue_estimated_wait_seconds", model="m")) == (3, 1, 4.5)
    exp.set_queue_source(lambda: (2, 1, None))  # work waiting and no prediction: unknown, not 0
    assert math.isnan(value(samples(exp), "diffusion_queue_estimated_wait_seconds", model="m"))


def test_calibration_deployment_and_build_info():
    fp = {"model": "m", "precision": "float32", "cache": "none"}
    cal = Calibration(
        model="m", fingerprint=fp, fingerprint_id=fingerprint_id(fp), slo_s=2.5,
        shapes={"64x64": ShapeBaseline(step_s=0.125, steps=4, cache_hit_ratio=0.25,
                                       stages=StageBaselines(text_encode=0.5, denoise=0.5, vae_decode=0.25)),
                "512x512": ShapeBaseline(step_s=1.0)},  # not on this allowlist: skipped
    )
    exp = Exporter("m", ["64x64"])
    exp.load_calibration(cal)
    exp.set_deployment(EngineInfo(engine="sim", engine_version="1", model="m", cache="none"), "abcd",
                       vae_tiling=False)
    smp = samples(exp)
    assert value(smp, "diffusion_latency_slo_seconds", model="m") == 2.5
    assert value(smp, "diffusion_denoise_step_baseline_seconds", model="m", shape="64x64") == 0.125
    assert value(smp, "diffusion_stage_baseline_seconds", model="m", shape="64x64", stage="vae_decode") == 0.25
    assert value(smp, "diffusion_cache_hit_ratio_baseline", model="m", shape="64x64") == 0.25
    assert ("diffusion_denoise_step_baseline_seconds", frozenset({("model", "m"), ("shape", "512x512")})) not in smp
    assert value(smp, "diffusion_baseline_info", model="m", fingerprint=cal.fingerprint_id) == 1
    assert value(smp, "diffusion_deployment_info", model="m", fingerprint="abcd", dtype="float32", cache="none",
                 compile="false", vae_tiling="false", attention="default") == 1
    build = [k for k in smp if k[0] == "diffusion_build_info"]
    assert len(build) == 1 and dict(build[0][1])["version"]
    exp.set_slo(10.0)  # --slo wins over the file
    exp.load_calibration(cal)
    assert value(samples(exp), "diffusion_latency_slo_seconds", model="m") == 10.0
    assert cal.shapes["64x64"].predict_s(8) == 8 * 0.125 + 0.5 + 0.25  # steps × step + encode + decode


def test_failed_requests_are_counted_by_shape_and_probe_requests_are_not():
    """An OOM has no duration, yet its shape class must be visible (doctor oom: shapes outside the list)."""
    exp = Exporter("m", ["64x64"])
    assert value(samples(exp), "diffusion_shape_requests_total", model="m", shape="other", outcome="oom") == 0
    exp.observe_request(shape="2048x2048", outcome="oom", status=507, duration_s=None)  # not allowlisted
    exp.observe_request(shape="64x64", outcome="ok", status=200, duration_s=0.5)
    exp.observe_request(shape="64x64", outcome="ok", status=200, duration_s=0.5, traffic="probe")
    smp = samples(exp)
    assert value(smp, "diffusion_shape_requests_total", model="m", shape="other", outcome="oom") == 1
    assert value(smp, "diffusion_shape_requests_total", model="m", shape="64x64", outcome="ok") == 1


def test_memory_peak_window_stays_bounded_without_a_scraper():
    now = [0.0]
    exp = Exporter("m", ["64x64"], gpus=["0"], peak_window_s=60.0, clock=lambda: now[0])
    for _ in range(1000):  # one request a second for 1000 s, nobody scrapes
        now[0] += 1.0
        exp.observe_generation(shape="64x64", stages=None, signals=RequestSignals(device="0"),
                               memory=MemoryStats(kind="cuda", peak_allocated_bytes=1, peak_reserved_bytes=1))
    assert max(len(q) for q in exp._peaks._values.values()) <= 61
