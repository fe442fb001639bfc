"""``POST /v1/chat/completions`` in vLLM-Omni's diffusion form, driven with raw httpx (no SDK speaks it).

The shapes checked here are vLLM-Omni's: the request of its benchmark's ``vllm-omni`` backend
(``benchmarks/diffusion/backends.py``), the answer of ``serving_chat.py`` (images as data URLs in the
assistant message content) and vLLM's ``ErrorResponse`` (``{"error": {message, type, param, code: int}}``).
"""

from __future__ import annotations

import base64
import io

import httpx
import numpy as np
import pytest
from PIL import Image

from diffbench.server.background import run_in_background

from .conftest import sim_config

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def url():
    with run_in_background(sim_config(), mode="thread") as base:
        yield base


def _decode(data_url: str) -> Image.Image:
    head, _, payload = data_url.partition(",")
    assert head == "data:image/png;base64"
    return Image.open(io.BytesIO(base64.b64decode(payload, validate=True)))


def test_chat_route_returns_the_image_as_a_data_url(url):
    body = {"model": "sim", "messages": [{"role": "user", "content": "a lighthouse at dusk"}],
            "extra_body": {"height": 48, "width": 80, "num_inference_steps": 3, "seed": 11, "fps": 8}}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["object"] == "chat.completion"
    msg = out["choices"][0]["message"]
    assert msg["role"] == "assistant" and out["choices"][0]["finish_reason"] == "stop"
    (part,) = msg["content"]
    assert part["type"] == "image_url"
    img = _decode(part["image_url"]["url"])
    assert img.size == (80, 48) and img.mode == "RGB"
    assert out["size"] == "80x48" and out["num_inference_steps"] == 3 and out["seed"] == 11
    assert out["ignored_parameters"] == ["fps"]  # accepted, not acted on: said so
    # fresh-user trial: a text-to-image request's strength (an edit field) was taken silently
    body["extra_body"]["strength"] = 0.5
    r_s = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
    assert r_s.status_code == 200 and r_s.json()["ignored_parameters"] == ["fps", "strength"]
    m = out["metrics"]
    assert m["service_time_s"] > 0 and set(m["stage_durations"]) >= {"denoise", "queue_wait"}
    # the same seed on the images route gives the same pixels (one generation path behind both routes)
    r2 = httpx.post(f"{url}/v1/images/generations", json={"prompt": "a lighthouse at dusk", "size": "80x48",
                                                         "num_inference_steps": 3, "seed": 11}, timeout=30)
    ref = Image.open(io.BytesIO(base64.b64decode(r2.json()["data"][0]["b64_json"])))
    assert np.array_equal(np.asarray(img), np.asarray(ref))


def test_flattened_fields_and_list_content_and_n(url):
    """The OpenAI SDK flattens ``extra_body=`` into the top level; a list content holds text parts."""
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "a red fox"}]}],
            "width": 32, "height": 64, "num_inference_steps": 2, "num_outputs_per_prompt": 2}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    parts = r.json()["choices"][0]["message"]["content"]
    assert [(_decode(p["image_url"]["url"]).size) for p in parts] == [(32, 64), (32, 64)]


ERRORS = [
    ({"messages": [{"role": "user", "content": "x"}], "extra_body": {"num_inference_steps": 0}},
     400, "extra_body.num_inference_steps", "greater than or equal to 1"),
    ({"messages": [{"role": "user", "content": "x"}], "extra_body": {"width": 64}}, 400, "height",
     "give both width and height"),
    ({"messages": [{"role": "system", "content": "x"}]}, 400, "messages", "no text prompt"),
    ({"messages": []}, 400, "messages", "at least 1 item"),
    ({"messages": [{"role": "user", "content": "x"}], "extra_body": {"num_frames": 9}}, 400, "num_frames",
     "POST /v1/videos"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "image_url",
      "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}, 400, "messages", "not a decodable"),
    ({"messages": [{"role": "user", "content": "x"}], "model": "other"}, 404, "model", "is not served here"),
    ({"messages": [{"role": "user", "content": "x"}], "stream": True}, 400, "stream", "streaming"),
]


@pytest.mark.parametrize("body, status, param, fragment", ERRORS, ids=[e[3] for e in ERRORS])
def test_errors_answer_vllms_error_response(url, body, status, param, fragment):
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == status and isinstance(err["code"], int)
    assert err["type"] == ("BadRequestError" if status == 400 else "NotFoundError")
    assert err["param"] == param and fragment in err["message"]


def test_a_body_that_is_not_json(url):
    r = httpx.post(f"{url}/v1/chat/completions", content=b"{", headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["param"] is None and "not valid JSON" in r.json()["error"]["message"]
