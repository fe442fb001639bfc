"""``diffbench doctor``: each check's verdict follows from the values injected into an exposition built
with prometheus_client from the metric table (tests/metrics/scrape_fixtures.py).

Before/after scrapes are real exposition text parsed back; the expected numbers are computed here from the
injected values (e.g. a step of 13 ms against a 10 ms baseline is ×1.3), not read from the code.
"""

from __future__ import annotations

import json

import pytest
from tests.metrics.scrape_fixtures import MODEL, Exposition, healthy

from diffbench.cli.main import main
from diffbench.metrics import names
from diffbench.metrics.scrape import parse_text
from diffbench.monitor.doctor import diagnose, view_from_scrapes


def _pair(after_fn, **healthy_kw):
    """(before, after) scrapes: a healthy service, then ``after_fn(exp)`` applied on top."""
    exp = Exposition()
    healthy(exp, **healthy_kw)
    before = parse_text(exp.text(), "before")
    before.time_s = 1000.0
    after_fn(exp)
    after = parse_text(exp.text(), "after")
    after.time_s = 1060.0
    return before, after


def _verdicts(report) -> dict[str, str]:
    return {c.key: c.verdict for c in report.checks}


def _more(exp: Exposition, n: int = 20, **kw) -> None:
    for _ in range(n):
        exp.serve(cache=("fbcache", 20, 10), **kw)


def test_healthy_service_has_no_suspect() -> None:
    before, after = _pair(_more)
    for symptom in ("p99", "artifacts", "oom"):
        rep = diagnose(symptom, view_from_scrapes([before, after]))
        assert rep.suspects == [], (symptom, [(c.key, c.sentence) for c in rep.checks])
    v = _verdicts(diagnose("p99", view_from_scrapes([before, after])))
    assert v == {"queue_vs_service": "ok", "step_vs_baseline": "ok", "recompiles": "ok", "rank_skew": "no data",
                 "cache_hit_ratio": "ok"}


def test_step_regression_is_the_suspect_and_deltas_are_used() -> None:
    """Steps at 13 ms after 20 requests at 10 ms (baseline 10 ms): the delta mean is ×1.3 (suspect);
    the totals of the after scrape alone average 11.5 ms, ×1.15 (under the ×1.2 alert: ok)."""
    before, after = _pair(lambda e: _more(e, step_s=0.013))
    rep = diagnose("p99", view_from_scrapes([before, after]))
    assert _verdicts(rep) == {"queue_vs_service": "ok", "step_vs_baseline": "suspect", "recompiles": "ok",
                              "rank_skew": "no data", "cache_hit_ratio": "ok"}
    step = rep.checks[1]
    assert step.value == pytest.approx(0.013 / 0.010, rel=1e-9)
    assert "diffbench bench --model tiny-flux --shapes 256x256" in step.command
    assert "deltas between two scrapes 60 s apart" in rep.basis
    totals = diagnose("p99", view_from_scrapes([after]))
    assert totals.checks[1].value == pytest.approx((0.010 + 0.013) / 2 / 0.010, rel=1e-9)
    assert totals.checks[1].verdict == "ok"
    assert "one scrape" in totals.basis and "totals" in totals.basis


def test_queueing_is_the_suspect() -> None:
    """Queue wait 0.2 s against a service time of 5 + 40 + 20 = 65 ms: queueing (share 0.2/0.065)."""
    before, after = _pair(lambda e: _more(e, queue_s=0.2))
    rep = diagnose("p99", view_from_scrapes([before, after]))
    q = rep.checks[0]
    assert q.verdict == "suspect" and q.sentence.startswith("queueing")
    assert q.value == pytest.approx(0.2 / (0.005 + 0.04 + 0.02), rel=1e-6)
    assert rep.suspects == ["queue_vs_service"]
    assert q.command.startswith("diffbench load --url")


@pytest.mark.parametrize("recompiles, verdict", [(0, "ok"), (2, "suspect")])
def test_recompiles(recompiles, verdict) -> None:
    def after(e: Exposition) -> None:
        _more(e)
        if recompiles:
            e.inc("diffusion_compile_recompiles", recompiles, model=MODEL)

    before, after_s = _pair(after)
    check = diagnose("p99", view_from_scrapes([before, after_s])).checks[2]
    assert (check.key, check.verdict, check.value) == ("recompiles", verdict, float(recompiles))


@pytest.mark.parametrize("fast, slow, verdict", [
    (0.010, 0.0105, "ok"),  # 5 %
    (0.010, 0.013, "suspect"),  # 30 % and 3 ms
    (0.001, 0.0015, "ok"),  # 50 % but 0.5 ms: under the 2 ms floor
    (0.100, 0.103, "ok"),  # 3 ms but 3 %
])
def test_rank_skew(fast, slow, verdict) -> None:
    def after(e: Exposition) -> None:
        e.rank(0, fast)
        e.rank(1, slow)

    before, after_s = _pair(after)
    check = diagnose("p99", view_from_scrapes([before, after_s])).checks[3]
    assert check.verdict == verdict
    assert check.value == pytest.approx((slow - fast) / fast, rel=1e-9)
    if verdict == "suspect":
        assert check.sentence.startswith("rank 1 ") and "--device cuda:1" in check.command


@pytest.mark.parametrize("hits, verdict", [(10, "ok"), (16, "suspect"), (4, "suspect"), (12, "ok"), (14, "suspect")])
def test_cache_drift_both_directions(hits, verdict) -> None:
    """Baseline 0.5; 20 lookups per request: hits 16 → 0.8 (+60 %), 4 → 0.2 (−60 %), 12 → 0.6 (+20 %),
    14 → 0.7 (+40 %); the ±30 % limit is the alert's."""
    def after(e: Exposition) -> None:
        for _ in range(10):
            e.serve(cache=("fbcache", 20, hits))

    before, after_s = _pair(after)
    for symptom, idx in (("p99", 4), ("artifacts", 2)):
        check = diagnose(symptom, view_from_scrapes([before, after_s])).checks[idx]
        assert check.verdict == verdict, check.sentence
        assert check.value == pytest.approx((hits / 20 - 0.5) / 0.5, rel=1e-9)


@pytest.mark.parametrize("psnr, verdict", [(34.0, "ok"), (31.5, "suspect"), (29.0, "suspect")])
def test_probe_psnr_against_threshold(psnr, verdict) -> None:
    """Threshold 35 dB; the alert fires below threshold − 3 dB = 32 dB."""
    before, after = _pair(lambda e: e.set("diffusion_quality_psnr_decibels", psnr, model=MODEL, probe="p0"))
    rep = diagnose("artifacts", view_from_scrapes([before, after]))
    assert rep.checks[0].verdict == verdict
    assert rep.checks[0].value == pytest.approx(psnr - 35.0)
    assert [c.key for c in rep.checks] == ["probe_psnr", "fingerprint", "cache_hit_ratio_drift", "precision"]


def test_fingerprint_and_precision() -> None:
    def after(e: Exposition) -> None:
        e.m["diffusion_deployment_info"].clear()
        e.deploy(fingerprint="fff999", baseline="abc123", dtype="float8_e4m3fn", cache="first-block=0.4")

    before, after_s = _pair(after)
    v = _verdicts(diagnose("artifacts", view_from_scrapes([before, after_s])))
    assert v["fingerprint"] == "suspect" and v["precision"] == "suspect"
    assert v["probe_psnr"] == "ok"


def test_missing_calibration_is_no_data_not_ok() -> None:
    exp = Exposition()
    exp.deploy(baseline=None)
    for _ in range(5):
        exp.serve()
    rep = diagnose("p99", view_from_scrapes([parse_text(exp.text(), "x")]))
    v = _verdicts(rep)
    assert v["step_vs_baseline"] == "no data" and "no baseline" in rep.checks[1].sentence
    assert _verdicts(diagnose("artifacts", view_from_scrapes([parse_text(exp.text(), "x")])))["fingerprint"] == "no data"


def test_oom_checks_follow_the_injected_values() -> None:
    """Peak 7.5 of 8 GiB (93.75 % > 90 %) with the vae_decode stage largest, 3 requests at an
    unlisted shape, tiling off, two requests running at once: every OOM check is suspect."""
    def after(e: Exposition) -> None:
        e.set("diffusion_gpu_memory_peak_bytes", 7.5 * 2**30, gpu="0")
        e.set("diffusion_stage_memory_peak_bytes", 6 * 2**30, model=MODEL, stage="vae_decode")
        for _ in range(3):
            e.serve(shape=names.OTHER_SHAPE)
        e.inc("diffusion_requests", 1, model=MODEL, outcome="oom", status="507", traffic="user")
        e.m["diffusion_deployment_info"].clear()
        e.deploy(vae_tiling="false")
        e.set("diffusion_requests_running", 2, model=MODEL)

    before, after_s = _pair(after)
    rep = diagnose("oom", view_from_scrapes([before, after_s]))
    assert _verdicts(rep) == {"peak_memory": "suspect", "other_shapes": "suspect", "vae_tiling": "suspect",
                              "concurrency": "suspect"}
    assert rep.checks[0].value == pytest.approx(7.5 / 8)
    assert "vae_decode" in rep.checks[0].sentence and "1 OOM" in rep.checks[0].sentence
    assert rep.checks[1].value == 3.0
    healthy_rep = diagnose("oom", view_from_scrapes(_pair(_more)))
    assert _verdicts(healthy_rep) == {"peak_memory": "ok", "other_shapes": "ok", "vae_tiling": "ok",
                                      "concurrency": "ok"}
    assert healthy_rep.checks[0].value == pytest.approx(2 / 8)


def test_every_metric_a_check_names_is_in_the_table() -> None:
    before, after = _pair(_more)
    for symptom in ("p99", "artifacts", "oom"):
        for c in diagnose(symptom, view_from_scrapes([before, after])).checks:
            for m in c.metrics:
                names.spec(m)
            assert c.command.startswith(("diffbench ", "TORCH_LOGS=recompiles diffbench "))


def test_cli_on_a_scrape_directory_writes_every_check(tmp_path, capsys) -> None:
    """One directory of before/after scrapes (the drills' fixture layout) is one argument."""
    exp = Exposition()
    healthy(exp)
    d = tmp_path / "scrapes"
    d.mkdir()
    exp.save(d / "before.prom", 1000.0)
    _more(exp, step_s=0.013)
    exp.save(d / "after.prom", 1030.0)
    out = tmp_path / "doctor.json"
    assert main(["doctor", "p99", "--scrape", str(d), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "per-step time vs baseline (same shape): suspect" in text
    assert "confirm: diffbench bench" in text
    doc = json.loads(out.read_text())
    assert [c["key"] for c in doc["checks"]] == ["queue_vs_service", "step_vs_baseline", "recompiles",
                                                 "rank_skew", "cache_hit_ratio"]
    assert doc["suspects"] == ["step_vs_baseline"]
    assert "30 s apart" in doc["basis"]


@pytest.mark.e2e
def test_doctor_reads_the_reference_service(tmp_path, capsys) -> None:
    """``diffbench serve --engine sim``'s real /metrics (whatever families it exports today): a diagnosis
    with exit 0, the queue check fed by the 3 requests sent, checks without their families 'no data'."""
    import urllib.request

    from diffbench.engines.registry import EngineConfig, SimParams
    from diffbench.server.background import run_in_background
    from diffbench.server.config import ServerConfig

    sim = SimParams(realtime=True, compile_s=0.0, jitter=0.0, tail_prob=0.0, step_s=0.001, text_encode_s=0.001,
                    vae_decode_s=0.001, other_s=0.001, launch_s=0.0)
    with run_in_background(ServerConfig(engine=EngineConfig(engine="sim", sim=sim)), mode="thread") as url:
        for _ in range(3):
            req = urllib.request.Request(url + "/v1/images/generations", method="POST",
                                         data=json.dumps({"prompt": "a", "size": "64x64"}).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as r:
                assert r.status == 200
        out = tmp_path / "d.json"
        for symptom in ("p99", "artifacts", "oom"):
            assert main(["doctor", symptom, "--metrics", url, "--interval", "0.2", "--json", str(out)]) == 0
            doc = json.loads(out.read_text())
            assert "deltas between two scrapes" in doc["basis"]
        assert main(["doctor", "p99", "--metrics", url, "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    queue = doc["checks"][0]
    assert queue["key"] == "queue_vs_service" and queue["verdict"] != "no data"
    assert "over 3 requests" in queue["details"][0]
    capsys.readouterr()


def test_a_directory_merges_the_probe_endpoint_into_before_and_after(tmp_path) -> None:
    """``before*.prom`` files form one scrape (the service's and the probe's endpoints), likewise ``after*``;
    the probe's PSNR (31 dB against a 35 dB threshold: 4 dB under, alert at 3) comes from its own file."""
    from diffbench.monitor.doctor import diagnose_scrapes

    service, probe = Exposition(), Exposition()
    healthy(service)
    service.m["diffusion_quality_psnr_decibels"].clear()  # the service does not export the probe's families
    service.m["diffusion_quality_psnr_threshold_decibels"].clear()
    probe.set("diffusion_quality_psnr_threshold_decibels", 35.0, model=MODEL, probe="p0")
    probe.set("diffusion_quality_psnr_decibels", 40.0, model=MODEL, probe="p0")
    service.save(tmp_path / "before.prom", 100.0)
    probe.save(tmp_path / "before-probe.prom", 101.0)
    _more(service)
    probe.set("diffusion_quality_psnr_decibels", 31.0, model=MODEL, probe="p0")
    service.save(tmp_path / "after.prom", 160.0)
    probe.save(tmp_path / "after-probe.prom", 161.0)
    rep = diagnose_scrapes("artifacts", tmp_path)
    assert rep.checks[0].key == "probe_psnr" and rep.checks[0].verdict == "suspect"
    assert rep.checks[0].value == pytest.approx(31.0 - 35.0)
    assert rep.suspects == ["probe_psnr"]
    assert "60 s apart" in rep.basis  # merged times: the latest of each phase (101 → 161)


@pytest.mark.e2e  # runs a subprocess
def test_doctor_imports_nothing_heavy(tmp_path) -> None:
    import subprocess
    import sys

    exp = Exposition()
    healthy(exp)
    path = exp.save(tmp_path / "s.prom", 1.0)
    code = ("import sys, json\nfrom diffbench.cli.main import main\n"
            f"rc = main(['doctor', 'p99', '--scrape', r'{path}'])\n"
            "print(json.dumps([rc, sorted(m for m in ('torch', 'diffusers', 'httpx', 'aiohttp') if m in sys.modules)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [0, []]


def test_every_metric_named_in_doctor_and_load_scrape_is_in_the_table() -> None:
    """The source of the checks, the views and load --scrape names only families (or their samples) of
    ``names.METRICS``."""
    import re
    from pathlib import Path

    import diffbench.load.scrape as load_scrape
    import diffbench.monitor.doctor_checks as checks
    import diffbench.monitor.doctor_views as views

    known = {m.name for m in names.METRICS} | names.sample_names()
    for mod in (checks, views, load_scrape):
        found = set(re.findall(r"\bdiffusion_[a-z_]+\b", Path(mod.__file__).read_text()))
        found = {f.rstrip("_") for f in found}
        # family names followed by a suffix built in code (family + "_sum") are families too
        assert found <= known, (mod.__name__, sorted(found - known))
