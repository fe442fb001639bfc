"""``quality --ray``: two actors give the single-process report (per-pair rows exactly, FID/KID within 1e-9)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from diffbench.cli.main import main

pytestmark = pytest.mark.ray

N_PAIRS = 12
FEATURES = 8


def _fake_inception(path: Path) -> Path:
    """A TorchScript stand-in with the clean-fid call contract (``model(x, return_features=True)``, x float
    (N, 3, H, W) in [0, 255]) and ``num_features`` = 8: a seeded random conv, tanh, global mean."""
    import torch
    from torch import nn

    class FakeInception(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            g = torch.Generator().manual_seed(0)
            self.conv = nn.Conv2d(3, FEATURES, 3, stride=2)
            with torch.no_grad():
                self.conv.weight.copy_(torch.randn(self.conv.weight.shape, generator=g) * 0.1)
                self.conv.bias.copy_(torch.randn(FEATURES, generator=g) * 0.1)
            self.num_features = FEATURES

        def forward(self, x: torch.Tensor, return_features: bool = False) -> torch.Tensor:
            return torch.tanh(self.conv(x / 255.0)).mean(dim=(2, 3)) * 10

    torch.jit.script(FakeInception()).save(str(path))
    return path


def _runs(tmp: Path, manifests: bool = False) -> tuple[Path, Path]:
    """Twelve 32x32 RGB pairs (candidate = baseline + noise; pair 05 identical, candidate 07 truncated); with
    ``manifests`` both sides hold manifest.json (prompts; the truncated file is then left intact: the manifest's
    sha256 would catch it on the driver)."""
    import hashlib

    from PIL import Image

    from diffbench.core.manifest import Manifest, ManifestEntry, write_manifest

    rng = np.random.default_rng(7)
    a, b = tmp / "A", tmp / "B"
    a.mkdir()
    b.mkdir()
    for i in range(N_PAIRS):
        x = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
        y = np.clip(np.rint(x + rng.normal(0, 2 + i, x.shape)) + 10 * (i % 3), 0, 255).astype(np.uint8)
        Image.fromarray(x).save(a / f"{i:02d}.png")
        Image.fromarray(y if i != 5 else x).save(b / f"{i:02d}.png")  # pair 05 identical
    if manifests:
        for root in (a, b):
            write_manifest(root, Manifest(entries=[
                ManifestEntry(prompt_id=f"p{i}", prompt=f"a photo of thing {i}", seed=i, height=32, width=32,
                              file=f"{i:02d}.png",
                              sha256=hashlib.sha256((root / f"{i:02d}.png").read_bytes()).hexdigest())
                for i in range(N_PAIRS)]))
        return a, b
    bad = b / "07.png"
    bad.write_bytes(bad.read_bytes()[:60])  # unreadable on the worker: a pair error, the run goes on
    return a, b


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit.script, to write the TorchScript file
def test_ray_quality_equals_single_process(ray_cluster, tmp_path: Path, capsys) -> None:
    import torch

    a, b = _runs(tmp_path)
    inc = _fake_inception(tmp_path / "fake-inception.pt")
    common = ["quality", str(a), str(b), "--fid", "--inception", str(inc), "--no-ms-ssim", "--allow-missing"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the actors' thread count: torch results depend on it
    try:
        assert main([*common, "--workers", "1", "--json", str(tmp_path / "one.json")]) == 0
    finally:
        torch.set_num_threads(threads)
    assert main([*common, "--ray", "local", "--ray-actors", "2", "--json", str(tmp_path / "ray.json")]) == 0
    out = capsys.readouterr().out
    assert "distributed: 2 Ray actor(s)" in out
    one = json.loads((tmp_path / "one.json").read_text())
    ray = json.loads((tmp_path / "ray.json").read_text())

    d = ray.pop("distributed")
    assert one.pop("distributed") is None
    assert d["actors"] == 2 and d["threads_per_actor"] == 1 and d["nodes"] == ["127.0.0.1"] and d["shards"] == 8
    # the unreadable file is the same pair error, and the other pairs are all there, in the same order
    assert [e["key"] for e in ray["errors"]] == ["07.png"] and ray["errors"] == one["errors"]
    assert "cannot decode image" in ray["errors"][0]["problem"]
    assert [p["key"] for p in ray["pairs"]] == [f"{i:02d}.png" for i in range(N_PAIRS) if i != 7]
    assert ray["pairs"] == one["pairs"]  # per-pair PSNR/SSIM (and every other field) exactly equal
    assert ray["summaries"] == one["summaries"] and ray["n_identical"] == one["n_identical"] == 1
    fd, fo = ray.pop("distribution"), one.pop("distribution")
    assert fd["n_baseline"] == fo["n_baseline"] == N_PAIRS - 1 and fd["feature_dim"] == FEATURES
    assert fo["fid"] > 0.1  # not a degenerate pair of sets
    assert abs(fd["fid"] - fo["fid"]) <= 1e-9 * abs(fo["fid"])
    assert abs(fd["kid_mean"] - fo["kid_mean"]) <= 1e-9 * abs(fo["kid_mean"])
    assert fd["kid_std"] == pytest.approx(fo["kid_std"], rel=1e-9)
    assert ray == one  # nothing else differs: settings, warnings, gates

    # the reference: FID from numpy on the features of the same images computed here
    from PIL import Image
    from scipy import linalg

    from diffbench.quality.distribution import load_inception

    fx = load_inception(inc)
    keys = [p["key"] for p in one["pairs"]]
    fa = np.concatenate([fx(np.asarray(Image.open(a / k))[None]) for k in keys])
    fb = np.concatenate([fx(np.asarray(Image.open(b / k))[None]) for k in keys])
    s1, s2 = np.cov(fa, rowvar=False), np.cov(fb, rowvar=False)
    ref = float(((fa.mean(0) - fb.mean(0)) ** 2).sum() + np.trace(s1 + s2 - 2 * linalg.sqrtm(s1 @ s2).real))
    assert fo["fid"] == pytest.approx(ref, rel=1e-6)


def test_missing_ray_extra_exits_3_naming_it(tmp_path: Path, monkeypatch, capsys) -> None:
    import sys

    a, b = _runs(tmp_path)
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    assert main(["quality", str(a), str(b), "--no-ms-ssim", "--ray", "local"]) == 3
    err = " ".join(capsys.readouterr().err.split())
    assert "--ray needs the ray extra" in err and ".[ray]" in err and "Traceback" not in err


def test_ray_clip_and_lpips_equal_single_process(ray_cluster, tmp_path: Path) -> None:
    """CLIP scores and LPIPS come back per pair (models loaded on the actors from the same files): the paired Δ
    statistics and LPIPS summaries are computed from the same values."""
    import torch
    from tests.quality.conftest import make_random_alexnet_state, make_tiny_clip

    a, b = _runs(tmp_path, manifests=True)
    clip = make_tiny_clip(tmp_path / "clip")
    alex = tmp_path / "alexnet.pth"
    torch.save(make_random_alexnet_state(0), alex)
    common = ["quality", str(a), str(b), "--clip", str(clip), "--lpips", "--lpips-backbone", str(alex),
              "--no-ms-ssim"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main([*common, "--workers", "1", "--json", str(tmp_path / "one.json")]) == 0
    finally:
        torch.set_num_threads(threads)
    assert main([*common, "--ray", "local", "--ray-actors", "2", "--json", str(tmp_path / "ray.json")]) == 0
    one = json.loads((tmp_path / "one.json").read_text())
    ray = json.loads((tmp_path / "ray.json").read_text())
    assert ray.pop("distributed")["actors"] == 2 and one.pop("distributed") is None
    assert one["pairing"] == "manifest" and len(one["pairs"]) == N_PAIRS
    assert sum(p["metrics"]["clip_baseline"] > 0 for p in one["pairs"]) >= 3  # not all clamped at 0
    assert sum(p["metrics"]["lpips"] > 0 for p in one["pairs"]) == N_PAIRS - 1  # all but the identical pair
    for pr, po in zip(ray["pairs"], one["pairs"], strict=True):
        assert pr["metrics"]["lpips"] == pytest.approx(po["metrics"]["lpips"], rel=1e-9, abs=1e-12)
        for k in ("clip_baseline", "clip_candidate", "clip_delta"):
            assert pr["metrics"][k] == pytest.approx(po["metrics"][k], rel=1e-9, abs=1e-12)
    assert ray["paired"]["clip"]["n"] == N_PAIRS and ray["settings"] == one["settings"]
    assert ray["summaries"]["lpips"] == one["summaries"]["lpips"]
    assert ray["paired"]["clip"]["mean_delta"] == pytest.approx(one["paired"]["clip"]["mean_delta"], rel=1e-9,
                                                                abs=1e-12)


class _DiesOnUse:
    """A feature extractor that kills its process when called (shipped by value to the actors)."""

    name = "dies"
    dim = FEATURES

    def __call__(self, images: np.ndarray) -> np.ndarray:
        import os

        os._exit(1)


def test_an_actor_that_dies_is_actor_died_exit_5(ray_cluster, tmp_path: Path) -> None:
    import ray

    from diffbench.distributed.cluster import ActorDied
    from diffbench.distributed.quality import RayPairs
    from diffbench.quality.compare import compare_dirs
    from diffbench.quality.models import QualityOptions

    from .test_cluster import by_value

    by_value(__name__)
    a, b = _runs(tmp_path)
    with pytest.raises(ActorDied, match="a quality actor died") as ei:
        compare_dirs(a, b, QualityOptions(ms_ssim=False, fid=True), feature_extractor=_DiesOnUse(),
                     executor=RayPairs(ray_cluster, actors=2))
    assert ei.value.exit_code == 5
    assert not [n for n in ray.util.list_named_actors() if n.startswith("diffbench-quality-")]  # all released


@pytest.mark.parametrize(("n", "actors"), [(12, 2), (1, 4), (7, 3), (100, 1), (0, 2)])
def test_shards_cover_the_pairs_contiguously_and_evenly(n: int, actors: int) -> None:
    from diffbench.distributed.quality import SHARDS_PER_ACTOR, shards

    cuts = shards(n, actors)
    assert [i for s, e in cuts for i in range(s, e)] == list(range(n))
    sizes = [e - s for s, e in cuts]
    assert all(sz > 0 for sz in sizes) and (not sizes or max(sizes) - min(sizes) <= 1)
    assert len(cuts) == min(n, actors * SHARDS_PER_ACTOR)


class _DiesWhenFlagged:
    """The fake Inception's features, but the process dies at its fifth call (third pair) while ``flag`` exists (shipped by
    value to the actors; the same ``name`` as a healthy run, so the pair ids match)."""

    name = "fake-inception"
    dim = FEATURES

    def __init__(self, inception: Path, flag: Path) -> None:
        self.inception, self.flag, self.calls = str(inception), str(flag), 0

    def __call__(self, images: np.ndarray) -> np.ndarray:
        import os

        from diffbench.quality.distribution import load_inception

        self.calls += 1
        if self.calls >= 5 and os.path.exists(self.flag):
            os._exit(1)
        return load_inception(Path(self.inception))(images)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_ray_state_keeps_scored_pairs_and_the_rerun_scores_only_the_rest(ray_cluster, tmp_path: Path) -> None:
    from diffbench.distributed.cluster import ActorDied
    from diffbench.distributed.quality import RayPairs
    from diffbench.distributed.taskstore import TASKS_DIR
    from diffbench.quality.compare import compare_dirs
    from diffbench.quality.models import QualityOptions

    from .test_cluster import by_value

    by_value(__name__)
    a, b = _runs(tmp_path, manifests=True)
    inc = _fake_inception(tmp_path / "fake-inception.pt")
    flag = tmp_path / "die"
    flag.write_text("1")
    state = tmp_path / "state"
    opt = QualityOptions(ms_ssim=False, fid=True)
    with pytest.raises(ActorDied, match=r"pairs are scored and kept in .*state"):
        compare_dirs(a, b, opt, feature_extractor=_DiesWhenFlagged(inc, flag),
                     executor=RayPairs(ray_cluster, actors=2, state=state))
    kept = len(list((state / TASKS_DIR).glob("*.json")))
    assert 0 < kept < N_PAIRS  # each actor died at its third pair; the shards that came back are kept
    flag.unlink()
    resumed = compare_dirs(a, b, opt, feature_extractor=_DiesWhenFlagged(inc, flag),
                           executor=RayPairs(ray_cluster, actors=2, state=state))
    assert resumed.distributed.resumed == kept and len(list((state / TASKS_DIR).glob("*.json"))) == N_PAIRS
    one = compare_dirs(a, b, opt.model_copy(update={"workers": 1}), feature_extractor=_DiesWhenFlagged(inc, flag))
    assert [p.model_dump() for p in resumed.pairs] == [p.model_dump() for p in one.pairs]  # pairing order kept
    assert resumed.distribution.fid == pytest.approx(one.distribution.fid, rel=1e-9)
    again = compare_dirs(a, b, opt, feature_extractor=_DiesWhenFlagged(inc, flag),
                         executor=RayPairs(ray_cluster, actors=2, state=state))
    assert again.distributed.resumed == N_PAIRS and again.distributed.actors == 0  # nothing left: no actor started
    assert again.distribution.fid == pytest.approx(one.distribution.fid, rel=1e-9)
    # a corrupt kept pair (here: not base64) is scored again, never loaded (reproduction: binascii.Error traceback)
    victim = sorted((state / TASKS_DIR).glob("*.json"))[0]
    rec = json.loads(victim.read_text())
    rec["data"]["outcome"] = "not base64!!"
    victim.write_text(json.dumps(rec))
    healed = compare_dirs(a, b, opt, feature_extractor=_DiesWhenFlagged(inc, flag),
                          executor=RayPairs(ray_cluster, actors=1, state=state))
    assert healed.distributed.resumed == N_PAIRS - 1
    assert healed.distribution.fid == pytest.approx(one.distribution.fid, rel=1e-9)


@pytest.mark.parametrize(("actors", "threads", "named"), [
    (20, 1, r"--ray-actors 20 \(\d+ used: one per shard of 12 pair\(s\)\): \d+ actors need"),
    (None, 64, r"--ray-actors \(default: the cluster's 2 CPUs / --ray-threads 64\): 1 actors need 64 CPUs.*"
               r"fewer --ray-threads per actor"),
])
def test_a_refused_pool_names_what_the_user_typed(ray_cluster, tmp_path: Path, actors, threads, named) -> None:
    """Reproduction (user trial): ``--ray-actors 1000`` on 16 pairs was refused as "--ray-actors 16", and
    ``--ray-threads 64`` as "--ray-actors 1 ... fewer --threads", options the user had not typed."""
    from diffbench.distributed.quality import RayPairs
    from diffbench.errors import UsageError
    from diffbench.quality.compare import compare_dirs
    from diffbench.quality.models import QualityOptions

    a, b = _runs(tmp_path)
    with pytest.raises(UsageError, match=named):
        compare_dirs(a, b, QualityOptions(ms_ssim=False), executor=RayPairs(ray_cluster, actors=actors,
                                                                             threads=threads))


def test_ctrl_c_says_how_many_pairs_ray_state_kept(ray_cluster, tmp_path: Path, monkeypatch, capsys) -> None:
    """Reproduction (user trial): Ctrl-C during ``quality --ray --ray-state DIR`` exited 130 silently, though 150
    pairs were kept there (the rerun used them)."""
    from diffbench.cli.main import main
    from diffbench.distributed.taskstore import TASKS_DIR, TaskRecord, TaskStore
    from diffbench.quality import compare

    a, b = _runs(tmp_path)
    state = tmp_path / "state"
    store = TaskStore(state)
    for i in range(3):
        store.write(TaskRecord(id=f"{i:020d}", kind="quality-pair", data={}))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(compare, "compare_dirs", interrupted)
    assert len(list((state / TASKS_DIR).glob("*.json"))) == 3
    assert main(["quality", str(a), str(b), "--no-ms-ssim", "--ray", "local", "--ray-state", str(state)]) == 130
    assert f"interrupted: 3 scored pair(s) are kept in {state}" in capsys.readouterr().err.replace("\n", " ")
    assert main(["quality", str(a), str(b), "--no-ms-ssim"]) == 130
    assert "no report was written" in capsys.readouterr().err
