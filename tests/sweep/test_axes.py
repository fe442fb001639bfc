"""The sweep's one axis from --cache/--option, and the fingerprint field each axis changes."""

from __future__ import annotations

import pytest

from diffbench.engines.knobs import CACHE_AXES, OPTION_AXES
from diffbench.errors import UsageError
from diffbench.sweep.axes import AXIS_FIELD, axis_name


def test_axis_name():
    assert axis_name("pab", None) == "pab"
    assert axis_name(None, "precision") == "precision"
    for cache, option in ((None, None), ("pab", "compile"), ("teacache", None), (None, "sparsity")):
        with pytest.raises(UsageError):
            axis_name(cache, option)


def test_http_sweep_may_name_any_lower_case_server_option():
    assert axis_name(None, "cfg-parallel", any_option=True) == "cfg-parallel"
    with pytest.raises(UsageError, match="lower case"):
        axis_name(None, "CFG", any_option=True)


def test_every_axis_changes_one_fingerprint_field():
    assert set(AXIS_FIELD) == set(CACHE_AXES) | set(OPTION_AXES)
    assert {AXIS_FIELD[a] for a in CACHE_AXES} == {"cache"}
    assert AXIS_FIELD["attention-backend"] == "attention_backend"
