"""``--dialect vllm-omni-chat``: the body vLLM-Omni's benchmark sends, the answer's checks, load against serve."""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image

from diffbench.cli.main import main
from diffbench.load.client import read_jsonl
from diffbench.load.client.dialects import chat_body, image_path
from diffbench.load.client.payload import check_chat
from diffbench.load.client.workload import RequestSpec, ShapeMix

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _spec(**shape: object) -> RequestSpec:
    return RequestSpec(index=0, kind="image", prompt="a fox", shape=ShapeMix(**shape), seed=7, model="m")


def test_chat_body_field_by_field():
    """vLLM-Omni ``async_request_chat_completions``: model, one user message with the prompt as a string,
    and the generation fields nested under an ``extra_body`` key."""
    assert chat_body(_spec(width=96, height=64, steps=3)) == {
        "model": "m",
        "messages": [{"role": "user", "content": "a fox"}],
        "extra_body": {"height": 64, "width": 96, "num_inference_steps": 3, "seed": 7},
    }
    full = chat_body(_spec(width=96, height=64, steps=3, frames=9, fps=8, guidance=3.5, negative_prompt="blur",
                           n=2))
    assert full["extra_body"] == {"height": 64, "width": 96, "num_inference_steps": 3, "seed": 7, "num_frames": 9,
                                  "fps": 8, "guidance_scale": 3.5, "negative_prompt": "blur",
                                  "num_outputs_per_prompt": 2}
    assert image_path("vllm-omni-chat") == "/v1/chat/completions"
    assert image_path("vllm-omni") == "/v1/images/generations"


def _png_url(w: int, h: int) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (1, 2, 3)).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _answer(content: object, **top: object) -> bytes:
    return json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
                       **top}).encode()


def _part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


CHECKS = [
    (_answer([_part(_png_url(32, 16))]), True, None),
    (_answer("Image generation completed but no images were produced."), False, "is text, not images"),
    (_answer([]), False, "holds 0 image_url parts, requested n=1"),
    (_answer([_part(_png_url(40, 16))]), False, "image is 40x16, requested 32x16"),
    (_answer([_part("https://example.invalid/a.png")]), False, "is not a data URL"),
    (_answer([_part("data:text/plain;base64,AAAA")]), False, "is not data:image/<type>;base64"),
    (_answer([_part("data:image/png;base64,@@")]), False, "base64 is not valid base64"),
    (_answer([_part("data:image/png;base64," + base64.b64encode(b"not a png").decode())]), False,
     "image does not decode"),
    (json.dumps({"choices": []}).encode(), False, "no choices[0]"),
    (b"{", False, "malformed JSON"),
]


@pytest.mark.parametrize("body, ok, fragment", CHECKS, ids=[str(c[2]) for c in CHECKS])
def test_check_chat(body, ok, fragment):
    v = check_chat(body, 32, 16, 1)
    assert v.ok is ok and (fragment is None or fragment in v.error), v.error


def test_chat_timings_from_metrics_or_the_first_part():
    v = check_chat(_answer([_part(_png_url(32, 16))], metrics={"stage_durations": {"denoise": 0.5},
                                                                "peak_memory_mb": 2.0}), 32, 16, 1)
    assert v.stages_s == {"denoise": 0.5} and v.peak_memory_bytes == 2 * 2**20
    part = {**_part(_png_url(32, 16)), "stage_durations": {"vae_decode": 0.25}, "peak_memory_mb": 1.0}
    v = check_chat(_answer([part]), 32, 16, 1)
    assert v.stages_s == {"vae_decode": 0.25} and v.peak_memory_bytes == 2**20


def _load(url: str, tmp_path, *extra: str) -> tuple[int, dict, list]:
    out, jl = tmp_path / "r.json", tmp_path / "r.jsonl"
    code = main(["load", "--url", url, "--dialect", "vllm-omni-chat", "--warmup", "0", "--timeout", "10",
                 "--size", "48x32", "--steps", "3", "--request-rate", "20", "--num-requests", "4", "--arrival",
                 "constant", "--seed", "5", "--json", str(out), "--jsonl", str(jl), *extra])
    return code, json.loads(out.read_text()), read_jsonl(jl)


def test_load_sends_vllm_omnis_body_and_reads_the_data_url(fake, tmp_path):
    from diffbench.load.client.workload import RequestPlanner, default_workload

    code, res, recs = _load(fake.url("ok"), tmp_path)
    assert code == 0 and res["n_ok"] == 4 and all(r.outcome == "ok" for r in recs)
    sent = [json.loads(b) for b in fake.chat_bodies]
    planned = RequestPlanner(default_workload(48, 32, 3), ["a lighthouse at dusk, oil painting"], seed=5).take(4)
    assert sorted(b["extra_body"]["seed"] for b in sent) == sorted(p.seed for p in planned)
    for b in sent:
        assert set(b) == {"messages", "extra_body"}  # no model in the workload: none sent
        assert set(b["extra_body"]) == {"height", "width", "num_inference_steps", "seed"}
        assert (b["extra_body"]["width"], b["extra_body"]["height"], b["extra_body"]["num_inference_steps"]) == \
            (48, 32, 3)
        assert b["messages"][0]["role"] == "user" and isinstance(b["messages"][0]["content"], str)
    assert res["rates"][0]["server_stages_s"]["denoise"] == 0.25  # the mean, read from the answer's metrics


@pytest.mark.parametrize("mode, fragment", [("chattext", "is text, not images"), ("chatwrong", "image is 56x32"),
                                            ("chaturl", "not a data URL"), ("chatbad64", "not valid base64")])
def test_a_malformed_chat_answer_is_a_failure(fake, tmp_path, mode, fragment):
    """A 200 without a (right) image is an invalid_payload, never a success or a throughput count."""
    code, res, recs = _load(fake.url(mode), tmp_path)
    assert code == 1  # no request succeeded
    assert res["n_ok"] == 0 and res["rates"][0]["outcomes"]["invalid_payload"] == 4
    assert all(r.outcome == "invalid_payload" and fragment in r.error for r in recs)


@pytest.mark.slow
def test_load_against_serve_in_the_chat_dialect(tmp_path):
    """The reference service (sim engine) answers the chat route; every request ok, server stages read."""
    from diffbench.engines.registry import EngineConfig, SimParams
    from diffbench.server.background import run_in_background
    from diffbench.server.config import ServerConfig

    sim = SimParams(realtime=True, compile_s=0.0, jitter=0.0, tail_prob=0.0, step_s=0.001)
    with run_in_background(ServerConfig(engine=EngineConfig(engine="sim", sim=sim)), mode="thread") as base:
        code, res, recs = _load(base, tmp_path, "--warmup", "1")
    assert code == 0 and res["n_ok"] == 4 == len(recs)
    row = res["rates"][0]
    assert row["server_service_time_s"]["n"] == 4 and "denoise" in row["server_stages_s"]


@pytest.mark.slow
def test_load_against_the_tiny_diffusers_service_in_the_chat_dialect(tmp_path):
    """Without --url: the reference service on the tiny random-weight pipeline (CPU) answers the chat route."""
    out = tmp_path / "r.json"
    assert main(["load", "--dialect", "vllm-omni-chat", "--request-rate", "2", "--num-requests", "3",
                 "--arrival", "constant", "--size", "64x64", "--steps", "2", "--timeout", "120",
                 "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["n_ok"] == 3 and res["conditions"]["dialect"] == "vllm-omni-chat"
    assert res["rates"][0]["server_service_time_s"]["n"] == 3
