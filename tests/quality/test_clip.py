"""CLIP score with local (tiny, random) weights: loads offline, reports 77-token truncation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from skimage import data

from diffbench.errors import MissingWeightsError
from diffbench.quality.distribution import clip_score


def test_clip_score_local_and_truncation(tiny_clip: Path) -> None:
    import torch
    from transformers import CLIPModel, CLIPProcessor

    imgs = [data.astronaut(), data.coffee()]
    prompts = ["an astronaut", "x" * 120]
    scores, truncated = clip_score(tiny_clip, imgs, prompts)
    assert truncated == [1]
    model = CLIPModel.from_pretrained(tiny_clip, local_files_only=True)
    proc = CLIPProcessor.from_pretrained(tiny_clip, local_files_only=True)
    with torch.no_grad():
        t = proc.tokenizer(prompts[:1], return_tensors="pt")
        te = model.get_text_features(**t)
        ie = model.get_image_features(**proc.image_processor(images=imgs[:1], return_tensors="pt"))
    te = getattr(te, "pooler_output", te)
    ie = getattr(ie, "pooler_output", ie)
    ref = 100 * max(float(torch.nn.functional.cosine_similarity(te, ie)[0]), 0.0)
    assert scores[0] == pytest.approx(ref, abs=1e-4)
    assert all(0.0 <= s <= 100.0 and np.isfinite(s) for s in scores)


def test_clip_missing_weights(tmp_path: Path) -> None:
    with pytest.raises(MissingWeightsError, match=str(tmp_path)):
        clip_score(tmp_path, [data.astronaut()], ["a"])


def test_compare_dirs_clip_with_manifest(tiny_clip: Path, tmp_path: Path) -> None:
    import hashlib

    from PIL import Image

    from diffbench.core.manifest import Manifest, ManifestEntry, write_manifest
    from diffbench.quality.compare import compare_dirs
    from diffbench.quality.models import QualityOptions

    prompts = ["a cat", "y" * 100]
    imgs = [data.chelsea()[:64, :64], data.coffee()[:64, :64]]
    for root, shift in ((tmp_path / "a", 0), (tmp_path / "b", 30)):
        root.mkdir()
        entries = []
        for i, (im, pr) in enumerate(zip(imgs, prompts, strict=True)):
            out = np.clip(im.astype(int) + shift, 0, 255).astype(np.uint8)
            Image.fromarray(out).save(root / f"{i}.png")
            entries.append(ManifestEntry(prompt_id=f"p{i}", prompt=pr, seed=0, height=64, width=64, file=f"{i}.png",
                                         sha256=hashlib.sha256((root / f"{i}.png").read_bytes()).hexdigest()))
        write_manifest(root, Manifest(entries=entries))
    rep = compare_dirs(tmp_path / "a", tmp_path / "b", QualityOptions(workers=2, ms_ssim=False, clip=tiny_clip))
    assert rep.clip_truncated == ["p1/seed0/0"]
    b_img = np.asarray(Image.open(tmp_path / "b" / "0.png"))
    ref_b, _ = clip_score(tiny_clip, [imgs[0], b_img], ["a cat", "a cat"])
    m = rep.pairs[0].metrics
    assert m["clip_baseline"] == pytest.approx(ref_b[0], abs=1e-4)
    assert m["clip_candidate"] == pytest.approx(ref_b[1], abs=1e-4)
    assert m["clip_delta"] == pytest.approx(ref_b[1] - ref_b[0], abs=1e-4)
    assert rep.summaries["clip_delta"].n == 2
