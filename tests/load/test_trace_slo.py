"""``load --trace`` with shapes, ``--trace-speed``, per-request SLOs (vLLM-Omni's rule) and AIPerf prompt files."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from diffbench.cli.main import main
from diffbench.core.records import RequestRecord
from diffbench.load.client import read_jsonl
from diffbench.load.client.slo import SloPolicy, base_unit_s, last_per_shape, work_units
from diffbench.load.client.trace import read_trace
from diffbench.load.client.workload import ShapeMix, load_prompts

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

DEFAULT = ShapeMix(width=64, height=64, steps=4)


def test_csv_jsonl_and_plain_traces(tmp_path):
    c = tmp_path / "t.csv"
    c.write_text("\ufefftimestamp,size,steps,prompt,slo_ms\n10,96x32,2,\"a fox, at dusk\",1500\n10.5,,3,,\n")
    tr = read_trace(c, DEFAULT)
    assert tr.format == "csv" and [r.t_s for r in tr.rows] == [0.0, 0.5]  # shifted to start at 0
    assert (tr.rows[0].shape.width, tr.rows[0].shape.height, tr.rows[0].shape.steps) == (96, 32, 2)
    assert (tr.rows[1].shape.width, tr.rows[1].shape.steps) == (64, 3)  # empty size cell: the default
    assert tr.rows[0].prompt == "a fox, at dusk" and tr.rows[0].slo_s == 1.5 and tr.rows[1].slo_s is None
    j = tmp_path / "t.jsonl"
    j.write_text('{"t": 0, "width": 32, "height": 48, "num_inference_steps": 5, "text": "x", "seed": 9}\n'
                 '{"t": 1.25, "width": 32, "height": 48, "num_inference_steps": 5, "num_frames": 9}\n')
    with pytest.raises(Exception, match="some rows have frames and some do not"):
        read_trace(j, DEFAULT)
    j.write_text('{"t": 0, "width": 32, "height": 48, "num_inference_steps": 5, "text": "x", "seed": 9}\n')
    r = read_trace(j, DEFAULT).rows[0]
    assert (r.shape.width, r.shape.height, r.shape.steps, r.prompt, r.seed) == (32, 48, 5, "x", 9)
    plain = tmp_path / "t.txt"
    plain.write_text("# seconds\n0\n0\n0.25\n")
    tr = read_trace(plain, DEFAULT)
    assert tr.format == "plain" and [r.t_s for r in tr.rows] == [0, 0, 0.25] and tr.shapes() == [DEFAULT]


def test_the_scaling_rule_against_a_hand_computation():
    """vLLM-Omni: units = max(W*H/256, 1) x frames x steps; base = median(latency / units); slo = base x units
    x scale. Warm-ups: 512x512 s20 in 2.0 s (1024 units x 20 = 20480 units), 256x256 s10 in 0.30 s (256 x 10
    = 2560 units), 16x8 s4 in 0.01 s (area 0.5 -> 1 unit, x 4 = 4 units)."""
    a, b, c = ShapeMix(width=512, height=512, steps=20), ShapeMix(width=256, height=256, steps=10), \
        ShapeMix(width=16, height=8, steps=4)
    assert (work_units(a), work_units(b), work_units(c)) == (20480.0, 2560.0, 4.0)
    base = base_unit_s([(a, 2.0), (b, 0.30), (c, 0.01)])
    # per-unit times 2/20480 = 9.765625e-5, 0.3/2560 = 1.171875e-4, 0.01/4 = 2.5e-3: the median is 1.171875e-4
    assert base == pytest.approx(1.171875e-4, rel=1e-12)
    # the first warm-up of a shape may pay compilation: only the last one of each shape is fitted
    assert last_per_shape([(a, 60.0), (b, 0.30), (a, 2.0), (c, 0.01)]) == [(a, 2.0), (b, 0.30), (c, 0.01)]
    video = ShapeMix(width=832, height=480, steps=30, frames=33)  # 1560 area units x 33 x 30 = 1,544,400
    pol = SloPolicy(scale=3.0, base_s=base, shapes={"v": video}, explicit={7: 2.5})
    rec = RequestRecord(id=0, shape="v", intended_s=0.0, done_s=1.0)
    assert pol.slo_for(rec) == pytest.approx(1.171875e-4 * 1_544_400 * 3.0, rel=1e-12)  # 542.953125 s
    assert pol.slo_for(RequestRecord(id=7, shape="v", intended_s=0.0)) == 2.5  # the trace's own SLO wins
    recs = [RequestRecord(id=7, shape="v", intended_s=1.0, done_s=3.4),  # 2.4 s <= 2.5: met
            RequestRecord(id=8, shape="v", intended_s=0.0, done_s=1.0, outcome="http_error"),  # failed: not met
            RequestRecord(id=9, shape="other", intended_s=0.0, done_s=1.0)]  # no SLO: not counted
    assert pol.attainment(recs) == (2, 1, 0.5)


def _trace_file(tmp_path, times):
    p = tmp_path / "burst.csv"
    with p.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["timestamp", "width", "height", "steps", "prompt", "slo_s"])
        for i, t in enumerate(times):
            w.writerow([t, 32 if i % 2 else 48, 32, 1 + i % 2, f"p{i}", "" if i % 3 else 1e-6])
    return p


def test_a_bursty_trace_is_replayed_at_its_timestamps_with_each_rows_shape(fake, tmp_path):
    """Bursts of 5 at 0, 0.4 and 1.0 s (replayed 2x faster): every request is sent at its own (scaled)
    timestamp, never early, and each burst is out before the next is due; each carries its row's shape."""
    times = [0.0] * 5 + [0.4] * 5 + [1.0] * 5
    out, jl = tmp_path / "r.json", tmp_path / "r.jsonl"
    assert main(["load", "--url", fake.url("ok"), "--trace", str(_trace_file(tmp_path, times)), "--trace-speed", "2",
                 "--warmup", "2", "--slo-scale", "3", "--timeout", "10", "--json", str(out), "--jsonl", str(jl),
                 "--csv", str(tmp_path / "r.csv")]) == 0
    recs = sorted(read_jsonl(jl), key=lambda r: r.id)
    assert [r.intended_s for r in recs] == [t / 2 for t in times]
    lags = np.array([r.sent_s - r.intended_s for r in recs])
    gap = min(b - a for a, b in zip(sorted(set(times)), sorted(set(times))[1:], strict=False)) / 2
    assert lags.min() >= 0.0 and lags.max() < gap / 2, lags
    assert [r.shape for r in recs] == [("32x32 s2" if i % 2 else "48x32 s1") for i in range(15)]
    res = json.loads(out.read_text())
    row = res["rates"][0]
    assert row["schedule"] == "trace" and row["offered_rate"] is None and row["n"] == 15
    assert row["duration_s"] == pytest.approx(0.5 * 15 / 14)  # span 0.5 s extended by one mean gap
    # SLOs recomputed from the records: rows 0, 3, 6, ... carry slo_s 1e-6 (always missed); the others get
    # base x max(W*H/256, 1) x steps x 3 with the base the run fitted on its warm-up (in the conditions)
    base = float(res["conditions"]["slo_base_unit_s"].split()[0])
    units = {"48x32 s1": 48 * 32 / 256 * 1, "32x32 s2": 32 * 32 / 256 * 2}
    slo = [1e-6 if i % 3 == 0 else base * units[r.shape] * 3 for i, r in enumerate(recs)]
    met = sum(r.outcome == "ok" and r.done_s - r.intended_s <= s for r, s in zip(recs, slo, strict=True))
    assert row["slo_requests"] == 15 and row["slo_met"] == met <= 10
    assert row["slo_attainment"] == pytest.approx(met / 15)
    line = next(csv.DictReader((tmp_path / "r.csv").open()))
    assert int(line["slo_requests"]) == 15 and float(line["slo_attainment"]) == row["slo_attainment"]


def test_trace_prompts_and_seeds_reach_the_server(fake, tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"t": 0, "width": 40, "height": 24, "steps": 3, "prompt": "row zero", "seed": 123}\n'
                 '{"t": 0.05, "width": 40, "height": 24, "steps": 3}\n')
    assert main(["load", "--url", fake.url("ok"), "--dialect", "vllm-omni-chat", "--trace", str(p), "--warmup",
                 "0", "--timeout", "10", "--prompts", str(_aiperf(tmp_path))]) == 0
    bodies = [json.loads(b) for b in fake.chat_bodies]
    assert bodies[0]["messages"][0]["content"] == "row zero" and bodies[0]["extra_body"]["seed"] == 123
    assert bodies[1]["messages"][0]["content"] == "second aiperf prompt"  # row 1 takes prompt 1 of --prompts
    assert bodies[1]["extra_body"] == {"height": 24, "width": 40, "num_inference_steps": 3, "seed": 1}


def _aiperf(tmp_path):
    p = tmp_path / "prompts.jsonl"
    p.write_text('{"text": "first aiperf prompt"}\n\n{"text": "second aiperf prompt", "image": "x.png"}\n')
    return p


def test_aiperf_prompt_file(tmp_path):
    assert load_prompts(_aiperf(tmp_path)) == ["first aiperf prompt", "second aiperf prompt"]
    plain = tmp_path / "p.txt"
    plain.write_text("one\n\ntwo\n")
    assert load_prompts(plain) == ["one", "two"]


def test_a_timestamp_only_trace_takes_its_shapes_from_the_workload_mix(tmp_path):
    """Fresh-user trial: a plain trace with --workload used only the workload's first shape."""
    from diffbench.load.client.trace import with_mix
    from diffbench.load.client.workload import Workload

    p = tmp_path / "ts.txt"
    p.write_text("".join(f"{i * 0.1}\n" for i in range(400)))
    mix = Workload(shapes=[ShapeMix(width=64, height=64, steps=2, weight=3),
                           ShapeMix(width=128, height=64, steps=2, weight=1)])
    tr = with_mix(read_trace(p, mix.shapes[0]), mix, seed=5)
    widths = [r.shape.width for r in tr.rows]
    n128 = widths.count(128)
    # the mix by weight: 1 in 4 requests at 128x64, binomial(400, 1/4) within 4 standard deviations
    assert abs(n128 - 100) <= 4 * (400 * 0.25 * 0.75) ** 0.5 and set(widths) == {64, 128}
    assert [r.t_s for r in tr.rows] == pytest.approx([i * 0.1 for i in range(400)])  # arrivals untouched
    assert with_mix(read_trace(p, mix.shapes[0]), mix, seed=5).rows == tr.rows  # seeded
    shaped = tmp_path / "s.csv"
    shaped.write_text("timestamp,size\n0,96x32\n1,96x32\n")
    assert {r.shape.width for r in with_mix(read_trace(shaped, mix.shapes[0]), mix, 5).rows} == {96}
