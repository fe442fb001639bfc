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
