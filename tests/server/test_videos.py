"""Video jobs: create (JSON and multipart) → poll → MP4 content (PyAV) → delete; queued cancel; OOM."""

from __future__ import annotations

import io
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from fastapi.testclient import TestClient

from diffbench.engines.base import GenerationRequest
from diffbench.engines.registry import EngineConfig
from diffbench.engines.sim import SimEngine
from diffbench.server.app import create_app

from .conftest import sim_config, sim_params

av = pytest.importorskip("av")


def _poll(client: TestClient, job_id: str, until: tuple[str, ...] = ("completed", "failed")) -> dict:
    deadline = time.perf_counter() + 10
    while True:
        job = client.get(f"/v1/videos/{job_id}").json()
        if job["status"] in until:
            return job
        assert time.perf_counter() < deadline, job
        time.sleep(0.02)


def _luma(rgb: np.ndarray) -> np.ndarray:
    return rgb.astype(np.float64) @ np.array([0.299, 0.587, 0.114])  # ITU-R BT.601 luma weights


@pytest.mark.parametrize("form", [False, True], ids=["json", "multipart"])
def test_lifecycle_create_poll_content_delete(form):
    with TestClient(create_app(sim_config())) as c:
        fields = {
            "prompt": "a red fox",
            "size": "64x48",
            "num_frames": 5,
            "fps": 8,
            "seed": 3,
            "num_inference_steps": 2,
        }
        if form:
            resp = c.post(
                "/v1/videos", data={k: str(v) for k, v in fields.items()}, files={"unused": (None, "")}
            )  # forces multipart/form-data
        else:
            resp = c.post("/v1/videos", json=fields)
        assert resp.status_code == 200, resp.text
        job = resp.json()
        assert job["status"] in ("queued", "in_progress", "completed")
        assert (job["width"], job["height"], job["num_frames"], job["seconds"]) == (64, 48, 5, "0.625")
        done = _poll(c, job["id"])
        assert done["status"] == "completed" and done["progress"] == 100
        assert done["stage_durations"]["denoise"] > 0 and done["peak_memory_mb"] > 0
        assert [j["id"] for j in c.get("/v1/videos").json()["data"]] == [job["id"]]

        content = c.get(f"/v1/videos/{job['id']}/content")
        assert content.status_code == 200 and content.headers["content-type"] == "video/mp4"
        with av.open(io.BytesIO(content.content)) as container:
            assert container.streams.video[0].average_rate == 8
            frames = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
        assert frames.shape == (5, 48, 64, 3)
        # Same pixels as the engine makes for (prompt, seed), up to lossy H.264 + 4:2:0 chroma: compare luma.
        ref = (
            SimEngine(EngineConfig(engine="sim", sim=sim_params()))
            .generate(GenerationRequest(prompt="a red fox", width=64, height=48, frames=5, steps=2, seed=3))
            .images[0]
        )
        corr = np.corrcoef(_luma(frames).ravel(), _luma(ref).ravel())[0, 1]
        assert corr > 0.95

        deleted = c.delete(f"/v1/videos/{job['id']}")
        assert deleted.json() == {
            "id": job["id"],
            "object": "video.deleted",
            "deleted": True,
            "status": "completed",
        }
        assert c.get(f"/v1/videos/{job['id']}").status_code == 404
        assert c.get(f"/v1/videos/{job['id']}/content").status_code == 404


def test_content_not_ready_and_delete_cancels_queued_job(gated_engine):
    with TestClient(create_app(sim_config(), engine=gated_engine)) as c, ThreadPoolExecutor(2):
        running = c.post("/v1/videos", json={"prompt": "first", "size": "32x32", "num_frames": 2}).json()
        assert gated_engine.entered.wait(10)
        queued = c.post("/v1/videos", json={"prompt": "second", "size": "32x32", "num_frames": 2}).json()
        assert _poll(c, running["id"], ("in_progress",))["status"] == "in_progress"
        assert c.get(f"/v1/videos/{queued['id']}").json()["status"] == "queued"
        not_ready = c.get(f"/v1/videos/{queued['id']}/content")
        assert not_ready.status_code == 404 and not_ready.json()["error"]["code"] == "not_ready"
        assert c.delete(f"/v1/videos/{queued['id']}").json()["status"] == "cancelled"
        gated_engine.gate.set()
        assert _poll(c, running["id"])["status"] == "completed"
        assert c.get("/health").json()["queue_length"] == 0
    assert gated_engine.prompts == ["first"]  # the deleted job never reached the device


def test_oom_fails_the_job_and_the_next_job_completes():
    with TestClient(create_app(sim_config(sim_params(fail_above_pixels=32 * 32 * 4)))) as c:
        big = c.post("/v1/videos", json={"prompt": "x", "size": "32x32", "num_frames": 8}).json()
        failed = _poll(c, big["id"])
        assert failed["status"] == "failed" and failed["error"]["code"] == "out_of_memory"
        assert failed["error"]["message"].startswith("out of memory at 32x32, 8 frames")
        small = c.post("/v1/videos", json={"prompt": "x", "size": "32x32", "num_frames": 4}).json()
        assert _poll(c, small["id"])["status"] == "completed"


def test_video_validation():
    with TestClient(create_app(sim_config())) as c:
        r = c.post(
            "/v1/videos", files={"input_reference": ("a.png", b"123", "image/png")}, data={"prompt": "x"}
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "input_reference"
        r = c.post("/v1/videos", content=b"[1, 2]", headers={"content-type": "application/json"})
        assert r.status_code == 400 and "JSON object" in r.json()["error"]["message"]
        r = c.post("/v1/videos", json={"prompt": "x", "size": "32x32", "seconds": 2, "fps": 4})
        assert r.json()["num_frames"] == 8  # seconds × fps (the sim takes any frame count)
        assert r.json()["adjusted_parameters"] == {}  # nothing was changed


def _mp4_frames(content: bytes) -> int:
    with av.open(io.BytesIO(content)) as container:
        return sum(1 for _ in container.decode(video=0))


def test_openai_seconds_on_a_4k_plus_1_model_rounds_to_a_valid_frame_count(wan_like):
    """OpenAI's ``videos.create(seconds="4")``: 4 s × 16 fps = 64 frames is not 4k + 1; 65 is used and said."""
    openai = pytest.importorskip("openai")
    import warnings

    with TestClient(create_app(sim_config(), engine=wan_like)) as c:
        client = openai.OpenAI(
            base_url="http://testserver/v1", api_key="unused", http_client=c, max_retries=0
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the Sora API deprecation notice
            video = client.videos.create(prompt="a red fox", seconds="4", size="32x32")
        extra = video.model_extra or {}
        # nearest 4k+1 to 4 × 16 = 64: 65 (|65 − 64| = 1 < |61 − 64| = 3)
        assert extra["num_frames"] == 65
        adj = extra["adjusted_parameters"]
        assert adj["num_frames"]["requested"] == 64 and adj["num_frames"]["used"] == 65
        assert (
            "4k" not in adj["num_frames"]["reason"]
            and "nearest valid count is 65" in adj["num_frames"]["reason"]
        )
        assert adj["seconds"]["used"] == pytest.approx(65 / 16) and float(video.seconds) == pytest.approx(
            65 / 16
        )
        done = _poll(c, video.id)
        assert done["status"] == "completed" and done["inference_time_s"] > 0
        assert done["inference_time_s"] == done["service_time_s"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            content = client.videos.download_content(video.id).read()
    assert _mp4_frames(content) == 65  # the file holds what the job says


def test_default_video_is_not_a_single_frame(wan_like):
    with TestClient(create_app(sim_config(), engine=wan_like)) as c:
        job = c.post("/v1/videos", json={"prompt": "x", "size": "32x32"}).json()
        # no seconds, no num_frames: OpenAI's default 4 s at the default 16 fps → 64 → nearest 4k+1 = 65
        assert job["num_frames"] == 65 and job["fps"] == 16
        assert job["adjusted_parameters"]["num_frames"]["requested"] is None
        done = _poll(c, job["id"])
        assert _mp4_frames(c.get(f"/v1/videos/{done['id']}/content").content) == 65
        exact = c.post("/v1/videos", json={"prompt": "x", "size": "32x32", "num_frames": 9}).json()
        assert (
            exact["num_frames"] == 9 and exact["adjusted_parameters"] == {}
        )  # an exact count is never moved
        r = c.post("/v1/videos", json={"prompt": "x", "size": "32x32", "seconds": 2, "fps": 4})
        assert r.json()["num_frames"] == 9  # 2 × 4 = 8 → 9 (|9 − 8| = 1 = |7 − 8|, 7 is not 4k+1)
