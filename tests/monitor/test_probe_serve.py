"""``diffbench probe`` against a real ``diffbench serve`` (tiny-flux on the CPU, 64x64, 2 steps) on loopback.

Independent checks: a deterministic service replayed against its own recorded answers gives PSNR = +inf;
a reference altered by Gaussian noise gives scikit-image's ``peak_signal_noise_ratio`` of the same arrays,
one altered by a known integer offset the closed form 10·log10(255²·N / (m·k²)); the gauges are read back
with ``prometheus_client.parser`` from the probe's own ``/metrics``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from diffbench.cli.main import main

from .probe_service import Shim, serve_tiny_flux

pytestmark = pytest.mark.e2e

pytest.importorskip("diffusers")
pytest.importorskip("prometheus_client")


@pytest.fixture(scope="module")
def service():
    with serve_tiny_flux(default_size="64x64", default_steps=2) as (url, shim):
        yield url, shim


@pytest.fixture(scope="module")
def recorded(service, tmp_path_factory) -> Path:
    """References recorded by the probe's own first pass: two prompts, batch of 2 (four images)."""
    url, _ = service
    ref = tmp_path_factory.mktemp("probe") / "ref"
    rc = main(["probe", "--url", url, "--record-reference", str(ref), "--once", "--size", "64x64", "--steps", "2",
               "--n", "2", "--seed", "7", "--prompt", "a lighthouse", "--prompt", "a red fox"])
    assert rc == 0
    return ref


@pytest.fixture(autouse=True)
def _reset(service):
    _, shim = service
    shim.overrides.clear()
    shim.fail = shim.drop_fingerprint = False
    shim.traffic.clear()
    yield


def _copy_refs(src: Path, dst: Path, fingerprint: object = "keep") -> dict:
    dst.mkdir()
    m = json.loads((src / "manifest.json").read_text())
    for e in m["entries"]:
        (dst / e["file"]).write_bytes((src / e["file"]).read_bytes())
    if fingerprint != "keep":
        m["fingerprint"] = fingerprint
    (dst / "manifest.json").write_text(json.dumps(m))
    return m


def _rewrite(ref: Path, m: dict, file: str, arr: np.ndarray) -> None:
    from PIL import Image

    Image.fromarray(arr).save(ref / file)
    for e in m["entries"]:
        if e["file"] == file:
            e["sha256"] = hashlib.sha256((ref / file).read_bytes()).hexdigest()
    (ref / "manifest.json").write_text(json.dumps(m))


def _load(p: Path) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(p).convert("RGB"))


def test_record_then_probe_identical_service_gives_inf(service, recorded: Path, tmp_path: Path) -> None:
    url, shim = service
    m = json.loads((recorded / "manifest.json").read_text())
    assert len(m["entries"]) == 4 and m["conditions"]["batch"] == 2 and m["conditions"]["steps"] == 2
    assert m["fingerprint"]["model"] == "tiny-flux" and m["fingerprint"]["precision"]
    out = tmp_path / "once.json"
    rc = main(["probe", "--url", url, "--reference", str(recorded), "--once", "--psnr-threshold", "30",
               "--json", str(out)])
    assert rc == 0
    rec = json.loads(out.read_text())
    assert rec["outcome"] == "ok" and rec["verdict"] == "ok" and rec["model"] == "tiny-flux"
    assert [e["psnr_db"] for e in rec["entries"]] == ["inf"] * 4  # strict JSON spelling of +inf
    assert all(e["ssim"] == pytest.approx(1.0, abs=1e-6) for e in rec["entries"])
    gens = [t for t in shim.traffic if t[0] == "POST"]
    assert len(gens) == 2  # one request per batch of 2: the reference's batch composition replayed
    assert shim.traffic and all(h == "probe" for _, _, h in shim.traffic), shim.traffic


def test_bench_save_outputs_manifest_is_a_valid_reference(service, tmp_path: Path) -> None:
    url, _ = service
    ref = tmp_path / "bench"
    assert main(["bench", "--height", "64", "--width", "64", "--steps", "2", "--warmup", "0", "--runs", "1",
                 "--num-prompts", "1", "--seeds", "3", "--no-repro", "--save-outputs", str(ref)]) == 0
    out = tmp_path / "b.json"
    assert main(["probe", "--url", url, "--reference", str(ref), "--once", "--psnr-threshold", "30",
                 "--json", str(out)]) == 0
    rec = json.loads(out.read_text())
    # bench ran the engine in this process, serve in another thread of it: same deployment, same numbers
    assert rec["outcome"] == "ok" and [e["psnr_db"] for e in rec["entries"]] == ["inf"]


def test_noisy_reference_psnr_equals_scikit_image_and_closed_form(service, recorded: Path, tmp_path: Path) -> None:
    metrics = pytest.importorskip("skimage.metrics")
    url, _ = service
    ref = tmp_path / "noisy"
    m = _copy_refs(recorded, ref)
    files = [e["file"] for e in m["entries"]]
    clean = {f: _load(recorded / f) for f in files}
    noisy = np.clip(clean[files[0]] + np.random.default_rng(0).normal(0.0, 8.0, clean[files[0]].shape), 0, 255)
    noisy = noisy.round().astype(np.uint8)
    _rewrite(ref, m, files[0], noisy)
    # a known offset: k = 4 on m = 300 values that cannot clip
    off = clean[files[1]].copy()
    flat = off.reshape(-1)
    idx = np.flatnonzero(flat <= 250)[:300]
    assert idx.size == 300
    flat[idx] += 4
    _rewrite(ref, m, files[1], off)
    out = tmp_path / "n.json"
    rc = main(["probe", "--url", url, "--reference", str(ref), "--once", "--psnr-threshold", "30", "--json", str(out)])
    rec = json.loads(out.read_text())
    by_file = {e["file"]: e for e in rec["entries"]}
    want = metrics.peak_signal_noise_ratio(clean[files[0]], noisy, data_range=255)
    assert by_file[files[0]]["psnr_db"] == pytest.approx(want, abs=1e-9)
    ssim = metrics.structural_similarity(clean[files[0]], noisy, gaussian_weights=True, sigma=1.5,
                                         use_sample_covariance=False, data_range=255, channel_axis=-1)
    assert by_file[files[0]]["ssim"] == pytest.approx(ssim, abs=1e-4)
    n = clean[files[1]].size
    assert by_file[files[1]]["psnr_db"] == pytest.approx(10 * math.log10(255**2 * n / (300 * 16)), abs=1e-9)
    assert [by_file[f]["psnr_db"] for f in files[2:]] == ["inf", "inf"]
    assert rec["psnr_db"] == pytest.approx(min(want, by_file[files[1]]["psnr_db"]), abs=1e-9)
    # threshold − 3 dB above the noisy entry's PSNR: the alert condition, --once exits 1 (results written)
    assert rc == (1 if want < 27 else 0)
    thr = want + 3.5
    out2 = tmp_path / "alert.json"
    rc = main(["probe", "--url", url, "--reference", str(ref), "--once", "--psnr-threshold", f"{thr}",
               "--json", str(out2)])
    rec2 = json.loads(out2.read_text())
    assert rc == 1 and rec2["verdict"] == "alert"
    assert {e["file"]: e["verdict"] for e in rec2["entries"]}[files[0]] == "alert"


def test_references_from_another_deployment_are_refused(service, recorded: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    url, shim = service
    shim.overrides.update({"precision": "bfloat16", "cache": "fbcache=0.1"})
    rc = main(["probe", "--url", url, "--reference", str(recorded), "--once", "--psnr-threshold", "30"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "precision: reference 'float32', service 'bfloat16'" in err and "cache:" in err and "re-record" in err
    assert not [t for t in shim.traffic if t[0] == "POST"]  # refused before any probe request


def test_unfingerprinted_manifest_refused_unless_allowed(service, recorded: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    url, _ = service
    ref = tmp_path / "nofp"
    _copy_refs(recorded, ref, fingerprint=None)
    args = ["probe", "--url", url, "--reference", str(ref), "--once", "--psnr-threshold", "30"]
    assert main(args) == 2
    assert "no deployment fingerprint" in capsys.readouterr().err
    assert main([*args, "--allow-unfingerprinted"]) == 0
    assert "warning" in capsys.readouterr().err


def test_record_refused_when_the_service_reports_no_fingerprint(service, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    url, shim = service
    shim.drop_fingerprint = True
    rc = main(["probe", "--url", url, "--record-reference", str(tmp_path / "r"), "--once", "--size", "64x64"])
    assert rc == 2 and "--allow-unfingerprinted" in capsys.readouterr().err
    assert not (tmp_path / "r" / "manifest.json").exists()


def _scrape(port: int) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if not s.name.endswith("_created"):
                out[s.name + (f"{{{s.labels['outcome']}}}" if "outcome" in s.labels else "")] = s.value
    return out


def _lines(path: Path) -> list[dict]:
    """The whole lines of a JSON-lines file being written (a line is written in one call and flushed)."""
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().split("\n")[:-1]]


def _wait(pred, what: str, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_continuous_probe_metrics_errors_and_sigterm(service, recorded: Path, tmp_path: Path) -> None:
    """The exporter's gauges, a failing service (outcome error, timestamp frozen), a clean SIGTERM."""
    url, shim = service
    lines = tmp_path / "probe.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "diffbench.cli.main", "probe", "--url", url, "--reference", str(recorded),
         "--interval", "0.3", "--metrics-port", "0", "--psnr-threshold", "30", "--probe-name", "golden",
         "--json", str(lines)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "/metrics" in line, line
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        ok = _wait(lambda: (v := _scrape(port))["diffusion_quality_probe_runs_total{ok}"] >= 2 and v,
                   "two good passes")
        assert ok["diffusion_quality_psnr_decibels"] == math.inf and ok["diffusion_quality_ssim_ratio"] == 1.0
        assert ok["diffusion_quality_psnr_threshold_decibels"] == 30.0
        assert ok["diffusion_quality_probe_interval_seconds"] == 0.3
        assert ok["diffusion_quality_probe_runs_total{error}"] == 0
        shim.fail = True
        last = _wait(lambda: (v := _scrape(port))["diffusion_quality_probe_runs_total{error}"] >= 2 and v,
                     "two failed passes")
        assert last["diffusion_quality_psnr_decibels"] == math.inf  # kept its last value
        frozen = last["diffusion_quality_probe_timestamp_seconds"]
        assert 0 < frozen < time.time() - 0.3  # not advanced by the failed passes
        shim.fail = False
        _wait(lambda: _scrape(port)["diffusion_quality_probe_timestamp_seconds"] > frozen, "recovery")
        shim.overrides["precision"] = "bfloat16"  # the deployment changes under the running probe
        _wait(lambda: any("another deployment" in " ".join(r["errors"]) for r in _lines(lines)),
              "a pass refused for the changed fingerprint")
        shim.overrides.clear()
        n_before = len(_lines(lines))
        _wait(lambda: any(r["outcome"] == "ok" for r in _lines(lines)[n_before:]), "recovery after the change")
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
        assert rc == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    recs = [json.loads(x) for x in lines.read_text().splitlines()]  # every line whole JSON
    assert lines.read_text().endswith("\n")
    outcomes = [r["outcome"] for r in recs]
    assert "error" in outcomes and outcomes.count("ok") >= 3
    err = next(r for r in recs if r["outcome"] == "error")
    assert err["verdict"] == "error" and "HTTP 500" in err["errors"][0]
    assert [r["pass_index"] for r in recs] == list(range(len(recs)))
    assert all(h == "probe" for _, _, h in shim.traffic)


def test_shim_passes_a_service_fingerprint_through() -> None:
    """The test shim only fills a missing fingerprint; a service that reports one keeps its own."""

    class App:
        state = None

    shim = Shim(App())
    card = {"id": "m", "fingerprint": {"model": "m", "precision": "bf16"}}
    shim._card_fingerprint(card)
    assert card["fingerprint"] == {"model": "m", "precision": "bf16"} and len(card["fingerprint_id"]) == 16


def test_continuous_record_run_records_then_compares(service, tmp_path: Path) -> None:
    url, _ = service
    ref, out = tmp_path / "ref", tmp_path / "p.jsonl"
    rc = main(["probe", "--url", url, "--record-reference", str(ref), "--count", "2", "--interval", "0.05",
               "--size", "64x64", "--steps", "2", "--psnr-threshold", "30", "--jsonl", str(out)])
    assert rc == 0
    first, second = _lines(out)
    assert first["outcome"] == "recorded" and first["psnr_db"] is None
    assert (ref / "manifest.json").exists()
    assert second["outcome"] == "ok" and second["psnr_db"] == "inf" and second["pass_index"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("sig, name", [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")])
def test_sigint_mid_pass_exits_0_with_whole_lines(service, recorded: Path, tmp_path: Path, sig: int,
                                                  name: str) -> None:
    """Passes back to back (interval 10 ms), so the signal lands in a pass: it is dropped, not half written.
    SIGTERM stops a continuous probe as Ctrl-C does, and the message names it."""
    url, _ = service
    lines = tmp_path / "p.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "diffbench.cli.main", "probe", "--url", url, "--reference", str(recorded),
         "--interval", "0.01", "--psnr-threshold", "30", "--json", str(lines)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _wait(lambda: len(_lines(lines)) >= 2, "two passes")
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 0
        assert proc.stderr is not None and f"stopped by {name}" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = lines.read_text()
    assert text.endswith("\n")
    recs = [json.loads(x) for x in text.splitlines()]
    assert len(recs) >= 2 and all(r["outcome"] == "ok" for r in recs)
