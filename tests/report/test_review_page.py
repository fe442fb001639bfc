"""The blind review page in headless Chromium, from real tiny-flux runs: judge every pair with the keyboard,
save the verdicts as a download, and score the downloaded file against the key.

Baseline: ``bench --model tiny-flux`` (64x64, 2 steps, float32); candidate: the same run in bfloat16 (a real
lossy change). The expected counts come from the keys pressed and the key file, computed here.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from scipy.stats import binomtest
from tests.report.browser import Browser, open_page, screenshot_nonblank

from diffbench.cli.main import main

BENCH = ["bench", "--model", "tiny-flux", "--height", "64", "--width", "64", "--steps", "2", "--warmup", "0",
         "--runs", "1", "--num-prompts", "4", "--seeds", "0,1", "--no-repro", "--threads", "1"]


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("review-page")
    base, cand = root / "fp32-baseline-run", root / "bf16-candidate-run"
    assert main([*BENCH, "--save-outputs", str(base)]) == 0
    assert main([*BENCH, "--dtype", "bfloat16", "--save-outputs", str(cand)]) == 0
    out = root / "review.html"
    assert main(["review", str(base), str(cand), "-o", str(out), "--worst", "3", "--random", "3", "--seed", "4",
                 "--quiet"]) == 0
    return {"root": root, "base": base, "cand": cand, "html": out, "key": root / "review.key.json"}


def _state(chrome: Browser) -> tuple[int, int, str]:
    d = chrome.driver
    body = d.find_element("css selector", "body")
    return (int(body.get_attribute("data-index")), int(body.get_attribute("data-judged")),
            d.find_element("id", "progress").text)


def _wait_download(folder: Path, name: str, timeout_s: float = 20.0) -> Path:
    target = folder / name
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if target.is_file() and not list(folder.glob("*.crdownload")):
            try:
                json.loads(target.read_text())
                return target
            except (OSError, json.JSONDecodeError):
                pass
        time.sleep(0.1)
    raise AssertionError(f"no download {name} in {folder}: {sorted(p.name for p in folder.iterdir())}")


@pytest.mark.slow
def test_review_page_keys_download_and_score(page: dict[str, Path], chrome: Browser, tmp_path: Path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    key = json.loads(page["key"].read_text())
    html = page["html"].read_text(encoding="utf-8")
    text = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", html)
    for secret in (str(page["base"]), str(page["cand"]), page["base"].name, page["cand"].name, "baseline", "candidate",
                   "bfloat16", "float32", "p00_s0_i0.png", "review.key"):
        assert secret.lower() not in text.lower(), secret
    assert {p["selection"] for p in key["pairs"]} == {"worst", "random"} and len(key["pairs"]) == 6

    open_page(chrome, page["html"])
    d = chrome.driver
    pairs = d.find_elements("css selector", ".pair")
    assert [p.get_attribute("data-pair") for p in pairs] == [p["id"] for p in key["pairs"]]
    shown = [p for p in pairs if p.is_displayed()]
    assert len(shown) == 1 and shown[0].get_attribute("data-pair") == "r01"
    imgs = shown[0].find_elements("css selector", "img")
    assert [d.execute_script("return [arguments[0].naturalWidth, arguments[0].naturalHeight]", i) for i in imgs] == [
        [64, 64], [64, 64]]
    assert _state(chrome) == (0, 0, "pair 1 of 6 · judged 0/6")
    screenshot_nonblank(chrome, "review")

    cycle = [(Keys.ARROW_LEFT, "left"), ("2", "same"), (Keys.ARROW_RIGHT, "right"), ("1", "left"), (Keys.SPACE, "same"),
             ("3", "right")]
    expected: dict[str, str] = {}

    def press(k: str) -> None:
        ActionChains(d).send_keys(k).perform()

    for i, p in enumerate(key["pairs"]):
        k, verdict = cycle[i % len(cycle)]
        press(k)
        expected[p["id"]] = verdict
        assert _state(chrome)[:2] == (i + 1, i + 1)
        if i == 1:  # undo: back to pair 2, its verdict cleared, then judged again the other way
            press(Keys.BACKSPACE)
            assert _state(chrome) == (1, 1, "pair 2 of 6 · judged 1/6")
            press(Keys.ARROW_RIGHT)
            expected[p["id"]] = "right"
            assert _state(chrome)[:2] == (2, 2)
        if i == 3:  # a reload keeps the work: the verdicts so far come back from this browser's storage
            d.refresh()
            assert _state(chrome)[:2] == (4, 4)
            assert "restored 4 verdict(s)" in d.find_element("id", "status").text
    assert d.find_element("id", "done").is_displayed()
    assert _state(chrome)[2] == "all 6 shown · judged 6/6"
    press("s")
    got = json.loads(_wait_download(chrome.download_dir, f"verdicts-{key['review_id']}.json").read_text())
    assert got["review_id"] == key["review_id"] and got["complete"] is True
    assert {v["pair"]: v["verdict"] for v in got["verdicts"]} == expected
    assert all(isinstance(v["time_ms"], (int, float)) and v["time_ms"] >= 0 for v in got["verdicts"])
    severe = [e for e in d.get_log("browser") if e.get("level") == "SEVERE"]
    assert not severe, severe

    # expected outcome per pair, from the key: picking the candidate's side = better
    exp = {"worse": 0, "same": 0, "better": 0}
    for p in key["pairs"]:
        v = expected[p["id"]]
        exp["same" if v == "same" else ("better" if v == p["candidate_side"] else "worse")] += 1
    dl = chrome.download_dir / f"verdicts-{key['review_id']}.json"
    res_path = tmp_path / "score.json"
    assert main(["review", "--score", str(dl), "--key", str(page["key"]), "--json", str(res_path)]) == 0
    res = json.loads(res_path.read_text())
    assert {k: res["counts"][k] for k in exp} == exp and res["counts"]["n"] == 6
    hi = binomtest(exp["worse"], 6).proportion_ci(method="exact").high
    assert res["worse"]["ci_high"] == pytest.approx(hi)
    rc = main(["review", "--score", str(dl), "--key", str(page["key"]), "--max-worse", "0.5"])
    assert rc == (0 if hi <= 0.5 else 1)
