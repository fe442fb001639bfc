"""``POST /admin/faults``: run-time changes of the engine, applied between generations, fingerprint unchanged."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from diffbench.server.faults import FaultController, parse_faults
from diffbench.server.http_errors import APIError


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({}, "one or more of"),
        ([1], "JSON object"),
        ({"nope": 1}, "unknown fault(s) nope"),
        ({"cache": "first-block"}, "AXIS=VALUE"),
        ({"cache": "teacup=0.1"}, "unknown axis 'teacup'"),
        ({"cache": "first-block=-1"}, "finite number >= 0"),
        ({"cache": "first-block=abc"}, "must be a number"),
        ({"vae_tiling": "off"}, "true or false"),
        ({"step_delay_s": -0.1}, ">= 0"),
        ({"step_delay_s": True}, ">= 0"),
        ({"calibration": 3}, "path of a calibration file"),
    ],
)
def test_bad_bodies_are_400_naming_the_field(body: Any, fragment: str) -> None:
    with pytest.raises(APIError) as exc:
        parse_faults(body)
    assert exc.value.status == 400 and fragment in exc.value.message


def test_good_bodies_are_canonical() -> None:
    assert parse_faults({"cache": "first-block=0.60", "vae_tiling": False, "step_delay_s": 0}) == {
        "cache": "first-block=0.6", "vae_tiling": False, "step_delay_s": 0.0}
    assert parse_faults({"cache": None}) == {"cache": None}


class _Vae:
    def __init__(self) -> None:
        self.use_tiling = True

    def enable_tiling(self) -> None:
        self.use_tiling = True

    def disable_tiling(self) -> None:
        self.use_tiling = False


class _Pipe:
    def __init__(self) -> None:
        self.vae = _Vae()


class _GatedEngine:
    """generate blocks until ``gate`` is set and records the VAE tiling it ran with."""

    def __init__(self) -> None:
        self.pipe = _Pipe()
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.saw_tiling: list[bool] = []

    def generate(self, request: Any, *, traffic: str = "user") -> str:
        self.traffic = traffic
        self.entered.set()
        assert self.gate.wait(10)
        self.saw_tiling.append(self.pipe.vae.use_tiling)
        return "done"


def test_a_change_waits_for_the_running_generation() -> None:
    engine = _GatedEngine()
    ctl = FaultController(engine)
    gen = threading.Thread(target=engine.generate, args=(None,), kwargs={"traffic": "probe"})
    gen.start()
    assert engine.entered.wait(5)
    applied = threading.Event()
    th = threading.Thread(target=lambda: (ctl.apply({"vae_tiling": False}), applied.set()))
    th.start()
    time.sleep(0.3)
    assert not applied.is_set() and engine.pipe.vae.use_tiling  # blocked behind the generation
    engine.gate.set()
    gen.join(5)
    th.join(5)
    assert applied.is_set() and engine.saw_tiling == [True] and engine.pipe.vae.use_tiling is False
    assert engine.traffic == "probe"  # keyword arguments pass through the lock wrapper


def test_sim_engine_has_nothing_to_change() -> None:
    class _NoPipe:
        def generate(self, request: Any) -> None:
            return None

    with pytest.raises(APIError) as exc:
        FaultController(_NoPipe()).apply({"vae_tiling": False})
    assert exc.value.status == 409


@pytest.mark.slow
def test_cache_threshold_changes_in_place_on_tiny_flux_without_changing_the_card() -> None:
    """The injected threshold gives the image a fresh engine with that cache gives (independent run)."""
    from fastapi.testclient import TestClient

    from diffbench.engines.base import GenerationRequest
    from diffbench.engines.knobs import build_cache_config
    from diffbench.engines.registry import EngineConfig, create_engine
    from diffbench.server.app import create_app
    from diffbench.server.config import ServerConfig
    from diffbench.server.faults import install_fault_routes

    def cached_engine(threshold: float) -> Any:
        eng = create_engine(EngineConfig())
        eng.start()
        eng.pipe.transformer.enable_cache(build_cache_config("first-block", str(threshold), eng.pipe, 6))
        return eng

    req = GenerationRequest(prompt="a red kite", width=64, height=64, steps=6, seed=3)
    reference = cached_engine(0.9).generate(req).images

    engine = cached_engine(0.05)
    engine.config = engine.config.model_copy(update={"cache": "first-block=0.05"})
    config = ServerConfig()
    app = create_app(config, engine, engine_started=True)
    install_fault_routes(app, app.state.service)
    body = {"prompt": "a red kite", "size": "64x64", "seed": 3, "num_inference_steps": 6,
            "response_format": "b64_json"}
    pipe = engine.pipe
    with TestClient(app) as client:
        card = client.get("/v1/models").json()
        before = engine.generate(req).images
        r = client.post("/admin/faults", json={"cache": "first-block=0.9", "vae_tiling": False})
        assert r.status_code == 200, r.text
        assert r.json()["state"]["cache"] == "first-block=0.9"
        assert client.get("/v1/models").json() == card  # the deployment the service reports is unchanged
        assert client.post("/v1/images/generations", json=body).status_code == 200
        after = engine.generate(req).images
        bad = client.post("/admin/faults", json={"cache": "first-block=x"})
        assert bad.status_code == 400 and "cache" in bad.text
    hooks = [h for m in pipe.transformer.modules()
             if (reg := getattr(m, "_diffusers_hook", None)) is not None
             for h in reg.hooks.values() if hasattr(h, "threshold")]
    assert hooks and all(h.threshold == 0.9 for h in hooks)
    assert pipe.vae.use_tiling is False
    assert np.array_equal(after, reference)
    assert not np.array_equal(before, after)


class _Exporter:
    def __init__(self) -> None:
        self.loaded: list[Any] = []

    def load_calibration(self, cal: Any) -> None:
        self.loaded.append(cal)


class _Service:
    def __init__(self, fingerprint_id: str) -> None:
        self.exporter = _Exporter()
        self.fingerprint_id = fingerprint_id


def _calibration(tmp_path: Any, fp: dict[str, Any]) -> str:
    cal_mod = pytest.importorskip("diffbench.monitor.calibration", reason="the calibration module (helper B) "
                                  "is not in this tree")
    cal = cal_mod.Calibration(model="tiny-flux", fingerprint=fp, fingerprint_id=cal_mod.fingerprint_id(fp),
                              shapes={"64x64": {"step_s": 0.004, "cache_hit_ratio": 0.375}})
    path = tmp_path / "cal.json"
    path.write_text(cal.model_dump_json())
    return str(path)


def test_calibration_loads_into_the_exporter_only_for_its_own_deployment(tmp_path: Any) -> None:
    path = _calibration(tmp_path, {"model": "tiny-flux", "cache": "first-block(threshold=0.3)"})
    from diffbench.monitor.calibration import fingerprint_id

    mine = fingerprint_id({"model": "tiny-flux", "cache": "first-block(threshold=0.3)"})
    svc = _Service(mine)
    ctl = FaultController(_GatedEngine(), service=svc)
    ctl.apply(parse_faults({"calibration": path}))
    assert [c.shapes["64x64"].step_s for c in svc.exporter.loaded] == [0.004]
    other = _Service(fingerprint_id({"model": "tiny-flux", "cache": "none"}))
    with pytest.raises(APIError) as exc:
        FaultController(_GatedEngine(), service=other).apply({"calibration": path})
    assert exc.value.status == 409 and "valid only for its deployment" in exc.value.message
    assert other.exporter.loaded == []
    with pytest.raises(APIError) as exc:
        ctl.apply({"calibration": str(tmp_path / "missing.json")})
    assert exc.value.status == 400 and "missing.json" in exc.value.message
