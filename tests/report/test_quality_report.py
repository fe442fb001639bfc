"""The quality report from real runs: ``bench --save-outputs`` twice → ``quality --json`` → ``report``.

Checked in headless Chromium (network cut): histograms, the worst-N grid (rows = min(worst, pairs), three
decoded images per row), the heat map's pixels against |candidate − baseline| × gain computed here with
numpy from the files, the per-frame curve of a video with its worst frame = argmin of the frame PSNRs, and
identical pairs (+inf PSNR) counted and stated. Markdown: tables and PNG files.
"""

from __future__ import annotations

import base64
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from tests.report.browser import blocks, open_page, screenshot_nonblank

from diffbench.cli.main import main
from diffbench.errors import InputError
from diffbench.report.build import build_document
from diffbench.report.html_render import render_html
from diffbench.report.kinds import ReportOptions
from diffbench.report.kinds.quality_images import colormap_lut, diff_magnitude, heat_map, thumbnail
from diffbench.report.markdown_render import render_markdown

FLUX = ["--model", "tiny-flux", "--height", "64", "--width", "64", "--warmup", "0", "--runs", "1",
        "--num-prompts", "2", "--seeds", "0,1", "--no-repro"]
WAN = ["--model", "tiny-wan", "--height", "64", "--width", "64", "--frames", "5", "--warmup", "0", "--runs", "1",
       "--num-prompts", "1", "--no-repro"]


def _rgb(path: Path) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(path).convert("RGB"))


def _decode(data_url: str) -> np.ndarray:
    from PIL import Image

    head, _, b64 = data_url.partition(",")
    assert head == "data:image/png;base64"
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB"))


@pytest.fixture(scope="module")
def flux(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real tiny-flux runs (2 vs 3 steps, 4 outputs each) and their quality result q.json."""
    d = tmp_path_factory.mktemp("flux")
    assert main(["bench", *FLUX, "--steps", "2", "--save-outputs", str(d / "base")]) == 0
    assert main(["bench", *FLUX, "--steps", "3", "--save-outputs", str(d / "cand")]) == 0
    assert main(["quality", str(d / "base"), str(d / "cand"), "--no-ms-ssim", "--json", str(d / "q.json")]) == 0
    return d


@pytest.fixture(scope="module")
def wan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real tiny-wan runs (64x64, 5 frames, 2 vs 3 steps) and their quality result qw.json."""
    d = tmp_path_factory.mktemp("wan")
    assert main(["bench", *WAN, "--steps", "2", "--save-outputs", str(d / "base")]) == 0
    assert main(["bench", *WAN, "--steps", "3", "--save-outputs", str(d / "cand")]) == 0
    assert main(["quality", str(d / "base"), str(d / "cand"), "--json", str(d / "qw.json")]) == 0
    return d


def _noisy_copy(flux: Path, out: Path) -> Path:
    """Path-paired copies of the flux baseline: 3 with seeded Gaussian noise (sigma 4, 8, 16), 1 identical."""
    from PIL import Image

    a, b = out / "A", out / "B"
    a.mkdir()
    b.mkdir()
    files = sorted((flux / "base").glob("*.png"))
    rng = np.random.default_rng(7)
    for f, sigma in zip(files, [4.0, 8.0, 16.0, 0.0], strict=True):
        shutil.copy(f, a / f.name)
        img = _rgb(f).astype(np.float64)
        noisy = np.clip(np.rint(img + rng.normal(0, sigma, img.shape)), 0, 255).astype(np.uint8) if sigma else img
        Image.fromarray(noisy.astype(np.uint8)).save(b / f.name)
    q = out / "qn.json"
    assert main(["quality", str(a), str(b), "--no-ms-ssim", "--json", str(q)]) == 0
    return q


def test_heat_map_is_amplified_absolute_difference() -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (9, 7, 3), dtype=np.uint8)
    b = rng.integers(0, 256, (9, 7, 3), dtype=np.uint8)
    gain = 3.5
    expect = np.clip(np.rint(np.abs(b.astype(float) - a.astype(float)).mean(-1) * gain), 0, 255).astype(np.uint8)
    mag, rgb = heat_map(a, b, gain)
    assert np.array_equal(mag, expect) and np.array_equal(diff_magnitude(a, a, gain), np.zeros((9, 7), np.uint8))
    from matplotlib import colormaps

    ref = np.rint(colormaps["inferno"](expect / 255.0)[..., :3] * 255).astype(np.uint8)
    assert np.abs(rgb.astype(int) - ref.astype(int)).max() <= 1  # LUT vs direct colormap: rounding only


def test_thumbnail_block_max_keeps_a_hot_pixel() -> None:
    img = np.zeros((600, 300), np.uint8)
    img[301, 17] = 200
    t = thumbnail(img, 256, block_max=True)
    assert t.shape == (200, 100) and t.max() == 200 and t[100, 5] == 200  # factor ceil(600/256) = 3
    small = np.arange(16, dtype=np.uint8).reshape(4, 4)
    up = thumbnail(small, 256)
    assert up.shape == (256, 256) and np.array_equal(up[::64, ::64], small)


def test_quality_report_in_browser(flux: Path, tmp_path: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    q = json.loads((flux / "q.json").read_text())
    opts = ReportOptions(worst=3, amplify=10.0)
    out = tmp_path / "report.html"
    assert main(["report", str(flux / "q.json"), "-o", str(out), "--worst", "3", "--amplify", "10"]) == 0
    open_page(chrome, out)
    found = blocks(chrome)
    assert {"quality-hist", "quality-1-summaries", "quality-1-grid", "quality-1-pairs"} <= set(found)
    grid = found["quality-1-grid"]
    rows = grid.find_elements("css selector", ".grid-row")
    assert len(rows) == min(opts.worst, q["n_pairs"]) == 3
    # lowest PSNR first, the same order numpy gives from the result's own numbers
    order = sorted(q["pairs"], key=lambda p: float(p["metrics"]["psnr"]))
    assert [r.find_element("css selector", "b").text for r in rows] == [p["key"] for p in order[:3]]
    d = chrome.driver
    for r in rows:
        imgs = r.find_elements("css selector", "img")
        assert len(imgs) == 3
        assert all(d.execute_script("return arguments[0].naturalWidth", i) > 0 for i in imgs)
    # the worst pair's heat map, decoded from the page, equals |cand - base| x 10 from the files
    worst = order[0]
    base, cand = _rgb(Path(worst["baseline"])), _rgb(Path(cand_path := worst["candidate"]))
    assert Path(cand_path).exists()
    imgs = rows[0].find_elements("css selector", "img")
    shown_base, shown_heat = _decode(imgs[0].get_attribute("src")), _decode(imgs[2].get_attribute("src"))
    k = shown_heat.shape[0] // base.shape[0]  # thumbnails of 64-px images are enlarged by an integer factor
    assert k * base.shape[0] == shown_heat.shape[0] and np.array_equal(shown_base[::k, ::k], base)
    mag = np.clip(np.rint(np.abs(cand.astype(float) - base.astype(float)).mean(-1) * 10.0), 0, 255).astype(int)
    assert mag.max() > 0
    from matplotlib import colormaps

    ref = np.rint(colormaps["inferno"](mag / 255.0)[..., :3] * 255)
    assert np.abs(shown_heat[::k, ::k].astype(int) - ref).max() <= 1
    # histograms: one SVG panel per metric; legend and caption carry n
    hist = found["quality-hist"]
    assert hist.find_element("css selector", "svg").size["width"] > 300
    assert "PSNR (dB, higher is better)" in hist.text and "SSIM (higher is better)" in hist.text
    assert f"(q n={q['n_pairs']})" in hist.text  # the caption names n per metric
    assert f"q (n={q['n_pairs']})" in hist.text
    d.execute_script("arguments[0].scrollIntoView()", grid)
    screenshot_nonblank(chrome, "report-quality")


def test_identical_pairs_are_counted_and_stated(flux: Path, tmp_path: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    from skimage.metrics import peak_signal_noise_ratio

    qn = _noisy_copy(flux, tmp_path)
    rep = json.loads(qn.read_text())
    assert rep["n_identical"] == 1
    out = tmp_path / "n.html"
    out.write_text(render_html(build_document([qn], ReportOptions(worst=8))), encoding="utf-8")
    open_page(chrome, out)
    found = blocks(chrome)
    hist = found["quality-hist"].text
    assert "qn (n=4, 1 identical +inf not drawn)" in hist and "1 identical pair(s) have PSNR = +inf" in hist
    assert "1 of 4 pairs are identical" in found["quality-1-identical"].text
    rows = found["quality-1-grid"].find_elements("css selector", ".grid-row")
    assert len(rows) == 4  # min(8, 4)
    # the noisiest copy (sigma 16) is first; its PSNR in the row is scikit-image's on the files
    first = rows[0].find_element("css selector", "table").text
    name = sorted((tmp_path / "A").glob("*.png"))[2].name
    ref = peak_signal_noise_ratio(_rgb(tmp_path / "A" / name), _rgb(tmp_path / "B" / name), data_range=255)
    assert rows[0].find_element("css selector", "b").text == name and f"{ref:.2f}" in first
    last = rows[-1].find_element("css selector", "table").text
    assert "+inf (identical)" in last
    heat = _decode(rows[-1].find_elements("css selector", "img")[2].get_attribute("src"))
    assert np.array_equal(np.unique(heat.reshape(-1, 3), axis=0), colormap_lut()[:1])  # all "no difference"


def test_video_report_marks_the_worst_frame(wan: Path, tmp_path: Path, chrome) -> None:  # type: ignore[no-untyped-def]
    q = json.loads((wan / "qw.json").read_text())
    psnr = np.asarray([float(f["psnr"]) for f in sorted(q["frames"], key=lambda f: f["frame"])])
    w = int(np.argmin(psnr))
    out = tmp_path / "v.html"
    assert main(["report", str(wan / "qw.json"), "-o", str(out)]) == 0
    open_page(chrome, out)
    found = blocks(chrome)
    curve = found["quality-1-frames-0"]
    assert curve.find_element("css selector", "svg").size["width"] > 300
    assert f"worst frame {w}: {psnr[w]:.2f} dB" in curve.text and f"worst frame {w} (lowest PSNR" in curve.text
    table_rows = found["quality-1-frames-0-table"].find_elements("css selector", "tbody tr")
    assert [r.text.endswith("<- worst") for r in table_rows] == [i == w for i in range(len(psnr))]
    # the grid shows the worst frame: its baseline image is that frame's file
    row = found["quality-1-grid"].find_elements("css selector", ".grid-row")
    assert len(row) == 1 and f"baseline frame {w}" in row[0].text
    shown = _decode(row[0].find_elements("css selector", "img")[0].get_attribute("src"))
    frame_file = _rgb(sorted(Path(q["pairs"][0]["baseline"]).iterdir())[w])
    k = shown.shape[0] // frame_file.shape[0]
    assert np.array_equal(shown[::k, ::k], frame_file)


@pytest.mark.slow
def test_two_results_overlay_histograms_and_grid_each(flux: Path, tmp_path: Path) -> None:
    qn = _noisy_copy(flux, tmp_path)
    doc = build_document([flux / "q.json", qn], ReportOptions(worst=2))
    ids = doc.block_ids()
    assert "quality-1-grid" in ids and "quality-2-grid" in ids
    hist = next(b for s in doc.sections for b in s.blocks if b.id == "quality-hist")
    ax = hist.figure.axes[0]  # the PSNR panel: one outline per result, counts = numpy's histogram of each
    assert [t.get_text().split(" ")[0] for t in ax.get_legend().get_texts()] == ["q", "qn"]
    assert ax.get_xlabel() == "PSNR (dB, higher is better)"
    psnr = [[float(p["metrics"]["psnr"]) for p in json.loads(f.read_text())["pairs"]] for f in (flux / "q.json", qn)]
    finite = [np.asarray([v for v in vs if np.isfinite(v)]) for vs in psnr]
    edges = np.histogram_bin_edges(np.concatenate(finite), bins="auto")
    for patch, vals in zip(ax.patches, finite, strict=True):  # a step histogram is one polygon per series
        xy = patch.get_xy()
        heights = xy[1:-1:2, 1][: len(edges) - 1]
        assert np.array_equal(heights, np.histogram(vals, bins=edges)[0])


def test_markdown_has_tables_and_pngs(flux: Path, tmp_path: Path) -> None:
    out = tmp_path / "q.md"
    assert main(["report", str(flux / "q.json"), "-o", str(out), "--format", "markdown", "--worst", "2"]) == 0
    text = out.read_text()
    assert "| metric | better | n |" in text and "| psnr | higher | 4 |" in text
    pngs = sorted((tmp_path / "q_files").glob("*.png"))
    assert len(pngs) >= 1 + 2 * 3  # the histograms, two grid rows of three images
    for p in pngs:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"q_files/{p.name}" in text


def test_moved_outputs_are_an_error_naming_the_file(flux: Path, tmp_path: Path, capsys) -> None:
    q = json.loads((flux / "q.json").read_text())
    moved = tmp_path / "moved"
    shutil.copytree(flux / "base", moved / "base")
    shutil.copytree(flux / "cand", moved / "cand")
    # the result keeps absolute paths; point it at a directory that is gone
    q["baseline"] = str(tmp_path / "gone" / "base")
    for p in q["pairs"]:
        p["baseline"] = p["baseline"].replace(str(flux / "base"), str(tmp_path / "gone" / "base"))
    bad = tmp_path / "q.json"
    bad.write_text(json.dumps(q))
    with pytest.raises(InputError, match=r"baseline output .*gone.*run diffbench report from the directory"):
        build_document([bad], ReportOptions())
    rc = main(["report", str(bad), "-o", str(tmp_path / "r.html")])
    err = capsys.readouterr().err
    assert rc == 2 and "is gone" in err and str(tmp_path / "gone") in err and not (tmp_path / "r.html").exists()


def test_relative_paths_resolve_from_the_result_directory(flux: Path, tmp_path: Path, monkeypatch) -> None:
    shutil.copytree(flux / "base", tmp_path / "base")
    shutil.copytree(flux / "cand", tmp_path / "cand")
    monkeypatch.chdir(tmp_path)
    assert main(["quality", "base", "cand", "--no-ms-ssim", "--json", "q.json"]) == 0
    assert json.loads((tmp_path / "q.json").read_text())["pairs"][0]["baseline"].startswith("base/")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    doc = build_document([tmp_path / "q.json"], ReportOptions(worst=1))
    grid = next(b for s in doc.sections for b in s.blocks if b.id == "quality-1-grid")
    assert len(grid.rows) == 1 and len(grid.rows[0].cells) == 3
    out = tmp_path / "m.md"
    render_markdown(doc, out)
    assert out.exists()


def _copy_run(flux: Path, tmp_path: Path) -> Path:
    """A quality result over copies of the flux outputs (so a test may break them)."""
    shutil.copytree(flux / "base", tmp_path / "base")
    shutil.copytree(flux / "cand", tmp_path / "cand")
    q = tmp_path / "q.json"
    assert main(["quality", str(tmp_path / "base"), str(tmp_path / "cand"), "--no-ms-ssim", "--json", str(q)]) == 0
    return q


def _worst_file(q: Path, side: str) -> Path:
    rep = json.loads(q.read_text())
    return Path(min(rep["pairs"], key=lambda p: float(p["metrics"]["psnr"]))[side])


def _remove(p: Path) -> None:
    p.unlink()


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[:100])


@pytest.mark.parametrize(("side", "breaks", "rc", "fragments"), [
    ("baseline", _remove, 2, ["baseline output", "is gone", "run diffbench report from the directory"]),
    ("candidate", _remove, 2, ["candidate output", "is gone", "keep (or move back)"]),
    ("candidate", _truncate, 2, ["cannot decode image", "truncated PNG"]),
    ("baseline", lambda p: shutil.rmtree(p.parent), 2, ["baseline output", "is gone"]),
])
def test_report_bad_quality_inputs(flux: Path, tmp_path: Path, capsys, side, breaks, rc, fragments) -> None:  # type: ignore[no-untyped-def]
    q = _copy_run(flux, tmp_path)
    target = _worst_file(q, side)
    breaks(target)
    capsys.readouterr()
    assert main(["report", str(q), "-o", str(tmp_path / "r.html")]) == rc
    err = capsys.readouterr().err
    assert all(f in err for f in fragments), err
    assert str(target.name) in err and not (tmp_path / "r.html").exists()


def test_gates_are_shown_pass_and_fail(flux: Path, tmp_path: Path) -> None:
    q = tmp_path / "g.json"
    rc = main(["quality", str(flux / "base"), str(flux / "cand"), "--no-ms-ssim", "--json", str(q),
               "--gate", "psnr.p50>=20", "--gate", "ssim.min>=0.99999"])
    rep = json.loads(q.read_text())
    assert rc == 1  # a gate failed, the result is still written
    doc = build_document([q], ReportOptions(worst=1))
    gates = next(b for s in doc.sections for b in s.blocks if b.id == "quality-1-gates")
    assert [r[-1] for r in gates.rows] == ["pass" if g["passed"] else "FAIL" for g in rep["gates"]] == ["pass", "FAIL"]
    over = next(b for s in doc.sections for b in s.blocks if b.id == "quality-overview-table")
    assert over.rows[0][-1] == "1 pass, 1 FAIL"


def test_animated_gif_pair_shows_its_worst_frame(tmp_path: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(11)
    frames = [rng.integers(0, 256, (48, 40, 3), dtype=np.uint8) for _ in range(4)]
    sigmas = [2.0, 3.0, 12.0, 1.0]  # frame 2 is the worst
    noisy = [np.clip(np.rint(f + rng.normal(0, s, f.shape)), 0, 255).astype(np.uint8) for f, s in zip(frames, sigmas,
                                                                                                     strict=True)]
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    b.mkdir()
    for d, fs in ((a, frames), (b, noisy)):
        # lossless frames: an RGB GIF would quantise to a palette, so store PNG frames as an APNG
        ims = [Image.fromarray(f) for f in fs]
        ims[0].save(d / "clip.png", save_all=True, append_images=ims[1:], duration=100, loop=0)
    q = tmp_path / "q.json"
    assert main(["quality", str(a), str(b), "--no-ms-ssim", "--json", str(q)]) == 0
    rep = json.loads(q.read_text())
    psnr = [float(f["psnr"]) for f in sorted(rep["frames"], key=lambda f: f["frame"])]
    assert int(np.argmin(psnr)) == 2 and rep["pairs"][0]["animated"] is True
    doc = build_document([q], ReportOptions(worst=4, amplify=5.0))
    grid = next(bl for s in doc.sections for bl in s.blocks if bl.id == "quality-1-grid")
    assert [c.label for c in grid.rows[0].cells][:2] == ["baseline frame 2", "candidate frame 2"]
    from PIL import Image as _I

    heat = np.asarray(_I.open(io.BytesIO(grid.rows[0].cells[2].png)).convert("RGB"))
    k = heat.shape[0] // 48
    mag = np.clip(np.rint(np.abs(noisy[2].astype(float) - frames[2].astype(float)).mean(-1) * 5.0), 0, 255)
    assert np.array_equal(heat[::k, ::k], colormap_lut()[mag.astype(np.uint8)])
    curve = next(bl for s in doc.sections for bl in s.blocks if bl.id == "quality-1-frames-0")
    assert "worst frame 2" in curve.caption


def test_lpips_and_distribution_metrics_are_shown_with_n(flux: Path, tmp_path: Path) -> None:
    # LPIPS needs AlexNet weights and FID an Inception model, neither available offline: add their fields to
    # a real result (the values are the schema's, what `quality --lpips --fid` writes) and check the report.
    q = json.loads((flux / "q.json").read_text())
    lp = [0.05, 0.2, 0.1, 0.3]
    for p, v in zip(q["pairs"], lp, strict=True):
        p["metrics"]["lpips"] = v
    q["settings"]["lpips"] = "LPIPS(alex) v0.1"
    q["distribution"] = {"extractor": "inception-2015-12-05", "feature_dim": 2048, "n_baseline": 4, "n_candidate": 4,
                         "fid": 12.5, "kid_mean": 0.001, "kid_std": 0.0005, "kid_subsets": 100, "kid_subset_size": 4,
                         "warnings": ["FID from n=4 is biased upward; use n >= 2048"]}
    f = tmp_path / "ql.json"
    f.write_text(json.dumps(q))
    doc = build_document([f], ReportOptions(worst=4))
    by_id = {b.id: b for s in doc.sections for b in s.blocks}
    hist = by_id["quality-hist"]
    lp_ax = next(ax for ax in hist.figure.axes if ax.get_xlabel() == "LPIPS (lower is better)")
    assert sum(p.get_height() for p in lp_ax.patches) == len(lp)
    dist = by_id["quality-1-distribution"]
    assert dist.rows[0][1:4] == ["4", "4", "12.5000"] and "biased upward" in by_id["quality-1-dist-warn-0"].text
    worst_lp = dict(by_id["quality-1-grid"].rows[0].numbers)["LPIPS"]
    first = min(q["pairs"], key=lambda p: float(p["metrics"]["psnr"]))
    assert worst_lp == f"{first['metrics']['lpips']:.4f}"


def test_frame_curves_never_draw_identical_frames() -> None:
    from diffbench.quality.models import FrameRow
    from diffbench.report.kinds.quality_plots import frame_curves

    inf = float("inf")
    rows = [FrameRow(key="v", frame=i, psnr=p, ssim=s, identical=p == inf)
            for i, (p, s) in enumerate([(inf, 1.0), (40.0, 0.99), (31.5, 0.95), (inf, 1.0)])]
    plot = frame_curves("v", rows, "x")
    line = plot.figure.axes[0].lines[0]
    assert list(line.get_xdata()) == [1, 2] and list(line.get_ydata()) == [40.0, 31.5]
    assert "worst frame 2" in plot.caption and "not drawn on the PSNR axis: [0, 3]" in plot.caption
    same = frame_curves("v", [r.model_copy(update={"psnr": inf}) for r in rows], "y")
    assert len(same.figure.axes[0].lines[0].get_xdata()) == 0
    assert any(t.get_text() == "all frames identical (PSNR +inf)" for t in same.figure.axes[0].texts)
