"""Frame folders pair by frame number (a missing number is named); video frame-rate and VFR differences are noted."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from skimage.metrics import peak_signal_noise_ratio

from diffbench.cli.main import main
from diffbench.quality.compare import compare_dirs
from diffbench.quality.models import QualityOptions


def _frames(n: int, seed: int = 0) -> np.ndarray:
    """n frames of distinct random content: any misaligned pair has a PSNR near 7.7 dB."""
    return np.random.default_rng(seed).integers(0, 256, (n, 24, 32, 3), dtype=np.uint8)


def _folder(d: Path, frames: dict[int, np.ndarray], name: str = "{:04d}.png") -> None:
    d.mkdir(parents=True)
    for n, f in frames.items():
        Image.fromarray(f).save(d / name.format(n))


def test_a_gap_with_the_same_count_is_named_not_compared_by_position(tmp_path: Path, capsys) -> None:
    fr = _frames(9)
    _folder(tmp_path / "A" / "v", {n: fr[n] for n in range(8)})  # 0..7
    _folder(tmp_path / "B" / "v", {n: fr[n] for n in (0, 1, 2, 4, 5, 6, 7, 8)})  # 3 missing, 8 extra: 8 frames too
    rc = main(["quality", str(tmp_path / "A"), str(tmp_path / "B"), "--no-ms-ssim"])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2
    assert "v: frame numbers differ: frame 3 missing in candidate; frame 8 missing in baseline" in err
    rc = main(["quality", str(tmp_path / "A"), str(tmp_path / "B"), "--no-ms-ssim", "--allow-missing",
               "--json", str(tmp_path / "q.json")])
    rep = json.loads((tmp_path / "q.json").read_text())
    assert rep["n_pairs"] == 0 and rep["frames"] == []  # no frame scored against the wrong frame
    # by position, frame 3 of A would have met frame 4 of B: distinct content, a low PSNR
    assert peak_signal_noise_ratio(fr[3], fr[4], data_range=255) < 12


def test_a_count_mismatch_names_the_missing_numbers(tmp_path: Path) -> None:
    fr = _frames(6)
    _folder(tmp_path / "A" / "v", {n: fr[n] for n in range(6)})
    _folder(tmp_path / "B" / "v", {n: fr[n] for n in (0, 1, 5)})
    rep = compare_dirs(tmp_path / "A", tmp_path / "B", QualityOptions(workers=1, ms_ssim=False))
    (e,) = rep.errors
    assert e.problem.startswith("frame count mismatch: frames 2-4 missing in candidate (baseline 6 frames, candidate 3")


def test_frames_pair_by_number_across_name_styles_and_rows_carry_the_numbers(tmp_path: Path) -> None:
    fr = _frames(6, seed=1)
    cand = fr.copy()
    cand[4] = np.clip(cand[4].astype(int) + np.random.default_rng(2).integers(-20, 21, cand[4].shape), 0, 255)
    nums = [1, 2, 3, 4, 5, 10]  # numbered from 1, with a jump both sides share
    _folder(tmp_path / "A" / "v", {n: fr[i] for i, n in enumerate(nums)}, "frame_{:04d}.png")
    _folder(tmp_path / "B" / "v", {n: cand[i] for i, n in enumerate(nums)}, "{}.png")  # unpadded, no prefix
    rep = compare_dirs(tmp_path / "A", tmp_path / "B", QualityOptions(workers=1, ms_ssim=False))
    assert rep.errors == []
    (pr,) = rep.pairs
    by_num = {r.frame: r.psnr for r in rep.frames}
    assert sorted(by_num) == nums
    assert by_num[5] == pytest.approx(peak_signal_noise_ratio(fr[4], cand[4], data_range=255))
    assert all(math.isinf(by_num[n]) for n in nums if n != 5)
    assert pr.video is not None and pr.video.psnr_worst_frame == 5  # the number in the file name


def test_two_files_for_one_frame_number_are_an_error(tmp_path: Path) -> None:
    fr = _frames(3)
    _folder(tmp_path / "A" / "v", {n: fr[n] for n in range(3)})
    _folder(tmp_path / "B" / "v", {n: fr[n] for n in range(3)})
    Image.fromarray(fr[1]).save(tmp_path / "B" / "v" / "frame_1.png")
    rep = compare_dirs(tmp_path / "A", tmp_path / "B", QualityOptions(workers=1, ms_ssim=False))
    (e,) = rep.errors
    assert "two files for frame 1 (0001.png, frame_1.png)" in e.problem


def _write_video(path: Path, frames: np.ndarray, fps: int, pts_ms: list[int] | None = None) -> None:
    import av

    with av.open(str(path), "w") as c:
        st = c.add_stream("libx264", rate=fps)
        st.width, st.height, st.pix_fmt = frames.shape[2], frames.shape[1], "yuv444p"
        st.options = {"crf": "0", "preset": "ultrafast"}
        if pts_ms is not None:
            st.codec_context.time_base = Fraction(1, 1000)
        for i, f in enumerate(frames):
            vf = av.VideoFrame.from_ndarray(f, format="rgb24")
            if pts_ms is not None:
                vf.pts, vf.time_base = pts_ms[i], Fraction(1, 1000)
            for pkt in st.encode(vf):
                c.mux(pkt)
        for pkt in st.encode():
            c.mux(pkt)


def test_video_frame_rates_24_vs_30_are_noted(tmp_path: Path) -> None:
    fr = _frames(5)
    for side, fps in (("A", 24), ("B", 30)):
        (tmp_path / side).mkdir()
        _write_video(tmp_path / side / "v.mp4", fr, fps)
    rep = compare_dirs(tmp_path / "A", tmp_path / "B", QualityOptions(workers=1, ms_ssim=False))
    (pr,) = rep.pairs
    assert any(n.startswith("frame rates differ: baseline 24 fps, candidate 30 fps; frames are paired by index")
               for n in pr.notes), pr.notes
    assert any("differ in frame rate or have a variable frame rate" in w and "v.mp4" in w for w in rep.warnings)


def test_same_rate_videos_get_no_timing_note(tmp_path: Path) -> None:
    fr = _frames(5)
    for side in ("A", "B"):
        (tmp_path / side).mkdir()
        _write_video(tmp_path / side / "v.mp4", fr, 24)
    rep = compare_dirs(tmp_path / "A", tmp_path / "B", QualityOptions(workers=1, ms_ssim=False))
    (pr,) = rep.pairs
    assert not any("frame rate" in n for n in pr.notes) and not any("frame rate" in w for w in rep.warnings)


def test_variable_frame_rate_is_noted(tmp_path: Path) -> None:
    fr = _frames(6)
    (tmp_path / "A").mkdir()
    (tmp_path / "B").mkdir()
    _write_video(tmp_path / "A" / "v.mp4", fr, 25)  # constant 40 ms
    pts = [0, 40, 80, 200, 240, 400]  # intervals 40, 40, 120, 40, 160 ms
    _write_video(tmp_path / "B" / "v.mp4", fr, 25, pts)
    rep = compare_dirs(tmp_path / "A", tmp_path / "B", QualityOptions(workers=1, ms_ssim=False))
    (pr,) = rep.pairs
    d = np.diff(pts)
    want = f"candidate: variable frame rate: frame intervals {d.min():.1f}-{d.max():.1f} ms"
    assert any(n.startswith(want) for n in pr.notes), pr.notes
    assert not any(n.startswith("baseline: variable") for n in pr.notes)
    assert any("variable frame rate" in w for w in rep.warnings)
