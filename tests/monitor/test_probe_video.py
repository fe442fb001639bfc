"""``diffbench probe`` on a video model: ``diffbench serve`` with tiny-wan (32x32, 5 frames, 1 step) on loopback,
in a process of its own.

The probe records the decoded MP4 as a frame folder, replays the job, and reports the worst frame; a
reference frame altered by a known offset gives the closed-form PSNR at that frame. The service's MP4
encoder is swapped for a lossless one (``probe_service.lossless_mp4``): serve's yuv420p/CRF 18 encoder is
lossy and not repeatable, and this test checks the probe, not the codec.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest

from diffbench.cli.main import main

from .probe_service import serve_in_subprocess

pytest.importorskip("diffusers")
pytest.importorskip("av")
pytestmark = pytest.mark.slow


def test_video_probe_records_replays_and_reports_the_worst_frame(tmp_path: Path) -> None:
    import urllib.request

    from PIL import Image

    with serve_in_subprocess("tiny-wan", "32x32", 1, lossless_video=True) as url:
        ref = tmp_path / "v"
        assert main(["probe", "--url", url, "--record-reference", str(ref), "--once", "--size", "32x32",
                     "--frames", "5", "--steps", "1"]) == 0
        m = json.loads((ref / "manifest.json").read_text())
        (entry,) = m["entries"]
        assert entry["frames"] == 5 and (ref / entry["file"]).is_dir()
        out = tmp_path / "o.json"
        assert main(["probe", "--url", url, "--reference", str(ref), "--once", "--psnr-threshold", "30",
                     "--json", str(out)]) == 0
        assert json.loads(out.read_text())["entries"][0]["psnr_db"] == "inf"

        frame = ref / entry["file"] / "frame_00002.png"
        arr = np.asarray(Image.open(frame).convert("RGB")).copy()
        flat = arr.reshape(-1)
        idx = np.flatnonzero(flat <= 250)[:100]
        assert idx.size == 100
        flat[idx] += 5
        Image.fromarray(arr).save(frame)
        h = hashlib.sha256()
        for f in sorted((ref / entry["file"]).iterdir()):
            h.update(f.read_bytes())
        entry["sha256"] = h.hexdigest()
        (ref / "manifest.json").write_text(json.dumps(m))
        assert main(["probe", "--url", url, "--reference", str(ref), "--once", "--psnr-threshold", "30",
                     "--json", str(out)]) == 0
        e = json.loads(out.read_text())["entries"][0]
        assert e["worst_frame"] == 2
        assert e["psnr_db"] == pytest.approx(10 * math.log10(255**2 * arr.size / (100 * 25)), abs=1e-9)
        assert e["ssim"] < 1.0
        with urllib.request.urlopen(f"{url}/__shim/traffic", timeout=10) as r:
            traffic = json.loads(r.read())
        paths = {p for _, p, _ in traffic}
        assert any(p.endswith("/content") for p in paths)
        assert all(hdr == "probe" for _, _, hdr in traffic)
        assert [m for m, p, _ in traffic if p.startswith("/v1/videos/")].count("DELETE") == 3
