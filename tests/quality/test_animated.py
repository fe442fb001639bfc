"""Animated GIF / APNG / WebP are read as video (every frame), never scored on their first frame only.

References are independent of the reader: the frames are generated here as numpy arrays (16-colour
palette, so GIF stores them exactly), and per-frame values come from scikit-image / numpy on those
arrays, not from anything diffbench decoded.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, features
from skimage.metrics import peak_signal_noise_ratio as sk_psnr
from skimage.metrics import structural_similarity as sk_ssim

from diffbench.cli.main import main
from diffbench.quality.compare import compare_dirs
from diffbench.quality.io import load_any
from diffbench.quality.models import QualityOptions

WEBP = features.check("webp")
FORMATS = [
    pytest.param("gif", {}, id="gif"),
    pytest.param("png", {}, id="apng"),
    pytest.param("webp", {"lossless": True}, id="webp",
                 marks=pytest.mark.skipif(not WEBP, reason="Pillow built without WebP support")),
]
H, W = 40, 56


def _frames(seed: int, n: int = 4, first: np.ndarray | None = None) -> np.ndarray:
    """n RGB frames from a fixed 16-colour palette; frame 2 differs from frame 1 only in one corner (a
    delta frame: GIF/APNG writers store a sub-rectangle and the reader must composite it)."""
    pal = np.random.default_rng(123).integers(0, 256, (16, 3), dtype=np.uint8)
    rng = np.random.default_rng(seed)
    idx = [rng.integers(0, 16, (H, W), dtype=np.uint8) for _ in range(n)]
    if n > 2:
        idx[2] = idx[1].copy()
        idx[2][:9, :13] = rng.integers(0, 16, (9, 13), dtype=np.uint8)
    out = np.stack([pal[i] for i in idx])
    if first is not None:
        out[0] = first
    return out


def _save(path: Path, frames: np.ndarray, **kw) -> None:
    ims = [Image.fromarray(f) for f in frames]
    if len(ims) == 1:
        ims[0].save(path, **kw)
    else:
        ims[0].save(path, save_all=True, append_images=ims[1:], duration=100, loop=0, **kw)


def _sk_ssim(a: np.ndarray, b: np.ndarray) -> float:
    return float(sk_ssim(a, b, gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=255,
                         channel_axis=-1))


@pytest.mark.parametrize(("ext", "kw"), FORMATS)
def test_every_frame_decoded_exactly(tmp_path: Path, ext: str, kw: dict) -> None:
    fr = _frames(0)
    p = tmp_path / f"v.{ext}"
    _save(p, fr, **kw)
    v = load_any(p)
    assert v.is_video and v.animated and v.array.shape == fr.shape
    assert np.array_equal(v.array, fr)  # all frames, delta frame composited (disposal applied)


def test_gif_disposal_restore_background(tmp_path: Path) -> None:
    fr = _frames(1)
    _save(tmp_path / "v.gif", fr, disposal=2)
    assert np.array_equal(load_any(tmp_path / "v.gif").array, fr)


@pytest.mark.parametrize(("ext", "kw"), FORMATS)
def test_later_frames_differ_is_not_identical(tmp_path: Path, ext: str, kw: dict) -> None:
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    b.mkdir()
    fa = _frames(0)
    fb = _frames(1, first=fa[0])  # same first frame, every later frame different
    _save(a / f"v.{ext}", fa, **kw)
    _save(b / f"v.{ext}", fb, **kw)
    rep = compare_dirs(a, b, QualityOptions(workers=1, ms_ssim=False))
    assert not rep.errors and rep.n_pairs == 1 and rep.n_identical == 0
    (pr,) = rep.pairs
    assert pr.kind == "video" and pr.animated and pr.frames == 4 and not pr.identical
    ref_p = [sk_psnr(x, y, data_range=255) if not np.array_equal(x, y) else np.inf for x, y in zip(fa, fb, strict=True)]
    ref_s = [_sk_ssim(x, y) for x, y in zip(fa, fb, strict=True)]
    got_p = [r.psnr for r in rep.frames]
    assert got_p[0] == np.inf and rep.frames[0].identical
    assert got_p[1:] == pytest.approx(ref_p[1:], abs=1e-6)
    assert [r.ssim for r in rep.frames] == pytest.approx(ref_s, abs=1e-4)
    v = pr.video
    assert v is not None and v.psnr_worst_frame == int(np.argmin(ref_p)) and v.identical_frames == 1
    assert v.ssim_worst_frame == int(np.argmin(ref_s))
    flick = lambda x: 1 - np.mean([np.abs(x[t + 1].astype(float) - x[t]).mean() for t in range(3)]) / 255  # noqa: E731
    assert v.flicker_delta == pytest.approx(flick(fb) - flick(fa), abs=1e-9)
    assert pr.metrics["psnr"] == pytest.approx(np.mean(ref_p[1:]), abs=1e-6)  # mean of the non-identical frames
    assert pr.metrics["ssim"] == pytest.approx(np.mean(ref_s[1:]), abs=1e-4)  # the same frames, as frame_ssim
    assert rep.summaries["frame_ssim"].mean == pytest.approx(np.mean(ref_s[1:]), abs=1e-4)
    assert rep.summaries["frame_psnr"].n == 4 and rep.summaries["frame_psnr"].n_identical == 1


@pytest.mark.parametrize(("ext", "kw"), FORMATS)
def test_cli_gate_sees_later_frames(tmp_path: Path, ext: str, kw: dict, capsys) -> None:
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    b.mkdir()
    fa = _frames(0)
    _save(a / f"v.{ext}", fa, **kw)
    _save(b / f"v.{ext}", _frames(1, first=fa[0]), **kw)
    qj = tmp_path / "q.json"
    rc = main(["quality", str(a), str(b), "--no-ms-ssim", "--json", str(qj), "--gate", "psnr.min>=40"])
    assert rc == 1  # first-frame-only reading called this pair identical (+inf) and passed
    q = json.loads(qj.read_text())
    assert q["n_identical"] == 0 and q["pairs"][0]["frames"] == 4 and len(q["frames"]) == 4


def test_animated_vs_still_is_a_pair_error(tmp_path: Path) -> None:
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    b.mkdir()
    fa = _frames(0)
    _save(a / "v.png", fa)
    _save(b / "v.png", fa[:1])  # the first frame alone, as a still PNG
    rep = compare_dirs(a, b, QualityOptions(workers=1, ms_ssim=False))
    assert rep.n_pairs == 0 and len(rep.errors) == 1
    msg = rep.errors[0].problem
    assert "kind mismatch" in msg and "animated image (4 frames)" in msg and "still image" in msg


def test_frame_count_mismatch_is_a_pair_error(tmp_path: Path) -> None:
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    b.mkdir()
    fa = _frames(0)
    _save(a / "v.gif", fa)
    _save(b / "v.gif", fa[:3])
    rep = compare_dirs(a, b, QualityOptions(workers=1, ms_ssim=False))
    assert rep.n_pairs == 0 and "frame count mismatch" in rep.errors[0].problem
    assert "4 frames" in rep.errors[0].problem and "3 frames" in rep.errors[0].problem


def test_single_frame_gif_is_a_still(tmp_path: Path) -> None:
    fr = _frames(0, n=1)
    _save(tmp_path / "s.gif", fr)
    s = load_any(tmp_path / "s.gif")
    assert not s.is_video and np.array_equal(s.array, fr[0])


def test_frame_folder_with_an_animated_entry_is_refused(tmp_path: Path) -> None:
    from diffbench.errors import InputError

    d = tmp_path / "clip"
    d.mkdir()
    _save(d / "00000.gif", _frames(0))
    _save(d / "00001.gif", _frames(1, n=1))
    with pytest.raises(InputError, match="00000.gif is itself an animated image"):
        load_any(d)
