"""Paired preference scores: statistics against numpy/scipy, PickScore and CLIP-IQA on a tiny random CLIP against
hand computations with transformers, and the paired report of ``quality`` (identical outputs: no difference)."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pytest
from skimage import data

from diffbench.errors import MissingWeightsError, UsageError
from diffbench.quality.preference import ClipIqaScorer, PickScorer, paired_delta


def test_paired_delta_against_numpy_and_scipy() -> None:
    from scipy import stats

    rng = np.random.default_rng(0)
    b = rng.normal(20.0, 1.0, 40)
    c = b + rng.normal(0.3, 0.5, 40)
    r = paired_delta("pickscore", b, c)
    d = c - b
    sem = np.std(d, ddof=1) / np.sqrt(d.size)
    assert r.n == 40 and r.mean_delta == pytest.approx(d.mean())
    assert r.sem == pytest.approx(sem, rel=1e-12)
    assert r.z == pytest.approx(d.mean() / sem)
    t = stats.ttest_rel(c, b)  # paired t statistic = mean Δ / SEM
    assert r.z == pytest.approx(t.statistic)
    lo, hi = stats.t.interval(0.95, d.size - 1, loc=d.mean(), scale=sem)
    assert r.ci95 == pytest.approx((lo, hi))
    assert r.verdict == ("candidate higher" if lo > 0 else "no significant difference")
    assert r.mde == pytest.approx((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * sem)
    assert not r.warnings  # n >= 30


def test_identical_scores_mean_no_difference() -> None:
    r = paired_delta("pickscore", [1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert r.verdict == "no difference" and r.z is None and r.mean_delta == 0.0 and r.sem == 0.0


def test_small_sample_warns_and_lower_is_named() -> None:
    r = paired_delta("clip_iqa", [0.5, 0.6, 0.7, 0.55], [0.1, 0.2, 0.25, 0.15])
    assert r.verdict == "candidate lower" and r.ci95 is not None and r.ci95[1] < 0
    assert any("n=4" in w for w in r.warnings)


def test_constant_shift_has_zero_sem_and_no_z() -> None:
    r = paired_delta("x", [1.0, 2.0], [1.5, 2.5])
    assert r.sem == 0.0 and r.z is None and r.verdict == "candidate higher"


def test_mismatched_pairs_are_refused() -> None:
    with pytest.raises(UsageError, match="pairs must match"):
        paired_delta("x", [1.0, 2.0], [1.0])
    with pytest.raises(UsageError, match="non-finite"):
        paired_delta("x", [1.0, math.nan], [1.0, 2.0])


def _hand_clip(model_dir: Path, images, texts):
    import torch
    from transformers import CLIPModel, CLIPProcessor

    model = CLIPModel.from_pretrained(model_dir, local_files_only=True).eval()
    proc = CLIPProcessor.from_pretrained(model_dir, local_files_only=True)
    with torch.no_grad():
        out = model(**proc(text=texts, images=images, return_tensors="pt", padding=True))
    return model, proc, out


def test_pickscore_is_the_scaled_cosine(tiny_clip: Path) -> None:
    imgs = [data.astronaut(), data.chelsea()]
    prompts = ["an astronaut", "a cat"]
    scores = PickScorer(tiny_clip)(imgs, prompts)
    _, _, out = _hand_clip(tiny_clip, imgs, prompts)
    # transformers' logits_per_image = exp(logit_scale) * cos(image_i, text_j): PickScore's definition
    ref = out.logits_per_image.diagonal().double().numpy()
    np.testing.assert_allclose(scores, ref, rtol=1e-5)


def test_clip_iqa_is_the_good_photo_probability(tiny_clip: Path) -> None:
    import torch

    imgs = [data.astronaut()[:128, :128], data.coffee()[:128, :128]]
    scores = ClipIqaScorer(tiny_clip)(imgs)
    model, proc, _ = _hand_clip(tiny_clip, imgs, ["Good photo.", "Bad photo."])
    with torch.no_grad():
        t = model.get_text_features(**proc.tokenizer(["Good photo.", "Bad photo."], return_tensors="pt", padding=True))
        i = model.get_image_features(**proc.image_processor(images=imgs, return_tensors="pt"))
    t = getattr(t, "pooler_output", t)
    i = getattr(i, "pooler_output", i)
    t = t / t.norm(dim=-1, keepdim=True)
    i = i / i.norm(dim=-1, keepdim=True)
    ref = torch.softmax(100 * i @ t.T, dim=-1)[:, 0].double().numpy()  # Wang et al. 2022, arXiv 2207.12396
    np.testing.assert_allclose(scores, ref, atol=1e-4)
    assert all(0.0 <= s <= 1.0 for s in scores)


@pytest.mark.parametrize("cls", [PickScorer, ClipIqaScorer])
def test_missing_weights_name_the_files(cls, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(MissingWeightsError, match="preprocessor_config.json") as e:
        cls(tmp_path)
    assert "model.safetensors" in str(e.value) and str(tmp_path) in str(e.value)


def _outputs(root: Path, imgs, prompts) -> None:
    from PIL import Image

    from diffbench.core.manifest import Manifest, ManifestEntry, write_manifest

    root.mkdir()
    entries = []
    for i, (im, pr) in enumerate(zip(imgs, prompts, strict=True)):
        Image.fromarray(im).save(root / f"{i}.png")
        entries.append(ManifestEntry(prompt_id=f"p{i}", prompt=pr, seed=0, height=im.shape[0], width=im.shape[1],
                                     file=f"{i}.png", sha256=hashlib.sha256((root / f"{i}.png").read_bytes()).hexdigest()))
    write_manifest(root, Manifest(entries=entries))


@pytest.mark.slow
def test_quality_reports_paired_scores(tiny_clip: Path, tmp_path: Path) -> None:
    from diffbench.quality.compare import compare_dirs
    from diffbench.quality.models import QualityOptions

    imgs = [data.chelsea()[:64, :64], data.coffee()[:64, :64], data.astronaut()[:64, :64]]
    prompts = ["a cat", "a cup", "an astronaut"]
    _outputs(tmp_path / "a", imgs, prompts)
    _outputs(tmp_path / "same", imgs, prompts)
    darker = [(im // 2).astype(np.uint8) for im in imgs]
    _outputs(tmp_path / "dark", darker, prompts)
    opt = QualityOptions(workers=1, ms_ssim=False, pickscore=tiny_clip, clip_iqa=tiny_clip)
    same = compare_dirs(tmp_path / "a", tmp_path / "same", opt)
    for name in ("pickscore", "clip_iqa"):
        r = same.paired[name]
        assert r.n == 3 and r.mean_delta == 0.0 and r.z is None and r.verdict == "no difference"
    dark = compare_dirs(tmp_path / "a", tmp_path / "dark", opt)
    ps = PickScorer(tiny_clip)
    d = np.array([ps([darker[i]], [prompts[i]])[0] - ps([imgs[i]], [prompts[i]])[0] for i in range(3)])
    r = dark.paired["pickscore"]
    assert r.mean_delta == pytest.approx(d.mean(), abs=1e-4)
    assert r.sem == pytest.approx(np.std(d, ddof=1) / np.sqrt(3), abs=1e-4)
    assert any("n=3" in w for w in dark.warnings)


def test_cli_prints_and_writes_the_paired_table(tiny_clip: Path, tmp_path: Path, capsys) -> None:
    import json

    from diffbench.cli.main import main

    imgs = [data.chelsea()[:64, :64], data.coffee()[:64, :64]]
    _outputs(tmp_path / "a", imgs, ["a cat", "a cup"])
    _outputs(tmp_path / "b", imgs, ["a cat", "a cup"])
    rc = main(["quality", str(tmp_path / "a"), str(tmp_path / "b"), "--no-ms-ssim", "--pickscore", str(tiny_clip),
               "--json", str(tmp_path / "q.json"), "-q"])
    out = " ".join(capsys.readouterr().out.split())  # the table wraps at the terminal width
    assert rc == 0
    assert "paired scores" in out and "no difference" in out
    rep = json.loads((tmp_path / "q.json").read_text())
    assert rep["paired"]["pickscore"]["verdict"] == "no difference" and rep["paired"]["pickscore"]["z"] is None
    assert rep["settings"]["pickscore"].startswith("PickScore")
    # the report renders the paired table from the saved JSON
    assert main(["report", str(tmp_path / "q.json"), "-o", str(tmp_path / "q.html"), "-q"]) == 0
    assert "paired scores" in (tmp_path / "q.html").read_text()
