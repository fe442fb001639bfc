"""FID / KID with a tiny feature extractor, against torchmetrics and known behaviour."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from diffbench.errors import MissingWeightsError, UsageError
from diffbench.quality.distribution import (
    INCEPTION_FILE,
    FeatureStats,
    TorchFeatureExtractor,
    distribution_metrics,
    fid_from_stats,
    kid,
    load_inception,
)


class Tiny(nn.Module):
    """Random conv + global pool: (N, 3, H, W) in [0, 255] (any dtype) -> (N, 8)."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, stride=2)
        with torch.no_grad():
            self.conv.weight.copy_(torch.randn(self.conv.weight.shape, generator=g) * 0.1)
            self.conv.bias.zero_()
        self.num_features = 8

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.conv(x.float() / 255.0)).mean(dim=(2, 3)) * 10


def _stats(f: np.ndarray) -> FeatureStats:
    s = FeatureStats(f.shape[1])
    for i in range(0, len(f), 100):  # several updates: the accumulators must add up
        s.update(f[i : i + 100])
    return s


def _fid(f1: np.ndarray, f2: np.ndarray) -> float:
    return fid_from_stats(_stats(f1), _stats(f2))[0]


def test_fid_matches_torchmetrics_formula() -> None:
    from torchmetrics.image.fid import _compute_fid

    rng = np.random.default_rng(0)
    f1 = rng.normal(0, 1, (500, 6))
    f2 = rng.normal(0.3, 0.8, (400, 6))
    ref = float(_compute_fid(torch.tensor(f1.mean(0)), torch.tensor(np.cov(f1, rowvar=False)),
                             torch.tensor(f2.mean(0)), torch.tensor(np.cov(f2, rowvar=False))))
    assert abs(_fid(f1, f2) - ref) < 1e-8


def test_fid_near_zero_and_grows_with_shift_and_variance_reduction() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(0, 1, (3000, 8))
    y = rng.normal(0, 1, (3000, 8))
    assert abs(_fid(x, x)) < 1e-3
    same = _fid(x, y)
    assert same < 0.05
    shifts = [_fid(x, y + m) for m in (0.25, 0.5, 1.0)]
    assert same < shifts[0] < shifts[1] < shifts[2]
    assert abs(shifts[2] - 8.0) < 0.3  # ‖Δμ‖² = 8 for a unit shift in 8 dims
    shrink = [_fid(x, y * s) for s in (0.8, 0.5)]
    assert same < shrink[0] < shrink[1]


@pytest.mark.filterwarnings("ignore:Metric `Kernel Inception Distance`")
def test_kid_matches_torchmetrics_and_grows() -> None:
    from torchmetrics.image.kid import KernelInceptionDistance

    rng = np.random.default_rng(2)
    x = rng.normal(0, 1, (200, 8))
    y = rng.normal(0.5, 1, (150, 8))

    class Passthrough(nn.Module):
        num_features = 8

        def forward(self, t: torch.Tensor) -> torch.Tensor:
            return t

    m = KernelInceptionDistance(feature=Passthrough(), subsets=1, subset_size=150)
    m.update(torch.tensor(x[:150]), real=True)
    m.update(torch.tensor(y), real=False)
    ref = float(m.compute()[0])
    # with subset_size = N every subset is the whole set (order does not matter): deterministic
    got, _, size = kid(x[:150], y, subsets=1, subset_size=150)
    assert size == 150 and abs(got - ref) < 1e-6
    z = rng.normal(0, 1, (200, 8))
    k_same = kid(x, z, subsets=20, subset_size=100)[0]
    k_shift = kid(x, z + 0.5, subsets=20, subset_size=100)[0]
    k_shrink = kid(x, z * 0.5, subsets=20, subset_size=100)[0]
    assert abs(k_same) < k_shift and abs(k_same) < k_shrink


def test_end_to_end_images_vs_torchmetrics_fid() -> None:
    from torchmetrics.image.fid import FrechetInceptionDistance

    rng = np.random.default_rng(3)
    a = rng.integers(0, 200, (40, 32, 32, 3), dtype=np.uint8)
    b = rng.integers(60, 256, (40, 32, 32, 3), dtype=np.uint8)
    tiny = Tiny()
    res = distribution_metrics(TorchFeatureExtractor(tiny, 8, "tiny"), list(a), list(b), batch=16,
                               kid_subsets=5, kid_subset_size=20)
    m = FrechetInceptionDistance(feature=Tiny())  # same seeded weights, separate instance
    m.update(torch.from_numpy(a).permute(0, 3, 1, 2), real=True)
    m.update(torch.from_numpy(b).permute(0, 3, 1, 2), real=False)
    assert res.fid == pytest.approx(float(m.compute()), rel=1e-4, abs=1e-6)
    assert res.n_baseline == 40 and res.n_candidate == 40
    assert any("N=40/40" in w for w in res.warnings)  # unstable-sample warning carries N


def test_fid_refuses_fewer_than_two() -> None:
    with pytest.raises(UsageError, match="at least 2"):
        _fid(np.ones((1, 4)), np.ones((5, 4)))


def test_inception_missing_names_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    with pytest.raises(MissingWeightsError) as ei:
        load_inception()
    assert INCEPTION_FILE in str(ei.value) and str(tmp_path / "hub" / "checkpoints") in str(ei.value)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_inception_torchscript_loads(tmp_path: Path) -> None:
    class FakeInception(nn.Module):  # same call contract as the clean-fid TorchScript file
        def forward(self, x: torch.Tensor, return_features: bool = False) -> torch.Tensor:
            return x.mean(dim=(2, 3)).repeat(1, 683)[:, :2048] if return_features else x

    p = tmp_path / INCEPTION_FILE
    torch.jit.script(FakeInception()).save(str(p))
    fx = load_inception(p)
    out = fx(np.full((2, 8, 8, 3), 7, np.uint8))
    assert out.shape == (2, 2048) and np.allclose(out, 7.0)


def test_compare_dirs_fid_with_tiny_extractor(tmp_path: Path) -> None:
    from PIL import Image

    from diffbench.quality.compare import compare_dirs
    from diffbench.quality.models import QualityOptions

    rng = np.random.default_rng(5)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    xs, ys = [], []
    for i in range(6):
        x = rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)
        y = np.clip(x.astype(int) + 40, 0, 255).astype(np.uint8)
        Image.fromarray(x).save(a / f"{i}.png")
        Image.fromarray(y).save(b / f"{i}.png")
        xs.append(x)
        ys.append(y)
    fx = TorchFeatureExtractor(Tiny(), 8, "tiny")
    rep = compare_dirs(a, b, QualityOptions(workers=2, ms_ssim=False), feature_extractor=fx)
    ref = distribution_metrics(fx, xs, ys, kid_subsets=100, kid_subset_size=1000)
    d = rep.distribution
    assert d is not None and d.n_baseline == 6 and d.fid == pytest.approx(ref.fid, rel=1e-5)
    assert d.kid_mean == pytest.approx(ref.kid_mean, rel=1e-5) and d.fid > 0
