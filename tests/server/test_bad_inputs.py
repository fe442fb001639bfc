"""Every bad input of the reference service, one row each: HTTP (request → status → param → message
fragments) and the ``serve`` command line (args → exit code → message fragments).

Validation errors answer 400 with OpenAI's error object (``type: invalid_request_error``, ``param`` the
field, never a JSON offset); messages use API field names, never CLI flags such as ``--width``.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from diffbench.cli.main import main
from diffbench.server.app import create_app
from diffbench.server.config import Limits

from .conftest import WanLikeSim, sim_config

IMG = "/v1/images/generations"
VID = "/v1/videos"
RAW = object()  # marker: the body is raw bytes, sent as application/json


@pytest.fixture(scope="module")
def client():
    from diffbench.engines.registry import EngineConfig

    from .conftest import sim_params

    limits = Limits(max_prompt_chars=50, max_pixels=70_000)
    engine = WanLikeSim(EngineConfig(engine="sim", sim=sim_params()))
    with TestClient(create_app(sim_config(limits=limits, default_size="32x32"), engine=engine)) as c:
        yield c


HTTP_ROWS = [
    # (method, path, body, status, param, fragments)
    ("POST", IMG, {"prompt": "a", "size": "64by64"}, 400, "size", ["not WIDTHxHEIGHT"]),
    (
        "POST",
        IMG,
        {"prompt": "a", "size": "100x64"},
        400,
        "size",
        ["width 100", "multiple of 16", "96 or 112"],  # the model's multiple, not only the service's 8
    ),
    ("POST", IMG, {"prompt": "a", "size": "65x64"}, 400, "size", ["width 65", "multiple of 16", "64 or 80"]),
    ("POST", IMG, {"prompt": "a", "size": "72x64"}, 400, "size", ["width 72", "multiple of 16", "64 or 80"]),
    ("POST", IMG, {"prompt": "a", "size": "64x8192"}, 400, "size", ["height 8192", "16..4096"]),
    ("POST", IMG, {"prompt": "a", "size": 16}, 400, "size", ["valid string"]),
    ("POST", IMG, {"prompt": "a", "size": "40x32"}, 400, "size", ["width 40", "multiple of 16"]),
    ("POST", IMG, {"prompt": "a", "width": 64}, 400, "height", ["give both width and height"]),
    ("POST", IMG, {"prompt": "a", "size": "64x64", "width": 32}, 400, "width", ["conflicts with size"]),
    ("POST", IMG, {"prompt": "a", "width": 40, "height": 32}, 400, "width", ["width 40", "multiple of 16"]),
    ("POST", IMG, {"prompt": "a", "width": 32, "height": 40}, 400, "height", ["height 40", "multiple of 16"]),
    ("POST", IMG, {"prompt": "a", "width": 32, "height": 36}, 400, "height", ["height 36", "32 or 48"]),
    ("POST", IMG, {"prompt": "a", "size": "512x512"}, 400, "size", ["--max-pixels 70000"]),
    ("POST", IMG, {"prompt": "a", "size": "128x64", "n": 10}, 400, "size", ["n=10", "--max-pixels"]),
    (
        "POST",
        IMG,
        {"prompt": "a", "num_inference_steps": 0},
        400,
        "num_inference_steps",
        ["greater than or equal to 1"],
    ),
    (
        "POST",
        IMG,
        {"prompt": "a", "num_inference_steps": 201},
        400,
        "num_inference_steps",
        ["--max-steps 200"],
    ),
    ("POST", IMG, {"prompt": "a", "n": 11}, 400, "n", ["11 is above", "--max-n 10"]),
    ("POST", IMG, {"prompt": "a", "n": 0}, 400, "n", ["greater than or equal to 1"]),
    ("POST", IMG, {"prompt": "a", "n": "x"}, 400, "n", ["valid integer"]),
    ("POST", IMG, {"prompt": ""}, 400, "prompt", ["at least 1 character"]),
    ("POST", IMG, {"prompt": "   "}, 400, "prompt", ["empty or only whitespace"]),
    ("POST", IMG, {"prompt": "x" * 51}, 400, "prompt", ["51 characters", "limit of 50"]),
    ("POST", IMG, {"prompt": "a", "guidance_scale": 25}, 400, "guidance_scale", ["less than or equal to 20"]),
    ("POST", IMG, {"prompt": "a", "seed": -1}, 400, "seed", ["greater than or equal to 0"]),
    ("POST", IMG, {"prompt": "a", "response_format": "xml"}, 400, "response_format", ["b64_json", "url"]),
    ("POST", IMG, {"size": "64x64"}, 400, "prompt", ["Field required"]),
    ("POST", IMG, b'{"prompt": "a", size: 1}', 400, None, ["not valid JSON", "at character 16"]),
    ("POST", IMG, b"[16]", 400, "body", ["valid dictionary"]),
    (
        "POST",
        IMG,
        {"prompt": "a", "size": "32x32", "num_frames": 1},
        400,
        "model",
        ["is a video model", "POST /v1/videos"],
    ),
    ("POST", IMG, {"prompt": "a", "model": "other"}, 404, "model", ["'other' is not served", "'sim'"]),
    (
        "POST",
        VID,
        {"prompt": "x", "size": "32x32", "num_frames": 0},
        400,
        "num_frames",
        ["greater than or equal to 1"],
    ),
    ("POST", VID, {"prompt": "x", "size": "32x32", "num_frames": 8}, 400, "num_frames", ["4k+1", "5 or 9"]),
    ("POST", VID, {"prompt": "x", "size": "40x32", "num_frames": 9}, 400, "size", ["width 40", "32 or 48"]),
    ("POST", VID, {"prompt": "x", "size": "72x64", "num_frames": 8}, 400, "size", ["width 72", "64 or 80"]),
    ("POST", VID, {"prompt": "x", "width": 32}, 400, "height", ["give both width and height"]),
    ("POST", VID, {"prompt": "x", "size": "32x32", "height": 48}, 400, "height", ["conflicts with size"]),
    ("POST", VID, {"prompt": "x", "size": "32x32", "seconds": 0}, 400, "seconds", ["greater than 0"]),
    ("POST", VID, {"prompt": "x", "size": "32x32", "fps": 0}, 400, "fps", ["greater than or equal to 1"]),
    (
        "POST",
        VID,
        {"prompt": "x", "size": "32x32", "seconds": 1e9},
        400,
        "seconds",
        ["--max-frames 257", "16.0625 s"],
    ),
    ("POST", VID, b'{"prompt": "x", "seconds": Infinity}', 400, "seconds", ["finite number"]),
    (
        "POST",
        VID,
        {"prompt": "x", "size": "64x64", "num_frames": 21},
        400,
        "size",
        ["21 frames", "--max-pixels"],
    ),
    ("POST", VID, b"[1, 2]", 400, None, ["JSON object"]),
    ("GET", "/v1/videos/video_nope", None, 404, "id", ["does not exist"]),
    ("GET", "/v1/videos/video_nope/content", None, 404, "id", ["does not exist"]),
    ("GET", "/v1/nothing", None, 404, None, ["no such route"]),
    ("DELETE", "/v1/models", None, 405, None, ["DELETE is not allowed"]),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "param", "fragments"), HTTP_ROWS)
def test_http_bad_input(client, method, path, body, status, param, fragments):
    if isinstance(body, bytes):
        resp = client.request(method, path, content=body, headers={"content-type": "application/json"})
    else:
        resp = client.request(method, path, json=body)
    assert resp.status_code == status, resp.text
    payload = resp.json()
    assert set(payload) == {"error"}, payload
    err = payload["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param
    for frag in fragments:
        assert frag in err["message"], err["message"]
    assert not re.search(r"--(width|height|frames|steps|batch|shapes)\b", err["message"]), err["message"]


BUSY = "<a port in use>"  # replaced by the port of a listening socket
NO_MODEL = ["--model", "/nonexistent/model"]  # a check that runs before the model loads names its flag

CLI_ROWS = [
    # (args after "serve", exit code, fragments of stderr)
    (["--port", BUSY, *NO_MODEL], 2, ["--port", "already in use", "another --port"]),
    (["--host", "0.0.0.0.0", *NO_MODEL], 2, ["--host '0.0.0.0.0' does not resolve"]),
    (["--host", "203.0.113.7", *NO_MODEL], 2, ["--host 203.0.113.7", "not an address of this machine"]),
    (["--engine", "sim", "--max-wait", "nan"], 2, ["--max-wait nan", "finite number >= 0.001"]),
    (["--engine", "sim", "--max-wait", "inf"], 2, ["--max-wait inf", "finite number"]),
    (["--engine", "sim", "--drain", "nan"], 2, ["--drain nan", "finite number >= 0"]),
    (["--engine", "sim", "--drain", "inf"], 2, ["--drain inf", "finite number"]),
    (["--engine", "sim", "--sim-step-s", "nan"], 2, ["--sim-step-s nan", "finite number"]),
    # the hint comes from the model's own multiple (16 for Flux), not only the service's 8
    (["--default-size", "100x100"], 2, ["--default-size", "width 100", "96 or 112"]),
    (["--engine", "nope"], 2, ["--engine 'nope' is not known"]),
    (["--engine", "sim", "--default-size", "big"], 2, ["--default-size", "not WIDTHxHEIGHT"]),
    (["--engine", "sim", "--default-size", "100x64"], 2, ["--default-size", "width 100", "multiple of 8"]),
    (["--engine", "sim", "--warmup", "7x7"], 2, ["--warmup", "7x7", "outside 16..4096"]),
    (["--engine", "sim", "--warmup", "64x64", "--warmup", "9000x64"], 2, ["--warmup", "9000x64"]),
    (
        ["--engine", "sim", "--max-pixels", "1000", "--default-size", "64x64"],
        2,
        ["--default-size", "--max-pixels"],
    ),
    (["--engine", "sim", "--default-steps", "500"], 2, ["--default-steps 500", "--max-steps 200"]),
    (["--engine", "sim", "--drain", "-1"], 2, ["--drain -1.0", "finite number >= 0"]),
    (["--engine", "sim", "--max-wait", "0"], 2, ["--max-wait 0.0", ">= 0.001"]),
    (["--engine", "sim", "--max-pixels", "0"], 2, ["--max-pixels"]),
    # monitoring flags (issue 11)
    (["--engine", "sim", "--cache", "first-block"], 2, ["--cache 'first-block'", "AXIS=VALUE"]),
    (["--engine", "sim", "--cache", "nope=1"], 2, ["--cache 'nope=1'", "unknown cache", "first-block"]),
    (["--engine", "sim", "--cache", "first-block=-1"], 2, ["--cache 'first-block=-1'", ">= 0"]),
    (["--engine", "sim", "--cache", "first-block=0.1"], 2, ["--cache", "sim engine has no step cache"]),
    (["--engine", "sim", "--compile"], 2, ["--compile", "sim engine"]),
    (["--engine", "sim", "--vae-tiling"], 2, ["--vae-tiling", "sim engine"]),
    (["--engine", "sim", "--memory-budget", "lots"], 2, ["--memory-budget 'lots'", "2GiB"]),
    (["--engine", "sim", "--memory-budget", "2XB"], 2, ["--memory-budget '2XB'", "not a size"]),
    (["--engine", "sim", "--memory-budget", "0"], 2, ["--memory-budget '0'", "at least 1 byte"]),
    # a budget below a warmup's peak: one line naming both flags, not a 44-line traceback (user trial)
    (["--engine", "sim", "--memory-budget", "1", "--warmup", "64x64"], 2,
     ["--warmup 64x64", "ran out of memory", "--memory-budget"]),
    (["--engine", "sim", "--calibration", "/nonexistent/cal.json"], 2, ["/nonexistent/cal.json", "not found",
                                                                          "diffbench monitor calibrate"]),
    (["--engine", "sim", "--calibration", __file__], 2, ["test_bad_inputs.py", "not JSON"]),
    (["--engine", "sim", "--slo", "nan"], 2, ["--slo nan", "finite number of seconds > 0"]),
    (["--engine", "sim", "--slo", "-1"], 2, ["--slo -1.0", "> 0"]),
    (["--engine", "sim", "--shapes", "big"], 2, ["--shapes 'big'", "not a shape label", "256x256"]),
    (["--engine", "sim", "--shapes", ","], 2, ["--shapes is empty"]),
    (["--engine", "sim", "--shapes", "64x64,64x64"], 2, ["--shapes", "64x64 is listed twice"]),
    (["--engine", "sim", "--request-timeout", "0"], 2, ["--request-timeout 0.0", "> 0"]),
    # issue 14 item 2: the edits input-size limit
    (["--engine", "sim", "--max-input-mb", "nan"], 2, ["--max-input-mb nan", "finite number of MiB"]),
    (["--engine", "sim", "--max-input-mb", "0"], 2, ["--max-input-mb 0.0", "at least 1 byte"]),
    (["--engine", "sim", "--max-input-mb", "-3"], 2, ["--max-input-mb -3.0", "finite number of MiB"]),
    # LoRA adapters are declared at start, each a directory with LoRA weights
    (["--engine", "sim", "--lora", "style"], 2, ["--lora 'style'", "NAME=DIR"]),
    (["--engine", "sim", "--lora", "s=/nonexistent/lora"], 2, ["--lora s=/nonexistent/lora", "no such directory"]),
    (["--engine", "sim", "--lora", f"s={Path(__file__).parent}"], 2, ["--lora s=", "no LoRA weights in it",
                                                                       "pytorch_lora_weights.safetensors"]),
]


@pytest.mark.parametrize(("args", "code", "fragments"), CLI_ROWS)
def test_serve_bad_args(capsys, args, code, fragments):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        args = [str(busy.getsockname()[1]) if a == BUSY else a for a in args]
        assert main(["serve", "--port", "0", *args]) == code
    err = capsys.readouterr().err
    for frag in fragments:
        assert frag in err, err
    assert "Traceback" not in err


def test_wan_frame_message_is_true():
    """The engine refuses a missing frame count, not 1 (which is 4*0+1 and accepted)."""
    from diffbench.engines.base import GenerationRequest
    from diffbench.engines.diffusers_engine import check_request
    from diffbench.errors import ShapeError

    req = GenerationRequest(prompt="a", width=32, height=32, steps=1)
    check_request("WanPipeline", req.model_copy(update={"frames": 1}))  # accepted
    with pytest.raises(ShapeError) as exc:
        check_request("WanPipeline", req)
    assert "gives no number of frames" in str(exc.value) and "e.g. 1, 9 or 33" in str(exc.value)
