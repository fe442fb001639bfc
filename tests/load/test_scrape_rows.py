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
