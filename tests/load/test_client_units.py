"""Workload files, dialect bodies, payload checks and outcome classification (no network)."""

from __future__ import annotations

import base64
import io
import json
from datetime import datetime, timezone
from email.utils import format_datetime

import numpy as np
import pytest

from diffbench.errors import InputError, UsageError
from diffbench.load.client import (
    RequestPlanner,
    classify_status,
    load_prompts,
    load_workload,
    parse_headers,
    parse_retry_after,
)
from diffbench.load.client.dialects import image_body, server_timings, video_fields
from diffbench.load.client.payload import check_images, check_video
from diffbench.load.client.profile import NoSuccessError, auto_rates


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_workload_unknown_field_is_an_error_naming_it(tmp_path):
    p = _write(tmp_path, "w.yaml", "shapes:\n  - {width: 64, heigth: 64, steps: 2}\n")
    with pytest.raises(InputError, match=r"shapes\.0\.heigth: unknown field"):
        load_workload(p)
    p = _write(tmp_path, "w.json", json.dumps({"shapes": [{"size": "64x64", "steps": 2}], "rate": 3}))
    with pytest.raises(InputError, match=r"rate: unknown field"):
        load_workload(p)


@pytest.mark.parametrize("shape, needle", [
    ({"width": 0, "height": 64, "steps": 2}, "shapes.0.width"),
    ({"size": "64by64", "steps": 2}, "WIDTHxHEIGHT"),
    ({"size": "64x64", "steps": 0}, "shapes.0.steps"),
    ({"size": "64x64", "steps": 2, "weight": -1}, "shapes.0.weight"),
])
def test_workload_invalid_shapes_are_clear_errors(tmp_path, shape, needle):
    p = _write(tmp_path, "w.json", json.dumps({"shapes": [shape]}))
    with pytest.raises(InputError) as info:
        load_workload(p)
    assert needle in str(info.value) and str(p) in str(info.value)


def test_video_workload_needs_frames(tmp_path):
    p = _write(tmp_path, "w.yaml", "kind: video\nshapes: [{size: 64x64, steps: 2}]\n")
    with pytest.raises(InputError, match="needs frames"):
        load_workload(p)


def test_weighted_mix_and_prompt_file(tmp_path):
    pf = _write(tmp_path, "p.txt", "first prompt\n\nsecond prompt\n")
    p = _write(tmp_path, "w.yaml", "prompt_file: p.txt\nshapes:\n  - {size: 64x64, steps: 2, weight: 3}\n"
               "  - {size: 128x64, steps: 4, weight: 1}\n")
    wl = load_workload(p)
    assert load_prompts(pf) == ["first prompt", "second prompt"]
    planner = RequestPlanner(wl, load_prompts(wl.prompt_file), seed=7)
    specs = planner.take(4000)
    frac = np.mean([s.shape.width == 64 for s in specs])
    # Binomial(4000, 0.75): 4 standard deviations = 4 * sqrt(0.75 * 0.25 / 4000) = 0.027
    assert abs(frac - 0.75) < 0.027
    assert [s.prompt for s in specs[:3]] == ["first prompt", "second prompt", "first prompt"]
    again = RequestPlanner(wl, ["x"], seed=7).take(50)
    assert [s.shape for s in again] == [s.shape for s in specs[:50]]  # seeded
    with pytest.raises(InputError, match=r"--prompts .*empty\.txt is empty; expected a text file with one prompt"):
        load_prompts(_write(tmp_path, "empty.txt", "\n  \n"))


def test_dialect_bodies(tmp_path):
    p = _write(tmp_path, "w.yaml", "model: m\nshapes: [{size: 96x64, steps: 7, guidance: 3.5, "
               "negative_prompt: blurry, frames: 9, fps: 8}]\n")
    spec = RequestPlanner(load_workload(p), ["hi"], seed=0).next()
    openai = image_body(spec, "openai")
    assert openai == {"prompt": "hi", "n": 1, "size": "96x64", "response_format": "b64_json", "model": "m"}
    omni = image_body(spec, "vllm-omni")
    assert omni["num_inference_steps"] == 7 and omni["guidance_scale"] == 3.5
    assert omni["negative_prompt"] == "blurry" and omni["seed"] == spec.seed
    vf = video_fields(spec, "sglang")
    assert (vf["width"], vf["height"], vf["num_frames"], vf["fps"]) == (96, 64, 9, 8)


def test_server_timings_units():
    stages, peak = server_timings({"stage_durations": {"denoise": 1.5, "vae_decode_ms": 250},
                                   "peak_memory_mb": 2.0})
    assert stages == {"denoise": 1.5, "vae_decode": 0.25} and peak == 2 * 2**20
    stages, peak = server_timings({"stages": [{"name": "denoise", "duration_ms": 40}],
                                   "peak_memory_bytes": 123, "stage_durations": "garbage"})
    assert stages == {"denoise": 0.04} and peak == 123
    assert server_timings({}) == ({}, None)


def _png_b64(w, h):
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (w, h)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def test_payload_checks():
    good = json.dumps({"data": [{"b64_json": _png_b64(32, 16)}]}).encode()
    assert check_images(good, 32, 16, 1).ok
    v = check_images(good, 16, 32, 1)
    assert not v.ok and "image is 32x16, requested 16x32" in v.error
    assert "holds 1 images, requested n=2" in check_images(good, 32, 16, 2).error
    assert "not valid base64" in check_images(b'{"data":[{"b64_json":"@@@"}]}', 8, 8, 1).error
    truncated = json.dumps({"data": [{"b64_json": _png_b64(32, 16)[:60]}]}).encode()
    assert not check_images(truncated, 32, 16, 1).ok
    assert "malformed JSON" in check_images(b"{", 8, 8, 1).error
    assert check_images(b'{"data":[{"url":"http://x"}]}', 8, 8, 1).error.startswith("data[0]: data[].b64_json")
    assert check_video(b"\x00\x00\x00\x18ftypmp42" + b"\x00" * 8).ok
    assert not check_video(b"").ok and not check_video(b"<html>not a video</html>").ok


def test_status_and_retry_after():
    assert classify_status(200).outcome == "ok"
    assert classify_status(404).outcome == "http_error"
    c = classify_status(429, "7")
    assert (c.outcome, c.retry_after_s) == ("rejected", 7.0)
    now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=timezone.utc)
    date = format_datetime(datetime(2026, 11, 30, 12, 0, 42, tzinfo=timezone.utc), usegmt=True)
    assert parse_retry_after(date, now_epoch_s=now.timestamp()) == 42.0
    assert parse_retry_after("soon") is None and parse_retry_after("-3") is None
    assert parse_retry_after(None) is None


def test_headers_and_auto_rates():
    assert parse_headers(["X-A: 1", "Auth:b:c"]) == {"X-A": "1", "Auth": "b:c"}
    with pytest.raises(UsageError, match="Name: value"):
        parse_headers(["nocolon"])
    assert auto_rates(2.0) == [0.5, 1.0, 1.5, 1.8, 2.0, 2.2, 2.4]
    with pytest.raises(NoSuccessError, match="no ok request"):
        auto_rates(0.0)


@pytest.mark.e2e  # runs a subprocess
def test_importing_the_client_and_command_does_not_import_aiohttp_httpx_or_torch():
    import subprocess
    import sys

    code = ("import sys, diffbench.load.client, diffbench.cli.load; "
            "print(sorted(m for m in ('aiohttp', 'httpx', 'torch', 'diffusers', 'PIL') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_shape_label_names_only_what_the_dialect_sends():
    from diffbench.load.client.dialects import shape_label
    from diffbench.load.client.workload import RequestSpec, ShapeMix

    img = RequestSpec(index=0, kind="image", prompt="p", seed=0, shape=ShapeMix(width=64, height=48, steps=2))
    vid = RequestSpec(index=0, kind="video", prompt="p", seed=0,
                      shape=ShapeMix(width=832, height=480, steps=30, frames=33, fps=8))
    assert shape_label(img, "vllm-omni") == "64x48 s2" and shape_label(img, "sglang") == "64x48 s2"
    assert shape_label(img, "openai") == "64x48"
    assert shape_label(vid, "vllm-omni") == "832x480 f33 s30"
    assert shape_label(vid, "openai") == "832x480 4s"  # what it sends: seconds = round(33 / 8)


def test_mp4_frame_count_reads_the_sample_table():
    pytest.importorskip("av")
    from diffbench.load.client.payload import check_video, mp4_frame_count
    from diffbench.server.mp4 import encode_mp4

    for frames in (1, 5, 17):
        data = encode_mp4(np.zeros((frames, 16, 16, 3), dtype=np.uint8), 8)
        assert mp4_frame_count(data) == frames
        assert check_video(data, frames).ok and not check_video(data, frames + 1).ok
    header_only = b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom"
    assert mp4_frame_count(header_only) is None and check_video(header_only, 5).ok  # unknown, not zero


def test_decode_body_removes_the_content_encoding():
    import gzip
    import zlib

    from diffbench.load.client.payload import decode_body

    raw = json.dumps({"data": [1, 2, 3]}).encode() * 50
    co = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw_deflate = co.compress(raw) + co.flush()
    assert decode_body(raw, None) == decode_body(raw, "identity") == raw
    assert decode_body(gzip.compress(raw), "gzip") == decode_body(gzip.compress(raw), "X-GZIP") == raw
    assert decode_body(zlib.compress(raw), "deflate") == decode_body(raw_deflate, "deflate") == raw
    with pytest.raises(ValueError, match="unsupported Content-Encoding 'br'"):
        decode_body(raw, "br")
    with pytest.raises(ValueError, match="does not decompress"):
        decode_body(b"not gzip", "gzip")
    v = check_images(raw, 8, 8, 1, encoding="br")
    assert not v.ok and "unsupported Content-Encoding" in v.error


def test_payload_errors_read_well():
    """An empty data[] is called empty; Pillow's message does not leak its buffer's repr."""
    import base64
    import json as _json

    from diffbench.load.client.payload import check_images

    empty = check_images(_json.dumps({"data": []}).encode(), 8, 8, 1)
    assert not empty.ok and empty.error == "response has an empty data[] list"
    missing = check_images(_json.dumps({"images": []}).encode(), 8, 8, 1)
    assert missing.error == "response has no data[] list"
    junk = base64.b64encode(b"this is not an image").decode()
    bad = check_images(_json.dumps({"data": [{"b64_json": junk}]}).encode(), 8, 8, 1)
    assert not bad.ok and "image does not decode: cannot identify image file" in bad.error
    assert "BytesIO" not in bad.error and "0x" not in bad.error
