"""Video: flicker and motion on synthetic clips with known frame differences, worst frame, PyAV IO."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from diffbench.errors import ShapeError
from diffbench.quality.compare import compare_dirs
from diffbench.quality.io import load_any
from diffbench.quality.kernels import psnr
from diffbench.quality.models import QualityOptions
from diffbench.quality.video import mean_abs_frame_diff, per_frame, temporal_flicker, worst_index


def _clip(levels: list[int], h: int = 32, w: int = 48) -> np.ndarray:
    return np.stack([np.full((h, w, 3), v, np.uint8) for v in levels])


def test_flicker_and_motion_known_differences() -> None:
    v = _clip([10, 20, 20, 50])  # |diffs| = 10, 0, 30 -> mean 40/3 levels
    assert mean_abs_frame_diff(v) == pytest.approx(40 / 3)
    assert temporal_flicker(v) == pytest.approx(1 - (40 / 3) / 255)
    assert temporal_flicker(_clip([7, 7, 7])) == 1.0
    assert temporal_flicker(_clip([7])) is None


def test_worst_frame_index_and_psnr() -> None:
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (6, 40, 40, 3), dtype=np.uint8)
    cand = base.copy()
    cand[2] = np.clip(cand[2].astype(int) + 3, 0, 255)
    cand[4] = np.clip(cand[4].astype(int) + rng.integers(-40, 41, cand[4].shape), 0, 255)
    p, s = per_frame(base, cand, 255.0)
    assert np.isinf(p[[0, 1, 3, 5]]).all()
    assert worst_index(p) == 4 and worst_index(s) == 4
    assert p[4] == pytest.approx(psnr(base[4], cand[4]))
    with pytest.raises(ShapeError, match="frame count"):
        per_frame(base, cand[:5], 255.0)


def _write_mp4(path: Path, frames: np.ndarray, fps: int = 8) -> None:
    import av

    with av.open(str(path), "w") as c:
        st = c.add_stream("libx264", rate=fps)
        st.width, st.height, st.pix_fmt = frames.shape[2], frames.shape[1], "yuv444p"
        st.options = {"crf": "0", "preset": "ultrafast"}
        for f in frames:
            for pkt in st.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                c.mux(pkt)
        for pkt in st.encode():
            c.mux(pkt)


def _smooth(t: int, shift: int) -> np.ndarray:
    y, x = np.mgrid[0:64, 0:96]
    return np.stack([
        np.stack([(x * 2 + k * shift) % 256, (y * 3) % 256, ((x + y) + k * shift) % 256], -1).astype(np.uint8)
        for k in range(t)
    ])


def test_read_mp4_written_with_pyav(tmp_path: Path) -> None:
    frames = _smooth(5, 4)
    p = tmp_path / "clip.mp4"
    _write_mp4(p, frames)
    v = load_any(p)
    assert v.is_video and v.array.shape == frames.shape
    for t in range(5):  # near-lossless (crf 0, yuv444p; RGB<->YUV rounding only)
        assert psnr(frames[t], v.array[t]) > 35


def test_compare_video_dirs_frame_folders_and_mismatch(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    base = _smooth(6, 4)
    cand = _smooth(6, 2)  # half the motion
    cand[0] = base[0]
    for root, vid in ((a, base), (b, cand)):
        (root / "v1").mkdir(parents=True)
        for t, f in enumerate(vid):
            Image.fromarray(f).save(root / "v1" / f"{t:05d}.png")
        (root / "v2").mkdir()
    for t, f in enumerate(base):
        Image.fromarray(f).save(a / "v2" / f"{t:05d}.png")
    for t, f in enumerate(base[:5]):
        Image.fromarray(f).save(b / "v2" / f"{t:05d}.png")
    rep = compare_dirs(a, b, QualityOptions(workers=1, ms_ssim=False))
    assert [e.key for e in rep.errors] == ["v2"] and "frame count mismatch" in rep.errors[0].problem
    (pr,) = rep.pairs
    v = pr.video
    assert v is not None and v.frames == 6
    assert v.motion_baseline == pytest.approx(mean_abs_frame_diff(base))
    assert v.motion_ratio == pytest.approx(mean_abs_frame_diff(cand) / mean_abs_frame_diff(base))
    assert v.flicker_delta == pytest.approx(temporal_flicker(cand) - temporal_flicker(base))
    p, s = per_frame(base, cand, 255.0)
    assert v.psnr_worst_frame == worst_index(p) and v.identical_frames == 1
    assert len(rep.frames) == 6 and rep.summaries["frame_psnr"].n == 6
    assert rep.summaries["frame_ssim"].worst == pytest.approx(s.min())


def test_gif_and_video_lpips(tmp_path: Path) -> None:
    from diffbench.quality.lpips import LPIPS

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    frames = _smooth(4, 8)
    for root, fr in ((a, frames), (b, frames[::-1].copy())):
        ims = [Image.fromarray(f) for f in fr]
        ims[0].save(root / "v.gif", save_all=True, append_images=ims[1:], duration=100, loop=0)
    v = load_any(a / "v.gif")
    assert v.is_video and v.array.shape[0] == 4 and v.array.shape[1:] == frames.shape[1:]
    lp = LPIPS.uncalibrated(seed=0)
    rep = compare_dirs(a, b, QualityOptions(workers=1, ms_ssim=False), lpips_model=lp)
    (pr,) = rep.pairs
    assert pr.video is not None and pr.video.lpips_worst is not None
    lps = [r.lpips for r in rep.frames]
    assert pr.video.lpips_worst_frame == int(np.argmax(lps)) and rep.summaries["frame_lpips"].worst == max(lps)
    assert rep.settings.lpips_calibrated is False


def test_truncated_mp4_is_an_input_error(tmp_path: Path) -> None:
    from diffbench.errors import InputError

    p = tmp_path / "clip.mp4"
    _write_mp4(p, _smooth(5, 4))
    raw = p.read_bytes()
    (tmp_path / "cut.mp4").write_bytes(raw[: len(raw) // 3])
    (tmp_path / "junk.webm").write_bytes(b"\x00" * 100)
    for bad in ("cut.mp4", "junk.webm"):
        with pytest.raises(InputError, match=bad):
            load_any(tmp_path / bad)


def test_temporal_metrics_refuse_a_still_image() -> None:
    img = _clip([5])[0]  # (H, W, 3): would otherwise be read as H frames of (W, 3)
    with pytest.raises(ShapeError, match=r"\(T, H, W, C\)"):
        temporal_flicker(img)
    with pytest.raises(ShapeError, match="per_frame takes"):
        per_frame(img, img, 255.0)


def test_summary_table_at_80_columns_shows_every_metric_name_whole(tmp_path: Path) -> None:
    from rich.console import Console

    from diffbench.report.quality_render import render_console

    a, b = tmp_path / "a", tmp_path / "b"
    base, cand = _smooth(6, 4), _smooth(6, 2)
    for root, vid in ((a, base), (b, cand)):
        (root / "v1").mkdir(parents=True)
        for t, f in enumerate(vid):
            Image.fromarray(f).save(root / "v1" / f"{t:05d}.png")
    rep = compare_dirs(a, b, QualityOptions(workers=1, ms_ssim=False))
    con = Console(width=80, record=True, color_system=None)
    render_console(rep, con)
    text = con.export_text()
    summary = text.split("per-pair metrics")[1].split("worst 1 by psnr")[0]  # up to the next table's title
    assert "…" not in text, text  # nothing cut anywhere: names, numbers, paths (folded instead)
    rows = [ln.strip("│ ") for ln in summary.splitlines()]
    for name in ("frame_psnr", "frame_ssim", "flicker_delta", "motion_ratio"):
        assert name in rep.summaries, name
        line = next((r for r in rows if r.startswith(name + " ")), None)  # the name whole, then the numbers
        assert line is not None, (name, summary)
        st = rep.summaries[name]
        assert f"{st.p10:.4f}" in line and f"{st.worst:.4f}" in line, line  # numbers whole, on the name's line


def test_each_summary_says_how_many_pairs_define_it_and_why_the_rest_do_not(tmp_path: Path) -> None:
    from rich.console import Console

    from diffbench.report.quality_render import render_console

    a, b = tmp_path / "a", tmp_path / "b"
    moving, still = _smooth(6, 4), np.repeat(_smooth(1, 4), 6, axis=0)  # a still clip: no motion at all
    clips = {"v0": (moving, _smooth(6, 2))} | {f"v{i}": (still, _smooth(6, 3)) for i in range(1, 5)}
    for key, pair in clips.items():
        for root, vid in zip((a, b), pair, strict=True):
            (root / key).mkdir(parents=True)
            for t, f in enumerate(vid):
                Image.fromarray(f).save(root / key / f"{t:05d}.png")
    rep = compare_dirs(a, b, QualityOptions(workers=1, ms_ssim=False))
    assert mean_abs_frame_diff(still) == 0.0  # so candidate / baseline motion is undefined for v1..v4
    m = rep.summaries["motion_ratio"]
    assert (m.n, m.n_pairs) == (1, 5)
    assert m.undefined == {"the baseline does not move (mean frame difference 0)": 4}
    assert m.p50 == pytest.approx(mean_abs_frame_diff(_smooth(6, 2)) / mean_abs_frame_diff(moving))
    for key in ("v1", "v2", "v3", "v4"):  # the per-pair note says why
        pr = next(p for p in rep.pairs if p.key == key)
        assert "motion_ratio undefined: the baseline does not move (mean frame difference 0)" in pr.notes
    assert not [n for n in next(p for p in rep.pairs if p.key == "v0").notes if "undefined" in n]
    for name in ("psnr", "ssim", "flicker_delta"):  # defined for every pair: n of n
        assert (rep.summaries[name].n, rep.summaries[name].n_pairs, rep.summaries[name].undefined) == (5, 5, {})
    assert "motion_ratio: defined for 1 of 5 pairs; undefined: the baseline does not move (mean frame " \
        "difference 0) (4)" in rep.warnings
    con = Console(width=120, record=True, color_system=None)
    render_console(rep, con)
    line = next(ln for ln in con.export_text().splitlines() if ln.strip("│ ").startswith("motion_ratio "))
    assert line.split("│")[1].strip() == "1/5"  # the n column: defined of pairs
