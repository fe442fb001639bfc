"""Input validation: status, field and fix in the message; never a 5xx for bad input."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from diffbench.engines.base import GenerationRequest
from diffbench.engines.registry import EngineConfig
from diffbench.engines.sim import SimEngine
from diffbench.errors import ShapeError
from diffbench.server.app import create_app
from diffbench.server.config import Limits

from .conftest import sim_config, sim_params

URL = "/v1/images/generations"


class Multiple32Sim(SimEngine):
    """An engine that, like a real pipeline, refuses sides that are not multiples of 32."""

    def validate(self, request: GenerationRequest) -> None:
        if request.width % 32:
            raise ShapeError(
                f"--width {request.width} is not a multiple of 32; use {request.width // 32 * 32}"
            )


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(sim_config(limits=Limits(max_prompt_chars=50)))) as c:
        yield c


def _err(resp):
    body = resp.json()
    assert set(body) == {"error"}, body
    return body["error"]


def test_engine_shape_error_is_400():
    engine = Multiple32Sim(EngineConfig(engine="sim", sim=sim_params()))
    with TestClient(create_app(sim_config(), engine=engine)) as c:
        resp = c.post(URL, json={"prompt": "a", "size": "48x64"})
        assert resp.status_code == 400
        err = _err(resp)
        assert err["code"] == "invalid_size" and err["param"] == "size"
        # one check for the service's multiple (8) and the engine's (32): the hint is valid for both
        assert "width 48 is not a multiple of 32 (use 32 or 64)" in err["message"]
        assert "--" not in err["message"]  # API field names, not the CLI's flags
        assert c.post(URL, json={"prompt": "a", "size": "64x48"}).status_code == 200
    assert engine.launches == 1  # the refused request never reached the device


def test_unknown_fields_are_reported_back(client):
    resp = client.post(URL, json={"prompt": "a", "size": "32x32", "true_cfg_scale": 4.0, "frobnicate": 1})
    assert resp.status_code == 200
    assert resp.json()["ignored_parameters"] == ["frobnicate", "true_cfg_scale"]


def test_invalid_requests_are_counted(client):
    before = _invalid_count(client)
    client.post(URL, json={"prompt": "a", "n": 11})
    client.post(URL, json={"prompt": "a", "size": "7x7"})
    assert _invalid_count(client) == before + 2


def _invalid_count(client) -> float:
    line = next(x for x in client.get("/metrics").text.splitlines() if 'outcome="invalid"' in x)
    return float(line.rsplit(" ", 1)[1])
