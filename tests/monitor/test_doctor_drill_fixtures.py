"""doctor answers each symptom from the scrapes a drill recorded (``diffbench drill all --record-scrapes``).

The fixtures under ``tests/fixtures/scrapes/<drill>/`` are real: tiny-flux served on the CPU, the fault of
each drill injected, and ``/metrics`` scraped before and after (the probe's endpoint too for ``cache``).
Each test recomputes the decisive number from the raw text with ``prometheus_client``'s parser (not with
doctor's code) and checks that doctor reports it and names the drill's fault as the first suspect.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from diffbench.monitor.doctor import diagnose_scrapes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scrapes"


def _samples(*files: Path) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for f in files:
        for fam in text_string_to_metric_families(f.read_text()):
            out.extend((s.name, dict(s.labels), float(s.value)) for s in fam.samples)
    return out


def _sum(samples: list, name: str, **labels: str) -> float:
    return sum(v for n, lab, v in samples if n == name and all(lab.get(k) == x for k, x in labels.items()))


def _suspect(report) -> str:
    return next(c.key for c in report.checks if c.verdict == "suspect")


def test_cache_drill_scrapes_point_artifacts_at_the_probe_and_the_cache() -> None:
    d = FIXTURES / "cache"
    before, after = _samples(d / "before.prom"), _samples(d / "after.prom")
    probe = _samples(d / "after_probe.prom")
    hits = _sum(after, "diffusion_cache_hits_total") - _sum(before, "diffusion_cache_hits_total")
    lookups = _sum(after, "diffusion_cache_lookups_total") - _sum(before, "diffusion_cache_lookups_total")
    baseline = max(v for n, _, v in after if n == "diffusion_cache_hit_ratio_baseline")
    psnr = min(v for n, _, v in probe if n == "diffusion_quality_psnr_decibels")
    threshold = max(v for n, _, v in probe if n == "diffusion_quality_psnr_threshold_decibels")
    assert psnr < threshold - 3  # the drill's injection really pushed quality out of budget

    rep = diagnose_scrapes("artifacts", d)
    checks = {c.key: c for c in rep.checks}
    assert _suspect(rep) == "probe_psnr"
    assert checks["probe_psnr"].value == pytest.approx(psnr - threshold)
    assert checks["cache_hit_ratio_drift"].verdict == "suspect"
    assert checks["cache_hit_ratio_drift"].value == pytest.approx((hits / lookups - baseline) / baseline)
    assert checks["fingerprint"].verdict == "ok"  # a silent config push: same fingerprint


def test_shapes_drill_scrapes_point_p99_at_recompiles() -> None:
    d = FIXTURES / "shapes"
    before, after = _samples(d / "before.prom"), _samples(d / "after.prom")
    recompiles = _sum(after, "diffusion_compile_recompiles_total") - _sum(before, "diffusion_compile_recompiles_total")
    assert recompiles >= 1
    rep = diagnose_scrapes("p99", d)
    checks = {c.key: c for c in rep.checks}
    assert _suspect(rep) == "recompiles"
    assert checks["recompiles"].value == recompiles
    assert checks["queue_vs_service"].verdict == "ok"  # the time went to the device, not the queue


def test_vae_drill_scrapes_point_oom_at_vae_decode_memory_and_tiling() -> None:
    d = FIXTURES / "vae"
    before, after = _samples(d / "before.prom"), _samples(d / "after.prom")
    peak = max(v for n, _, v in after if n == "diffusion_gpu_memory_peak_bytes")
    total = max(v for n, _, v in after if n == "diffusion_gpu_memory_total_bytes")
    ooms = _sum(after, "diffusion_requests_total", outcome="oom") - _sum(before, "diffusion_requests_total",
                                                                          outcome="oom")
    assert ooms == 1 and peak / total > 0.9
    rep = diagnose_scrapes("oom", d)
    checks = {c.key: c for c in rep.checks}
    assert _suspect(rep) == "peak_memory"
    assert checks["peak_memory"].value == pytest.approx(peak / total)
    assert "vae_decode" in checks["peak_memory"].sentence
    assert checks["vae_tiling"].verdict == "suspect"


@pytest.mark.e2e
def test_live_doctor_reads_the_service_and_the_probe_endpoints_together(capsys) -> None:
    """Reproduction (user trial): ``--metrics`` given twice kept only the last URL, so a live doctor could
    never see the probe's PSNR next to the service's series. Both endpoints now merge into one scrape."""
    import http.server
    import json
    import threading

    from diffbench.cli.main import main

    d = FIXTURES / "cache"
    bodies = [(d / "after.prom").read_bytes(), (d / "after_probe.prom").read_bytes()]
    servers = []
    for body in bodies:
        class Handler(http.server.BaseHTTPRequestHandler):
            payload = body

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(self.payload)

            def log_message(self, *args: object) -> None:
                pass

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
    try:
        urls = [f"http://127.0.0.1:{s.server_address[1]}/metrics" for s in servers]
        out = Path(__import__("tempfile").mkdtemp()) / "doctor.json"
        assert main(["doctor", "artifacts", "--metrics", urls[0], "--metrics", urls[1], "--json", str(out)]) == 0
        checks = {c["key"]: c for c in json.loads(out.read_text())["checks"]}
        assert checks["probe_psnr"]["verdict"] == "suspect"  # the probe's endpoint was read
        assert checks["cache_hit_ratio_drift"]["verdict"] != "no data"  # and the service's
        assert urls[1].removesuffix("/metrics") not in checks["probe_psnr"]["command"]  # hints name the service
    finally:
        for s in servers:
            s.shutdown()
