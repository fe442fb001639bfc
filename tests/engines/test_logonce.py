"""Prompt-truncation warnings pass once per kind; other records pass untouched."""

from __future__ import annotations

import logging

from diffbench.engines.logonce import SUFFIX, OnceFilter


def _rec(msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("diffusers.pipelines.flux", logging.WARNING, __file__, 1, msg, args, None)


def test_each_kind_once_other_records_always():
    f = OnceFilter()
    clip = "The following part of your input was truncated because CLIP can only handle sequences up to 77 tokens: %s"
    t5 = "The following part of your input was truncated because `max_sequence_length` is set to  64 tokens: %s"
    first = _rec(clip, "['a']")
    assert f.filter(first) and first.getMessage().endswith(SUFFIX) and "['a']" in first.getMessage()
    assert not f.filter(_rec(clip, "['b']"))  # same kind, other removed text: dropped
    assert f.filter(_rec(t5, "['']")) and not f.filter(_rec(t5, "['x']"))
    tok = "Token indices sequence length is longer than the specified maximum sequence length for this model (78 > 77)"
    assert f.filter(_rec(tok)) and not f.filter(_rec(tok))
    other = _rec("something else happened")
    assert f.filter(other) and f.filter(_rec("something else happened"))
    assert other.getMessage() == "something else happened"


def test_the_vae_upcast_record_of_img2img_is_shown_once() -> None:
    """Reproduction: every tiny-sdxl edit logged "There are modules in AutoencoderKL that should be kept in
    float32: [] ..." (the img2img pipeline upcasts its VAE on each call)."""
    import logging

    f = OnceFilter()
    msg = "There are modules in AutoencoderKL that should be kept in float32: []. Casting directly"
    recs = [logging.LogRecord("diffusers", logging.WARNING, __file__, 1, msg, None, None) for _ in range(3)]
    assert [f.filter(r) for r in recs] == [True, False, False]
