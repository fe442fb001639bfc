"""Every bad input gives a per-file error naming the file and the problem; policies are explicit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from skimage import data

from diffbench.errors import InputError
from diffbench.quality.compare import compare_dirs
from diffbench.quality.io import load_any
from diffbench.quality.models import QualityOptions


def _pair_dirs(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    return a, b


def _only_error(a: Path, b: Path, **kw) -> str:
    rep = compare_dirs(a, b, QualityOptions(workers=1, ms_ssim=False, **kw))
    assert rep.n_pairs == 0 and len(rep.errors) == 1, rep.errors
    return rep.errors[0].problem


def test_truncated_and_corrupt_png(tmp_path: Path) -> None:
    a, b = _pair_dirs(tmp_path)
    img = data.astronaut()
    Image.fromarray(img).save(a / "x.png")
    Image.fromarray(img).save(b / "x.png")
    raw = (b / "x.png").read_bytes()
    (b / "x.png").write_bytes(raw[: len(raw) // 2])
    msg = _only_error(a, b)
    assert str(b / "x.png") in msg and "cannot decode" in msg
    (b / "x.png").write_bytes(b"not a png at all")
    assert "cannot decode" in _only_error(a, b)


def test_unsupported_format(tmp_path: Path) -> None:
    a, b = _pair_dirs(tmp_path)
    Image.fromarray(data.camera()).save(a / "ok.png")
    Image.fromarray(data.camera()).save(b / "ok.png")
    (b / "weird.xyz").write_bytes(b"??")
    rep = compare_dirs(a, b, QualityOptions(workers=1, ms_ssim=False))
    assert rep.n_pairs == 1
    assert [(e.key, e.problem) for e in rep.errors] == [("weird.xyz", "unsupported format .xyz")]
    with pytest.raises(InputError, match="unsupported format"):
        load_any(b / "weird.xyz")


def test_grayscale_vs_rgb_is_a_pair_error(tmp_path: Path) -> None:
    a, b = _pair_dirs(tmp_path)
    Image.fromarray(data.camera()).save(a / "x.png")
    Image.fromarray(np.stack([data.camera()] * 3, -1)).save(b / "x.png")
    assert "channel mismatch: baseline grayscale, candidate RGB" in _only_error(a, b)


def test_grayscale_pair_is_compared(tmp_path: Path) -> None:
    a, b = _pair_dirs(tmp_path)
    Image.fromarray(data.camera()).save(a / "x.png")
    Image.fromarray(data.camera()).save(b / "x.png")
    rep = compare_dirs(a, b, QualityOptions(workers=1, ms_ssim=False))
    assert rep.pairs[0].channels == 1 and rep.n_identical == 1


def test_rgba_policies(tmp_path: Path) -> None:
    a, b = _pair_dirs(tmp_path)
    rgb = data.chelsea()
    alpha = np.full(rgb.shape[:2] + (1,), 128, np.uint8)
    Image.fromarray(np.concatenate([rgb, alpha], -1)).save(a / "x.png")
    Image.fromarray(rgb).save(b / "x.png")
    msg = _only_error(a, b)
    assert str(a / "x.png") in msg and "alpha" in msg and "--alpha" in msg
    rep = compare_dirs(a, b, QualityOptions(workers=1, ms_ssim=False, alpha="drop"))
    assert rep.pairs[0].identical and "baseline: alpha dropped" in rep.pairs[0].notes
    assert rep.settings.alpha_policy == "drop"
    rep = compare_dirs(a, b, QualityOptions(workers=1, ms_ssim=False, alpha="composite-white"))
    comp = np.rint(rgb * (128 / 255) + 255 * (1 - 128 / 255)).astype(np.uint8)
    from diffbench.quality.kernels import psnr

    assert rep.pairs[0].metrics["psnr"] == pytest.approx(psnr(comp, rgb))


def test_16bit_png_rejected(tmp_path: Path) -> None:
    a, b = _pair_dirs(tmp_path)
    Image.fromarray(data.camera().astype(np.uint16) * 256).save(a / "x.png")
    Image.fromarray(data.camera()).save(b / "x.png")
    msg = _only_error(a, b)
    assert str(a / "x.png") in msg and "16-bit" in msg


def test_palette_png_expanded(tmp_path: Path) -> None:
    a, b = _pair_dirs(tmp_path)
    pal = Image.fromarray(data.astronaut()).quantize(64)
    pal.save(a / "x.png")
    pal.convert("RGB").save(b / "x.png")
    rep = compare_dirs(a, b, QualityOptions(workers=1, ms_ssim=False))
    assert rep.pairs[0].identical and "baseline: palette expanded" in rep.pairs[0].notes


def test_exif_orientation_applied_and_reported(tmp_path: Path) -> None:
    a, b = _pair_dirs(tmp_path)
    img = data.chelsea()  # 300 x 451
    Image.fromarray(img).save(a / "x.jpg", quality=95)
    stored = Image.fromarray(np.rot90(img, 1))  # stored rotated; EXIF 6 says "rotate 270 (90 CW) to view"
    exif = Image.Exif()
    exif[0x0112] = 6
    stored.save(b / "x.jpg", quality=95, exif=exif)
    loaded = load_any(b / "x.jpg")
    assert loaded.array.shape == img.shape and any("EXIF orientation 6" in n for n in loaded.notes)
    rep = compare_dirs(a, b, QualityOptions(workers=1, ms_ssim=False))
    assert rep.pairs[0].metrics["psnr"] > 30  # same picture once oriented


def test_npy_nan_inf_and_range(tmp_path: Path) -> None:
    a, b = _pair_dirs(tmp_path)
    x = np.random.default_rng(0).random((32, 32, 3))
    np.save(a / "x.npy", x)
    y = x.copy()
    y[3, 4, 1] = np.nan
    y[5, 5, 0] = np.inf
    np.save(b / "x.npy", y)
    msg = _only_error(a, b)
    assert str(b / "x.npy") in msg and "2 NaN/Inf" in msg
    np.save(b / "x.npy", x * 2)
    assert "expected [0, 1]" in _only_error(a, b)
    np.save(b / "x.npy", x)
    rep = compare_dirs(a, b, QualityOptions(workers=1, ms_ssim=False))
    assert rep.pairs[0].identical and np.isinf(rep.pairs[0].metrics["psnr"])


def test_empty_directory(tmp_path: Path) -> None:
    a, b = _pair_dirs(tmp_path)
    Image.fromarray(data.camera()).save(a / "x.png")
    with pytest.raises(InputError, match="no images"):
        compare_dirs(a, b, QualityOptions(workers=1))
    with pytest.raises(InputError, match="not a directory"):
        compare_dirs(a, tmp_path / "missing", QualityOptions(workers=1))


def test_decompression_bomb_is_an_input_error(tmp_path: Path, monkeypatch) -> None:
    Image.fromarray(data.camera()).save(tmp_path / "x.png")  # 512² > 2 × 1000 px: Pillow refuses it
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(InputError, match="x.png"):
        load_any(tmp_path / "x.png")


# Cut points of a PNG's tail: 1-12 lose (part of) IEND, 13-16 the last IDAT CRC, 20 four bytes of zlib data,
# 40 deep into IDAT. Pillow decodes the pixels of all but the last exactly, so only an integrity check sees them.
@pytest.mark.parametrize("cut", [1, 4, 8, 12, 13, 16, 20, 40])
def test_truncated_png_tail_is_a_pair_error(tmp_path: Path, cut: int) -> None:
    a, b = _pair_dirs(tmp_path)
    img = np.random.default_rng(cut).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    Image.fromarray(img).save(a / "x.png")
    Image.fromarray(img).save(b / "x.png")
    raw = (b / "x.png").read_bytes()
    (b / "x.png").write_bytes(raw[:-cut])
    msg = _only_error(a, b)
    assert str(b / "x.png") in msg and ("truncated" in msg or "corrupt" in msg), msg
    with pytest.raises(InputError, match="x.png"):
        load_any(b / "x.png")


def test_png_with_a_flipped_crc_byte_is_corrupt(tmp_path: Path) -> None:
    p = tmp_path / "x.png"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(p)
    raw = bytearray(p.read_bytes())
    raw[-13] ^= 0xFF  # last byte of the last IDAT chunk's CRC (IEND is the final 12 bytes)
    p.write_bytes(bytes(raw))
    with pytest.raises(InputError, match="CRC"):
        load_any(p)


def test_intact_png_with_trailing_bytes_still_loads(tmp_path: Path) -> None:
    p = tmp_path / "x.png"
    img = np.random.default_rng(1).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    Image.fromarray(img).save(p)
    p.write_bytes(p.read_bytes() + b"trailer")  # data after IEND is not a truncation
    assert (load_any(p).array == img).all()


def test_truncated_png_listed_in_a_manifest_is_a_sha256_error(tmp_path: Path) -> None:
    import hashlib

    from diffbench.core.manifest import Manifest, ManifestEntry, write_manifest

    a, b = _pair_dirs(tmp_path)
    img = np.random.default_rng(2).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    for d in (a, b):
        Image.fromarray(img).save(d / "x.png")
        e = ManifestEntry(prompt_id="p", seed=0, height=16, width=16, file="x.png",
                          sha256=hashlib.sha256((d / "x.png").read_bytes()).hexdigest())
        write_manifest(d, Manifest(entries=[e]))
    (b / "x.png").write_bytes((b / "x.png").read_bytes()[:-12])  # IEND gone after the run
    msg = _only_error(a, b)
    assert str(b / "x.png") in msg and "sha256 differs" in msg
