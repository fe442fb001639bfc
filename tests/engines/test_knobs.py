"""Knob value parsing and range checks, the knob each cache axis sets, and the unsupported-pipeline error."""

from __future__ import annotations

import pytest

from diffbench.engines.knobs import (
    CACHE_AXES,
    cache_knob,
    check_cache_supported,
    describe_cache,
    parse_values,
)
from diffbench.errors import UsageError


def test_values_are_canonical():
    assert parse_values("first-block", "0.05, 0.10,0.2") == ["0.05", "0.1", "0.2"]
    assert parse_values("taylorseer", "1,3") == ["1", "3"]
    assert parse_values("compile", "off,ON") == ["off", "on"]
    assert describe_cache("first-block", "0.1") == "first-block(threshold=0.1)"


@pytest.mark.parametrize(
    ("axis", "text", "match"),
    [
        ("first-block", "-0.1", ">= 0"),
        ("magcache", "abc", "number"),
        ("first-block", "nan", "finite"),
        ("taylorseer", "0", ">= 1"),
        ("pab", "1.5", "integer"),
        ("precision", "int3", "precision must be"),
        ("first-block", "0.1,0.10", "duplicate"),
        ("first-block", " , ", "empty"),
    ],
)
def test_bad_values(axis, text, match):
    with pytest.raises(UsageError, match=match):
        parse_values(axis, text)


def test_cache_knob_names_the_config_attribute_of_each_axis():
    assert {a: cache_knob(a) for a in CACHE_AXES} == {
        "first-block": "threshold",
        "taylorseer": "cache_interval",
        "magcache": "threshold",
        "fastercache": "spatial_attention_block_skip_range",
        "pab": "spatial_attention_block_skip_range",
    }
    with pytest.raises(UsageError, match="unknown cache axis 'precision'"):
        cache_knob("precision")


@pytest.mark.slow
def test_cache_on_unet_pipeline_names_pipeline_and_supported_options():
    from diffbench.engines.tiny import build_tiny

    pipe = build_tiny("tiny-sdxl")
    with pytest.raises(UsageError) as exc:
        check_cache_supported(pipe, "first-block", "tiny-sdxl")
    msg = str(exc.value)
    assert "StableDiffusionXLPipeline" in msg and "UNet2DConditionModel" in msg
    assert "--option precision" in msg and "compile" in msg


@pytest.mark.slow
def test_magcache_needs_flux_ratios():
    from diffbench.engines.tiny import build_tiny

    with pytest.raises(UsageError, match="FLUX_MAG_RATIOS"):
        check_cache_supported(build_tiny("tiny-wan"), "magcache", "tiny-wan")
    check_cache_supported(build_tiny("tiny-wan"), "first-block", "tiny-wan")  # supported: no error
