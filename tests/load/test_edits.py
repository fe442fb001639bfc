"""``load`` with edit workloads (``kind: edit``): the request of each dialect, and ``load`` against ``serve`` in
every dialect, checked against what reached a recording engine (the input pictures, pixel for pixel, in
round-robin order; masks; strength).
"""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
from PIL import Image

from diffbench.cli.main import main
from diffbench.engines.base import GenerationRequest, GenerationResult
from diffbench.engines.registry import EngineConfig, SimParams
from diffbench.engines.sim import SimEngine
from diffbench.load.client.dialects import chat_body, edit_fields, image_path
from diffbench.load.client.workload import RequestPlanner, load_workload

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

SIM = SimParams(realtime=True, compile_s=0.0, jitter=0.0, tail_prob=0.0, step_s=0.001)


class RecordingSim(SimEngine):
    def __init__(self) -> None:
        super().__init__(EngineConfig(engine="sim", sim=SIM))
        self.requests: list[GenerationRequest] = []

    def generate(self, request: GenerationRequest) -> GenerationResult:
        self.requests.append(request)
        return super().generate(request)


def _pixels(seed: int, w: int = 48, h: int = 32) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _decoded(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(img)


@pytest.fixture
def edit_dir(tmp_path):
    """Three input pictures (distinct random pixels), three greyscale masks, and two workloads."""
    (tmp_path / "in").mkdir()
    (tmp_path / "m").mkdir()
    for i in range(3):
        Image.fromarray(_pixels(i)).save(tmp_path / "in" / f"{i}.png")
        mask = np.zeros((32, 48), np.uint8)
        mask[:, : 8 * (i + 1)] = 255
        Image.fromarray(mask).save(tmp_path / "m" / f"{i}.png")
    shape = "shapes: [{size: 48x32, steps: 3}]\n"
    (tmp_path / "masked.yaml").write_text("kind: edit\nimages: in\nmasks: m\nstrength: 0.5\n" + shape)
    (tmp_path / "plain.yaml").write_text("kind: edit\nimages: in\nstrength: 0.5\n" + shape)
    return tmp_path


def test_planner_sends_the_pictures_round_robin(edit_dir):
    wl = load_workload(edit_dir / "masked.yaml")
    specs = RequestPlanner(wl, ["p"], seed=3).take(7)
    assert [s.image for s in specs] == [str(edit_dir / "in" / f"{i % 3}.png") for i in range(7)]
    assert [s.mask for s in specs] == [str(edit_dir / "m" / f"{i % 3}.png") for i in range(7)]
    assert all(s.kind == "edit" and s.strength == 0.5 for s in specs)


def test_edit_request_of_each_dialect(edit_dir):
    spec = RequestPlanner(load_workload(edit_dir / "masked.yaml"), ["a door"], seed=1).next()
    assert edit_fields(spec, "openai") == {"prompt": "a door", "n": 1, "size": "48x32", "response_format": "b64_json"}
    for d in ("vllm-omni", "sglang"):
        assert edit_fields(spec, d) == {"prompt": "a door", "n": 1, "size": "48x32", "response_format": "b64_json",
                                        "num_inference_steps": 3, "seed": spec.seed, "strength": 0.5}
        assert image_path(d, edit=True) == "/v1/images/edits"
    body = chat_body(spec)
    text, part = body["messages"][0]["content"]  # type: ignore[index]
    assert text == {"type": "text", "text": "a door"} and part["type"] == "image_url"
    head, _, payload = part["image_url"]["url"].partition(",")
    assert head == "data:image/png;base64"
    np.testing.assert_array_equal(_decoded(base64.b64decode(payload)), _pixels(0))
    assert body["extra_body"] == {"height": 32, "width": 48, "num_inference_steps": 3,  # type: ignore[index]
                                  "seed": spec.seed, "strength": 0.5}
    assert image_path("vllm-omni-chat", edit=True) == "/v1/chat/completions"


@pytest.mark.slow
@pytest.mark.parametrize("dialect", ["openai", "vllm-omni", "sglang", "vllm-omni-chat"])
def test_load_edits_against_serve(edit_dir, dialect):
    """Every request ok and checked (decoded, size-checked); the engine got the pictures in round-robin order
    (warm-up first), the masks and the strength where the dialect sends them."""
    from diffbench.server.background import run_in_background
    from diffbench.server.config import ServerConfig

    engine = RecordingSim()
    workload = "plain.yaml" if dialect == "vllm-omni-chat" else "masked.yaml"
    out = edit_dir / "r.json"
    with run_in_background(ServerConfig(engine=EngineConfig(engine="sim", sim=SIM)), mode="thread",
                           engine=engine) as base:
        code = main(["load", "--url", base, "--dialect", dialect, "--workload", str(edit_dir / workload),
                     "--warmup", "1", "--timeout", "10", "--request-rate", "20", "--num-requests", "4",
                     "--arrival", "constant", "--seed", "2", "--json", str(out), "--quiet"])
    res = json.loads(out.read_text())
    assert code == 0 and res["n_ok"] == 4 and res["rates"][0]["outcomes"]["invalid_payload"] == 0
    assert res["conditions"]["kind"] == "edit" and "3 picture(s)" in res["conditions"]["edit_inputs"]
    assert "image_encode" in res["rates"][0]["server_stages_s"]
    reqs = [r for r in engine.requests if r.prompt != "warmup"]
    assert len(reqs) == 5 and all(r.is_edit and (r.width, r.height) == (48, 32) for r in reqs)
    # warm-up (planner index 0) then 4 measured requests (1..4): planner index i sends picture i % 3
    which = [next(j for j in range(3) if np.array_equal(_decoded(r.image), _pixels(j))) for r in reqs]
    assert sorted(which) == sorted(i % 3 for i in range(5))
    if dialect != "openai":  # the seed sent is seed_base + index (openai sends none): the exact picture per index
        index = [r.seed - 2 * 1_000_003 for r in reqs]
        assert sorted(index) == list(range(5)) and which == [i % 3 for i in index]
    for r, j in zip(reqs, which, strict=True):
        if dialect == "vllm-omni-chat":
            assert r.mask is None
        else:
            expected = np.zeros((32, 48), np.uint8)
            expected[:, : 8 * (j + 1)] = 255
            np.testing.assert_array_equal(_decoded(r.mask), expected)
    strength = GenerationRequest.model_fields["strength"].default if dialect == "openai" else 0.5
    assert all(r.strength == strength for r in reqs)
    # fresh-user trial: the openai dialect's conditions named the workload's strength, which it never sent
    said = res["conditions"]["edit_inputs"]
    assert ("strength: not sent" in said and "strength" in res["conditions"]["not_sent"]) if dialect == "openai" \
        else "strength 0.5" in said
    assert all(r.steps == 3 for r in reqs) != (dialect == "openai")  # openai sends no steps (server default 8)


@pytest.mark.parametrize("mode, outcome, fragment", [
    ("wrongsize", "invalid_payload", "image is 56x32, requested 48x32"),
    ("badimg", "invalid_payload", "image does not decode"),
    ("r500", "http_error", "HTTP 500"),
])
def test_a_bad_edit_answer_is_a_failure(fake, edit_dir, mode, outcome, fragment):
    """An edit answer is checked as a generation's: a 200 without the right image never counts as ok."""
    from diffbench.load.client import read_jsonl

    out, jl = edit_dir / "r.json", edit_dir / "r.jsonl"
    code = main(["load", "--url", fake.url(mode), "--dialect", "vllm-omni", "--workload", str(edit_dir / "masked.yaml"),
                 "--warmup", "0", "--timeout", "10", "--request-rate", "20", "--num-requests", "3", "--arrival",
                 "constant", "--json", str(out), "--jsonl", str(jl), "--quiet"])
    assert code == 1 and json.loads(out.read_text())["n_ok"] == 0
    recs = read_jsonl(jl)
    assert len(recs) == 3 and all(r.outcome == outcome and fragment in r.error for r in recs)
    body = fake.edit_bodies[-1]
    assert b'name="image"; filename="' in body and b'name="mask"; filename="' in body
    assert b'name="strength"\r\n\r\n0.5\r\n' in body


def _img2img_engine() -> bool:
    from diffbench.engines.base import STAGES

    return "image_encode" in STAGES


@pytest.mark.slow
@pytest.mark.skipif(not _img2img_engine(), reason="needs the diffusers engine's img2img path ("
                    "engines.base.STAGES lists image_encode)")
@pytest.mark.parametrize("dialect", ["vllm-omni", "vllm-omni-chat"])
def test_load_edits_against_the_tiny_diffusers_service(tmp_path, dialect):
    """Without --url: the reference service on the tiny random-weight FLUX (CPU) runs the edits; the server
    reports the input's VAE encode."""
    (tmp_path / "in").mkdir()
    Image.fromarray(_pixels(0, 64, 64)).save(tmp_path / "in" / "a.png")
    (tmp_path / "w.yaml").write_text("kind: edit\nimages: in\nstrength: 0.5\nshapes: [{size: 64x64, steps: 2}]\n")
    out = tmp_path / "r.json"
    assert main(["load", "--dialect", dialect, "--workload", str(tmp_path / "w.yaml"), "--request-rate", "2",
                 "--num-requests", "2", "--arrival", "constant", "--timeout", "120", "--json", str(out),
                 "--quiet"]) == 0
    res = json.loads(out.read_text())
    assert res["n_ok"] == 2 and res["rates"][0]["server_stages_s"]["image_encode"] > 0
