"""Per-request LoRA adapters on the service (``serve --lora NAME=DIR``; the images API's ``lora`` field, as
vLLM-Omni takes it): outputs differ by adapter and repeat per adapter, swaps are timed and exported."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from diffbench.engines.adapters import SIM_SWAP_S
from diffbench.engines.config import EngineConfig
from diffbench.server.app import create_app
from diffbench.server.config import ServerConfig

from .conftest import sim_params
from .test_monitoring import scrape, val

IMG = "/v1/images/generations"


def _pixels(resp) -> np.ndarray:  # type: ignore[no-untyped-def]
    assert resp.status_code == 200, resp.text
    raw = base64.b64decode(resp.json()["data"][0]["b64_json"])
    return np.asarray(Image.open(io.BytesIO(raw)).convert("RGB"))


def _ask(c: TestClient, lora: dict | None, seed: int = 3):  # type: ignore[no-untyped-def]
    body = {"prompt": "a red fox", "size": "64x64", "num_inference_steps": 2, "seed": seed}
    if lora is not None:
        body["lora"] = lora
    return c.post(IMG, json=body)


def _run_mix(cfg: ServerConfig) -> tuple[list, list, dict]:
    order = [None, {"name": "a"}, {"name": "a"}, {"name": "b", "scale": 1.0}, None]
    with TestClient(create_app(cfg)) as c:
        resps = [_ask(c, lora) for lora in order]
        smp = scrape(c)
    return [_pixels(r) for r in resps], [r.json()["stage_durations"].get("adapter_swap") for r in resps], smp


def _check(images: list, swaps: list, smp: dict, model: str) -> None:
    base, a, a2, b, base2 = images
    assert np.array_equal(a, a2) and np.array_equal(base, base2)  # the same adapter repeats its picture
    assert not np.array_equal(base, a) and not np.array_equal(a, b) and not np.array_equal(base, b)
    assert swaps[0] == 0.0 and swaps[2] == 0.0 and all(s > 0 for s in (swaps[1], swaps[3], swaps[4]))
    for name, n in (("a", 1), ("b", 1), ("none", 1)):
        assert val(smp, "diffusion_adapter_swaps_total", model=model, adapter=name) == n
    assert val(smp, "diffusion_adapter_swap_duration_seconds_count", model=model) == 3
    assert val(smp, "diffusion_adapter_swap_duration_seconds_sum", model=model) == pytest.approx(
        swaps[1] + swaps[3] + swaps[4], rel=1e-6)


def test_the_sim_service_switches_adapters_per_request() -> None:
    cfg = ServerConfig(engine=EngineConfig(engine="sim", sim=sim_params(), adapters={"a": "/a", "b": "/b"}))
    images, swaps, smp = _run_mix(cfg)
    _check(images, swaps, smp, "sim")
    assert swaps[1] == SIM_SWAP_S  # the sim's stated swap cost


@pytest.mark.slow  # makes two adapters with PEFT and serves tiny-flux
def test_tiny_flux_service_switches_real_adapters(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.lora_adapters import make_adapters

    from diffbench.engines.adapters import parse_adapters

    made = make_adapters(tmp_path)
    cfg = ServerConfig(engine=EngineConfig(engine="diffusers", model="tiny-flux",
                                           adapters=parse_adapters([f"{k}={v}" for k, v in made.items()])))
    images, swaps, smp = _run_mix(cfg)
    _check(images, swaps, smp, "tiny-flux")


@pytest.mark.parametrize(("lora", "fragment"), [
    ({"name": "c"}, "adapter 'c' is not loaded; loaded: a, b"),
    ({}, "give the name of a loaded adapter"),
    ({"name": "a", "local_path": "/elsewhere"}, "is not the directory adapter 'a' was loaded from"),
    ({"local_path": "/x/a"}, "is not the directory adapter 'a' was loaded from"),
    ({"name": "a", "scale": 5}, "less than or equal to 4"),
])
def test_a_bad_lora_field_is_a_400_naming_it(lora: dict, fragment: str) -> None:
    cfg = ServerConfig(engine=EngineConfig(engine="sim", sim=sim_params(), adapters={"a": "/a", "b": "/b"}))
    with TestClient(create_app(cfg)) as c:
        resp = _ask(c, lora)
    assert resp.status_code == 400 and fragment in resp.text, resp.text


def test_a_service_without_adapters_says_how_to_load_one() -> None:
    with TestClient(create_app(ServerConfig(engine=EngineConfig(engine="sim", sim=sim_params())))) as c:
        resp = _ask(c, {"name": "a"})
        assert _ask(c, None).json()["stage_durations"].get("adapter_swap") is None  # no key without adapters
        text = c.get("/metrics").text
    assert resp.status_code == 400 and "serve --lora NAME=DIR" in resp.text
    assert not [ln for ln in text.splitlines() if ln.startswith("diffusion_adapter_swaps_total")]
