"""Large pairs: refused from the headers before decoding (naming size, estimate, --allow-large), never a traceback."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from diffbench.cli.main import main
from diffbench.quality import io as qio
from diffbench.quality.compare import compare_dirs
from diffbench.quality.memory import estimate_pair_bytes
from diffbench.quality.models import QualityOptions

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def write_bilevel_png(path: Path, width: int, height: int) -> None:
    """A one-colour 1-bit grayscale PNG of any size, streamed row by row: a few hundred KB for 20000x20000,
    and never a full image in memory (PNG spec: IHDR bit depth 1, colour type 0; each row a filter byte)."""
    row = b"\x00" * (1 + (width + 7) // 8)
    z = zlib.compressobj(9)
    idat = b"".join(z.compress(row) for _ in range(height)) + z.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b""))


def _pair(tmp: Path, width: int, height: int) -> tuple[Path, Path]:
    for side in ("A", "B"):
        (tmp / side).mkdir()
        write_bilevel_png(tmp / side / "big.png", width, height)
    return tmp / "A", tmp / "B"


def test_a_decompression_bomb_is_our_error_before_decoding(tmp_path: Path, capsys, monkeypatch) -> None:
    a, b = _pair(tmp_path, 20000, 20000)
    decoded: list[Path] = []
    monkeypatch.setattr(qio, "_load_image", lambda p, alpha: decoded.append(p))  # must never be reached
    tracemalloc.start()
    rc = main(["quality", str(a), str(b), "--no-ms-ssim"])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2 and decoded == []
    assert f"{a}/big.png: 20000x20000 px (400 Mpx) is above Pillow's decompression-bomb limit of 179 Mpx" in err
    gib = estimate_pair_bytes(1, 20000, 20000, False, False) / 2**30
    assert f"needs about {gib:.1f} GiB; pass --allow-large" in err
    assert "Traceback" not in err and "DOS attack" not in err
    assert peak < 64 << 20  # a decoded 20000x20000 grayscale image alone is 400 MB


def test_load_image_above_the_bomb_limit_needs_allow_large(tmp_path: Path, monkeypatch) -> None:
    from diffbench.errors import InputError

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # 64x64 = 4096 px > 2 x 1000
    p = tmp_path / "x.png"
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(p)
    with pytest.raises(InputError, match="decompression-bomb limit.*pass --allow-large"):
        qio.load_image(p)
    assert qio.load_image(p, allow_large=True).array.shape == (64, 64, 3)
    assert Image.MAX_IMAGE_PIXELS == 1000  # the limit is restored after the block


def test_memory_bound_refuses_and_allow_large_scores(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (256, 256, 3), dtype=np.uint8)
    for side in ("A", "B"):
        (tmp_path / side).mkdir()
        Image.fromarray(img).save(tmp_path / side / "x.png")
    base = estimate_pair_bytes(1, 256, 256, False, False)
    with_ms = estimate_pair_bytes(1, 256, 256, True, False)
    rep = compare_dirs(tmp_path / "A", tmp_path / "B", QualityOptions(workers=1, max_memory=base - 1))
    (e,) = rep.errors
    assert f"x.png: 256x256 px: scoring the pair needs about {base / 2**30:.1f} GiB" in e.problem
    assert "--allow-large" in e.problem and rep.pairs == []
    # between the two estimates: PSNR/SSIM computed, MS-SSIM skipped with a note
    rep = compare_dirs(tmp_path / "A", tmp_path / "B", QualityOptions(workers=1, max_memory=(base + with_ms) // 2))
    (pr,) = rep.pairs
    assert "ms_ssim" not in pr.metrics and pr.metrics["psnr"] == float("inf")
    assert any(n.startswith("MS-SSIM not computed") for n in pr.notes)
    assert any("too large for MS-SSIM" in w for w in rep.warnings)
    rep = compare_dirs(tmp_path / "A", tmp_path / "B", QualityOptions(workers=1, max_memory=1, allow_large=True,
                                                                       ms_ssim=False))
    assert rep.errors == [] and rep.n_pairs == 1


# The pair's own peak: VmHWM (the resident high-water mark of this process's memory, reset after the warm-up by
# writing 5 to clear_refs; ru_maxrss would also carry the parent's resident size across fork + exec).
MEASURE = textwrap.dedent("""
    import sys
    from pathlib import Path
    from diffbench.quality.compare import load_scorers, score_pair
    from diffbench.quality.models import QualityOptions
    from diffbench.quality.pairing import PairSpec

    def status(field):
        for line in open("/proc/self/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024

    d = Path(sys.argv[1])
    opt = QualityOptions(workers=1, ms_ssim=False, allow_large=True)
    sc = load_scorers(opt, "path")
    score_pair(PairSpec("w", d / "wa.png", d / "wb.png"), opt, sc)  # a small pair first: lazy imports, caches
    open("/proc/self/clear_refs", "w").write("5")
    rss0 = status("VmRSS")
    out = score_pair(PairSpec("x", d / "a.png", d / "b.png"), opt, sc)
    assert out.pair is not None, out.error
    print(status("VmHWM") - rss0)
""")


@pytest.mark.e2e
def test_the_estimate_bounds_a_measured_peak(tmp_path: Path) -> None:
    n = 1600
    y, x = np.mgrid[0:n, 0:n]
    a = np.stack([(x + y) % 256, (x * 3) % 256, (y * 5) % 256], -1).astype(np.uint8)
    b = a.copy()
    b[::3] ^= 7
    Image.fromarray(a).save(tmp_path / "a.png", compress_level=1)
    Image.fromarray(b).save(tmp_path / "b.png", compress_level=1)
    Image.fromarray(a[:64, :64]).save(tmp_path / "wa.png")
    Image.fromarray(b[:64, :64]).save(tmp_path / "wb.png")
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run([sys.executable, "-c", MEASURE, str(tmp_path)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    measured = int(out.stdout.split()[-1])
    est = estimate_pair_bytes(1, n, n, False, False)
    assert 0 < measured <= est <= 3 * measured, (measured, est)


LIMITED = textwrap.dedent("""
    import resource, sys
    import psutil
    vms = psutil.Process().memory_info().vms
    resource.setrlimit(resource.RLIMIT_AS, (vms + (1536 << 20), resource.RLIM_INFINITY))
    from diffbench.cli.main import main
    sys.exit(main(["quality", sys.argv[1], sys.argv[2], "--no-ms-ssim", "--workers", "1"]))
""")


@pytest.mark.e2e
def test_a_13000_pair_under_a_memory_limit_is_refused_clearly(tmp_path: Path) -> None:
    a, b = _pair(tmp_path, 13000, 13000)  # under Pillow's limit; ~2.6 GiB to score, 1.5 GiB address space
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run([sys.executable, "-c", LIMITED, str(a), str(b)], capture_output=True, text=True, env=env,
                         timeout=120)
    err = " ".join(out.stderr.split())
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "MemoryError" not in out.stderr
    assert f"{a}/big.png: 13000x13000 px: scoring the pair needs about" in err
    assert err.rstrip().endswith("--allow-large scores the pairs refused as too large)")
