"""``bench --engine http`` against ``diffbench serve`` (tiny-flux on the CPU, a subprocess on 127.0.0.1).

The acceptance of issue 14 item 3: per-shape statistics and the server's stages; outputs that pair with a
local ``bench --save-outputs`` of the same model and seed in ``quality`` with PSNR inf (same tiny model,
same seed, same CPU: identical pixels); a refused shape is a failed run with the server's status and
message, and the run goes on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from diffbench.cli.main import main

pytestmark = pytest.mark.slow

COMMON = ["--steps", "2", "--num-prompts", "2", "--seeds", "0,3", "--warmup", "1", "--runs", "4", "-q"]


@pytest.fixture(scope="module")
def tiny_flux_url() -> Iterator[str]:
    from diffbench.server.background import run_in_background
    from diffbench.server.config import ServerConfig

    with run_in_background(ServerConfig(), mode="subprocess") as url:  # diffusers tiny-flux on the CPU
        yield url


def test_bench_http_stats_stages_and_quality_pairing(tiny_flux_url: str, tmp_path: Path) -> None:
    remote_json, local_json = tmp_path / "remote.json", tmp_path / "local.json"
    rc = main(["bench", "--engine", "http", "--url", tiny_flux_url, "--shapes", "64x48,32x32", *COMMON,
               "--json", str(remote_json), "--save-outputs", str(tmp_path / "remote")])
    assert rc == 0
    remote = json.loads(remote_json.read_text())
    assert remote["conditions"]["engine"] == "http" and remote["conditions"]["model"] == "tiny-flux"
    assert [s["shape"] for s in remote["shapes"]] == ["64x48 s2 b1", "32x32 s2 b1"]
    for shape in remote["shapes"]:
        assert shape["error"] is None and shape["failed_runs"] == []
        assert shape["latency_s"]["n"] == 4 and len(shape["warmup_s"]) == 1
        server = shape["server_stages_s"]
        assert {"text_encode", "denoise", "vae_decode", "queue_wait", "service_time"} <= set(server)
        assert all(v["n"] == 4 for v in server.values())
        # every run's client latency >= its server service time, so the medians keep that order
        assert shape["latency_s"]["p50"] >= server["service_time"]["median"]
        assert shape["client_overhead_s"] is not None and shape["client_overhead_s"] > 0
        # the stage split comes from the server and reconciles with the client's end-to-end mean
        st = shape["stages_s"]
        assert st["denoise"] == pytest.approx(server["denoise"]["mean"], rel=1e-9)
        assert st["text_encode"] + st["denoise"] + st["vae_decode"] + st["other"] == \
            pytest.approx(st["end_to_end"], rel=1e-9)
        # the server's peak (CPU: resident-set growth over the call, which may be 0 once memory is resident)
        assert shape["memory"]["kind"] == "cpu-rss" and shape["memory"]["peak_allocated_bytes"] >= 0
        assert shape["repro"]["reproducible"] is True  # the same request twice: identical pixels
    manifest = json.loads((tmp_path / "remote" / "manifest.json").read_text())
    assert sorted((e["prompt_id"], e["seed"]) for e in manifest["entries"]) == \
        [("p00", 0), ("p00", 3), ("p01", 0), ("p01", 3)]

    rc = main(["bench", "--model", "tiny-flux", "--shapes", "64x48", *COMMON, "--json", str(local_json),
               "--save-outputs", str(tmp_path / "local")])
    assert rc == 0
    q = tmp_path / "q.json"
    assert main(["quality", str(tmp_path / "local"), str(tmp_path / "remote"), "--json", str(q)]) == 0
    report = json.loads(q.read_text())
    assert report["pairing"] == "manifest" and report["n_pairs"] == 4
    assert report["n_identical"] == 4 and report["summaries"]["psnr"]["n_inf"] == 4


def test_refused_shape_is_a_failed_run_and_the_run_goes_on(tiny_flux_url: str, tmp_path: Path) -> None:
    """72x64 is not a multiple of 16 for Flux: the server answers 400; bench records it and measures 64x64."""
    out = tmp_path / "r.json"
    rc = main(["bench", "--engine", "http", "--url", tiny_flux_url, "--shapes", "72x64,64x64", "--steps", "2",
               "--warmup", "0", "--runs", "5", "--no-repro", "-q", "--json", str(out)])
    assert rc == 0
    bad, good = json.loads(out.read_text())["shapes"]
    assert good["error"] is None and good["latency_s"]["n"] == 5
    assert bad["latency_s"] is None and "3 requests in a row failed" in bad["error"]
    assert len(bad["failed_runs"]) == 3
    assert all(f["status"] == 400 and "multiple of 16" in f["error"] for f in bad["failed_runs"])
