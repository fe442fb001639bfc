"""``bench --input-images``: the single-request protocol for image-to-image, end to end on tiny-flux (CPU).

Two runs of the same edits pair in ``quality`` with PSNR inf (same model, input and seed: identical pixels);
a run whose input pictures have the same names but other content pairs with none of them (the pairing key
carries the input's sha256).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from diffbench.cli.main import main

pytest.importorskip("diffusers")


def _inputs(folder: Path, seed: int, names=("a.png", "b.webp")) -> None:
    """Random 56x40 pictures (resized to the bench shape by the engine); WebP saved lossless."""
    from PIL import Image

    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for name in names:
        img = Image.fromarray(rng.integers(0, 256, (40, 56, 3), dtype=np.uint8))
        img.save(folder / name, **({"lossless": True} if name.endswith(".webp") else {}))


COMMON = ["--model", "tiny-flux", "--shapes", "64x48", "--steps", "4", "--strength", "0.5", "--warmup", "1",
          "--runs", "4", "--num-prompts", "1", "--seeds", "0,1", "-q"]


@pytest.mark.slow
def test_edit_bench_saves_pairable_outputs_and_reports_the_image_encode(tmp_path: Path) -> None:
    _inputs(tmp_path / "in", seed=0)
    for run in ("A", "B"):
        rc = main(["bench", *COMMON, "--input-images", str(tmp_path / "in"), "--json", str(tmp_path / f"{run}.json"),
                   "--save-outputs", str(tmp_path / run)])
        assert rc == 0
    res = json.loads((tmp_path / "A.json").read_text())
    (shape,) = res["shapes"]
    assert shape["shape"] == "64x48 s4 b1 edit@0.5" and shape["edit"] is True and shape["strength"] == 0.5
    # Flux at 4 steps x 0.5: t_start = int(4 - 2.0) = 2 -> 2 steps ran (counted by the step hook)
    assert shape["steps"] == 4 and shape["steps_run"] == 2 and shape["step_s"]["steps_per_run"] == 2
    st = shape["stages_s"]
    assert st["image_encode"] > 0
    total = st["text_encode"] + st["image_encode"] + st["denoise"] + st["vae_decode"] + st["other"]
    assert total == pytest.approx(st["end_to_end"], rel=1e-9)
    assert res["conditions"]["strength"] == 0.5 and res["conditions"]["input_images"] == 2
    assert len(shape["warmup_s"]) == 1 and shape["latency_s"]["n"] == 4

    manifest = json.loads((tmp_path / "A" / "manifest.json").read_text())
    entries = manifest["entries"]
    assert len(entries) == 4  # 2 inputs x 1 prompt x 2 seeds
    for e in entries:
        src = tmp_path / "in" / e["input_image"]
        assert e["input_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
        assert e["prompt_id"].endswith(e["input_sha256"][:8]) and e["strength"] == 0.5
        assert hashlib.sha256((tmp_path / "A" / e["file"]).read_bytes()).hexdigest() == e["sha256"]
    assert {e["input_image"] for e in entries} == {"a.png", "b.webp"}

    q = tmp_path / "q.json"
    assert main(["quality", str(tmp_path / "A"), str(tmp_path / "B"), "--json", str(q)]) == 0
    report = json.loads(q.read_text())
    assert report["pairing"] == "manifest" and report["n_pairs"] == 4
    assert report["n_identical"] == 4 and report["summaries"]["psnr"]["n_inf"] == 4

    # other pictures under the same names: no output pairs with run A's
    _inputs(tmp_path / "other", seed=1)
    assert main(["bench", *COMMON, "--runs", "1", "--no-repro", "--input-images", str(tmp_path / "other"),
                 "--save-outputs", str(tmp_path / "C")]) == 0
    keys_a = {e["prompt_id"] for e in entries}
    keys_c = {e["prompt_id"] for e in json.loads((tmp_path / "C" / "manifest.json").read_text())["entries"]}
    assert len(keys_c) == 2 and not keys_a & keys_c


def test_sim_edit_bench_shows_fewer_steps_and_the_image_encode(tmp_path: Path) -> None:
    """The sim device: int(28 x 0.5) = 14 steps, and the image encode stage (its closed form is tested in
    tests/engines/test_sim.py)."""
    _inputs(tmp_path / "in", seed=0, names=("a.png",))
    out = tmp_path / "r.json"
    assert main(["bench", "--engine", "sim", "--runs", "3", "--warmup", "1", "--no-repro", "--num-prompts", "1",
                 "--input-images", str(tmp_path / "in"), "--strength", "0.5", "--json", str(out), "-q"]) == 0
    (shape,) = json.loads(out.read_text())["shapes"]
    assert shape["steps_run"] == 14 and shape["stages_s"]["image_encode"] > 0


@pytest.mark.slow
def test_the_report_shows_the_image_encode_stage_for_edits_only(tmp_path: Path) -> None:
    _inputs(tmp_path / "in", seed=0, names=("a.png",))
    sim = ["bench", "--engine", "sim", "--runs", "2", "--warmup", "0", "--no-repro", "--num-prompts", "1", "-q"]
    assert main([*sim, "--input-images", str(tmp_path / "in"), "--json", str(tmp_path / "e.json")]) == 0
    assert main([*sim, "--json", str(tmp_path / "t.json")]) == 0
    for results, shown in (([tmp_path / "e.json", tmp_path / "t.json"], True), ([tmp_path / "t.json"], False)):
        page = tmp_path / f"r{int(shown)}.md"
        assert main(["report", *map(str, results), "-o", str(page), "--format", "markdown"]) == 0
        header = next(ln for ln in page.read_text().splitlines() if ln.startswith("| series | text encode"))
        assert ("| image encode |" in header) is shown
