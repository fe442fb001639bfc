"""Distribution metrics: FID and KID on pluggable features, CLIP score with local weights.

- FID = ‖μ₁ − μ₂‖² + Tr(Σ₁ + Σ₂ − 2(Σ₁Σ₂)^½) (Heusel et al. 2017). Running sums and outer-product sums
  are kept in float64; the square root is ``scipy.linalg.sqrtm`` (imaginary parts from numerical noise
  are dropped, and reported when large). FID refuses N < 2 and warns when N < 2048 (or < feature dim):
  the estimate is biased and unstable; compare FIDs only at equal N with the same extractor.
- KID = unbiased MMD² with the cubic polynomial kernel k(x, y) = (x·y/d + 1)³ (Bińkowski et al. 2018),
  mean and std over seeded random subsets.
- The real extractor is the TF-Inception (2015-12-05) port as a TorchScript file
  (``inception-2015-12-05.pt``, clean-fid / StyleGAN2-ADA), given by ``--inception PATH`` or found in
  ``$TORCH_HOME/hub/checkpoints/``; torchvision/torch-fidelity are not used. Tests plug in a tiny module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from diffbench.errors import InputError, MissingWeightsError, UsageError
from diffbench.quality.models import DistributionResult

INCEPTION_FILE = "inception-2015-12-05.pt"
FID_STABLE_N = 2048


class FeatureExtractor(Protocol):
    """Maps uint8 images ``(N, H, W, 3)`` to float features ``(N, d)``."""

    name: str
    dim: int

    def __call__(self, images: np.ndarray) -> np.ndarray: ...


def _two_sum_into(hi: np.ndarray, lo: np.ndarray, x: np.ndarray, s: np.ndarray, t: np.ndarray,
                  u: np.ndarray) -> np.ndarray:
    """``hi + lo += x`` elementwise, the rounding error of ``hi + x`` going into ``lo``; returns the new ``hi``
    (the buffer ``s``: the caller swaps it with the old ``hi``, which becomes scratch). ``s``, ``t``, ``u``:
    scratch arrays of ``hi``'s shape.

    Knuth's TwoSum (error-free: ``hi + x == s + e`` exactly in float64), so ``hi + lo`` carries about 106 bits:
    the rounded total ``hi + lo`` does not depend on the order in which terms (or partial sums) are added,
    except for totals within ~2⁻¹⁰⁰ relative of a rounding boundary (Shewchuk 1997; Ogita, Rump & Oishi 2005).
    """
    np.add(hi, x, out=s)  # s = hi + x
    np.subtract(s, hi, out=t)  # t = b' = s - hi
    np.subtract(x, t, out=u)  # u = x - b'
    np.subtract(s, t, out=t)  # t = a' = s - b'
    np.subtract(hi, t, out=t)  # t = hi - a'
    np.add(t, u, out=t)  # e = (hi - a') + (x - b')
    np.add(lo, t, out=lo)
    return s


class FeatureStats:
    """Float64 running statistics of features: n, Σx, Σxxᵀ (and, with ``keep``, the raw rows for KID).

    The sums are compensated (each kept as a float64 pair ``hi + lo``, :func:`_two_sum_into`) and updated one
    row at a time with elementwise products (no BLAS reduction), so statistics accumulated over shards and
    combined with :meth:`merge`, in any order, give the same mean and covariance as one pass over all rows
    (bit for bit in practice; the sums are the correctly rounded float64 sums, as ``math.fsum``). Cost per row:
    about 7·d² float64 operations, 3.5-4x the plain sum (``benchmarks/bench_feature_stats.py``: 40-60 ms per
    row at d = 2048 on one shared core, against 11-18 ms); memory 5·d² float64 while updating (hi, lo, 3 scratch: 160 MiB at
    d = 2048), 2·(d + d²) float64 when pickled (64 MiB).
    """

    def __init__(self, dim: int, keep: bool = True) -> None:
        self.n = 0
        self.sum = np.zeros(dim, dtype=np.float64)
        self.outer = np.zeros((dim, dim), dtype=np.float64)
        self._sum_lo = np.zeros(dim, dtype=np.float64)
        self._outer_lo = np.zeros((dim, dim), dtype=np.float64)
        self.keep = keep
        self._feats: list[np.ndarray] = []
        self._scratch: dict[int, list[np.ndarray]] = {}  # per rank: 3 buffers (product, s, t); not pickled

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_scratch"] = {}
        return state

    @property
    def dim(self) -> int:
        return int(self.sum.shape[0])

    def _bufs(self, like: np.ndarray) -> list[np.ndarray]:
        if like.ndim not in self._scratch:
            self._scratch[like.ndim] = [np.empty_like(like) for _ in range(3)]
        return self._scratch[like.ndim]

    def _add(self, which: str, x: np.ndarray, consume: bool) -> None:
        """``self.<which> (+ its lo part) += x``, compensated; ``consume``: ``x`` may be overwritten."""
        hi, lo = getattr(self, which), getattr(self, "_" + which + "_lo")
        b = self._bufs(hi)
        new = _two_sum_into(hi, lo, x, b[1], b[2], x if consume else np.empty_like(x))
        setattr(self, which, new)
        b[1] = hi  # the old hi becomes scratch

    def update(self, feats: np.ndarray) -> None:
        """Add rows ``(N, d)`` (any float dtype; converted to float64).

        Raises:
            UsageError: not ``(N, d)``. InputError: NaN/Inf in the features.
        """
        f = np.asarray(feats, dtype=np.float64)
        if f.ndim != 2 or f.shape[1] != self.dim:
            raise UsageError(f"features must be (N, {self.dim}), got {f.shape}")
        if not np.isfinite(f).all():
            raise InputError("feature extractor returned NaN/Inf")
        prod = self._bufs(self.outer)[0]
        for row in f:
            self._add("sum", row, consume=False)
            np.multiply.outer(row, row, out=prod)
            self._add("outer", prod, consume=True)
        self.n += f.shape[0]
        if self.keep:
            self._feats.append(f)

    def merge(self, other: FeatureStats) -> FeatureStats:
        """Add ``other``'s statistics (and its kept rows, after this one's) into this one; returns self.

        Raises:
            UsageError: the feature widths differ.
        """
        if other.dim != self.dim:
            raise UsageError(f"cannot merge statistics of feature width {other.dim} into width {self.dim}")
        self._add("sum", other.sum, consume=False)
        self._add("outer", other.outer, consume=False)
        self._sum_lo += other._sum_lo
        self._outer_lo += other._outer_lo
        self.n += other.n
        if self.keep:
            self._feats.extend(other._feats)
        return self

    def totals(self) -> tuple[np.ndarray, np.ndarray]:
        """(Σx ``(d,)``, Σxxᵀ ``(d, d)``) rounded to float64."""
        return self.sum + self._sum_lo, self.outer + self._outer_lo

    def mean_cov(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean ``(d,)`` and sample covariance ``(d, d)`` (ddof 1), float64.

        Raises:
            UsageError: fewer than 2 rows.
        """
        if self.n < 2:
            raise UsageError(f"FID needs at least 2 samples per side, got {self.n}")
        total, outer = self.totals()
        mu = total / self.n
        cov = (outer - self.n * np.outer(mu, mu)) / (self.n - 1)
        return mu, cov

    @property
    def features(self) -> np.ndarray:
        return np.concatenate(self._feats) if self._feats else np.zeros((0, self.dim))


def fid_from_stats(a: FeatureStats, b: FeatureStats) -> tuple[float, list[str]]:
    """FID between two accumulated sets; returns (value, warnings).

    Raises:
        UsageError: fewer than 2 samples on a side.
    """
    from scipy import linalg

    mu1, s1 = a.mean_cov()
    mu2, s2 = b.mean_cov()
    warnings: list[str] = []
    d = mu1.shape[0]
    n_min = min(a.n, b.n)
    if n_min < FID_STABLE_N or n_min < d:
        warnings.append(
            f"FID from N={a.n}/{b.n} samples (d={d}) is unstable and biased upward; "
            f"use >= {max(FID_STABLE_N, d)} (5k+ recommended) or prefer KID / paired metrics"
        )
    covmean = linalg.sqrtm(s1 @ s2)
    if not np.isfinite(covmean).all():
        eps = 1e-6
        off = np.eye(d) * eps
        covmean = linalg.sqrtm((s1 + off) @ (s2 + off))
        warnings.append(f"singular covariance product; added {eps:g}·I to both covariances")
    if np.iscomplexobj(covmean):
        imag = float(np.max(np.abs(covmean.imag)))
        if imag > 1e-3:
            warnings.append(f"sqrtm has imaginary component {imag:.3g} (dropped)")
        covmean = covmean.real
    diff = mu1 - mu2
    val = float(diff @ diff + np.trace(s1) + np.trace(s2) - 2.0 * np.trace(covmean))
    return val, warnings


def kid(f1: np.ndarray, f2: np.ndarray, subsets: int = 100, subset_size: int = 1000, seed: int = 2020
        ) -> tuple[float, float, int]:
    """KID (unbiased MMD², cubic polynomial kernel) mean and std over seeded subsets.

    ``subset_size`` is clipped to min(N1, N2) (returned third). Raises UsageError when a side has < 2.
    """
    n = min(f1.shape[0], f2.shape[0])
    if n < 2:
        raise UsageError(f"KID needs at least 2 samples per side, got {f1.shape[0]}/{f2.shape[0]}")
    m = min(subset_size, n)
    d = f1.shape[1]
    rng = np.random.default_rng(seed)
    vals = np.empty(subsets)
    for i in range(subsets):
        x = f1[rng.choice(f1.shape[0], m, replace=False)]
        y = f2[rng.choice(f2.shape[0], m, replace=False)]
        kxx = (x @ x.T / d + 1.0) ** 3
        kyy = (y @ y.T / d + 1.0) ** 3
        kxy = (x @ y.T / d + 1.0) ** 3
        vals[i] = (
            (kxx.sum() - np.trace(kxx)) / (m * (m - 1))
            + (kyy.sum() - np.trace(kyy)) / (m * (m - 1))
            - 2.0 * kxy.mean()
        )
    return float(vals.mean()), float(vals.std()), m


def distribution_metrics(
    extractor: FeatureExtractor, baseline: Sequence[np.ndarray], candidate: Sequence[np.ndarray],
    batch: int = 16, kid_subsets: int = 100, kid_subset_size: int = 1000, seed: int = 2020,
) -> DistributionResult:
    """FID and KID between two image sets (uint8 (H, W, 3) each) with ``extractor``.

    Raises:
        UsageError: fewer than 2 images per side.
    """
    stats = []
    for imgs in (baseline, candidate):
        st = FeatureStats(extractor.dim)
        for i in range(0, len(imgs), batch):
            chunk = list(imgs[i : i + batch])
            if len({c.shape for c in chunk}) > 1:
                for c in chunk:
                    st.update(extractor(c[None]))
            else:
                st.update(extractor(np.stack(chunk)))
        stats.append(st)
    fid, warns = fid_from_stats(stats[0], stats[1])
    km, ks, m = kid(stats[0].features, stats[1].features, kid_subsets, kid_subset_size, seed)
    return DistributionResult(
        extractor=extractor.name, feature_dim=extractor.dim, n_baseline=stats[0].n, n_candidate=stats[1].n,
        fid=fid, kid_mean=km, kid_std=ks, kid_subsets=kid_subsets, kid_subset_size=m, warnings=warns,
    )


class TorchFeatureExtractor:
    """Wraps a torch module ``f(float (N, 3, H, W) in [0, 255]) -> (N, d)`` as a FeatureExtractor."""

    def __init__(self, module: Callable, dim: int, name: str) -> None:
        self.module, self.dim, self.name = module, dim, name

    def __call__(self, images: np.ndarray) -> np.ndarray:
        import torch

        x = torch.from_numpy(np.array(images, dtype=np.float32)).permute(0, 3, 1, 2)
        with torch.no_grad():
            out = self.module(x)
        return out.reshape(out.shape[0], -1).double().numpy()


def load_inception(path: Path | None = None) -> TorchFeatureExtractor:
    """The TF-Inception TorchScript (clean-fid's ``inception-2015-12-05.pt``): 2048-d pool features (or
    ``num_features`` of a TorchScript module that sets that attribute: small stand-ins in tests).

    Called as ``model(x, return_features=True)`` with x float (N, 3, H, W) in [0, 255]; the model
    resizes to 299 internally. Not verified here against the real file (none offline).

    Raises:
        MissingWeightsError: no file (names it and where to put it). InputError: not TorchScript.
    """
    import torch

    from diffbench.quality.lpips import hub_checkpoint_dir

    p = Path(path) if path is not None else hub_checkpoint_dir() / INCEPTION_FILE
    if p.is_dir():
        p = p / INCEPTION_FILE
    if not p.is_file():
        raise MissingWeightsError(
            f"FID needs the Inception weights {INCEPTION_FILE} (TorchScript, clean-fid/StyleGAN2-ADA "
            f"'2015-12-05' port); not found at {p}. Put it in {hub_checkpoint_dir()} or pass --inception PATH. "
            "torch-fidelity's pt_inception-2015-12-05-6726825d.pth state dict needs torchvision and is not "
            "supported."
        )
    import warnings

    try:
        with warnings.catch_warnings():  # torch 2.13 deprecates jit.load; keep machine output clean
            warnings.simplefilter("ignore", DeprecationWarning)
            model = torch.jit.load(str(p), map_location="cpu").eval()
    except Exception as exc:
        raise InputError(f"{p}: not a TorchScript Inception file ({exc}); use {INCEPTION_FILE}") from exc

    def f(x: torch.Tensor) -> torch.Tensor:
        return model(x, return_features=True)

    # the feature width: a module attribute num_features when the file has one (torchmetrics' convention, used by
    # test stand-ins), else the 2048 pool3 features of the real file
    dim = int(getattr(model, "num_features", 2048))
    return TorchFeatureExtractor(f, dim, f"TF-Inception 2015-12-05 pool3 (TorchScript {p.name})")


class ClipScorer:
    """CLIP text-image score with a local transformers CLIPModel (``local_files_only=True``).

    Score = 100 · max(cos(image, text), 0) per image (CLIP-S clamps per sample; torchmetrics clamps the
    mean). Prompts longer than the text tower's limit (77 tokens for CLIP) are truncated keeping EOS
    and reported via :meth:`is_truncated`.

    Raises:
        MissingWeightsError: the directory does not hold a loadable CLIP model and processor.
    """

    def __init__(self, model_dir: Path) -> None:
        from diffbench.errors import require

        tf = require("transformers", "diffusers")
        CLIPModel, CLIPProcessor = tf.CLIPModel, tf.CLIPProcessor  # type: ignore[attr-defined]  # noqa: N806
        self.model_dir = Path(model_dir)
        try:
            self.model = CLIPModel.from_pretrained(str(model_dir), local_files_only=True).eval()
            self.proc = CLIPProcessor.from_pretrained(str(model_dir), local_files_only=True)
        except (OSError, ValueError) as exc:
            raise MissingWeightsError(
                f"CLIP weights not found in {model_dir} ({exc}); save a CLIPModel and CLIPProcessor there "
                "with save_pretrained"
            ) from exc
        tok = self.proc.tokenizer
        self.limit = int(min(tok.model_max_length, self.model.config.text_config.max_position_embeddings))
        self.name = f"CLIP ({self.model_dir.name}), 100*max(cos,0), max {self.limit} tokens"
        import threading

        self._lock = threading.Lock()  # HF fast tokenizers are not safe to call from several threads

    def is_truncated(self, prompt: str) -> bool:
        with self._lock:
            return len(self.proc.tokenizer(prompt)["input_ids"]) > self.limit

    def __call__(self, images: Sequence[np.ndarray], prompts: Sequence[str]) -> list[float]:
        """Scores for uint8 (H, W, 3) images with one prompt each."""
        import torch

        if len(images) != len(prompts):
            raise UsageError(f"{len(images)} images but {len(prompts)} prompts")
        with self._lock:
            t_in = self.proc.tokenizer(list(prompts), padding=True, truncation=True, max_length=self.limit,
                                       return_tensors="pt")
            i_in = self.proc.image_processor(images=[np.asarray(x) for x in images], return_tensors="pt")
        with torch.no_grad():
            ie = self.model.get_image_features(pixel_values=i_in["pixel_values"])
            te = self.model.get_text_features(**t_in)
        ie = getattr(ie, "pooler_output", ie)  # transformers >= 5 returns a model output
        te = getattr(te, "pooler_output", te)
        ie = ie / ie.norm(dim=-1, keepdim=True)
        te = te / te.norm(dim=-1, keepdim=True)
        cos = (ie * te).sum(-1).double().numpy()
        if np.isnan(cos).any():
            raise InputError("CLIP score produced NaN")
        return [float(100.0 * max(c, 0.0)) for c in cos]


def clip_score(
    model_dir: Path, images: Sequence[np.ndarray], prompts: Sequence[str], batch: int = 8
) -> tuple[list[float], list[int]]:
    """CLIP score per image with local weights (see :class:`ClipScorer`).

    Args:
        model_dir: a directory with a transformers CLIPModel + processor.
        images: uint8 (H, W, 3). prompts: one per image.

    Returns:
        (scores, indices of prompts truncated at the tokenizer limit, 77 for CLIP; EOS is kept).

    Raises:
        MissingWeightsError: the directory does not hold a loadable CLIP model.
    """
    if len(images) != len(prompts):
        raise UsageError(f"{len(images)} images but {len(prompts)} prompts")
    scorer = ClipScorer(model_dir)
    truncated = [i for i, p in enumerate(prompts) if scorer.is_truncated(p)]
    scores: list[float] = []
    for i in range(0, len(images), batch):
        scores.extend(scorer(images[i : i + batch], prompts[i : i + batch]))
    return scores, truncated
