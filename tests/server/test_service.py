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

from .conftest import sim_config, sim_params


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
        assert 'diffusion_requests_total{model="sim",outcome="ok",status="200"} 1.0' in metrics
        assert 'diffusion_stage_duration_seconds_count{model="sim",stage="denoise"} 1.0' in metrics


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


@pytest.mark.parametrize("mode", ["thread", "subprocess"])
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
