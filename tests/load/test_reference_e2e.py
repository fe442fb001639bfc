"""``load --reference`` against tiny-flux served with ``--enable-faults``: a cache threshold pushed between
two rows drops the second row's PSNR and its quality goodput while its latency goodput stays."""

from __future__ import annotations

import base64
import io
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROMPT, SEED, SIDE, STEPS = "a red kite over a beach", 3, 64, 6


def _generate(url: str) -> np.ndarray:
    import httpx
    from PIL import Image

    body = {"prompt": PROMPT, "size": f"{SIDE}x{SIDE}", "seed": SEED, "num_inference_steps": STEPS,
            "response_format": "b64_json"}
    r = httpx.post(f"{url}/v1/images/generations", json=body, timeout=120)
    r.raise_for_status()
    with Image.open(io.BytesIO(base64.b64decode(r.json()["data"][0]["b64_json"]))) as img:
        return np.asarray(img.convert("RGB"))


def test_pushed_cache_threshold_drops_psnr_and_quality_goodput_not_latency_goodput(tmp_path: Path) -> None:
    import httpx
    from skimage.metrics import peak_signal_noise_ratio

    from diffbench.cli.main import main
    from diffbench.engines.registry import EngineConfig
    from diffbench.load.client import read_jsonl
    from diffbench.load.goodput import count_good, parse_goodput_floors
    from diffbench.monitor.probe_refs import ProbeCase, write_references
    from diffbench.server.background import run_in_background
    from diffbench.server.config import ServerConfig

    cfg = ServerConfig(engine=EngineConfig(engine="diffusers", model="tiny-flux"), enable_faults=True)
    refs, jsonl, out = tmp_path / "refs", tmp_path / "records.jsonl", tmp_path / "load.json"
    with run_in_background(cfg) as url:
        card = httpx.get(f"{url}/v1/models").json()["data"][0]
        reference = _generate(url)
        case = ProbeCase(prompt_id="p0", prompt=PROMPT, seed=SEED, width=SIDE, height=SIDE, frames=None,
                         steps=STEPS, n=1)
        write_references(refs, [(case, STEPS, reference[None])], conditions={"batch": 1, "steps": STEPS},
                         fingerprint=card.get("fingerprint"))
        pushed = threading.Event()

        def push_after_first_row() -> None:  # the first row has 4 requests; push once they are recorded
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                if jsonl.exists() and len(jsonl.read_text().splitlines()) >= 4:
                    r = httpx.post(f"{url}/admin/faults", json={"cache": "first-block=0.9"}, timeout=60)
                    assert r.status_code == 200, r.text
                    pushed.set()
                    return
                time.sleep(0.01)

        pusher = threading.Thread(target=push_after_first_row, daemon=True)
        pusher.start()
        code = main(["load", "--url", url, "--reference", str(refs), "--rates", "0.4,0.5", "--num-requests", "4",
                     "--duration", "60", "--timeout", "120", "--size", f"{SIDE}x{SIDE}", "--steps", str(STEPS),
                     "--warmup", "1", "--goodput", "latency:120 psnr:50", "--jsonl", str(jsonl), "--json", str(out),
                     "--quiet"])
        pusher.join(5)
        assert code == 0 and pushed.is_set()
        degraded = _generate(url)  # the answer after the push, fetched independently

    rows = json.loads(out.read_text())["rates"]
    assert len(rows) == 2
    before, after = rows[0]["quality"], rows[1]["quality"]
    assert before["n_scored"] == 4 and before["psnr_worst_db"] == 200.0  # identical to the reference
    assert before["goodput"]["n_good"] == 4
    psnr_after = peak_signal_noise_ratio(reference, degraded, data_range=255)
    assert psnr_after < 50
    assert after["psnr_p50_db"] == pytest.approx(psnr_after, abs=1e-9)
    assert after["goodput"]["fraction"] < before["goodput"]["fraction"]
    assert after["fraction_under_gate"] > 0.5
    # latency goodput over all requests stays: every request of both rows was ok within the latency limit
    assert rows[0]["n_good"] == rows[0]["n_ok"] == 4 and rows[1]["n_good"] == rows[1]["n_ok"] == 4
    # the quality goodput recounted from the records
    records = read_jsonl(jsonl)
    cons, floors = parse_goodput_floors("latency:120 psnr:50")
    for row, run in zip(rows, sorted({json.loads(line)["run"] for line in jsonl.read_text().splitlines()},
                                     key=lambda r: float(r.split("=")[1])), strict=True):
        recs = [r for r, line in zip(records, jsonl.read_text().splitlines(), strict=True)
                if json.loads(line)["run"] == run]
        good = sum(1 for r in recs if r.outcome == "ok" and r.psnr_db is not None and r.psnr_db >= 50
                   and r.done_s - r.intended_s <= 120)  # type: ignore[operator]
        assert row["quality"]["goodput"]["n_good"] == good
        assert row["n_good"] == count_good(recs, cons).n_good
