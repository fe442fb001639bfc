"""The one warm-up key of bench, load and serve: what splits it, its label, and that a bench request and a
load workload entry of the same request give the same key."""

from __future__ import annotations

import pytest

from diffbench.engines.base import GenerationRequest
from diffbench.load.client.workload import ShapeMix
from diffbench.workload.warmkey import WarmupKey, cfg_state


@pytest.mark.parametrize(("guidance", "want"), [(None, None), (0.0, False), (1.0, False), (1.5, True), (7.0, True)])
def test_cfg_is_on_above_one_as_diffusers_decides_it(guidance: float | None, want: bool | None) -> None:
    assert cfg_state(guidance) is want


def test_every_field_splits_the_key_and_names_itself_in_the_label() -> None:
    base = WarmupKey(width=64, height=48, frames=None, steps=2)
    assert base.label() == "64x48 s2" and base.suffix() == ""
    variants = {
        "64x48 s2 n4": WarmupKey(64, 48, None, 2, batch=4),
        "64x48 s2 cfg": WarmupKey(64, 48, None, 2, cfg=True),
        "64x48 s2 nocfg": WarmupKey(64, 48, None, 2, cfg=False),
        "64x48 s2 neg": WarmupKey(64, 48, None, 2, negative=True),
        "64x48 s2 edit@0.6": WarmupKey(64, 48, None, 2, edit=True, strength=0.6),
        "64x48 s2 inpaint@0.5": WarmupKey(64, 48, None, 2, edit=True, mask=True, strength=0.5),
        "64x48 s2 edit": WarmupKey(64, 48, None, 2, edit=True),
        "64x48 s2 lora=style": WarmupKey(64, 48, None, 2, adapter="style", adapter_scale=1.0),
        "64x48 s2 lora=style@0.5": WarmupKey(64, 48, None, 2, adapter="style", adapter_scale=0.5),
        "64x48 f9 s2": WarmupKey(64, 48, 9, 2),
        "64x48 s3": WarmupKey(64, 48, None, 3),
    }
    for label, key in variants.items():
        assert key.label() == label and key != base
    assert len({*variants.values(), base}) == len(variants) + 1


def test_guidance_values_on_the_same_side_of_one_share_a_key() -> None:
    assert ShapeMix(size="64x64", steps=2, guidance=3.5).warmup_key() == ShapeMix(size="64x64", steps=2, guidance=7).warmup_key()
    assert ShapeMix(size="64x64", steps=2, guidance=3.5).warmup_key() != ShapeMix(size="64x64", steps=2, guidance=1).warmup_key()


@pytest.mark.parametrize("fields", [
    {},
    {"batch": 4},
    {"guidance": 3.5, "negative_prompt": "blurry"},
    {"guidance": 1.0},
    {"adapter": "style", "adapter_scale": 0.5},
])
def test_bench_and_load_build_the_same_key_for_the_same_request(fields: dict[str, object]) -> None:
    req = GenerationRequest(prompt="a", width=64, height=48, steps=2, **fields)  # type: ignore[arg-type]
    mix_fields = {("n" if k == "batch" else k): v for k, v in fields.items()}
    mix = ShapeMix(width=64, height=48, steps=2, **mix_fields)  # type: ignore[arg-type]
    assert req.warmup_key == mix.warmup_key()
    assert mix.label() == req.warmup_key.label()


def test_an_edit_request_and_an_edit_workload_entry_share_the_key() -> None:
    req = GenerationRequest(prompt="a", width=64, height=64, steps=4, image=b"png", mask=b"m", strength=0.5)
    mix = ShapeMix(size="64x64", steps=4)
    assert req.warmup_key == mix.warmup_key(edit=True, mask=True, strength=0.5)
    assert req.warmup_key.label() == "64x64 s4 inpaint@0.5"
    assert mix.label() == "64x64 s4"  # a workload entry alone is text-to-image


def test_existing_load_labels_are_unchanged_for_plain_entries() -> None:
    assert ShapeMix(size="512x384", steps=8).label() == "512x384 s8"
    assert ShapeMix(size="832x480", steps=30, frames=33).label() == "832x480 f33 s30"
    assert ShapeMix(size="512x384", steps=8, adapter="style").label() == "512x384 s8 lora=style"
    assert ShapeMix(size="512x384", steps=8, adapter="style", adapter_scale=0.5).label() == "512x384 s8 lora=style@0.5"
