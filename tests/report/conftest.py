"""Fixtures of the report tests: one headless Chromium per session (see ``browser.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.report.browser import Browser, skip_or_fail_without_browser, start_browser


@pytest.fixture(scope="session")
def chrome(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    skip_or_fail_without_browser()
    b = start_browser(tmp_path_factory.mktemp("downloads"))
    try:
        yield b
    finally:
        b.driver.quit()
