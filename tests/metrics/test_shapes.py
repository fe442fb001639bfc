"""The shape label rule: WxH, WxHfF for video, suffix bB when batch > 1; allowlist or other."""

from __future__ import annotations

import pytest

from diffbench.errors import UsageError
from diffbench.metrics.shapes import ShapeAllowlist, parse_label, parse_shapes, shape_label


@pytest.mark.parametrize(("args", "label"), [
    ((256, 256, None, 1), "256x256"),
    ((832, 480, 33, 1), "832x480f33"),  # width first, as --size and the API's size field
    ((256, 256, None, 2), "256x256b2"),
    ((128, 128, 9, 4), "128x128f9b4"),
])
def test_label_and_its_inverse(args, label):
    assert shape_label(*args) == label
    assert parse_label(label) == args


def test_allowlist_maps_everything_else_to_other():
    allow = ShapeAllowlist(["256x256", "128x128f9"])
    assert allow.classify(256, 256) == "256x256"
    assert allow.classify(128, 128, 9) == "128x128f9"
    assert allow.classify(128, 128, 17) == "other" and allow.classify(256, 256, None, 2) == "other"
    assert allow.all == ("256x256", "128x128f9", "other")


def test_parse_shapes_canonicalises():
    assert parse_shapes(" 256X256, 128×128f9 ,64x64b2") == ("256x256", "128x128f9", "64x64b2")
    assert parse_shapes(["256x256", "64x64b2"]) == ("256x256", "64x64b2")


@pytest.mark.parametrize(("text", "fragment"), [
    ("", "is empty"),
    ("256", "not a shape label"),
    ("other", "not a shape label"),
    ("0x256", ">= 1"),
    ("64x64b1", "bB suffix only for B > 1"),
    ("64x64,64x64", "listed twice"),
])
def test_parse_shapes_bad(text, fragment):
    with pytest.raises(UsageError, match="--shapes") as exc:
        parse_shapes(text)
    assert fragment in str(exc.value)
