"""Rows find their scrape windows by the label the profile driver gave the run (load --scrape)."""

from __future__ import annotations

from diffbench.core.records import RequestRecord
from diffbench.load.knee import analyze_sweep
from diffbench.load.scrape import MetricsScraper
from diffbench.load.scrape_rows import attach
from diffbench.load.summary import run_label, summarize_rate
from diffbench.metrics.scrape import Scrape


def _records(n: int, rate: float) -> list[RequestRecord]:
    return [RequestRecord(id=i, rate=rate, shape="64x64", intended_s=i / rate, sent_s=i / rate,
                          done_s=i / rate + 0.1, outcome="ok") for i in range(n)]


def test_each_row_gets_the_window_of_its_run_trace_and_burst_included() -> None:
    scraper = MetricsScraper("http://127.0.0.1:9/metrics", fetch=lambda _url: Scrape([]))
    for label in (run_label(rate=2.0), run_label(burst=12), run_label(trace=8), run_label(rate=4.0)):
        scraper.begin_row(label)
        scraper.end_row(0)
    rows = [summarize_rate(_records(8, 2.0), offered_rate=2.0, duration_s=4.0),
            summarize_rate(_records(10, 100.0), offered_rate=None, duration_s=0.2, schedule="burst"),
            summarize_rate(_records(8, 3.0), offered_rate=None, duration_s=3.0, schedule="trace")]
    out = attach(analyze_sweep(rows, slo_s=None, source="load"), scraper)
    assert [r.server is not None for r in out.rates] == [True, True, True]
    assert {r.label for r in out.rates} >= {"2 req/s", "burst of 10"}
    lone = attach(analyze_sweep([summarize_rate(_records(8, 8.0), offered_rate=8.0, duration_s=1.0)], slo_s=None,
                                source="load"), scraper)
    assert lone.rates[0].server is None  # no run was named 8 req/s


OURS = """# TYPE diffusion_requests_total counter
diffusion_requests_total{{model="m",outcome="ok",status="200",traffic="user"}} {ok}
# TYPE diffusion_energy_joules_total counter
diffusion_energy_joules_total{{model="m",gpu="0"}} {gpu0}
diffusion_energy_joules_total{{model="m",gpu="1"}} {gpu1}
"""
DCGM = """# TYPE diffusion_requests_total counter
diffusion_requests_total{{model="m",outcome="ok",status="200",traffic="user"}} {ok}
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="0",UUID="GPU-a",modelName="NVIDIA H100",Hostname="h"}} {gpu0}
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="1",UUID="GPU-b",modelName="NVIDIA H100",Hostname="h"}} {gpu1}
"""


def _scraped(texts: list[str], per_request: dict[str, int | None] | None = None, ok: int = 8):
    from diffbench.metrics.scrape import parse_text

    it = iter(texts)
    scraper = MetricsScraper("http://127.0.0.1:9/metrics", fetch=lambda _url: parse_text(next(it), "t"))
    scraper.begin_row(run_label(rate=2.0))
    scraper.end_row(0)
    row = summarize_rate(_records(ok, 2.0), offered_rate=2.0, duration_s=4.0)
    return attach(analyze_sweep([row], slo_s=None, source="load"), scraper, outputs_per_request=per_request).rates[0]


def test_joules_per_ok_output_from_our_counter_summed_over_gpus() -> None:
    row = _scraped([OURS.format(ok=0, gpu0=1000.0, gpu1=50.0), OURS.format(ok=8, gpu0=1400.0, gpu1=130.0)],
                   {"64x64 s8": 2})
    sv = row.server
    assert sv is not None and sv.energy_source == "diffusion_energy_joules_total"
    assert sv.energy_j == 480.0  # (1400 - 1000) + (130 - 50)
    assert sv.energy_per_ok_output_j == 480.0 / (8 * 2)  # 8 ok requests of 2 images


def test_joules_per_ok_output_from_dcgm_millijoules() -> None:
    row = _scraped([DCGM.format(ok=0, gpu0=9_000_000, gpu1=1_000_000),
                    DCGM.format(ok=8, gpu0=9_600_000, gpu1=1_200_000)])
    sv = row.server
    assert sv is not None and sv.energy_source == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    assert sv.energy_j == 800.0  # (600,000 + 200,000) mJ
    assert sv.energy_per_ok_output_j == 100.0  # 8 ok requests of 1 image


def test_no_energy_counter_says_not_available() -> None:
    text = 'diffusion_requests_total{model="m",outcome="ok",status="200",traffic="user"} 0\n'
    sv = _scraped([text, text]).server
    assert sv is not None and sv.energy_j is None and sv.energy_per_ok_output_j is None
    assert sv.energy_source is not None and sv.energy_source.startswith("not available: the scraped endpoint exports "
                                                                        "neither diffusion_energy_joules_total")


def test_mixed_images_per_request_count_per_shape() -> None:
    from diffbench.load.scrape_rows import ok_outputs

    recs = [RequestRecord(id=i, rate=2.0, shape="a" if i < 3 else "b", intended_s=i, sent_s=i, done_s=i + 0.1,
                          outcome="ok") for i in range(5)]
    row = summarize_rate(recs, offered_rate=2.0, duration_s=4.0)
    assert ok_outputs(row, {"a": 4, "b": 1}) == 3 * 4 + 2 * 1
    assert ok_outputs(row, {"a": 4, "b": None}) is None  # b's images per request are ambiguous
    assert ok_outputs(row, {}) == 5


RECOMPILES = """# TYPE diffusion_requests_total counter
diffusion_requests_total{{model="m",outcome="ok",status="200",traffic="user"}} {ok}
# TYPE diffusion_compile_recompiles counter
diffusion_compile_recompiles_total{{model="m"}} {n}
"""


def test_recompiles_during_the_row_are_a_cold_start_in_measurement() -> None:
    from diffbench.load.coldstart import COLD_START, SERVER

    row = _scraped([RECOMPILES.format(ok=0, n=3), RECOMPILES.format(ok=8, n=5)])
    assert row.server is not None and row.server.recompiles == 5 - 3
    assert [(c.shape, c.recompiles) for c in row.cold_start] == [(SERVER, 2)]
    assert [w for w in row.warnings if w.startswith(COLD_START)] == [row.cold_start[0].message()]
    steady = _scraped([RECOMPILES.format(ok=0, n=3), RECOMPILES.format(ok=8, n=3)])
    assert steady.server is not None and steady.server.recompiles == 0
    assert steady.cold_start == [] and not [w for w in steady.warnings if w.startswith(COLD_START)]
    unexported = _scraped([OURS.format(ok=0, gpu0=0, gpu1=0), OURS.format(ok=8, gpu0=1, gpu1=1)])
    assert unexported.server is not None and unexported.server.recompiles is None and unexported.cold_start == []
