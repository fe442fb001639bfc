"""LPIPS v0.1 (AlexNet backbone) in plain torch.nn, no torchvision (the layer slices of
richzhang/PerceptualSimilarity ``lpips/pretrained_networks.py``; Zhang et al. 2018, arXiv:1801.03924).

Architecture (Zhang et al. 2018, LPIPS v0.1 "alex"):

1. Inputs in [-1, 1] (8-bit pixels are mapped once with x/127.5 - 1).
2. Scaling layer: (x - shift) / scale, shift = [-.030, -.088, -.188], scale = [.458, .448, .450].
3. AlexNet ``features`` (torchvision's first 12 modules); taps after the 5 ReLU stages.
4. Each tap unit-normalised over channels (divide by L2 norm + 1e-10), squared difference.
5. Bias-free 1×1 conv head per tap (weights ``lin{i}.model.1.weight`` of torchmetrics'
   ``functional/image/lpips_models/alex.pth``), spatial mean, sum over taps.

Weights: the ImageNet backbone ``alexnet-owt-7be5be79.pth`` is read from ``--lpips-backbone PATH`` or
``$TORCH_HOME/hub/checkpoints/`` (default ``~/.cache/torch/hub/checkpoints/``). When it is absent,
:func:`load_lpips` raises :class:`MissingWeightsError`; random backbones exist only for tests and are
labelled "uncalibrated".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from diffbench.errors import InputError, MissingWeightsError, ShapeError

if TYPE_CHECKING:
    import torch

BACKBONE_FILE = "alexnet-owt-7be5be79.pth"
LPIPS_VERSION = "0.1"
SHIFT = (-0.030, -0.088, -0.188)
SCALE = (0.458, 0.448, 0.450)
TAP_CHANNELS = (64, 192, 384, 256, 256)
TAP_ENDS = (2, 5, 8, 10, 12)  # slices 0-2, 2-5, 5-8, 8-10, 10-12 of features


def hub_checkpoint_dir() -> Path:
    """``$TORCH_HOME/hub/checkpoints`` (TORCH_HOME defaults to ``$XDG_CACHE_HOME/torch`` or ~/.cache/torch)."""
    th = os.environ.get("TORCH_HOME")
    if not th:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        th = str(Path(xdg) / "torch")
    return Path(th) / "hub" / "checkpoints"


def heads_path() -> Path:
    """Path of the v0.1 alex linear heads bundled in the torchmetrics wheel."""
    import torchmetrics

    return Path(torchmetrics.__file__).parent / "functional" / "image" / "lpips_models" / "alex.pth"


def find_backbone(path: Path | None = None) -> Path:
    """Locate the AlexNet backbone weights.

    Raises:
        MissingWeightsError: names the file and where to put it.
    """
    if path is not None:
        p = Path(path)
        if p.is_dir():
            p = p / BACKBONE_FILE
        if p.is_file():
            return p
        raise MissingWeightsError(
            f"LPIPS backbone weights not found at {p}; expected the torchvision ImageNet AlexNet file "
            f"{BACKBONE_FILE} (download.pytorch.org/models/{BACKBONE_FILE})"
        )
    p = hub_checkpoint_dir() / BACKBONE_FILE
    if p.is_file():
        return p
    raise MissingWeightsError(
        f"LPIPS needs the AlexNet backbone weights {BACKBONE_FILE}; not found in {p.parent}. Put the file "
        f"there (torch hub cache, $TORCH_HOME/hub/checkpoints/) or pass --lpips-backbone PATH. "
        "diffbench never downloads weights and never uses a random backbone for LPIPS."
    )


def _build_module(backbone_state: dict[str, torch.Tensor] | None, heads_state: dict[str, torch.Tensor]):
    import torch
    from torch import nn

    class LPIPSAlex(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 64, 11, stride=4, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
                nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
                nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(inplace=True),
                nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(inplace=True),
                nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True),
            )
            self.lins = nn.ModuleList(nn.Conv2d(c, 1, 1, bias=False) for c in TAP_CHANNELS)
            self.register_buffer("shift", torch.tensor(SHIFT).view(1, 3, 1, 1))
            self.register_buffer("scale", torch.tensor(SCALE).view(1, 3, 1, 1))

        def taps(self, x: torch.Tensor) -> list[torch.Tensor]:
            out, start = [], 0
            h = (x - self.shift) / self.scale
            for end in TAP_ENDS:
                for i in range(start, end):
                    h = self.features[i](h)
                out.append(h)
                start = end
            return out

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            """x, y: (N, 3, H, W) float in [-1, 1] → (N,) LPIPS distances."""
            n = x.shape[0]
            total = x.new_zeros(n)
            for lin, f in zip(self.lins, self.taps(torch.cat([x, y])), strict=True):  # one pass, same kernels
                fx, fy = f[:n], f[n:]
                nx = fx / (fx.pow(2).sum(1, keepdim=True).sqrt() + 1e-10)
                ny = fy / (fy.pow(2).sum(1, keepdim=True).sqrt() + 1e-10)
                total = total + lin((nx - ny) ** 2).mean(dim=(1, 2, 3))
            return total

    m = LPIPSAlex()
    if backbone_state is not None:
        feats = {k[len("features."):]: v for k, v in backbone_state.items() if k.startswith("features.")}
        if not feats:  # already stripped
            feats = {k: v for k, v in backbone_state.items() if k[:1].isdigit()}
        missing, unexpected = m.features.load_state_dict(feats, strict=False)
        if missing or unexpected:
            raise InputError(f"LPIPS backbone state does not match AlexNet features (missing {missing})")
    for i, lin in enumerate(m.lins):
        lin.weight.data.copy_(heads_state[f"lin{i}.model.1.weight"])
    for p in m.parameters():
        p.requires_grad_(False)
    return m.eval()


class LPIPS:
    """LPIPS(alex, v0.1) scorer. Build with :func:`load_lpips` (real weights) or :meth:`uncalibrated`."""

    def __init__(self, module: object, calibrated: bool, source: str) -> None:
        self.module = module
        self.calibrated = calibrated
        self.source = source

    @classmethod
    def uncalibrated(cls, seed: int = 0) -> LPIPS:
        """Random backbone (seeded), real heads. For tests only: NOT the LPIPS metric."""
        import torch

        g = torch.Generator().manual_seed(seed)
        m = _build_module(None, torch.load(heads_path(), map_location="cpu", weights_only=True))
        with torch.no_grad():
            for p in m.features.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
        return cls(m, calibrated=False, source=f"random backbone (seed {seed}), uncalibrated")

    @property
    def description(self) -> str:
        cal = "calibrated" if self.calibrated else "UNCALIBRATED (random backbone)"
        return f"LPIPS v{LPIPS_VERSION} alex, torchvision-free port, heads from torchmetrics; {cal}; {self.source}"

    def __call__(self, a: np.ndarray, b: np.ndarray, data_range: float = 255.0) -> np.ndarray:
        """LPIPS for (H, W, 3) or (N, H, W, 3) arrays in [0, data_range]; returns (N,) float64.

        Raises:
            InputError: shapes differ. ShapeError: not channel-last RGB (e.g. (B, H, W) or (3, H, W)).
        """
        import torch

        if a.shape != b.shape:
            raise InputError(f"LPIPS shape mismatch {a.shape} vs {b.shape}")
        if a.ndim not in (3, 4) or a.shape[-1] != 3:
            raise ShapeError(f"LPIPS takes (H, W, 3) or (N, H, W, 3) channel-last RGB, got shape {a.shape}; "
                             "a (B, H, W) or channel-first array is refused")
        if a.ndim == 3:
            a, b = a[None], b[None]

        def t(x: np.ndarray) -> torch.Tensor:  # the single conversion to [-1, 1]
            x = torch.from_numpy(np.array(x, dtype=np.float32)).permute(0, 3, 1, 2)
            return x * (2.0 / data_range) - 1.0

        with torch.no_grad():
            return self.module(t(a), t(b)).double().numpy()


def load_lpips(backbone: Path | None = None) -> LPIPS:
    """Real LPIPS(alex): backbone from ``backbone`` or the torch hub cache, heads from torchmetrics.

    Raises:
        MissingWeightsError: the backbone file is absent (names it and where to put it).
        InputError: the file does not hold AlexNet weights.
    """
    from diffbench.errors import require

    torch = require("torch", "quality")
    path = find_backbone(backbone)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for corrupt files
        raise InputError(f"{path}: cannot load LPIPS backbone weights ({exc})") from exc
    heads = torch.load(heads_path(), map_location="cpu", weights_only=True)
    return LPIPS(_build_module(state, heads), calibrated=True, source=str(path))
