"""Shared test configuration: offline by default, tiny engines cached per session."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")


@pytest.fixture
def one_line_error():
    """Check a refused command: the exit code, one ``error: ...`` line on stderr, and message fragments."""

    def check(rc: int, err: str, code: int, fragments) -> None:
        assert rc == code, err
        lines = [ln for ln in err.strip().splitlines() if ln]
        assert len(lines) == 1 and lines[0].startswith("error: "), err
        for frag in fragments:
            assert frag in err, (frag, err)

    return check
