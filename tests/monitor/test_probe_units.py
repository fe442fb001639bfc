"""Units of the quality probe: comparison against scikit-image and closed forms, verdict bands, batch
grouping of reference manifests, the fingerprint check, and the exported series (parsed back)."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import numpy as np
import pytest

from diffbench.core.manifest import Manifest, ManifestEntry
from diffbench.errors import InputError
from diffbench.monitor.probe import (
    PassRecord,
    ProbeMetrics,
    ServiceInfo,
    check_fingerprint,
    compare_output,
    read_threshold,
    verdict_of,
)
from diffbench.monitor.probe_refs import group_cases


def _img(seed: int, shape: tuple[int, ...] = (48, 64, 3)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


def test_image_psnr_and_ssim_equal_scikit_image() -> None:
    metrics = pytest.importorskip("skimage.metrics")
    ref = _img(0)
    noisy = np.clip(ref + np.random.default_rng(1).normal(0, 6.0, ref.shape), 0, 255).round().astype(np.uint8)
    p, s, worst = compare_output(ref, noisy)
    assert worst is None
    assert p == pytest.approx(metrics.peak_signal_noise_ratio(ref, noisy, data_range=255), abs=1e-9)
    want = metrics.structural_similarity(ref, noisy, gaussian_weights=True, sigma=1.5,
                                         use_sample_covariance=False, data_range=255, channel_axis=-1)
    assert s == pytest.approx(want, abs=1e-4)
    assert compare_output(ref, ref.copy())[0] == math.inf


def test_video_reports_the_worst_frame_with_the_closed_form_psnr() -> None:
    ref = np.stack([_img(t, (32, 32, 3)) // 2 for t in range(5)])  # values <= 127: +k never clips
    ans = ref.copy()
    ans[1, :4, :4, 0] += 2  # 16 values off by 2 in frame 1
    ans[3, :8, :8, :] += 3  # 192 values off by 3 in frame 3: the worst frame
    p, s, worst = compare_output(ref, ans)
    n = 32 * 32 * 3
    assert worst == 3
    assert p == pytest.approx(10 * math.log10(255**2 * n / (192 * 3**2)), abs=1e-9)
    assert s < 1.0


@pytest.mark.parametrize(
    ("psnr", "threshold", "verdict"),
    [(math.inf, 30.0, "ok"), (30.0, 30.0, "ok"), (29.99, 30.0, "low"), (27.0, 30.0, "low"),
     (26.99, 30.0, "alert"), (5.0, None, "ok")],
)
def test_verdict_bands_put_the_alert_at_threshold_minus_3_db(psnr: float, threshold: float | None,
                                                            verdict: str) -> None:
    assert verdict_of(psnr, threshold) == verdict


def _entry(pid: str, seed: int, index: int, frames: int | None = None) -> ManifestEntry:
    return ManifestEntry(prompt_id=pid, prompt=f"prompt {pid}", seed=seed, index=index, height=32, width=32,
                         frames=frames, steps=2, file=f"{pid}_{seed}_{index}.png", sha256="0" * 64)


def test_entries_group_into_the_batches_that_made_them() -> None:
    m = Manifest(conditions={"batch": 2, "guidance": 3.5},
                 entries=[_entry("a", 0, 1), _entry("b", 0, 0), _entry("a", 0, 0), _entry("b", 0, 1)])
    cases = group_cases(m, Path("/refs"))
    assert [(c.prompt_id, c.n, [e.index for e in c.entries]) for c in cases] == [("a", 2, [0, 1]),
                                                                                  ("b", 2, [0, 1])]
    assert all(c.guidance == 3.5 and c.steps == 2 for c in cases)


@pytest.mark.parametrize(
    ("entries", "conditions", "fragment"),
    [
        ([_entry("a", 0, 0), _entry("a", 0, 2)], {}, "not 0..1"),
        ([_entry("a", 0, 0)], {"batch": 2}, "conditions.batch is 2"),
        ([_entry("a", 0, 0, frames=5), _entry("a", 0, 1, frames=5)], {}, "one video per job"),
        ([], {}, "lists no outputs"),
    ],
)
def test_manifests_that_cannot_be_replayed_as_they_ran_are_refused(entries: list[ManifestEntry],
                                                                   conditions: dict, fragment: str) -> None:
    with pytest.raises(InputError, match=fragment):
        group_cases(Manifest(conditions=conditions, entries=entries), Path("/refs"))


FP = {"model": "tiny-flux", "precision": "float32", "cache": "none", "torch": "2.13.0"}


def _svc(fp: dict | None) -> ServiceInfo:
    return ServiceInfo(model="tiny-flux", fingerprint=fp, fingerprint_id=None, is_video=False)


def test_fingerprint_check() -> None:
    assert check_fingerprint(FP, _svc(dict(FP)), allow_unfingerprinted=False, where="R") is None
    with pytest.raises(InputError) as err:
        check_fingerprint(FP, _svc({**FP, "precision": "bfloat16", "cache": "fbcache=0.1"}),
                          allow_unfingerprinted=False, where="R")
    msg = str(err.value)
    assert "cache: reference 'none', service 'fbcache=0.1'" in msg and "precision" in msg
    assert "re-record" in msg and "model:" not in msg
    for ref, svc in ((None, FP), (FP, None)):
        with pytest.raises(InputError, match="--allow-unfingerprinted"):
            check_fingerprint(ref, _svc(svc), allow_unfingerprinted=False, where="R")
        warn = check_fingerprint(ref, _svc(svc), allow_unfingerprinted=True, where="R")
        assert warn is not None and "warning" in warn


def _families(m: ProbeMetrics) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for fam in text_string_to_metric_families(m.render().decode()):
        for s in fam.samples:
            assert not s.name.endswith("_created"), s.name  # not in the metric table (user trial)
            assert s.labels.get("model") == "tiny-flux" and s.labels.get("probe") == "golden"
            key = s.name + (f"{{{s.labels['outcome']}}}" if "outcome" in s.labels else "")
            out[key] = s.value
    return out


def _rec(outcome: str, psnr: float | None, ssim: float | None, finished: float) -> PassRecord:
    return PassRecord(probe="golden", model="tiny-flux", url="u", reference="r", fingerprint_id=None, pass_index=0,
                      started_unix=finished - 1, finished_unix=finished, outcome=outcome, threshold_db=30.0,
                      alert_below_db=27.0, psnr_db=psnr, ssim=ssim, verdict="ok" if outcome == "ok" else "error")


def test_metrics_zero_initialised_and_a_failed_pass_keeps_the_last_values() -> None:
    m = ProbeMetrics("tiny-flux", "golden", interval_s=15.0, threshold_db=30.0)
    v = _families(m)
    assert v["diffusion_quality_probe_runs_total{ok}"] == 0 and v["diffusion_quality_probe_runs_total{error}"] == 0
    assert v["diffusion_quality_probe_timestamp_seconds"] == 0 and v["diffusion_quality_probe_interval_seconds"] == 15
    assert v["diffusion_quality_psnr_threshold_decibels"] == 30
    assert math.isnan(v["diffusion_quality_psnr_decibels"]) and math.isnan(v["diffusion_quality_ssim_ratio"])
    m.record(_rec("ok", 35.5, 0.97, 1000.0))
    m.record(_rec("error", None, None, 2000.0))
    v = _families(m)
    assert v["diffusion_quality_psnr_decibels"] == 35.5 and v["diffusion_quality_ssim_ratio"] == 0.97
    assert v["diffusion_quality_probe_timestamp_seconds"] == 1000.0  # did not advance on the error
    assert v["diffusion_quality_probe_runs_total{ok}"] == 1 and v["diffusion_quality_probe_runs_total{error}"] == 1


def test_exported_families_are_in_the_metric_table() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from diffbench.metrics.names import sample_names

    m = ProbeMetrics("tiny-flux", "golden", interval_s=1.0, threshold_db=None)
    names = {s.name for f in text_string_to_metric_families(m.render().decode()) for s in f.samples
             if not s.name.endswith("_created")}
    assert names and names <= sample_names()
    assert len(names) == 6


@pytest.mark.parametrize(
    ("content", "fragment"),
    [(None, "file not found"), ("{", "cannot read it as JSON"),
     ('{"probes": {"other": {"psnr_threshold_db": 30}}}', "probes in the file: other"),
     ('{"probes": {"golden": {"psnr_threshold_db": "x"}}}', "no finite probes.golden")],
)
def test_calibration_threshold_errors(tmp_path: Path, content: str | None, fragment: str) -> None:
    p = tmp_path / "cal.json"
    if content is not None:
        p.write_text(content)
    with pytest.raises(InputError, match=fragment):
        read_threshold(p, "golden")


def test_calibration_threshold_read(tmp_path: Path) -> None:
    p = tmp_path / "cal.json"
    p.write_text('{"model": "tiny-flux", "probes": {"golden": {"psnr_threshold_db": 31.5}}}')
    assert read_threshold(p, "golden") == 31.5


def test_unreachable_service_is_a_request_error() -> None:
    import socket

    import aiohttp

    from diffbench.monitor.probe import ProbeRequestError, fetch_service_info

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def go() -> None:
        async with aiohttp.ClientSession() as session:
            await fetch_service_info(session, f"http://127.0.0.1:{port}")

    with pytest.raises(ProbeRequestError, match="/v1/models"):
        asyncio.run(go())
