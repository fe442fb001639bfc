"""OpenAI conformance of ``diffbench serve``, driven by the official ``openai`` client on a loopback port:
``response_format="url"`` (files served for ``--url-ttl`` seconds), ``size="auto"``, variations (image-to-image
with no prompt), a 404 that lists every route, the video ``thumbnail``/``spritesheet`` variants, and the one
``stream`` rule.

Expected values come from elsewhere than the code under test: the same seed's ``b64_json`` answer, the
app's own route table, Pillow decoding the images, PyAV decoding the MP4.
"""

from __future__ import annotations

import base64
import io
import json
import time
import urllib.error
import urllib.request
import warnings

import httpx
import numpy as np
import pytest
from PIL import Image

from diffbench.engines.base import GenerationRequest, GenerationResult
from diffbench.engines.registry import EngineConfig
from diffbench.engines.sim import SimEngine
from diffbench.server.app import create_app
from diffbench.server.background import run_in_background

from .conftest import sim_config, sim_params

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.timeout(60)

DEFAULT_SIZE = (96, 64)  # not the ServerConfig default (256x256), so "auto" is seen to map to it


def _config(**kw: object):
    return sim_config(default_size=f"{DEFAULT_SIZE[0]}x{DEFAULT_SIZE[1]}", **kw)


@pytest.fixture(scope="module")
def base():
    with run_in_background(_config(), mode="thread") as url:
        yield url


def _client(base: str):
    return openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=30)


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _image(data: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(data))
    img.load()
    return img


def test_url_response_serves_the_same_png_as_b64_json(base):
    client = _client(base)
    kw = {"prompt": "a red fox", "size": "64x48", "extra_body": {"seed": 11, "num_inference_steps": 2}}
    by_url = client.images.generate(response_format="url", n=2, **kw)
    by_b64 = client.images.generate(response_format="b64_json", n=2, **kw)
    urls = [d.url for d in by_url.data]
    assert all(u and u.startswith(f"{base}/v1/files/images/") for u in urls), urls  # the request's Host
    assert all(d.b64_json is None for d in by_url.data)
    for url, ref in zip(urls, by_b64.data, strict=True):
        status, body = _get(url)
        assert status == 200
        assert body == base64.b64decode(ref.b64_json or "")


def test_url_answers_404_expired_after_the_ttl():
    with run_in_background(_config(url_ttl_s=0.05), mode="thread") as url:
        r = _client(url).images.generate(prompt="a fox", size="32x32", response_format="url")
        file_url = r.data[0].url
        assert file_url
        deadline = time.monotonic() + 20
        while (got := _get(file_url))[0] == 200:  # served until the TTL passes, then 404
            assert time.monotonic() < deadline, "the file was never expired"
            time.sleep(0.05)
        status, body = got
        err = json.loads(body)["error"]
        assert status == 404 and err["code"] == "expired"
        assert "expired at" in err["message"] and "--url-ttl" in err["message"]
        status, body = _get(f"{url}/v1/files/images/{'0' * 32}.png")
        assert status == 404 and json.loads(body)["error"]["code"] == "not_found"


def test_size_auto_on_generations_is_the_default_size(base):
    r = _client(base).images.generate(prompt="a fox", size="auto", extra_body={"num_inference_steps": 1})
    assert _image(base64.b64decode(r.data[0].b64_json or "")).size == DEFAULT_SIZE


class RecordingSim(SimEngine):
    """The sim engine, keeping every request it was asked to generate."""

    def __init__(self) -> None:
        super().__init__(EngineConfig(engine="sim", sim=sim_params()))
        self.requests: list[GenerationRequest] = []

    def generate(self, request: GenerationRequest) -> GenerationResult:
        self.requests.append(request)
        return super().generate(request)


def _png_of(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def test_create_variation_is_an_image_to_image_run_without_prompt():
    engine = RecordingSim()
    src = np.random.default_rng(3).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    with run_in_background(_config(), mode="thread", engine=engine) as url, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # dall-e-2 only in the real API
        client = _client(url)
        r = client.images.create_variation(image=("in.png", _png_of(src), "image/png"), n=2,
                                           response_format="url")
        bad = httpx.post(f"{url}/v1/images/variations", timeout=30,
                         files=[("image", ("in.png", _png_of(src))), ("mask", ("m.png", _png_of(src)))])
        pngs = [_get(d.url or "")[1] for d in r.data]
    assert len(pngs) == 2 and all(_image(p).size == (64, 48) for p in pngs)  # no size: the input's size
    (req,) = engine.requests
    assert req.prompt == "" and req.batch == 2 and req.image is not None and req.mask is None
    assert (np.asarray(_image(req.image).convert("RGB")) == src).all()  # the uploaded picture, pixel for pixel
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "mask"


def test_unknown_route_404_lists_every_route(base):
    client = _client(base)
    with pytest.raises(openai.NotFoundError) as info:
        client.audio.speech.create(model="tts-1", voice="alloy", input="hello")
    message = info.value.body["message"] if isinstance(info.value.body, dict) else str(info.value)
    paths = {getattr(r, "path", None) for r in create_app(_config()).routes} - {None}
    assert {"/v1/images/edits", "/v1/images/generations", "/v1/images/variations",
            "/v1/videos/{video_id}/content", "/v1/files/images/{name}"} <= paths
    missing = [p for p in paths if p not in message]
    assert not missing, (missing, message)


def _decode_mp4(data: bytes) -> np.ndarray:
    av = pytest.importorskip("av")
    with av.open(io.BytesIO(data)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


class FlatFramesSim(SimEngine):
    """The sim engine with flat frames: frame k of a video is grey level ``LEVEL0 + STEP * k`` (easy to
    recognise after H.264 / JPEG, exact after lossless WebP)."""

    LEVEL0, STEP = 20, 30

    def __init__(self) -> None:
        super().__init__(EngineConfig(engine="sim", sim=sim_params()))

    def generate(self, request: GenerationRequest) -> GenerationResult:
        result = super().generate(request)
        images = result.images
        assert images is not None and images.ndim == 5
        levels = self.LEVEL0 + self.STEP * np.arange(images.shape[1])
        result.images = np.broadcast_to(levels[None, :, None, None, None], images.shape).astype(np.uint8)
        return result


def test_video_thumbnail_is_a_webp_still_and_spritesheet_a_jpeg():
    frames = 6
    levels = FlatFramesSim.LEVEL0 + FlatFramesSim.STEP * np.arange(frames)
    with run_in_background(_config(), mode="thread", engine=FlatFramesSim()) as url:
        client = _client(url)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the Sora API deprecation notice
            job = client.videos.create(prompt="a fox", size="64x48", extra_body={"num_frames": frames})
            deadline = time.monotonic() + 20
            while (job := client.videos.retrieve(job.id)).status not in ("completed", "failed"):
                assert time.monotonic() < deadline
                time.sleep(0.02)
            assert job.status == "completed"
            mp4 = client.videos.download_content(job.id).read()
            thumb = client.videos.download_content(job.id, variant="thumbnail")
            sheet = client.videos.download_content(job.id, variant="spritesheet")
            with pytest.raises(openai.BadRequestError) as bad:
                client.videos.download_content(job.id, variant="poster")  # type: ignore[arg-type]
    assert bad.value.status_code == 400 and "poster" in str(bad.value) and "thumbnail" in str(bad.value)
    video = _decode_mp4(mp4)
    assert video.shape == (frames, 48, 64, 3)
    np.testing.assert_allclose(video.mean(axis=(1, 2, 3)), levels, atol=3)  # the MP4 holds the levels
    assert thumb.response.headers["content-type"] == "image/webp"
    still = _image(thumb.read())
    assert still.format == "WEBP" and still.size == (64, 48)
    assert (np.asarray(still.convert("RGB")) == levels[0]).all()  # frame 0, exactly (lossless WebP)
    assert sheet.response.headers["content-type"] == "image/jpeg"
    tiles = _image(sheet.read())
    # 6 frames (at most 16 are taken): all of them, 4 per row, so 2 rows x 4 columns of 64x48 tiles, the
    # last two tiles black
    assert tiles.format == "JPEG" and tiles.size == (4 * 64, 2 * 48)
    grid = np.asarray(tiles.convert("RGB"), np.float64)
    means = [grid[r * 48 + 8:(r + 1) * 48 - 8, c * 64 + 8:(c + 1) * 64 - 8].mean() for r in (0, 1) for c in range(4)]
    np.testing.assert_allclose(means, [*levels, 0, 0], atol=4)


def test_stream_true_is_refused_alike_on_images_edits_and_chat(base):
    client = _client(base)
    errors = []
    with pytest.raises(openai.BadRequestError) as img:
        client.images.generate(prompt="a fox", size="32x32", stream=True, partial_images=1)
    errors.append(img.value)
    png = io.BytesIO()
    Image.new("RGB", (32, 32)).save(png, format="PNG")
    with pytest.raises(openai.BadRequestError) as edit:
        client.images.edit(image=("in.png", png.getvalue(), "image/png"), prompt="a fox", stream=True)
    errors.append(edit.value)
    with pytest.raises(openai.BadRequestError) as chat:
        client.chat.completions.create(model="sim", messages=[{"role": "user", "content": "a fox"}], stream=True)
    errors.append(chat.value)
    bodies = [e.body for e in errors]
    assert all(isinstance(b, dict) and b["param"] == "stream" for b in bodies), bodies
    assert len({b["message"] for b in bodies}) == 1 and "stream false" in bodies[0]["message"]  # type: ignore[index]


def _ok_count(base: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    status, body = _get(f"{base}/metrics")
    assert status == 200
    return sum(s.value for fam in text_string_to_metric_families(body.decode()) for s in fam.samples
               if s.name == "diffusion_requests_total" and s.labels["outcome"] == "ok"
               and s.labels["traffic"] == "user")


def test_edits_and_variations_are_counted_like_generations(base):
    client = _client(base)
    png = _png_of(np.zeros((32, 32, 3), np.uint8))
    before = _ok_count(base)
    client.images.generate(prompt="a fox", size="32x32")
    client.images.edit(image=("in.png", png, "image/png"), prompt="a fox")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        client.images.create_variation(image=("in.png", png, "image/png"))
    assert _ok_count(base) - before == 3
