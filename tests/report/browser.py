"""Headless Chromium for the report tests (Debian ``chromium`` + ``chromium-driver``, Python ``selenium``).

``.ci/run`` installs both. Where Chromium is missing the browser tests skip with the reason, except under
CI (``CI`` set), where a missing browser is a failure: the acceptance needs the pages opened for real.

Every page is opened from a ``file://`` URL with ``--host-resolver-rules=MAP * ~NOTFOUND`` (any name lookup
fails), and :func:`open_page` also checks the HTML text for ``http(s)://`` references and the DevTools
network log for ``http(s)`` requests, and fails on any SEVERE console message.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
REMOTE_REF = re.compile(r"""(?:src|href|action|poster|data)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?(?:https?:)?//""",
                        re.IGNORECASE)


def missing_reason() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import selenium  # noqa: F401
    except ModuleNotFoundError:
        return "selenium is not installed (pip install -e '.[test]')"
    for exe in (CHROMIUM, CHROMEDRIVER):
        if not (os.path.exists(exe) or shutil.which(os.path.basename(exe))):
            return f"{exe} missing: apt-get install -y chromium chromium-driver (what .ci/run does)"
    return None


def skip_or_fail_without_browser() -> None:
    reason = missing_reason()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"browser tests must run in CI: {reason}")
    pytest.skip(reason)


@dataclass
class Browser:
    driver: Any
    download_dir: Path


def start_browser(download_dir: Path) -> Browser:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
                "--host-resolver-rules=MAP * ~NOTFOUND", "--disable-dev-shm-usage", "--hide-scrollbars"):
        opts.add_argument(arg)
    exe = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    if exe:
        opts.binary_location = exe
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    download_dir.mkdir(parents=True, exist_ok=True)
    opts.add_experimental_option("prefs", {"download.default_directory": str(download_dir),
                                           "download.prompt_for_download": False,
                                           "download.directory_upgrade": True})
    drv_path = CHROMEDRIVER if os.path.exists(CHROMEDRIVER) else shutil.which("chromedriver")
    driver = webdriver.Chrome(service=Service(drv_path), options=opts)
    driver.execute_cdp_cmd("Browser.setDownloadBehavior",
                           {"behavior": "allow", "downloadPath": str(download_dir)})
    return Browser(driver=driver, download_dir=download_dir)


@dataclass
class OpenedPage:
    url: str
    console: list[dict[str, Any]]
    requests: list[str]


def open_page(browser: Browser, html_path: Path) -> OpenedPage:
    """Open a report from disk and assert it is self-contained and error-free.

    Asserts: no remote reference in the HTML text, no SEVERE console entry, no ``http(s)`` request in the
    DevTools network log. Returns what was seen (console entries, every requested URL).
    """
    text = html_path.read_text(encoding="utf-8")
    remote = REMOTE_REF.findall(text)
    assert not remote, f"{html_path} references the network: {remote[:3]}"
    d = browser.driver
    d.get_log("browser")  # drop entries of earlier pages
    d.get_log("performance")
    url = html_path.resolve().as_uri()
    d.get(url)
    d.execute_script("return document.readyState")
    console = d.get_log("browser")
    severe = [e for e in console if e.get("level") == "SEVERE"]
    assert not severe, f"console errors on {html_path.name}: {severe}"
    requests = []
    for entry in d.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            requests.append(msg["params"]["request"]["url"])
    fetched = [u for u in requests if u.startswith(("http://", "https://"))]
    assert not fetched, f"{html_path.name} fetched from the network: {fetched[:3]}"
    return OpenedPage(url=url, console=console, requests=requests)


def screenshot_nonblank(browser: Browser, name: str | None = None) -> bytes:
    """Take a viewport screenshot and assert it is not blank (enough distinct, non-background pixels).

    With ``DIFFBENCH_SCREENSHOT_DIR`` set, also save it there as ``<name>.png`` (how docs/ is refreshed:
    ``DIFFBENCH_SCREENSHOT_DIR=docs pytest tests/report -k browser``).
    """
    import numpy as np
    from PIL import Image

    png = browser.driver.get_screenshot_as_png()
    img = np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=np.float64)
    background = np.median(img)
    share = float(np.mean(np.abs(img - background) > 24))
    assert img.std() > 8 and share > 0.03, f"blank screenshot (std {img.std():.1f}, ink share {share:.3f})"
    out_dir = os.environ.get("DIFFBENCH_SCREENSHOT_DIR")
    if out_dir and name:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / f"{name}.png").write_bytes(png)
    return png


def blocks(browser: Browser, kind: str | None = None) -> dict[str, Any]:
    """The page's ``data-block`` elements by id (optionally of one ``data-kind``)."""
    from selenium.webdriver.common.by import By

    sel = f'[data-block][data-kind="{kind}"]' if kind else "[data-block]"
    return {e.get_attribute("data-block"): e for e in browser.driver.find_elements(By.CSS_SELECTOR, sel)}
