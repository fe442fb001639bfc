"""The one shape grammar: sizes, sizes with frames, labels, and the neutral SizeSyntaxError."""

from __future__ import annotations

import pytest

from diffbench.core.shapes import SizeSyntaxError, parse_size, parse_size_frames, shape_label


@pytest.mark.parametrize("text, want", [("1024x768", (1024, 768)), (" 832 X 480 ", (832, 480)),
                                        ("512×512", (512, 512)), ("0x0", (0, 0))])
def test_parse_size_accepts_width_first(text: str, want: tuple[int, int]) -> None:
    assert parse_size(text) == want


@pytest.mark.parametrize("text", ["", "512", "512x", "x512", "512x512x3", "-1x5", "1.5x2", "５１２x512", "axb"])
def test_parse_size_refuses_with_the_text_and_reason(text: str) -> None:
    with pytest.raises(SizeSyntaxError) as info:
        parse_size(text)
    assert isinstance(info.value, ValueError)
    assert info.value.text == text and info.value.reason == "not WIDTHxHEIGHT"


def test_parse_size_minimum() -> None:
    assert parse_size("1x1", minimum=1) == (1, 1)
    with pytest.raises(SizeSyntaxError, match=">= 1"):
        parse_size("0x5", minimum=1)


def test_parse_size_frames() -> None:
    assert parse_size_frames("832x480x33") == (832, 480, 33)
    assert parse_size_frames("256x256") == (256, 256, None)
    for bad in ("832x480x0", "0x480", "832x480x33x2", "832x"):
        with pytest.raises(SizeSyntaxError):
            parse_size_frames(bad)


def test_labels_in_both_styles() -> None:
    assert shape_label(256, 256) == "256x256"
    assert shape_label(128, 128, 9) == "128x128f9"
    assert shape_label(256, 256, None, 2) == "256x256b2"
    assert shape_label(256, 256, steps=8, human=True) == "256x256 s8 b1"
    assert shape_label(832, 480, 33, 1, steps=30, human=True) == "832x480 f33 s30 b1"
    assert shape_label(512, 384, None, None, steps=8, human=True) == "512x384 s8"
    assert shape_label(512, 384, 0, 1, steps=8, human=True) == "512x384 s8 b1"


def test_parse_label_inverts_the_metric_label() -> None:
    from diffbench.core.shapes import parse_label

    for args in ((256, 256, None, 1), (128, 128, 9, 1), (256, 256, None, 2), (64, 32, 5, 3)):
        assert parse_label(shape_label(*args)) == args
    for bad in ("256x256b1", "0x5", "other", "256x256 s8"):
        with pytest.raises(SizeSyntaxError):
            parse_label(bad)
