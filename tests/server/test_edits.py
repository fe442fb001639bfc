"""``POST /v1/images/edits`` (OpenAI multipart) driven by the real ``openai`` client, the chat route's data-URL
input images, and every bad edit input (one row each).

A recording sim engine keeps the requests it got, so the tests check what reached the engine against values
computed here independently: the input picture decoded by Pillow pixel for pixel, OpenAI's transparent mask
converted to white = repaint by numpy, strength, steps and seed as sent.
"""

from __future__ import annotations

import base64
import io

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from diffbench.engines.base import GenerationRequest, GenerationResult
from diffbench.engines.registry import EngineConfig
from diffbench.engines.sim import SimEngine
from diffbench.server.app import create_app
from diffbench.server.background import run_in_background
from diffbench.server.config import Limits

from .conftest import sim_config, sim_params

pytestmark = pytest.mark.timeout(60)

EDITS = "/v1/images/edits"


class RecordingSim(SimEngine):
    """The sim engine, keeping every request it was asked to generate."""

    def __init__(self) -> None:
        super().__init__(EngineConfig(engine="sim", sim=sim_params()))
        self.requests: list[GenerationRequest] = []

    def generate(self, request: GenerationRequest) -> GenerationResult:
        self.requests.append(request)
        return super().generate(request)


def _pixels(w: int, h: int, seed: int = 0, channels: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, channels), dtype=np.uint8)


def _png(arr: np.ndarray, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format=fmt)
    return buf.getvalue()


def _decoded(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(img)


@pytest.fixture(scope="module")
def live():
    engine = RecordingSim()
    with run_in_background(sim_config(), mode="thread", engine=engine) as base:
        yield base, engine


def test_openai_client_edit_reaches_the_engine(live):
    """``client.images.edit`` with an image, an OpenAI (transparent-area) mask, n=2 and the vLLM-Omni extras."""
    openai = pytest.importorskip("openai")
    base, engine = live
    src = _pixels(64, 48, seed=1)
    alpha = np.full((48, 64), 255, np.uint8)
    alpha[10:20, 5:40] = 0  # OpenAI: transparent = the area to edit
    mask = np.dstack([_pixels(64, 48, seed=2), alpha])
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
    engine.requests.clear()
    r = client.images.edit(
        model="sim", image=("in.png", _png(src), "image/png"), mask=("mask.png", _png(mask), "image/png"),
        prompt="a red door", n=2, size="32x32", response_format="b64_json",
        extra_body={"num_inference_steps": 5, "seed": 17, "strength": 0.4, "negative_prompt": "blur"},
    )
    assert len(r.data) == 2 and r.size == "32x32"
    for item in r.data:
        assert _decoded(base64.b64decode(item.b64_json)).shape == (32, 32, 3)
    extra = r.model_extra or {}
    assert extra["strength"] == 0.4 and extra["seed"] == 17 and extra["num_inference_steps"] == 5
    assert "image_encode" in extra["stage_durations"]
    (req,) = engine.requests
    assert req.is_edit and (req.width, req.height, req.batch, req.steps, req.seed) == (32, 32, 2, 5, 17)
    assert req.strength == 0.4 and req.negative_prompt == "blur" and req.prompt == "a red door"
    np.testing.assert_array_equal(_decoded(req.image), src)  # the picture sent, pixel for pixel
    np.testing.assert_array_equal(_decoded(req.mask), np.where(alpha == 0, 255, 0).astype(np.uint8))


def test_openai_client_image_list_and_default_size(live):
    """The SDK sends a list as ``image[]``; without ``size`` the output keeps the input's size; a
    greyscale mask (white = repaint) is passed unchanged."""
    openai = pytest.importorskip("openai")
    base, engine = live
    src = _pixels(48, 32, seed=3)
    grey = np.zeros((32, 48), np.uint8)
    grey[:, :16] = 255
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
    engine.requests.clear()
    r = client.images.edit(image=[("a.png", _png(src), "image/png")], mask=("m.png", _png(grey), "image/png"),
                           prompt="snow")
    assert r.size == "48x32" and _decoded(base64.b64decode(r.data[0].b64_json)).shape == (32, 48, 3)
    (req,) = engine.requests
    assert (req.width, req.height) == (48, 32) and req.strength == GenerationRequest.model_fields["strength"].default
    np.testing.assert_array_equal(_decoded(req.mask), grey)


def test_chat_route_with_a_data_url_input_image(live):
    """vLLM-Omni's chat form with an ``image_url`` data-URL part is an edit (raw httpx: no SDK speaks it)."""
    base, engine = live
    src = _pixels(64, 32, seed=4)
    url = "data:image/png;base64," + base64.b64encode(_png(src)).decode()
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "at night"},
                                                      {"type": "image_url", "image_url": {"url": url}}]}],
            "extra_body": {"num_inference_steps": 3, "seed": 9, "strength": 0.75}}
    engine.requests.clear()
    r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["size"] == "64x32" and out["strength"] == 0.75
    assert "image_encode" in out["metrics"]["stage_durations"]
    (part,) = out["choices"][0]["message"]["content"]
    head, _, payload = part["image_url"]["url"].partition(",")
    assert head == "data:image/png;base64" and _decoded(base64.b64decode(payload)).shape == (32, 64, 3)
    (req,) = engine.requests
    assert req.prompt == "at night" and req.strength == 0.75 and (req.steps, req.seed) == (3, 9)
    np.testing.assert_array_equal(_decoded(req.image), src)


def test_text_to_image_answers_have_no_image_encode_stage(live):
    base, _ = live
    r = httpx.post(f"{base}/v1/images/generations", json={"prompt": "a", "size": "32x32"}, timeout=30)
    assert r.status_code == 200 and "image_encode" not in r.json()["stage_durations"]


@pytest.fixture(scope="module")
def client():
    limits = Limits(max_side=128, max_input_bytes=40_000)
    with TestClient(create_app(sim_config(limits=limits, default_size="32x32"), engine=RecordingSim())) as c:
        yield c


_OK = _png(_pixels(32, 32))
_BIG = _png(_pixels(120, 120, seed=5))  # ~43 kB of incompressible pixels: above max_input_bytes 40,000
_GIF = _png(_pixels(32, 32), fmt="GIF")
_WIDE = _png(np.zeros((16, 160, 3), np.uint8))  # 160 px wide: above max_side 128

EDIT_ROWS = [
    # (form fields, files, status, param, fragments)
    ({"prompt": "a"}, [], 400, "image", ["no input image"]),
    ({"prompt": "a"}, [("image", ("x.png", b"not an image", "image/png"))], 400, "image", ["not a decodable"]),
    ({"prompt": "a"}, [("image", ("x.png", b"", "image/png"))], 400, "image", ["empty"]),
    ({"prompt": "a"}, [("image", ("x.png", _OK, "image/png")), ("mask", ("m.png", _png(_pixels(16, 32)), "image/png"))],
     400, "mask", ["16x32 is not the size of image (32x32)"]),
    ({"prompt": "a"}, [("image", ("x.png", _BIG, "image/png"))], 400, "image", ["above this service's limit",
                                                                              "--max-input-mb"]),
    ({"prompt": "a"}, [("image", ("x.gif", _GIF, "image/gif"))], 400, "image", ["GIF", "PNG, JPEG or WebP"]),
    ({"prompt": "a"}, [("image", ("x.png", _WIDE, "image/png"))], 400, "image", ["160x16", "--max-side"]),
    ({"prompt": "a"}, [("image", ("a.png", _OK, "image/png")), ("image", ("b.png", _OK, "image/png"))], 400,
     "image", ["2 files", "one input image"]),
    ({"prompt": "a", "strength": "0"}, [("image", ("x.png", _OK, "image/png"))], 400, "strength", ["greater than 0"]),
    ({"prompt": "a", "strength": "1.5"}, [("image", ("x.png", _OK, "image/png"))], 400, "strength", ["less than"]),
    ({"prompt": "  "}, [("image", ("x.png", _OK, "image/png"))], 400, "prompt", ["empty"]),
    ({}, [("image", ("x.png", _OK, "image/png"))], 400, "prompt", ["prompt"]),
    ({"prompt": "a", "image": "x"}, [], 400, "image", ["upload the image as a file"]),
    ({"prompt": "a", "size": "36x32"}, [("image", ("x.png", _OK, "image/png"))], 400, "size", ["width 36"]),
    ({"prompt": "a", "response_format": "xml"}, [("image", ("x.png", _OK, "image/png"))], 400, "response_format",
     ["b64_json", "url"]),
    ({"prompt": "a", "model": "other"}, [("image", ("x.png", _OK, "image/png"))], 404, "model", ["not served"]),
]


@pytest.mark.parametrize("fields, files, status, param, fragments", EDIT_ROWS)
def test_bad_edit_inputs(client, fields, files, status, param, fragments):
    r = client.post(EDITS, data=fields, files=files) if files else client.post(EDITS, data=fields)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param
    for frag in fragments:
        assert frag in err["message"], err["message"]


def test_a_json_body_is_refused_naming_the_multipart_form(client):
    r = client.post(EDITS, json={"prompt": "a", "image": "x"})
    assert r.status_code == 400 and "multipart/form-data" in r.json()["error"]["message"]


def test_unknown_form_fields_are_listed_as_ignored(client):
    r = client.post(EDITS, data={"prompt": "a", "input_fidelity": "high", "quality": "hd"},
                    files=[("image", ("x.png", _OK, "image/png"))])
    assert r.status_code == 200, r.text
    assert r.json()["ignored_parameters"] == ["input_fidelity", "quality"]


@pytest.mark.parametrize("url, fragment", [
    ("https://example.com/x.png", "is not a data URL"),
    ("data:image/png;base64,%%%", "not valid base64"),
    ("data:image/png;base64," + base64.b64encode(b"hello").decode(), "not a decodable"),
    ("data:text/plain,hello", "is not data:image/<type>;base64"),
])
def test_bad_chat_input_images(client, url, fragment):
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                      {"type": "image_url", "image_url": {"url": url}}]}]}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "messages" and err["code"] == 400 and fragment in err["message"]


def test_two_chat_input_images_are_refused(client):
    url = "data:image/png;base64," + base64.b64encode(_OK).decode()
    part = {"type": "image_url", "image_url": {"url": url}}
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, part, part]}]}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400 and "2 input images" in r.json()["error"]["message"]


@pytest.mark.parametrize("steps, strength", [(8, 0.6), (10, 0.3), (28, 0.75), (4, 1.0), (3, 0.1), (50, 0.35)])
def test_denoise_steps_of_an_edit_match_diffusers_img2img(steps, strength):
    """Admission control times an edit by the steps it runs: diffusers' own ``get_timesteps`` says how many."""
    from types import SimpleNamespace

    diffusers = pytest.importorskip("diffusers")
    from diffbench.server.admission import denoise_steps, shape_key

    scheduler = diffusers.FlowMatchEulerDiscreteScheduler()
    scheduler.set_timesteps(steps)
    pipe = SimpleNamespace(scheduler=scheduler)
    from diffusers.pipelines.flux.pipeline_flux_img2img import FluxImg2ImgPipeline

    timesteps, run = FluxImg2ImgPipeline.get_timesteps(pipe, steps, strength, "cpu")
    edit = GenerationRequest(prompt="p", width=32, height=32, steps=steps, image=_OK, strength=strength)
    assert denoise_steps(edit) == run == len(timesteps)
    plain = GenerationRequest(prompt="p", width=32, height=32, steps=steps)
    assert denoise_steps(plain) == steps and shape_key(plain) != shape_key(edit)
