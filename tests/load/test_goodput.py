"""Goodput constraints: parsing, ``--slo`` folding, and the good count on hand-built records, recomputed
independently with numpy from the columns the records were built from."""

from __future__ import annotations

import numpy as np
import pytest

from diffbench.core.records import RequestRecord
from diffbench.errors import UsageError
from diffbench.load.goodput import (
    GoodputConstraint,
    count_good,
    describe,
    latency_limit,
    parse_goodput,
    with_slo,
)
from diffbench.load.summary import summarize_rate


def test_parse_names_aliases_and_list() -> None:
    cs = parse_goodput("latency:10 queue_wait:2 first_byte:0.5 stage.denoise:3 e2el:8")
    assert [(c.name, c.max_s) for c in cs] == [("latency", 10.0), ("queue_wait", 2.0), ("ttfb", 0.5),
                                               ("stage.denoise", 3.0), ("latency_from_send", 8.0)]
    assert parse_goodput(["latency:1", "lag:0.01"]) == parse_goodput("latency:1  lag:0.01")
    assert describe(cs[:2]) == "latency <= 10 s and queue_wait <= 2 s"
    assert latency_limit(cs) == 10.0 and latency_limit(cs[1:]) is None


@pytest.mark.parametrize("spec, fragment", [
    ("", "--goodput: empty"),
    ("latency", "'latency' must look like name:seconds"),
    ("latency:", "'latency:' must look like name:seconds"),
    (":3", "':3' must look like name:seconds"),
    ("speed:3", "unknown constraint 'speed:3'"),
    ("stage.:3", "unknown constraint 'stage.:3'"),
    ("latency:x", "'latency:x': 'x' is not a number of seconds"),
    ("latency:0", "'latency:0': the limit must be a positive finite"),
    ("latency:-1", "the limit must be a positive finite"),
    ("latency:inf", "the limit must be a positive finite"),
    ("latency:nan", "the limit must be a positive finite"),
    ("latency:1 latency:2", "latency is given twice ('latency:2')"),
    ("ttfb:1 first_byte:2", "ttfb is given twice ('first_byte:2')"),
])
def test_bad_specs_are_one_line_errors(spec: str, fragment: str) -> None:
    with pytest.raises(UsageError) as exc:
        parse_goodput(spec)
    assert fragment in str(exc.value) and "\n" not in str(exc.value)


def test_slo_is_a_latency_constraint() -> None:
    q = [GoodputConstraint(name="queue_wait", max_s=2.0)]
    assert with_slo(q, 5.0) == [GoodputConstraint(name="latency", max_s=5.0), *q]
    assert with_slo(parse_goodput("latency:5"), 5.0) == parse_goodput("latency:5")
    assert with_slo(q, None) == q
    with pytest.raises(UsageError, match="--slo 4 and --goodput latency:5 disagree"):
        with_slo(parse_goodput("latency:5"), 4.0)


def _columns(seed: int, n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    intended = np.arange(n) * 0.1
    lag = rng.uniform(0.0, 0.02, n)
    cq = np.where(rng.random(n) < 0.3, rng.uniform(0, 1.0, n), 0.0)
    server_q = rng.uniform(0.0, 2.0, n)
    has_sq = rng.random(n) < 0.8  # 20 % of responses carry no queue stage
    denoise = rng.uniform(0.5, 3.0, n)
    has_dn = rng.random(n) < 0.9
    ttfb = rng.uniform(0.1, 1.0, n)
    has_fb = rng.random(n) < 0.95
    service = rng.uniform(0.5, 4.0, n)
    outcome_ok = rng.random(n) < 0.85
    return {"intended": intended, "lag": lag, "cq": cq, "server_q": server_q, "has_sq": has_sq,
            "denoise": denoise, "has_dn": has_dn, "ttfb": ttfb, "has_fb": has_fb, "service": service,
            "ok": outcome_ok}


def _records(c: dict[str, np.ndarray]) -> list[RequestRecord]:
    out = []
    for i in range(c["intended"].size):
        sent = c["intended"][i] + c["lag"][i] + c["cq"][i]
        stages = {}
        if c["has_sq"][i]:
            stages["queue_wait"] = float(c["server_q"][i])
        if c["has_dn"][i]:
            stages["denoise"] = float(c["denoise"][i])
        out.append(RequestRecord(
            id=i, intended_s=float(c["intended"][i]), sent_s=float(sent),
            first_byte_s=float(sent + c["ttfb"][i]) if c["has_fb"][i] else None,
            done_s=float(sent + c["service"][i]), outcome="ok" if c["ok"][i] else "http_error",
            client_queue_s=float(c["cq"][i]), server_stages_s=stages))
    return out


def test_count_good_matches_numpy() -> None:
    c = _columns(0, 3000)
    recs = _records(c)
    cs = parse_goodput("latency:3 queue_wait:1.2 ttfb:0.8 stage.denoise:2.5 lag:0.5")
    latency = c["lag"] + c["cq"] + c["service"]
    queue = c["cq"] + c["server_q"]
    good = (c["ok"] & (latency <= 3) & c["has_sq"] & (queue <= 1.2) & c["has_fb"] & (c["ttfb"] <= 0.8) & c["has_dn"]
            & (c["denoise"] <= 2.5) & (c["lag"] + c["cq"] <= 0.5))
    got = count_good(recs, cs)
    assert got.n_good == int(good.sum()) > 0
    assert got.missing == {"ttfb": int((c["ok"] & ~c["has_fb"]).sum()),
                           "stage.denoise": int((c["ok"] & ~c["has_dn"]).sum()),
                           "queue_wait": int((c["ok"] & ~c["has_sq"]).sum())}
    # through the summary: goodput = good / the ok window, warnings name the missing values
    s = summarize_rate(recs, offered_rate=10.0, duration_s=300.0, goodput=cs, slo_s=3.0)
    assert s.n_good == got.n_good
    assert s.goodput == pytest.approx(got.n_good / s.n_ok * s.ok_rate, rel=1e-12)
    assert s.goodput_constraints == cs
    n_ok = int(c["ok"].sum())
    assert f"goodput: {got.missing['ttfb']} of {n_ok} ok requests did not report ttfb; they count as not good" \
        in s.warnings
    assert f"goodput: {got.missing['queue_wait']} of {n_ok} ok requests did not report queue_wait; they count " \
        "as not good" in s.warnings


def test_latency_constraint_equals_slo() -> None:
    c = _columns(1, 500)
    recs = _records(c)
    a = summarize_rate(recs, offered_rate=10.0, duration_s=50.0, slo_s=2.0)
    b = summarize_rate(recs, offered_rate=10.0, duration_s=50.0, slo_s=2.0, goodput=parse_goodput("latency:2"))
    latency = c["lag"] + c["cq"] + c["service"]
    assert a.n_good == b.n_good == int((c["ok"] & (latency <= 2.0)).sum())
    assert a.goodput == b.goodput


def test_failed_requests_never_good_and_missing_never_good() -> None:
    recs = [RequestRecord(id=0, intended_s=0.0, sent_s=0.0, done_s=0.1, outcome="timeout"),
            RequestRecord(id=1, intended_s=0.0, sent_s=0.0, done_s=0.1),  # no first byte, no stage
            RequestRecord(id=2, intended_s=0.0, sent_s=0.0, first_byte_s=0.05, done_s=0.1,
                          server_stages_s={"denoise": 0.05})]
    assert count_good(recs, parse_goodput("latency:1")).n_good == 2
    assert count_good(recs, parse_goodput("ttfb:1")).n_good == 1
    assert count_good(recs, parse_goodput("stage.denoise:1")).n_good == 1
    assert count_good(recs, []).n_good == 2
