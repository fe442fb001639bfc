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


END_TO_END = ("e2e", "ray", "browser", "promtool")
"""Markers of the end-to-end groups; each implies ``slow`` (registered in pyproject.toml)."""


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects: the markers added here are seen by the selection
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the end-to-end tests that a fixture identifies (``chrome``: browser, ``ray_cluster``: ray), then add
    ``slow`` to every test of an end-to-end group, so ``pytest -m "not slow"`` leaves them all out."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if "chrome" in fixtures:
            item.add_marker(pytest.mark.browser)
        if "ray_cluster" in fixtures:
            item.add_marker(pytest.mark.ray)
        if any(item.get_closest_marker(m) for m in END_TO_END) and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
