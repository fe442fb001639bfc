"""serve's /metrics: zero-initialised series, probe traffic kept apart, timeouts, disconnects, the
calibration-based wait estimate, deployment fingerprint, sim signals, --enable-faults."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
import types

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from diffbench.core.env import capture_env
from diffbench.engines.fingerprint import FINGERPRINT_FIELDS, deployment_fingerprint
from diffbench.engines.registry import EngineConfig
from diffbench.engines.sim import SimEngine
from diffbench.metrics import names
from diffbench.monitor.calibration import Calibration, ShapeBaseline, StageBaselines, fingerprint_id
from diffbench.monitor.exporter import STATUS_OF

from .conftest import sim_config, sim_params

IMG = "/v1/images/generations"


def scrape(c: TestClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for fam in text_string_to_metric_families(c.get("/metrics").text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def val(smp: dict, name: str, **labels: str) -> float:
    return smp[(name, frozenset(labels.items()))]


def _app(engine=None, **cfg):
    from diffbench.server.app import create_app

    return create_app(sim_config(**cfg), engine=engine)


def test_first_scrape_shows_zeros_and_warmups_are_not_exported():
    with TestClient(_app(default_size="64x64", warmup_sizes=("64x64", "32x32"), default_steps=3)) as c:
        smp = scrape(c)
        assert c.get("/health").json()["completed"] == 0
    for outcome in names.OUTCOMES:
        assert val(smp, "diffusion_requests_total", model="sim", outcome=outcome, status=str(STATUS_OF[outcome]),
                   traffic="user") == 0
    assert sum(v for k, v in smp.items() if k[0] == "diffusion_requests_total") == 0
    for shape in ("64x64", "32x32", "other"):  # allowlist default: default size + warmup sizes
        assert val(smp, "diffusion_denoise_step_duration_seconds_count", model="sim", shape=shape) == 0
        assert val(smp, "diffusion_request_duration_seconds_count", model="sim", shape=shape, traffic="user") == 0
    assert val(smp, "diffusion_compile_recompiles_total", model="sim") == 0
    assert val(smp, "diffusion_gpu_memory_peak_bytes", gpu="sim") == 0  # the warmups' peaks are not exported


def test_a_probe_request_counts_only_as_probe_traffic():
    with TestClient(_app(default_size="64x64", default_steps=3)) as c:
        user = c.post(IMG, json={"prompt": "a", "size": "64x64"})
        probe = c.post(IMG, json={"prompt": "a", "size": "64x64"}, headers={"X-Diffbench-Traffic": "probe"})
        sneaky = c.post(IMG, json={"prompt": "a", "size": "64x64"}, headers={"X-Diffbench-Traffic": "warmup"})
        smp = scrape(c)
    assert user.status_code == probe.status_code == sneaky.status_code == 200
    assert val(smp, "diffusion_requests_total", model="sim", outcome="ok", status="200", traffic="user") == 2
    assert val(smp, "diffusion_requests_total", model="sim", outcome="ok", status="200", traffic="probe") == 1
    assert val(smp, "diffusion_request_duration_seconds_count", model="sim", shape="64x64", traffic="probe") == 1
    assert val(smp, "diffusion_request_duration_seconds_count", model="sim", shape="64x64", traffic="user") == 2
    # two user generations of 3 steps; the probe's steps, stages and queue wait are not there
    assert val(smp, "diffusion_denoise_step_duration_seconds_count", model="sim", shape="64x64") == 6
    for stage in ("text_encode", "denoise", "vae_decode", "postprocess"):
        assert val(smp, "diffusion_stage_duration_seconds_count", model="sim", shape="64x64", stage=stage) == 2
    assert val(smp, "diffusion_queue_wait_seconds_count", model="sim") == 2


def test_request_timeout_drops_a_queued_request_and_answers_504(gated_engine):
    answers: dict[str, int] = {}
    with TestClient(_app(gated_engine, request_timeout_s=0.5)) as c:
        def send(prompt: str) -> None:
            answers[prompt] = c.post(IMG, json={"prompt": prompt, "size": "32x32"}).status_code

        first = threading.Thread(target=send, args=("running",))
        first.start()
        assert gated_engine.entered.wait(10)
        second = threading.Thread(target=send, args=("queued",))
        second.start()
        first.join(30)
        second.join(30)
        gated_engine.gate.set()  # the running generation cannot be interrupted: it finishes now
        deadline = time.perf_counter() + 10
        while c.get("/health").json()["running"] and time.perf_counter() < deadline:
            time.sleep(0.02)
        after = c.post(IMG, json={"prompt": "after", "size": "32x32"}).status_code
        smp = scrape(c)
        health = c.get("/health").json()
    assert answers == {"running": 504, "queued": 504} and after == 200
    assert health["timed_out"] == 2  # /health counts them too (user trial: it showed none)
    assert gated_engine.prompts == ["running", "after"]  # the queued one never reached the device
    assert val(smp, "diffusion_requests_total", model="sim", outcome="timeout", status="504", traffic="user") == 2
    # the timed-out running generation did run: its steps are exported (8 default steps each, 2 runs)
    assert val(smp, "diffusion_denoise_step_duration_seconds_count", model="sim", shape="other") == 16


def test_a_client_that_disconnects_while_queued_is_cancelled(gated_engine):
    with TestClient(_app(gated_engine)) as c:
        first = threading.Thread(target=lambda: c.post(IMG, json={"prompt": "running", "size": "32x32"}))
        first.start()
        assert gated_engine.entered.wait(10)
        app = c.app
        body = json.dumps({"prompt": "gone", "size": "32x32"}).encode()
        sent: list[dict] = []
        gone = asyncio.Event()

        async def receive() -> dict:
            if not sent:
                sent.append({})
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)

        async def call() -> None:
            scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                     "scheme": "http", "path": IMG, "raw_path": IMG.encode(), "query_string": b"",
                     "headers": [(b"content-type", b"application/json"), (b"host", b"test")],
                     "client": ("127.0.0.1", 1), "server": ("test", 80), "state": {}}
            task = asyncio.ensure_future(app(scope, receive, send))
            await asyncio.sleep(0.5)  # admitted and queued behind the running request
            assert c.get("/health").json()["queue_length"] == 1
            gone.set()
            await asyncio.wait_for(task, 10)

        asyncio.run(call())
        gated_engine.gate.set()
        first.join(30)
        smp = scrape(c)
    starts = [m for m in sent if m.get("type") == "http.response.start"]
    assert starts and starts[0]["status"] == 499
    assert "gone" not in gated_engine.prompts
    assert val(smp, "diffusion_requests_total", model="sim", outcome="cancelled", status="499", traffic="user") == 1
    assert val(smp, "diffusion_requests_total", model="sim", outcome="ok", status="200", traffic="user") == 1


def test_models_card_carries_the_deployment_fingerprint():
    with TestClient(_app()) as c:
        card = c.get("/v1/models").json()["data"][0]
        info = c.app.state.service.info
    expected = json.loads(json.dumps(deployment_fingerprint(info, capture_env()), default=str))
    assert card["fingerprint"] == expected and set(card["fingerprint"]) == set(FINGERPRINT_FIELDS)
    assert card["fingerprint_id"] == fingerprint_id(deployment_fingerprint(info, capture_env()))


def test_estimated_wait_comes_from_the_calibration_baselines(gated_engine):
    fp = {"model": "sim"}
    cal = Calibration(model="sim", fingerprint=fp, fingerprint_id=fingerprint_id(fp), slo_s=30.0,
                      shapes={"32x32": ShapeBaseline(step_s=0.5, steps=2, stages=StageBaselines(
                          text_encode=0.25, denoise=1.0, vae_decode=0.25))})
    per_request = 2 * 0.5 + 0.25 + 0.25  # steps × step baseline + text encode + VAE decode (the admission estimate: docs/reference/metrics.md, diffusion_queue_estimated_wait_seconds)
    with TestClient(_app(gated_engine, calibration=cal, shapes=("32x32",))) as c:
        threads = [threading.Thread(target=lambda: c.post(IMG, json={"prompt": "a", "size": "32x32",
                                                                        "num_inference_steps": 2}))
                   for _ in range(3)]
        threads[0].start()
        assert gated_engine.entered.wait(10)
        for t in threads[1:]:
            t.start()
        deadline = time.perf_counter() + 10
        while c.get("/health").json()["queue_length"] < 2 and time.perf_counter() < deadline:
            time.sleep(0.02)
        smp = scrape(c)
        gated_engine.gate.set()
        for t in threads:
            t.join(30)
    est = val(smp, "diffusion_queue_estimated_wait_seconds", model="sim")
    # two queued requests in full, plus what is left of the running one (at most one request)
    assert 2 * per_request <= est <= 3 * per_request
    assert val(smp, "diffusion_queue_depth", model="sim") == 2 and val(smp, "diffusion_requests_running",
                                                                        model="sim") == 1
    assert val(smp, "diffusion_latency_slo_seconds", model="sim") == 30.0
    assert val(smp, "diffusion_denoise_step_baseline_seconds", model="sim", shape="32x32") == 0.5
    assert val(smp, "diffusion_baseline_info", model="sim", fingerprint=cal.fingerprint_id) == 1


def test_sim_recompiles_after_warmup_and_memory_budget_oom():
    budget = int(sim_params().memory_bytes_per_pixel * 48 * 48)  # the sim's peak: bytes/pixel × pixels
    engine = SimEngine(EngineConfig(engine="sim", sim=sim_params(), memory_budget_bytes=budget))
    with TestClient(_app(engine, default_size="32x32", warmup_sizes=("32x32",))) as c:
        assert c.post(IMG, json={"prompt": "a", "size": "32x32"}).status_code == 200  # warmed: no recompile
        assert scrape(c)[("diffusion_compile_recompiles_total", frozenset({("model", "sim")}))] == 0
        assert c.post(IMG, json={"prompt": "a", "size": "48x48"}).status_code == 200  # new shape: 1
        oom = c.post(IMG, json={"prompt": "a", "size": "64x64"})
        assert c.post(IMG, json={"prompt": "a", "size": "48x48"}).status_code == 200  # compiled already
        smp = scrape(c)
    assert oom.status_code == 507 and "memory budget" in oom.json()["error"]["message"]
    assert val(smp, "diffusion_compile_recompiles_total", model="sim") == 1
    assert val(smp, "diffusion_gpu_memory_total_bytes", gpu="sim") == budget
    # the failed request's peak is exported (max over the window): what DiffusionGPUPeakMemoryHigh must see
    oom_peak = int(sim_params().memory_bytes_per_pixel * 64 * 64)
    assert val(smp, "diffusion_gpu_memory_peak_allocated_bytes", gpu="sim") == oom_peak
    assert val(smp, "diffusion_gpu_memory_peak_bytes", gpu="sim") / budget > 0.9
    assert val(smp, "diffusion_stage_memory_peak_bytes", model="sim", stage="vae_decode") == oom_peak
    assert val(smp, "diffusion_requests_total", model="sim", outcome="oom", status="507", traffic="user") == 1


def test_enable_faults_installs_the_fault_routes(monkeypatch):

    calls = []
    fake = types.ModuleType("diffbench.server.faults")
    fake.install_fault_routes = lambda app, service: calls.append((app, service))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "diffbench.server.faults", fake)
    app = _app(enable_faults=True)
    assert calls == [(app, app.state.service)]
    assert "/admin/faults" not in {getattr(r, "path", "") for r in _app().routes}  # never without the flag


class _Timer:
    def __init__(self, engine: SimEngine) -> None:
        self.engine, self.marked_after = engine, None

    def mark_warm(self) -> None:
        self.marked_after = self.engine.launches  # generations run before the snapshot


def test_the_instrumentation_is_marked_warm_after_the_warmups():
    engine = SimEngine(EngineConfig(engine="sim", sim=sim_params()))
    engine.timer = _Timer(engine)  # type: ignore[attr-defined]  # the diffusers engine's instrumentation
    with TestClient(_app(engine, warmup_sizes=("32x32", "64x64"))):
        pass
    assert engine.timer.marked_after == 2  # type: ignore[attr-defined]


def test_refresh_deployment_follows_a_run_time_change():
    engine = SimEngine(EngineConfig(engine="sim", sim=sim_params()))
    with TestClient(_app(engine)) as c:
        service = c.app.state.service
        before = c.get("/v1/models").json()["data"][0]["fingerprint_id"]
        engine._info = engine.info().model_copy(update={"cache": "first-block(threshold=0.5)"})
        service.refresh_deployment(vae_tiling=True)
        card = c.get("/v1/models").json()["data"][0]
        smp = scrape(c)
    assert card["fingerprint"]["cache"] == "first-block(threshold=0.5)" and card["fingerprint_id"] != before
    info = [dict(k[1]) for k in smp if k[0] == "diffusion_deployment_info"]
    assert len(info) == 1 and info[0]["fingerprint"] == card["fingerprint_id"]
    assert info[0]["cache"] == "first-block(threshold=0.5)" and info[0]["vae_tiling"] == "true"


def test_start_up_is_exported_by_phase():
    """``diffusion_startup_duration_seconds``: the engine's start (weights), the warmups (here the sim's
    first-call compile at each warmup size, slept for real) and process start → ready, each at least what it
    contains (lower bounds only: a busy machine makes every phase longer)."""
    compile_s = 0.1

    class SlowLoad(SimEngine):
        def start(self):  # type: ignore[no-untyped-def]
            time.sleep(0.15)  # a weight load
            return super().start()

    engine = SlowLoad(EngineConfig(engine="sim", sim=sim_params(compile_s=compile_s)))
    with TestClient(_app(engine, default_size="32x32", warmup_sizes=("32x32", "48x48"))) as c:
        smp = scrape(c)
    load = val(smp, "diffusion_startup_duration_seconds", model="sim", phase="load")
    warm = val(smp, "diffusion_startup_duration_seconds", model="sim", phase="warmup")
    ready = val(smp, "diffusion_startup_duration_seconds", model="sim", phase="ready")
    assert load >= 0.15
    assert warm >= 2 * compile_s  # two warmup sizes, each compiled once
    assert ready >= load + warm


def test_a_service_without_warmups_exports_no_warmup_phase():
    with TestClient(_app(default_size="32x32")) as c:
        smp = scrape(c)
    assert ("diffusion_startup_duration_seconds", frozenset({("model", "sim"), ("phase", "warmup")})) not in smp
    assert val(smp, "diffusion_startup_duration_seconds", model="sim", phase="load") >= 0


class _JoulesPerGeneration:
    """An energy meter whose counter rises by 7 J inside every generation of ``engine`` (nothing else)."""

    source, scope = "fake", "test device"

    def __init__(self, engine: SimEngine) -> None:
        self.joules = 0.0
        real = engine.generate

        def generate(request):  # type: ignore[no-untyped-def]
            self.joules += 7.0
            return real(request)

        engine.generate = generate  # type: ignore[method-assign]

    def read(self) -> float:
        return self.joules


def test_energy_counter_adds_what_the_meter_read_around_each_generation():
    from diffbench.server.app import create_app

    cfg = sim_config(default_size="64x64", warmup_sizes=("64x64",), default_steps=3)
    engine = SimEngine(EngineConfig(engine="sim", sim=sim_params()))
    app = create_app(cfg, engine=engine)
    meter = _JoulesPerGeneration(engine)
    app.state.service.energy = meter
    with TestClient(app) as c:
        assert val(scrape(c), "diffusion_energy_joules_total", model="sim", gpu="sim") == 0  # warmups not counted
        for prompt in ("a", "b", "c"):
            assert c.post(IMG, json={"prompt": prompt, "size": "64x64"}).status_code == 200
        smp = scrape(c)
        assert app.state.service.energy_note == "energy: fake (test device) -> diffusion_energy_joules_total"
    assert val(smp, "diffusion_energy_joules_total", model="sim", gpu="sim") == 3 * 7.0


def test_without_a_readable_counter_there_is_no_energy_sample_and_the_reason_is_given():
    with TestClient(_app(default_size="64x64", default_steps=3)) as c:
        assert c.post(IMG, json={"prompt": "a", "size": "64x64"}).status_code == 200
        text = c.get("/metrics").text
        note = c.app.state.service.energy_note  # type: ignore[attr-defined]
    assert "# TYPE diffusion_energy_joules_total counter" in text
    assert not [line for line in text.splitlines() if line.startswith("diffusion_energy_joules_total")]
    assert note == "energy: not available: the simulated engine does no device work"


def test_models_card_states_one_gpu_on_a_cuda_device_and_none_otherwise():
    with TestClient(_app()) as c:
        assert c.get("/v1/models").json()["data"][0]["gpus"] is None  # the sim engine: no GPU
        service = c.app.state.service
        service.info = service.info.model_copy(update={"device": "cuda:0"})
        assert c.get("/v1/models").json()["data"][0]["gpus"] == 1
