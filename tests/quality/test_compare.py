"""compare_dirs and ``diffbench quality``: manifest pairing, listed errors, JSON/CSV, gates, exit codes."""

from __future__ import annotations

import csv
import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from skimage import data
from skimage.metrics import peak_signal_noise_ratio as sk_psnr

from diffbench.cli.main import main
from diffbench.core.manifest import Manifest, ManifestEntry, write_manifest
from diffbench.core.stats import percentile
from diffbench.quality.compare import compare_dirs
from diffbench.quality.lpips import BACKBONE_FILE
from diffbench.quality.models import QualityOptions

PHOTOS = [data.astronaut()[:192, :192], data.coffee()[:192, :256], data.chelsea()[:192, :192],
          data.rocket()[:192, :192], data.immunohistochemistry()[:192, :192]]


def _save_run(root: Path, noise: float, seed: int, manifest: bool = True) -> list[np.ndarray]:
    root.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    entries, imgs = [], []
    for i, img in enumerate(PHOTOS):
        out = img if noise == 0 else np.clip(np.rint(img + rng.normal(0, noise * (i + 1), img.shape)), 0, 255)
        out = out.astype(np.uint8)
        name = f"p{i}_s{100 + i}.png"
        Image.fromarray(out).save(root / name)
        imgs.append(out)
        entries.append(ManifestEntry(prompt_id=f"p{i}", prompt=f"prompt {i}", seed=100 + i, height=out.shape[0],
                                     width=out.shape[1], file=name,
                                     sha256=hashlib.sha256((root / name).read_bytes()).hexdigest()))
    if manifest:
        write_manifest(root, Manifest(entries=entries))
    return imgs


@pytest.fixture()
def runs(tmp_path: Path) -> tuple[Path, Path, list[np.ndarray], list[np.ndarray]]:
    a, b = tmp_path / "A", tmp_path / "B"
    ia = _save_run(a, 0, 0)
    ib = _save_run(b, 2.0, 1)
    return a, b, ia, ib


def test_manifest_pairing_and_summary(runs) -> None:
    a, b, ia, ib = runs
    rep = compare_dirs(a, b, QualityOptions(workers=2, ms_ssim=False, worst=2))
    assert rep.pairing == "manifest" and rep.n_pairs == 5 and not rep.errors
    ref = [sk_psnr(x, y, data_range=255) for x, y in zip(ia, ib, strict=True)]
    s = rep.summaries["psnr"]
    assert s.n == 5 and s.p50 == pytest.approx(percentile(ref, 50), abs=1e-6)
    assert s.p10 == pytest.approx(percentile(ref, 10), abs=1e-6) and s.worst == pytest.approx(min(ref))
    assert [w.key for w in s.worst_pairs] == [f"p{i}/seed{100 + i}/0" for i in np.argsort(ref)[:2]]
    assert rep.summaries["ssim"].worst == rep.summaries["ssim"].min


def test_manifest_mismatch_listed(runs) -> None:
    a, b, _, _ = runs
    (b / "p1_s101.png").write_bytes((b / "p1_s101.png").read_bytes()[:100])  # changed after the run
    rep = compare_dirs(a, b, QualityOptions(workers=1, ms_ssim=False))
    assert rep.n_pairs == 4 and "sha256 differs" in rep.errors[0].problem


def test_missing_and_resized_both_listed_cli(tmp_path: Path, capsys) -> None:
    a, b = tmp_path / "A", tmp_path / "B"
    _save_run(a, 0, 0, manifest=False)
    _save_run(b, 1.0, 1, manifest=False)
    (b / "p0_s100.png").unlink()
    Image.fromarray(PHOTOS[1]).resize((128, 96)).save(b / "p1_s101.png")
    rc = main(["quality", str(a), str(b), "--json", str(tmp_path / "q.json"), "--no-ms-ssim"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "p0_s100.png: missing in candidate" in err and "p1_s101.png: size mismatch" in err
    q = json.loads((tmp_path / "q.json").read_text())
    assert {e["key"] for e in q["errors"]} == {"p0_s100.png", "p1_s101.png"} and q["n_pairs"] == 3
    rc = main(["quality", str(a), str(b), "--allow-missing", "--no-ms-ssim"])
    assert rc == 0


@pytest.mark.slow
def test_cli_json_csv_gates_exit_codes(runs, tmp_path: Path, capsys) -> None:
    a, b, ia, ib = runs
    (a / "extra.png").write_bytes((a / "p0_s100.png").read_bytes())  # not in the manifest: ignored by keys
    qj, qc = tmp_path / "q.json", tmp_path / "q.csv"
    rc = main(["quality", str(a), str(b), "--json", str(qj), "--csv", str(qc), "--gate", "psnr.p10>=20"])
    assert rc == 0
    q = json.loads(qj.read_text())
    for k in ("n", "p50", "p10", "worst", "worst_pairs"):
        assert k in q["summaries"]["psnr"] and k in q["summaries"]["ssim"]
    assert q["gates"][0]["passed"] is True
    assert q["settings"]["ssim"].find("use_sample_covariance=False") > 0
    rows = list(csv.DictReader(qc.open()))
    assert len(rows) == 5 and float(rows[0]["psnr"]) == pytest.approx(sk_psnr(ia[0], ib[0], data_range=255))
    worst = min(sk_psnr(x, y, data_range=255) for x, y in zip(ia, ib, strict=True))
    rc = main(["quality", str(a), str(b), "--json", str(qj), "--gate", f"psnr.min>={worst + 1}"])
    err = capsys.readouterr().err
    assert rc == 1 and "FAIL psnr.min>=" in err and "short by 1" in err
    q = json.loads(qj.read_text())  # outputs were written before the gate failed
    assert q["gates"][0]["passed"] is False and q["gates"][0]["margin"] == pytest.approx(-1.0)
    assert main(["quality", str(a), str(b), "--preset", "equivalent"]) == 1  # noisy pairs are < 40 dB
    assert main(["quality", str(a), str(b), "--gate", "psnr.p10=>3"]) == 2  # malformed gate


def test_identical_runs_json_valid_with_inf(tmp_path: Path, capsys) -> None:
    a, b = tmp_path / "A", tmp_path / "B"
    _save_run(a, 0, 0)
    _save_run(b, 0, 0)
    qj = tmp_path / "q.json"
    rc = main(["quality", "--noise-floor", str(a), str(b), "--json", str(qj), "--preset", "equivalent"])
    out = capsys.readouterr().out
    assert rc == 0 and "noise floor" in out
    text = qj.read_text()
    q = json.loads(text)  # strict JSON: +inf is the string "inf"
    assert "Infinity" not in text and "NaN" not in text
    assert q["noise_floor"] is True and q["n_identical"] == 5
    assert q["summaries"]["psnr"]["n_inf"] == 5 and q["summaries"]["psnr"]["p10"] == "inf"
    assert q["summaries"]["psnr"]["mean"] is None


def test_lpips_without_weights_cli(runs, tmp_path: Path, monkeypatch, capsys) -> None:
    a, b, _, _ = runs
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "th"))
    rc = main(["quality", str(a), str(b), "--lpips"])
    err = capsys.readouterr().err
    assert rc == 3 and BACKBONE_FILE in err and str(tmp_path / "th" / "hub" / "checkpoints") in err


def test_lpips_with_weights_and_gate(runs, tmp_path: Path, monkeypatch, random_alexnet_state) -> None:
    import torch

    a, b, _, _ = runs
    hub = tmp_path / "th" / "hub" / "checkpoints"
    hub.mkdir(parents=True)
    torch.save(random_alexnet_state(0), hub / BACKBONE_FILE)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "th"))
    qj = tmp_path / "q.json"
    rc = main(["quality", str(a), str(b), "--lpips", "--no-ms-ssim", "--json", str(qj), "--gate", "lpips.max<=10"])
    q = json.loads(qj.read_text())
    s = q["summaries"]["lpips"]
    assert rc == 0 and s["n"] == 5 and s["higher_is_better"] is False and s["worst"] == s["max"]
    assert q["settings"]["lpips"].startswith("LPIPS v0.1 alex")
    assert all(math.isfinite(p["metrics"]["lpips"]) and p["metrics"]["lpips"] > 0 for p in q["pairs"])


def _sk_ssim(a: np.ndarray, b: np.ndarray) -> float:
    from skimage.metrics import structural_similarity

    return float(structural_similarity(a, b, gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
                                       data_range=255, channel_axis=-1))


def test_identical_pairs_counted_in_every_row(tmp_path: Path, capsys) -> None:
    # Reproduction: with identical pairs, the PSNR row said "identical 2" and the SSIM/MS-SSIM rows "0",
    # and SSIM's mean mixed the identical pairs' 1.0 in while PSNR's mean left them out.
    a, b = tmp_path / "A", tmp_path / "B"
    ia = _save_run(a, 0, 0)
    ib = _save_run(b, 2.0, 1)
    for i in (1, 3):  # two candidates are bit-identical to their baseline
        (b / f"p{i}_s{100 + i}.png").write_bytes((a / f"p{i}_s{100 + i}.png").read_bytes())
        ib[i] = ia[i]
    mb = Manifest.model_validate_json((b / "manifest.json").read_text())
    write_manifest(b, Manifest(entries=[e.model_copy(update={"sha256": hashlib.sha256((b / e.file).read_bytes())
                                                             .hexdigest()}) for e in mb.entries]))
    qj = tmp_path / "q.json"
    assert main(["quality", str(a), str(b), "--json", str(qj)]) == 0
    out = capsys.readouterr().out
    q = json.loads(qj.read_text())
    s = q["summaries"]
    changed = [i for i in range(5) if i not in (1, 3)]
    for m in ("psnr", "ssim", "ms_ssim"):
        assert s[m]["n"] == 5 and s[m]["n_identical"] == 2, m
    assert s["psnr"]["n_inf"] == 2 and s["ssim"]["n_inf"] == 0
    assert s["psnr"]["mean"] == pytest.approx(np.mean([sk_psnr(ia[i], ib[i], data_range=255) for i in changed]))
    assert s["ssim"]["mean"] == pytest.approx(np.mean([_sk_ssim(ia[i], ib[i]) for i in changed]), abs=1e-4)
    # the summary table has no outer edge: cells are metric │ n │ identical │ ...
    rows = {line.split("│")[0].strip(): line.split("│")[2].strip() for line in out.splitlines()
            if line.count("│") > 4 and line.split("│")[0].strip() in ("psnr", "ssim", "ms_ssim")}
    assert rows == {"psnr": "2", "ssim": "2", "ms_ssim": "2"}  # the console's identical column


def test_border_only_difference_is_flagged_not_identical(tmp_path: Path, capsys) -> None:
    # Reproduction: a pair differing only in the 5-px border SSIM crops scored SSIM ~ 1.0 with nothing said.
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    b.mkdir()
    img = PHOTOS[0]
    art = img.copy()
    art[:2] = 0  # a 2-px black bar along the top edge: a real artifact
    art[:, -3:] = 255  # and a 3-px white bar on the right
    Image.fromarray(img).save(a / "x.png")
    Image.fromarray(art).save(b / "x.png")
    inner = img.copy()
    inner[5, 40] = 0  # one pixel at the first row SSIM averages: an interior difference
    Image.fromarray(img).save(a / "y.png")
    Image.fromarray(inner).save(b / "y.png")
    assert _sk_ssim(img, art) > 0.99  # the reference's blind spot that makes the flag necessary
    qj, qc = tmp_path / "q.json", tmp_path / "q.csv"
    assert main(["quality", str(a), str(b), "--no-ms-ssim", "--json", str(qj), "--csv", str(qc)]) == 0
    out = capsys.readouterr().out
    q = json.loads(qj.read_text())
    x, y = sorted(q["pairs"], key=lambda p: p["key"])
    assert x["identical"] is False and x["border_only_difference"] is True
    ring = int((img != art).any(-1).sum())
    assert x["border_diff_pixels"] == ring and x["interior_diff_pixels"] == 0
    assert x["metrics"]["psnr"] == pytest.approx(sk_psnr(img, art, data_range=255))  # finite
    assert x["metrics"]["ssim"] == pytest.approx(_sk_ssim(img, art), abs=1e-4)
    assert any("border_only_difference" in n for n in x["notes"])
    assert y["border_only_difference"] is False and y["interior_diff_pixels"] == 1
    assert q["n_identical"] == 0 and q["n_border_only"] == 1
    assert q["summaries"]["psnr"]["n_identical"] == 0 and q["summaries"]["ssim"]["n_identical"] == 0
    assert "1 differ only in SSIM's 5-px border" in out.replace("\n", " ")
    assert [r["border_only_difference"] for r in csv.DictReader(qc.open())] == ["True", "False"]


def _manifest_run(root: Path, conditions: dict, fingerprint: dict, steps: int = 4) -> None:
    root.mkdir()
    Image.fromarray(PHOTOS[0]).save(root / "p0.png")
    e = ManifestEntry(prompt_id="p0", prompt="a", seed=0, height=192, width=192, steps=steps, file="p0.png",
                      sha256=hashlib.sha256((root / "p0.png").read_bytes()).hexdigest())
    write_manifest(root, Manifest(conditions=conditions, fingerprint=fingerprint, entries=[e]))


def test_generation_settings_diff_printed_not_failed(tmp_path: Path, capsys) -> None:
    cond = {"model": "tiny-flux", "steps": 4, "batch": 1, "guidance": None, "shape": "192x192", "cache": "none"}
    fp = {"model": "tiny-flux", "precision": "float32", "torch": "2.5.1", "cache": "none"}
    a, b = tmp_path / "A", tmp_path / "B"
    _manifest_run(a, cond, fp)
    _manifest_run(b, {**cond, "batch": 2, "cache": "fbc"}, {**fp, "torch": "2.6.0", "cache": "fbc"})
    rep = compare_dirs(a, b, QualityOptions(workers=1, ms_ssim=False))
    got = [(d.field, d.source, d.baseline, d.candidate) for d in rep.settings_diff]
    assert got == [("batch", "conditions", 1, 2), ("cache", "conditions", "none", "fbc"),
                   ("torch", "fingerprint", "2.5.1", "2.6.0")]  # fingerprint's cache not repeated
    assert "batch composition changes pixels" in rep.settings_diff[0].note
    qj = tmp_path / "q.json"
    assert main(["quality", str(a), str(b), "--no-ms-ssim", "--json", str(qj)]) == 0  # reported, not failed
    out = capsys.readouterr().out
    assert "generation setting(s) differ" in out and "batch" in out and "2.6.0" in out
    assert [d["field"] for d in json.loads(qj.read_text())["settings_diff"]] == ["batch", "cache", "torch"]
    c2 = tmp_path / "C"
    _manifest_run(c2, cond, fp)
    assert compare_dirs(a, c2, QualityOptions(workers=1, ms_ssim=False)).settings_diff == []


def test_settings_diff_per_entry_steps_and_missing_conditions(tmp_path: Path) -> None:
    a, b = tmp_path / "A", tmp_path / "B"
    _manifest_run(a, {}, {}, steps=4)
    _manifest_run(b, {}, {}, steps=3)
    rep = compare_dirs(a, b, QualityOptions(workers=1, ms_ssim=False))
    assert [(d.field, d.source, d.baseline, d.candidate) for d in rep.settings_diff] == [("steps", "entries", 4, 3)]
    assert any("records no conditions" in w for w in rep.warnings)


@pytest.mark.slow
def test_bench_batch_1_vs_2_settings_diff_end_to_end(tmp_path: Path, capsys) -> None:
    # Reproduction: batch 1 vs batch 2 of the same seed differ in pixels (86 dB on a 256² tiny-flux run)
    # and nothing said why. The manifests written by `bench --save-outputs` now name the difference.
    common = ["--model", "tiny-flux", "--height", "64", "--width", "64", "--steps", "2", "--warmup", "0",
              "--runs", "1", "--num-prompts", "1"]
    assert main(["bench", *common, "--batch", "1", "--save-outputs", str(tmp_path / "b1")]) == 0
    assert main(["bench", *common, "--batch", "2", "--save-outputs", str(tmp_path / "b2")]) == 0
    capsys.readouterr()
    qj = tmp_path / "q.json"
    rc = main(["quality", str(tmp_path / "b1"), str(tmp_path / "b2"), "--allow-missing", "--no-ms-ssim",
               "--json", str(qj)])
    out = capsys.readouterr().out
    q = json.loads(qj.read_text())
    assert rc == 0 and q["n_pairs"] == 1 and [e["key"] for e in q["errors"]] == ["p00/seed0/1"]
    diff = {d["field"]: (d["baseline"], d["candidate"]) for d in q["settings_diff"]}
    assert diff["batch"] == (1, 2) and "torch" not in diff and "model" not in diff
    notes = {d["field"]: d["note"] for d in q["settings_diff"]}
    assert "batch composition changes pixels" in notes["batch"]
    # The console names the differing setting (table cells wrap at the terminal width, so match one word).
    assert "generation setting(s) differ" in " ".join(out.split()) and "│ batch " in out
