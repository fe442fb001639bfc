"""Preference and alignment scores, compared **paired** against a fixed-seed baseline.

Scorers (local weights only; nothing downloads):

- :class:`PickScorer`: PickScore (Kirstain et al. 2023, arXiv 2305.01569), a CLIP model fine-tuned on human
  preferences; score = exp(logit_scale) · cos(image, prompt) with the model's own ``logit_scale`` (the
  reference implementation in yuvalkirstain/PickScore's README). Weights: ``yuvalkirstain/PickScore_v1``, processor
  ``laion/CLIP-ViT-H-14-laion2B-s32B-b79K`` saved into one directory (the pair that yuvalkirstain/PickScore's README loads).
- :class:`ClipIqaScorer`: CLIP-IQA (Wang et al. 2022, arXiv 2207.12396) via torchmetrics'
  ``CLIPImageQualityAssessment`` on a local CLIP directory: softmax over 100 · cos(image, "Good photo.") and
  100 · cos(image, "Bad photo."), the probability of "good" in [0, 1]. No prompt needed.

These scores do not measure realism and rank differently across prompts, so a value means something only
relative to a control on the same prompt and seed: :func:`paired_delta` reports per-image Δ = candidate −
baseline, mean Δ with its standard error, z and a 95 % interval (SGLang's ``bench_image_quality.py`` reports
mean Δ, SEM and z against a baseline manifest: sgl-project/sglang
``python/sglang/multimodal_gen/benchmarks/bench_image_quality.py``).

ImageReward and HPSv2 are not offered: ``image-reward`` 1.5 pins ``timm==0.6.13`` (which requires torchvision)
and ``fairscale``; ``hpsv2`` 1.2.0 requires ``torchvision`` directly and pins ``pytest==7.2.0`` and
``protobuf<4``; either would pull a CUDA torchvision build next to the pinned CPU torch (package metadata read
with ``pip download --no-deps``, December 2026).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel

from diffbench.errors import InputError, MissingWeightsError, UsageError

SMALL_N = 30
"""Below this many pairs the normal approximation behind z is shaky; the interval uses Student's t."""

Verdict = Literal["no difference", "no significant difference", "candidate higher", "candidate lower", "no pairs"]


class PairedDelta(BaseModel):
    """Paired comparison of one score over n (baseline, candidate) pairs with the same prompt and seed.

    ``mean_delta`` = mean(candidate − baseline); ``sem`` = sd(Δ, ddof=1) / √n; ``z`` = mean_delta / sem
    (``None`` when sem = 0: every Δ equal, e.g. identical outputs); ``ci95`` = mean_delta ± t(0.975, n−1) · sem;
    ``mde`` = the smallest true mean Δ this n detects with 80 % power at 5 % two-sided (≈ 2.8 · sem,
    (z_0.975 + z_0.8) · sem). ``verdict``: "no difference" when every Δ is 0, "candidate higher/lower" when the
    interval excludes 0, else "no significant difference". Units are the score's own.
    """

    metric: str
    n: int
    mean_baseline: float | None = None
    mean_candidate: float | None = None
    mean_delta: float | None = None
    sd_delta: float | None = None
    sem: float | None = None
    z: float | None = None
    ci95: tuple[float, float] | None = None
    mde: float | None = None
    verdict: Verdict
    warnings: list[str] = []


def paired_delta(metric: str, baseline: Sequence[float], candidate: Sequence[float]) -> PairedDelta:
    """Paired statistics of ``candidate − baseline`` (same length, finite numbers).

    Raises:
        UsageError: the two sequences differ in length or hold non-finite values.
    """
    b = np.asarray(baseline, dtype=np.float64)
    c = np.asarray(candidate, dtype=np.float64)
    if b.shape != c.shape or b.ndim != 1:
        raise UsageError(f"{metric}: {b.size} baseline but {c.size} candidate scores; pairs must match")
    if not (np.isfinite(b).all() and np.isfinite(c).all()):
        raise UsageError(f"{metric}: non-finite score in the pairs")
    n = int(b.size)
    if n == 0:
        return PairedDelta(metric=metric, n=0, verdict="no pairs")
    d = c - b
    mean = float(d.mean())
    out = PairedDelta(metric=metric, n=n, mean_baseline=float(b.mean()), mean_candidate=float(c.mean()),
                      mean_delta=mean, verdict="no significant difference")
    if np.all(d == 0):
        out.sd_delta = out.sem = 0.0
        out.ci95 = (0.0, 0.0)
        out.verdict = "no difference"
        return out
    if n < 2:
        out.warnings.append(f"{metric}: n=1, no standard error; compare more prompts and seeds")
        out.verdict = "candidate higher" if mean > 0 else "candidate lower"
        return out
    from scipy import stats

    sd = float(d.std(ddof=1))
    sem = sd / math.sqrt(n)
    out.sd_delta, out.sem = sd, sem
    if sem == 0.0:  # every Δ equal and non-zero: a constant shift, exactly known
        out.ci95 = (mean, mean)
        out.verdict = "candidate higher" if mean > 0 else "candidate lower"
        return out
    out.z = mean / sem
    half = float(stats.t.ppf(0.975, n - 1)) * sem
    out.ci95 = (mean - half, mean + half)
    out.mde = float(stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * sem
    if out.ci95[0] > 0:
        out.verdict = "candidate higher"
    elif out.ci95[1] < 0:
        out.verdict = "candidate lower"
    if n < SMALL_N:
        out.warnings.append(f"{metric}: n={n} pairs (< {SMALL_N}): z assumes a normal mean; the interval uses "
                            f"Student's t; a true mean Δ below {out.mde:.3g} would likely go unseen")
    return out


def _load_clip(model_dir: Path, what: str, fix: str) -> tuple[object, object]:
    from diffbench.errors import require

    tf = require("transformers", "diffusers")
    model_dir = Path(model_dir)
    missing = [] if (model_dir / "config.json").is_file() else ["config.json"]
    # transformers < 5 saves the image processor as preprocessor_config.json, >= 5 as processor_config.json
    if not any((model_dir / f).is_file() for f in ("preprocessor_config.json", "processor_config.json")):
        missing.append("preprocessor_config.json (or processor_config.json)")
    weights = [f for f in ("model.safetensors", "pytorch_model.bin") if (model_dir / f).is_file()]
    if not model_dir.is_dir() or missing or not weights:
        need = missing + ([] if weights else ["model.safetensors (or pytorch_model.bin)"])
        raise MissingWeightsError(f"{what} weights not found in {model_dir}: missing {', '.join(need) or 'the directory'}; "
                                  f"{fix}")
    try:
        model = tf.CLIPModel.from_pretrained(str(model_dir), local_files_only=True).eval()  # type: ignore[attr-defined]
        proc = tf.CLIPProcessor.from_pretrained(str(model_dir), local_files_only=True)  # type: ignore[attr-defined]
    except (OSError, ValueError) as exc:
        raise MissingWeightsError(f"{what} weights in {model_dir} do not load ({exc}); {fix}") from exc
    return model, proc


def _pooled_features(model: object) -> object:
    """``model`` with ``get_text_features`` / ``get_image_features`` returning tensors again.

    transformers >= 5 returns a ``BaseModelOutputWithPooling`` from both, which torchmetrics 1.9's CLIP-IQA
    still divides as a tensor (the break CLIPScore had, Lightning-AI/torchmetrics#3407); the embedding is its ``pooler_output``."""
    import torch

    class Pooled(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def get_text_features(self, *args: object, **kwargs: object) -> torch.Tensor:
            out = self.inner.get_text_features(*args, **kwargs)  # type: ignore[operator]
            return getattr(out, "pooler_output", out)

        def get_image_features(self, *args: object, **kwargs: object) -> torch.Tensor:
            out = self.inner.get_image_features(*args, **kwargs)  # type: ignore[operator]
            return getattr(out, "pooler_output", out)

    return Pooled(model).eval()  # type: ignore[arg-type]


class PickScorer:
    """PickScore with a local CLIP directory: ``scorer(images, prompts) -> list[float]``.

    Args:
        model_dir: a directory holding a transformers ``CLIPModel`` (config.json, model.safetensors) and its
            ``CLIPProcessor`` (preprocessor_config.json or processor_config.json, tokenizer files).

    Raises:
        MissingWeightsError: files missing (named) or not loadable; exit 3 from the CLI.
    """

    FIX = ("save yuvalkirstain/PickScore_v1 (CLIPModel.from_pretrained(...).save_pretrained(DIR)) and the "
           "processor of laion/CLIP-ViT-H-14-laion2B-s32B-b79K (CLIPProcessor ... save_pretrained(DIR)) into DIR")

    def __init__(self, model_dir: Path) -> None:
        self.model_dir = Path(model_dir)
        self.model, self.proc = _load_clip(self.model_dir, "PickScore", self.FIX)
        cfg = self.model.config  # type: ignore[attr-defined]
        self.limit = int(min(self.proc.tokenizer.model_max_length,  # type: ignore[attr-defined]
                             cfg.text_config.max_position_embeddings))
        self.name = f"PickScore ({self.model_dir.name}): exp(logit_scale)*cos(image, prompt), max {self.limit} tokens"
        self._lock = threading.Lock()  # HF fast tokenizers are not safe across threads

    def __call__(self, images: Sequence[np.ndarray], prompts: Sequence[str]) -> list[float]:
        """Scores of uint8 (H, W, 3) images, one prompt each (truncated at the text tower's limit)."""
        import torch

        if len(images) != len(prompts):
            raise UsageError(f"{len(images)} images but {len(prompts)} prompts")
        with self._lock:
            t_in = self.proc.tokenizer(list(prompts), padding=True, truncation=True,  # type: ignore[attr-defined]
                                       max_length=self.limit, return_tensors="pt")
            i_in = self.proc.image_processor(images=[np.asarray(x) for x in images],  # type: ignore[attr-defined]
                                             return_tensors="pt")
        m = self.model
        with torch.no_grad():
            ie = m.get_image_features(pixel_values=i_in["pixel_values"])  # type: ignore[attr-defined]
            te = m.get_text_features(**t_in)  # type: ignore[attr-defined]
            ie = getattr(ie, "pooler_output", ie)  # transformers >= 5 returns a model output
            te = getattr(te, "pooler_output", te)
            ie = ie / ie.norm(dim=-1, keepdim=True)
            te = te / te.norm(dim=-1, keepdim=True)
            s = m.logit_scale.exp() * (ie * te).sum(-1)  # type: ignore[attr-defined]
        out = s.double().numpy()
        if np.isnan(out).any():
            raise InputError("PickScore produced NaN")
        return [float(v) for v in out]


class ClipIqaScorer:
    """CLIP-IQA (torchmetrics ``CLIPImageQualityAssessment``, prompt pair "quality") on a local CLIP directory.

    ``scorer(images) -> list[float]`` in [0, 1] for uint8 (H, W, 3) images.

    Raises:
        MissingWeightsError: files missing (named) or not loadable.
    """

    FIX = ("save a CLIP model, e.g. openai/clip-vit-base-patch16 (CLIPModel and CLIPProcessor save_pretrained) "
           "into DIR; the 'clip_iqa' weights of piq are not used (they download)")

    def __init__(self, model_dir: Path) -> None:
        from diffbench.errors import require

        self.model_dir = Path(model_dir)
        model, proc = _load_clip(self.model_dir, "CLIP-IQA", self.FIX)  # offline, names missing files
        tm = require("torchmetrics.multimodal", "quality")
        pooled = _pooled_features(model)
        # torchmetrics accepts a loader callable in place of a hub id (its hub ids would download). For a
        # transformers CLIP it divides by data_range and the CLIPProcessor then rescales by 1/255 again, so
        # 8-bit pixels go in as 0-255 floats with data_range=1 (one rescale, as the processor expects).
        self.metric = tm.CLIPImageQualityAssessment(  # type: ignore[attr-defined]
            model_name_or_path=lambda: (pooled, proc), data_range=1.0, prompts=("quality",))
        self.name = f"CLIP-IQA ({self.model_dir.name}, torchmetrics, prompts Good/Bad photo.)"
        self._lock = threading.Lock()

    def __call__(self, images: Sequence[np.ndarray]) -> list[float]:
        import torch

        x = torch.from_numpy(np.stack([np.asarray(i) for i in images])).permute(0, 3, 1, 2).float()
        with self._lock, torch.no_grad():
            s = self.metric(x)
            self.metric.reset()
        out = s.reshape(-1).double().numpy()
        if np.isnan(out).any():
            raise InputError("CLIP-IQA produced NaN")
        return [float(v) for v in out]
