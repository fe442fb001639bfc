"""LoRA adapters on the engines (diffbench.engines.adapters): declared at start, one active per request,
a swap measured when the active adapter or its scale changes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from diffbench.engines.adapters import SIM_SWAP_S, parse_adapters
from diffbench.engines.base import GenerationRequest
from diffbench.engines.config import EngineConfig, SimParams
from diffbench.engines.registry import create_engine
from diffbench.errors import ShapeError, UsageError


def _req(adapter: str | None, scale: float = 1.0, seed: int = 0) -> GenerationRequest:
    return GenerationRequest(prompt="a red fox", height=64, width=64, steps=2, seed=seed, adapter=adapter,
                             adapter_scale=scale)


@pytest.fixture(scope="module")
def adapters(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from tests.lora_adapters import make_adapters

    return make_adapters(tmp_path_factory.mktemp("loras"))


def test_parse_adapters_checks_each_directory(tmp_path: Path, adapters: dict[str, str]) -> None:
    assert parse_adapters([f"a={adapters['a']}", f" b = {adapters['b']} "]) == {
        "a": str(Path(adapters["a"]).resolve()), "b": str(Path(adapters["b"]).resolve())}
    empty = tmp_path / "empty"
    empty.mkdir()
    for spec, fragment in ((["nodir"], "give NAME=DIR"), ([f"a b={adapters['a']}"], "the name may hold"),
                           ([f"a={adapters['a']}", f"a={adapters['b']}"], "given twice"),
                           ([f"a={tmp_path / 'missing'}"], "no such directory"),
                           ([f"a={empty}"], "no LoRA weights in it")):
        with pytest.raises(UsageError, match=fragment):
            parse_adapters(spec)


def test_tiny_flux_switches_adapters_per_request(adapters: dict[str, str]) -> None:
    eng = create_engine(EngineConfig(engine="diffusers", model="tiny-flux", adapters=parse_adapters(
        [f"{k}={v}" for k, v in adapters.items()])))
    eng.start()
    try:
        runs = [(name, eng.generate(_req(name))) for name in (None, "a", "a", "b", None)]
        with pytest.raises(ShapeError, match="'c' is not loaded; loaded: a, b"):
            eng.generate(_req("c"))
    finally:
        eng.stop()
    images = [r.images for _, r in runs]
    swaps = [r.extra["adapter_swap_s"] for _, r in runs]
    # each adapter changes the picture, differently; the same adapter repeats it; none gives the base back
    assert not np.array_equal(images[0], images[1]) and not np.array_equal(images[1], images[3])
    assert not np.array_equal(images[0], images[3])
    assert np.array_equal(images[1], images[2]) and np.array_equal(images[0], images[4])
    # a swap is measured when the active adapter changes (none → a, a → b, b → none), never on a repeat
    assert swaps[0] == 0.0 and swaps[2] == 0.0
    assert all(s > 0 for s in (swaps[1], swaps[3], swaps[4]))


def test_the_sim_swaps_at_its_stated_cost_and_changes_the_picture() -> None:
    eng = create_engine(EngineConfig(engine="sim", adapters={"a": "/a", "b": "/b"},
                                     sim=SimParams(jitter=0.0, tail_prob=0.0, compile_s=0.0)))
    eng.start()
    runs = [eng.generate(_req(name, scale)) for name, scale in ((None, 1.0), ("a", 1.0), ("a", 1.0), ("a", 0.5),
                                                                 ("b", 1.0))]
    assert [r.extra["adapter_swap_s"] for r in runs] == [0.0, SIM_SWAP_S, 0.0, SIM_SWAP_S, SIM_SWAP_S]
    assert np.array_equal(runs[1].images, runs[2].images)
    assert len({r.images.tobytes() for r in (runs[0], runs[1], runs[3], runs[4])}) == 4
    with pytest.raises(ShapeError, match="not loaded"):
        eng.generate(_req("c"))


def test_an_engine_without_adapters_refuses_a_request_naming_one() -> None:
    eng = create_engine(EngineConfig(engine="sim"))
    eng.start()
    with pytest.raises(ShapeError, match="loads none"):
        eng.generate(_req("a"))
    assert "adapter_swap_s" not in eng.generate(_req(None)).extra  # nothing reported without adapters


def test_the_fingerprint_names_each_adapter_by_its_content(tmp_path: Path, adapters: dict[str, str]) -> None:
    """The sim and diffusers engines state their adapters' content hashes; the deployment fingerprint carries
    them (absent without adapters, so a deployment without LoRA keeps its fingerprint), and other weights
    under the same name give another fingerprint."""
    import hashlib
    import shutil

    from diffbench.core.env import capture_env
    from diffbench.engines.fingerprint import deployment_fingerprint

    def digest(d: str) -> str:  # the weight and config files present, in name order, each name then bytes
        h = hashlib.sha256()
        for f in sorted(p for p in Path(d).iterdir() if p.name.endswith(".safetensors") or p.name == "adapter_config.json"):
            h.update(f.name.encode() + b"\0" + f.read_bytes())
        return h.hexdigest()[:16]

    env = capture_env()
    plain = create_engine(EngineConfig(engine="sim", sim=SimParams(jitter=0.0))).start()
    assert "adapters" not in deployment_fingerprint(plain, env)
    info = create_engine(EngineConfig(engine="sim", sim=SimParams(jitter=0.0), adapters=adapters)).start()
    fp = deployment_fingerprint(info, env)
    assert fp["adapters"] == {name: digest(d) for name, d in sorted(adapters.items())}
    other = tmp_path / "b2"
    shutil.copytree(adapters["b"], other)
    weights = next(p for p in other.iterdir() if p.name.endswith(".safetensors"))
    weights.write_bytes(weights.read_bytes()[:-1] + bytes([weights.read_bytes()[-1] ^ 1]))
    swapped = create_engine(EngineConfig(engine="sim", sim=SimParams(jitter=0.0),
                                         adapters={**adapters, "b": str(other)})).start()
    fp2 = deployment_fingerprint(swapped, env)
    assert fp2["adapters"]["a"] == fp["adapters"]["a"] and fp2["adapters"]["b"] != fp["adapters"]["b"]
