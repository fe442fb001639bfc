"""/health, /v1/models, /metrics, stage/memory headers, the OpenAI client, run_in_background, the CLI."""

from __future__ import annotations

import base64
import io
import socket

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from diffbench.cli.main import main
from diffbench.engines.base import GenerationRequest
from diffbench.engines.registry import EngineConfig
from diffbench.engines.sim import SimEngine
from diffbench.errors import ModelError
from diffbench.server.app import create_app
from diffbench.server.background import run_in_background
from diffbench.server.config import ServerConfig

from .conftest import GatedSim, sim_config, sim_params


def _refused(base_url: str) -> bool:
    host, port = base_url.removeprefix("http://").split(":")
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, int(port))) != 0


def test_health_models_metrics_and_timing_headers():
    with TestClient(create_app(sim_config(default_steps=3))) as c:
        health = c.get("/health")
        assert health.status_code == 200
        assert health.json()["status"] == "ok" and health.json()["model"] == "sim"
        models = c.get("/v1/models").json()
        assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["sim"]
        assert models["data"][0]["engine"] == "sim" and models["data"][0]["default_steps"] == 3

        r = c.post("/v1/images/generations", json={"prompt": "a", "size": "64x32", "n": 2})
        body = r.json()
        assert body["num_inference_steps"] == 3 and len(body["data"]) == 2
        stages = body["stage_durations"]
        assert set(stages) == {"text_encode", "denoise", "vae_decode", "other", "queue_wait"}
        # The sim engine's memory model: bytes_per_pixel × H × W × n (diffbench.engines.sim).
        expected = int(sim_params().memory_bytes_per_pixel * 64 * 32 * 2)
        assert body["peak_memory_bytes"] == expected and body["peak_memory_mb"] == expected / 2**20
        assert r.headers["X-Peak-Memory-Bytes"] == str(expected)
        timing = dict(part.split(";dur=") for part in r.headers["Server-Timing"].split(", "))
        assert float(timing["denoise"]) == pytest.approx(stages["denoise"] * 1e3, abs=1e-3)
        assert float(timing["service"]) == pytest.approx(body["service_time_s"] * 1e3, abs=1e-3)
        metrics = c.get("/metrics").text
        assert 'diffusion_requests_total{model="sim",outcome="ok",status="200",traffic="user"} 1.0' in metrics
        # 64x32 with n=2 is not on the allowlist (default: the default size 256x256): shape "other"
        assert 'diffusion_stage_duration_seconds_count{model="sim",shape="other",stage="denoise"} 1.0' in metrics


def test_openai_client_generates_an_image():
    openai = pytest.importorskip("openai")
    with run_in_background(sim_config(), mode="thread") as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=30)
        result = client.images.generate(
            model="sim",
            prompt="a lighthouse at dusk",
            size="64x64",
            response_format="b64_json",
            extra_body={"seed": 7, "num_inference_steps": 2},
        )
    image = Image.open(io.BytesIO(base64.b64decode(result.data[0].b64_json)))
    assert image.format == "PNG" and image.size == (64, 64)
    ref = (
        SimEngine(EngineConfig(engine="sim", sim=sim_params()))
        .generate(GenerationRequest(prompt="a lighthouse at dusk", width=64, height=64, steps=2, seed=7))
        .images[0]
    )
    np.testing.assert_array_equal(np.asarray(image.convert("RGB")), ref)  # PNG is lossless


@pytest.mark.parametrize("mode", ["thread", pytest.param("subprocess", marks=pytest.mark.e2e)])
def test_run_in_background_starts_and_stops(mode):
    import httpx

    with run_in_background(sim_config(), mode=mode) as url:
        assert url.startswith("http://127.0.0.1:")
        assert httpx.get(f"{url}/health", timeout=5).json()["status"] == "ok"
    assert _refused(url)


def test_run_in_background_reports_a_startup_failure():
    cfg = ServerConfig(engine=EngineConfig(engine="diffusers", model="/nonexistent/model/dir"))
    with pytest.raises(ModelError, match="failed to start|exited"), run_in_background(cfg, mode="thread"):
        pass


def test_cli_rejects_bad_options(capsys):
    assert main(["serve", "--engine", "nope"]) == 2
    assert "--engine 'nope' is not known" in capsys.readouterr().err
    assert main(["serve", "--engine", "sim", "--default-size", "big"]) == 2
    assert "not WIDTHxHEIGHT" in capsys.readouterr().err


@pytest.mark.parametrize("warm", [False, True])
def test_warmup_takes_the_first_call_cost_before_serving(warm):
    compile_s = 0.3  # the sim pays this once per new shape, like torch.compile
    engine = SimEngine(EngineConfig(engine="sim", sim=sim_params(compile_s=compile_s)))
    cfg = sim_config(warmup_sizes=("64x64",) if warm else ())
    with TestClient(create_app(cfg, engine=engine)) as c:
        first = c.post("/v1/images/generations", json={"prompt": "a", "size": "64x64"}).json()
        assert (first["service_time_s"] < compile_s) is warm
        assert c.get("/health").json()["completed"] == 1  # the warmup is not counted
    assert engine.launches == (2 if warm else 1)


def test_sim_engine_behind_http_runs_in_real_time():
    app = create_app(ServerConfig(engine=EngineConfig(engine="sim")))  # SimParams(realtime=False) by default
    assert app.state.service.engine.p.realtime is True


def test_inference_time_beside_service_time():
    with TestClient(create_app(sim_config())) as c:
        body = c.post(
            "/v1/images/generations", json={"prompt": "a", "size": "64x64", "num_inference_steps": 2}
        ).json()
    engine_s = sum(v for k, v in body["stage_durations"].items() if k != "queue_wait")
    assert body["inference_time_s"] == body["service_time_s"]  # one measurement, the name AIPerf/SGLang read
    assert body["inference_time_s"] == pytest.approx(engine_s, abs=0.05)  # the sim's own stage plan
    assert body["inference_time_s"] > 0


def test_width_and_height_are_honoured_without_size():
    with TestClient(create_app(sim_config())) as c:
        r = c.post("/v1/images/generations", json={"prompt": "a", "width": 64, "height": 32, "seed": 4})
        same = c.post("/v1/images/generations", json={"prompt": "a", "size": "64x32", "width": 64, "seed": 4})
    assert r.status_code == 200 and r.json()["size"] == "64x32"
    image = Image.open(io.BytesIO(base64.b64decode(r.json()["data"][0]["b64_json"])))
    assert image.size == (64, 32)  # PIL: (width, height)
    assert same.status_code == 200 and same.json()["data"] == r.json()["data"]  # agreeing fields are fine


def _count(metrics: str, outcome: str, status: int) -> float:
    key = f'diffusion_requests_total{{model="sim",outcome="{outcome}",status="{status}",traffic="user"}} '
    line = next((x for x in metrics.splitlines() if x.startswith(key)), None)
    return 0.0 if line is None else float(line.rsplit(" ", 1)[1])


def test_every_outcome_is_counted_with_its_status():
    engine = GatedSim(EngineConfig(engine="sim", sim=sim_params(fail_above_pixels=64 * 64)))  # "boom" fails
    engine.gate.set()
    with TestClient(create_app(sim_config(), engine=engine)) as c:
        url = "/v1/images/generations"
        sent = [
            (c.post(url, json={"prompt": "a", "size": "32x32"}), "ok", 200),
            (c.post(url, json={"prompt": "a", "size": "7x7"}), "invalid", 400),
            (c.post(url, json={"prompt": "a", "n": 99}), "invalid", 400),
            (c.post(url, json={"prompt": "a", "model": "nope"}), "not_found", 404),
            (c.get("/v1/videos/video_unknown"), "not_found", 404),
            (c.get("/v1/no/such/path"), "not_found", 404),
            (c.post(url, json={"prompt": "boom", "size": "32x32"}), "error", 500),
            (c.post(url, json={"prompt": "a", "size": "128x128"}), "oom", 507),
        ]
        for resp, _, status in sent:
            assert resp.status_code == status, resp.text
        c.get("/health")  # health checks and scrapes are not diffusion requests
        metrics = c.get("/metrics").text
    expected: dict[tuple[str, int], int] = {}
    for _, outcome, status in sent:
        expected[(outcome, status)] = expected.get((outcome, status), 0) + 1
    for (outcome, status), n in expected.items():
        assert _count(metrics, outcome, status) == n, (outcome, status, metrics)
    total = sum(
        float(x.rsplit(" ", 1)[1]) for x in metrics.splitlines() if x.startswith("diffusion_requests_total{")
    )
    assert total == len(sent)


def test_rejections_are_counted_as_429():
    with TestClient(create_app(sim_config(max_queue=0))) as c:  # max_queue 0: nothing may wait
        r = c.post("/v1/images/generations", json={"prompt": "a", "size": "32x32"})
        v = c.post("/v1/videos", json={"prompt": "a", "size": "32x32", "num_frames": 2})
        metrics = c.get("/metrics").text
    assert r.status_code == 429 and v.status_code == 429
    assert _count(metrics, "rejected", 429) == 2
