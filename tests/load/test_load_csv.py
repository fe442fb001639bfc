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


def test_quality_and_work_columns_carry_the_row_values() -> None:
    """The columns added for quality under load and work follow the row's values (recomputed here from the
    records: numpy percentiles of the PSNRs, the good count by hand)."""
    import numpy as np

    from diffbench.load.goodput import parse_goodput_floors
    from diffbench.load.scored import quality_row

    psnr = [50.0, 42.0, 38.5, 61.0]
    recs = [RequestRecord(id=i, intended_s=0.0, sent_s=0.0, done_s=0.5, reference=f"ref{i}", psnr_db=p, ssim=0.9)
            for i, p in enumerate(psnr)]
    cs, floors = parse_goodput_floors("latency:1 psnr:40")
    row = summarize_rate(recs, offered_rate=2.0, duration_s=2.0, schedule="poisson", goodput=cs)
    row = row.model_copy(update={"quality": quality_row(recs, cs, floors), "mpx_steps_per_s": 1.25})
    (line,) = list(csv.DictReader(io.StringIO(sweep_csv(analyze_sweep([row])))))
    assert list(line) == list(COLUMNS)
    assert float(line["psnr_p50_db"]) == float(np.percentile(psnr, 50))
    assert float(line["psnr_p10_db"]) == float(np.percentile(psnr, 10))
    assert float(line["psnr_worst_db"]) == min(psnr)
    assert float(line["psnr_gate_db"]) == 40.0 and float(line["fraction_under_gate"]) == 0.25
    assert int(line["quality_n_good"]) == 3 and float(line["quality_goodput_fraction"]) == 0.75
    assert float(line["mpx_steps_per_s"]) == 1.25
    assert line["server_energy_j"] == "" and line["gpus"] == ""  # not measured: empty cells
