"""Cache lookups and hits of a diffusers cache on tiny-flux, checked against an independent count."""

from __future__ import annotations

import pytest

pytest.importorskip("diffusers")

from diffbench.engines.base import GenerationRequest  # noqa: E402
from diffbench.engines.registry import EngineConfig, create_engine  # noqa: E402
from diffbench.errors import UsageError  # noqa: E402

pytestmark = pytest.mark.slow

STEPS = 5
REQ = GenerationRequest(prompt="a lighthouse", height=64, width=64, steps=STEPS)


@pytest.fixture(scope="module")
def engines():
    made = {}
    for threshold in ("0", "1e9"):
        e = create_engine(EngineConfig(model="tiny-flux", cache=f"first-block={threshold}"))
        e.start()
        made[threshold] = e
    yield made
    for e in made.values():
        e.stop()


def _last_block_computes(engine) -> list[int]:
    """An independent count: forwards of the last transformer block's first own-parameter child (that
    child runs only when the block's original forward ran, i.e. when the cache did not skip)."""
    blocks = engine.pipe.transformer.single_transformer_blocks or engine.pipe.transformer.transformer_blocks
    child = next(m for m in blocks[-1].modules() if m is not blocks[-1] and next(m.parameters(recurse=False), None) is not None)
    seen = [0]
    child.register_forward_pre_hook(lambda *a: seen.__setitem__(0, seen[0] + 1))
    return seen


@pytest.mark.parametrize("threshold", ["0", "1e9"])
def test_first_block_cache_counts(engines, threshold: str) -> None:
    engine = engines[threshold]
    assert engine.info().cache == f"first-block(threshold={format(float(threshold), '.10g')})"
    computes = _last_block_computes(engine)
    for _ in range(2):  # the cache state is reset between requests: same counts each time
        computes[0] = 0
        res = engine.generate(REQ)
        c = res.signals.cache
        assert c is not None and c.cache == "fbcache"
        assert c.lookups == res.stages.denoiser_calls == STEPS  # FLUX is guidance-distilled: 1 forward/step
        assert c.lookups - c.hits == computes[0]
        if threshold == "0":
            assert c.hits == 0  # nothing is ever below a threshold of 0
        else:
            assert c.hits == STEPS - 1  # only the first step (no residual yet) computes


def test_no_cache_reports_none_and_bad_cache_specs_are_refused() -> None:
    e = create_engine(EngineConfig(model="tiny-flux"))
    e.start()
    assert e.generate(REQ).signals.cache is None
    e.stop()
    for spec, frag in (("first-block", "AXIS=VALUE"), ("nope=1", "unknown cache"), ("first-block=-1", ">= 0")):
        with pytest.raises(UsageError, match=frag):
            create_engine(EngineConfig(model="tiny-flux", cache=spec)).start()


@pytest.mark.slow
@pytest.mark.parametrize("spec,short", [("taylorseer=2", "taylorseer"), ("pab=2", "pab")])
def test_attention_caches_count_one_decision_per_attention_call(spec: str, short: str) -> None:
    import functools

    engine = create_engine(EngineConfig(model="tiny-flux", cache=spec))
    engine.start()
    attns = [m for m in engine.pipe.transformer.modules() if type(m).__name__ == "FluxAttention"]
    ran = [0]
    for attn in attns:  # independent count: the attention processor runs only when attention is computed
        cls = type(attn.processor)

        @functools.wraps(cls.__call__)
        def counting(self, *a, __orig=cls.__call__, **k):
            ran[0] += 1
            return __orig(self, *a, **k)

        attn.processor.__class__ = type("Counting" + cls.__name__, (cls,), {"__call__": counting})
    engine.instrumentation.measure_flops = False  # the FLOP replay (one uncached forward) would run them too
    res = engine.generate(GenerationRequest(prompt="a", height=64, width=64, steps=8))
    c = res.signals.cache
    assert c.cache == short
    assert c.lookups == len(attns) * res.stages.denoiser_calls  # one decision per attention call
    assert 0 < c.hits < c.lookups
    assert c.lookups - c.hits == ran[0]
    engine.stop()
