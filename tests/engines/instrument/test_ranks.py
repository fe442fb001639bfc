"""Per-rank compute time over the whole step (diffbench.engines.instrument.ranks) with 2 CPU processes on
gloo, and what ``doctor p99`` makes of it.

One spawn runs every case (a rank slow before, between or after the step's collectives; equal ranks with
and without work); the expected values follow from the sleeps injected: the slow rank's compute of a step is
at least its sleep, the other rank's is well under it (it waited inside a collective instead), and the
step's wall time is the same on both ranks (each waits for the slower one).
"""

from __future__ import annotations

import json
import statistics

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from diffbench.engines.instrument.signals import RequestSignals
from diffbench.metrics.scrape import parse_text
from diffbench.monitor.doctor import diagnose, view_from_scrapes
from diffbench.monitor.doctor_checks import RANK_SKEW_FLOOR_S
from diffbench.monitor.exporter import Exporter

from ._dist_worker import run

SLEEP_S = 0.1
STEPS = 4
IDLE_STEPS = 20  # sub-millisecond steps: more of them, so one preemption of a busy host does not make a skew
SLOW = {"before": 1, "between": 0, "after": 1}  # the slow rank differs between cases: the name is not a default
CASES = [(p, p, r, SLEEP_S, STEPS) for p, r in SLOW.items()] + [
    ("equal_work", None, 0, SLEEP_S, STEPS), ("equal_idle", None, 0, 0.0, IDLE_STEPS)]

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo"),
]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, list[dict]]:
    """Case name -> [rank 0's result, rank 1's result] (step_s, compute_s, keys)."""
    out = tmp_path_factory.mktemp("ranks")
    mp.spawn(run, args=(2, str(out), CASES), nprocs=2, join=True)
    by_rank = [json.loads((out / f"rank{i}.json").read_text()) for i in (0, 1)]
    return {name: [by_rank[0][name], by_rank[1][name]] for name, *_ in CASES}


def _doctor(r: list[dict]):
    """The p99 runbook's rank-skew finding on a scrape of an exporter fed each rank's signals."""
    exp = Exporter("m", ["64x64"], ranks=[0, 1])
    for rank in (0, 1):
        exp.observe_generation(shape="64x64", stages=None, memory=None,
                               signals=RequestSignals(rank_compute_s={rank: r[rank]["compute_s"]}))
    scrape = parse_text(exp.render()[0].decode(), "exporter")
    report = diagnose("p99", view_from_scrapes([scrape]))
    return next(c for c in report.checks if c.key == "rank_skew")


@pytest.mark.parametrize("placement", list(SLOW))
def test_slow_rank_shows_in_compute_time_wherever_it_is_slow(results, placement: str) -> None:
    slow = SLOW[placement]
    r = results[placement]
    assert r[0]["keys"] == [0] and r[1]["keys"] == [1]  # each rank reports its own rank
    assert len(r[0]["compute_s"]) == len(r[1]["compute_s"]) == STEPS
    for i in range(STEPS):
        c_slow, c_fast = r[slow]["compute_s"][i], r[1 - slow]["compute_s"][i]
        assert c_slow >= SLEEP_S  # the slow rank slept inside this step, outside every collective
        assert c_fast < 0.5 * SLEEP_S  # the other one waited for it inside a collective
        assert c_slow <= r[slow]["step_s"][i] and c_fast <= r[1 - slow]["step_s"][i]  # compute is part of the step
        if i > 0:  # wall time hides it: both wait for the slower rank (step 0 of "after" is the exception)
            assert abs(r[0]["step_s"][i] - r[1]["step_s"][i]) < 0.5 * SLEEP_S


@pytest.mark.parametrize("placement", list(SLOW))
def test_doctor_p99_names_the_slow_rank(results, placement: str) -> None:
    slow = SLOW[placement]
    finding = _doctor(results[placement])
    assert finding.verdict == "suspect", finding.sentence
    assert finding.sentence.startswith(f"rank {slow} ")
    assert f"--device cuda:{slow} " in finding.command


@pytest.mark.parametrize("case", ["equal_work", "equal_idle"])
def test_equal_ranks_never_fire(results, case: str) -> None:
    """Equal work: the ranks' means are within 10 %. No work: sub-millisecond steps, whose noise can exceed
    10 % between the ranks, but not the 2 ms floor."""
    r = results[case]
    means = [statistics.fmean(r[k]["compute_s"]) for k in (0, 1)]
    if case == "equal_idle":
        assert max(means) < RANK_SKEW_FLOOR_S  # the whole compute is under the floor: no skew can pass it
    finding = _doctor(r)
    assert finding.verdict == "ok", finding.sentence
    assert finding.value == pytest.approx((max(means) - min(means)) / min(means), rel=1e-6)
