"""``load --reference`` with a video reference: answers decoded with PyAV, sanity-checked frame by frame and
scored by their worst frame (PSNR, SSIM), checked against scikit-image frame by frame."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

pytest.importorskip("av")


def _mp4(frames: np.ndarray, fps: int = 8) -> bytes:
    """Lossless RGB H.264 (libx264rgb, qp 0): decoded frames equal ``frames`` exactly."""
    import av

    _, height, width, _ = frames.shape
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264rgb", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "rgb24"
        stream.options = {"qp": "0", "preset": "veryfast"}
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buf.getvalue()


def _folder(path: Path, frames: np.ndarray) -> str:
    from PIL import Image

    path.mkdir()
    for i, f in enumerate(frames):
        Image.fromarray(f).save(path / f"frame_{i:05d}.png")
    return str(path)


def _clip(rng: np.random.Generator, t: int = 5, side: int = 24) -> np.ndarray:
    return rng.integers(30, 226, (t, side, side, 3), dtype=np.uint8)


def test_a_clip_is_scored_by_its_worst_frame(tmp_path: Path) -> None:
    from diffbench.load.client.scoring import PSNR_IDENTICAL_DB, score_video

    rng = np.random.default_rng(4)
    answer = _clip(rng)
    ref = answer.copy()
    ref[1] = np.clip(ref[1].astype(np.int16) + rng.integers(-3, 4, ref[1].shape), 0, 255).astype(np.uint8)
    ref[3] = np.clip(ref[3].astype(np.int16) + rng.integers(-20, 21, ref[3].shape), 0, 255).astype(np.uint8)
    folder = _folder(tmp_path / "ref", ref)
    v = score_video(_mp4(answer), None, folder, sanity=True)
    assert v.ok and v.quality is not None and v.hashes is not None
    want_psnr = min(peak_signal_noise_ratio(r, a, data_range=255) for r, a in zip(ref, answer, strict=True)
                    if not np.array_equal(r, a))
    want_ssim = min(structural_similarity(r, a, data_range=255, channel_axis=2, gaussian_weights=True, sigma=1.5,
                                          use_sample_covariance=False) for r, a in zip(ref, answer, strict=True))
    assert v.quality["psnr_db"] == pytest.approx(want_psnr, abs=1e-9)  # frame 3, the worst
    assert v.quality["ssim"] == pytest.approx(want_ssim, abs=1e-4)
    same = score_video(_mp4(answer), None, _folder(tmp_path / "same", answer), sanity=True)
    assert same.quality is not None and same.quality["psnr_db"] == PSNR_IDENTICAL_DB


def test_a_clip_unlike_its_reference_or_with_a_black_frame_is_invalid(tmp_path: Path) -> None:
    from diffbench.load.client.scoring import score_video

    rng = np.random.default_rng(5)
    answer = _clip(rng)
    short = score_video(_mp4(answer[:4]), None, _folder(tmp_path / "ref", answer), sanity=True)
    assert not short.ok and short.quality is None and "4x24x24" in (short.error or "")
    dark = answer.copy()
    dark[2] = 0
    black = score_video(_mp4(dark), None, str(tmp_path / "ref"), sanity=True)
    assert not black.ok and black.invalid_kind == "black_frame" and "frame 2" in (black.error or "")


@pytest.mark.e2e
@pytest.mark.slow
def test_load_replays_a_video_reference_and_reports_the_worst_frame(tmp_path: Path) -> None:
    """tiny-wan served with a lossless MP4 encoder: a reference recorded by ``probe`` replays identical; a
    reference frame altered by a known offset gives that frame's PSNR as the row's worst."""
    import hashlib

    from PIL import Image
    from tests.monitor.probe_service import serve_in_subprocess

    from diffbench.cli.main import main

    pytest.importorskip("diffusers")
    with serve_in_subprocess("tiny-wan", "32x32", 1, lossless_video=True) as url:
        ref = tmp_path / "v"
        assert main(["probe", "--url", url, "--record-reference", str(ref), "--once", "--size", "32x32",
                     "--frames", "5", "--steps", "1"]) == 0
        m = json.loads((ref / "manifest.json").read_text())
        (entry,) = m["entries"]
        out = tmp_path / "load.json"
        args = ["load", "--url", url, "--reference", str(ref), "--rates", "0.5",
                "--num-requests", "2", "--duration", "60", "--timeout", "120", "--size", "32x32", "--frames", "5",
                "--steps", "1", "--warmup", "0", "--json", str(out), "--quiet"]
        assert main(args) == 0
        q = json.loads(out.read_text())["rates"][0]["quality"]
        assert q["n_reference"] == 2 and q["n_scored"] == 2 and q["psnr_worst_db"] == 200.0

        folder = ref / entry["file"]
        frame = folder / "frame_00002.png"
        original = np.asarray(Image.open(frame).convert("RGB"))
        arr = original.copy()
        flat = arr.reshape(-1)
        flat[np.flatnonzero(flat <= 250)[:100]] += 5
        Image.fromarray(arr).save(frame)
        h = hashlib.sha256()
        for f in sorted(folder.iterdir()):
            h.update(f.read_bytes())
        entry["sha256"] = h.hexdigest()
        (ref / "manifest.json").write_text(json.dumps(m))
        assert main(args) == 0
    q = json.loads(out.read_text())["rates"][0]["quality"]
    assert q["n_scored"] == 2
    assert q["psnr_worst_db"] == pytest.approx(peak_signal_noise_ratio(arr, original, data_range=255), abs=1e-9)
