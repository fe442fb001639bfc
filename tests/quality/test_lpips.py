"""LPIPS(alex) port vs an independent functional reference built from the architecture description."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from skimage import data

from diffbench.errors import MissingWeightsError
from diffbench.quality.lpips import BACKBONE_FILE, LPIPS, heads_path, load_lpips

from .conftest import ALEX_CONVS as CONVS
from .conftest import make_random_alexnet_state as _random_backbone


def _reference(sd: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """LPIPS v0.1 straight from the paper/description, written functionally (x, y in [-1, 1])."""
    heads = torch.load(heads_path(), map_location="cpu", weights_only=True)
    shift = torch.tensor([-0.030, -0.088, -0.188]).view(1, 3, 1, 1)
    scale = torch.tensor([0.458, 0.448, 0.450]).view(1, 3, 1, 1)

    def feats(z: torch.Tensor) -> list[torch.Tensor]:
        h = (z - shift) / scale
        out = []
        for i, (idx, _, _, _, s, p) in enumerate(CONVS):
            if i in (1, 2):
                h = F.max_pool2d(h, 3, 2)
            h = F.relu(F.conv2d(h, sd[f"features.{idx}.weight"], sd[f"features.{idx}.bias"], stride=s, padding=p))
            out.append(h)
        return out

    total = torch.zeros(x.shape[0])
    for i, (fx, fy) in enumerate(zip(feats(x), feats(y), strict=True)):
        nx = fx / (torch.sqrt(torch.sum(fx**2, dim=1, keepdim=True)) + 1e-10)
        ny = fy / (torch.sqrt(torch.sum(fy**2, dim=1, keepdim=True)) + 1e-10)
        w = heads[f"lin{i}.model.1.weight"]
        total += F.conv2d((nx - ny) ** 2, w).mean(dim=(1, 2, 3))
    return total


@pytest.fixture()
def backbone_file(tmp_path: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    sd = _random_backbone(1)
    p = tmp_path / BACKBONE_FILE
    torch.save(sd, p)
    return p, sd


def test_port_equals_reference_with_same_backbone(backbone_file) -> None:
    path, sd = backbone_file
    lp = load_lpips(path)
    a = np.stack([data.astronaut()[:128, :128], data.coffee()[:128, 100:228]])
    rng = np.random.default_rng(0)
    b = np.clip(a + rng.normal(0, 20, a.shape), 0, 255).astype(np.uint8)
    got = lp(a, b, 255.0)
    t = lambda z: torch.from_numpy(z).permute(0, 3, 1, 2).float() / 127.5 - 1.0  # noqa: E731
    ref = _reference(sd, t(a), t(b)).double().numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-7)
    assert (got > 0).all()
    # same pixels as float [0, 1] (data_range 1.0) give the same value: one conversion, one contract
    np.testing.assert_allclose(lp(a / 255.0, b / 255.0, 1.0), got, rtol=1e-5)
    assert lp.calibrated  # loaded from a file (these test weights are random; the flag means "from disk")


def test_lpips_of_identical_is_zero() -> None:
    lp = LPIPS.uncalibrated(seed=3)
    a = data.chelsea()[:96, :96]
    assert float(lp(a, a.copy())[0]) == 0.0
    assert not lp.calibrated and "UNCALIBRATED" in lp.description


def test_hub_cache_lookup(monkeypatch, tmp_path: Path, backbone_file) -> None:
    path, _ = backbone_file
    hub = tmp_path / "th" / "hub" / "checkpoints"
    hub.mkdir(parents=True)
    (hub / BACKBONE_FILE).write_bytes(path.read_bytes())
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "th"))
    assert load_lpips().source == str(hub / BACKBONE_FILE)


def test_missing_weights_names_file_and_location(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "empty"))
    with pytest.raises(MissingWeightsError) as ei:
        load_lpips()
    msg = str(ei.value)
    assert BACKBONE_FILE in msg and str(tmp_path / "empty" / "hub" / "checkpoints") in msg
    with pytest.raises(MissingWeightsError, match=BACKBONE_FILE):
        load_lpips(tmp_path / "nope.pth")



def test_lpips_refuses_non_channel_last_rgb() -> None:
    from diffbench.errors import ShapeError

    lp = LPIPS.uncalibrated(seed=0)
    for shape in ((4, 64, 64), (3, 64, 64), (64, 64, 1), (64, 64)):  # batch, channel-first, gray, 2-D
        x = np.zeros(shape, np.uint8)
        with pytest.raises(ShapeError, match="channel-last RGB"):
            lp(x, x)
