"""``--csv`` rendering of a sweep on hand-made rows (the end-to-end CSV = JSON check is in test_client_cli)."""

from __future__ import annotations

import csv
import io

from diffbench.core.records import RequestRecord
from diffbench.load.goodput import parse_goodput
from diffbench.load.knee import analyze_sweep
from diffbench.load.summary import summarize_rate
from diffbench.report.load_csv import COLUMNS, sweep_csv


def test_burst_row_and_goodput_definition() -> None:
    recs = [RequestRecord(id=i, intended_s=0.0, sent_s=0.0, done_s=0.5 * (i + 1),
                          server_stages_s={"denoise": 0.4}) for i in range(4)]
    cs = parse_goodput("latency:1.2 stage.denoise:1")
    row = summarize_rate(recs, offered_rate=None, duration_s=2.0, schedule="burst", goodput=cs, slo_s=1.2)
    result = analyze_sweep([row], slo_s=1.2)
    (line,) = list(csv.DictReader(io.StringIO(sweep_csv(result))))
    assert list(line) == list(COLUMNS)
    assert line["offered_rate"] == "" and line["offered"] == "inf" and line["schedule"] == "burst"
    # done at 0.5, 1.0, 1.5, 2.0 s from arrival 0: two within 1.2 s, over the 2 s the burst took
    assert int(line["n_good"]) == 2 and float(line["goodput"]) == 2 / 2.0
    assert line["goodput_definition"] == "latency:1.2 stage.denoise:1"
    assert line["users"] == "" and line["mode"] == "open"
