"""End-to-end sweeps on the tiny FLUX pipeline (64x64, 10 steps, 2 prompts)."""

from __future__ import annotations

import io
import json
import math

import pytest
from rich.console import Console

from diffbench.errors import UsageError
from diffbench.report.sweep_report import print_console, to_csv
from diffbench.store.runs import RunStore
from diffbench.sweep.compare import compare_runs
from diffbench.sweep.runner import run_sweep

pytestmark = pytest.mark.slow

STEPS = 10


def test_first_block_thresholds(tmp_path, factory, shared_flux, small):
    values = ["0", "0.05", "0.2", "0.5", "1000000"]
    with RunStore.open(tmp_path / "s.sqlite") as st:
        res = run_sweep(small(values, budget_db=30), st, engine_factory=factory)
        stored = st.list_runs(sweep_id=res.sweep_id)
    pts = {p.value: p for p in res.points}
    skipped = [pts[v].skipped_steps for v in values]
    # closed forms: threshold 0 never skips (the relative change is > 0); an enormous threshold skips every step
    # but the first of each generation (no previous residual) -> (steps - 1) / steps, exactly, only if the
    # cache state is reset before every generation
    assert skipped[0] == 0.0
    assert skipped[-1] == pytest.approx((STEPS - 1) / STEPS)
    assert all(a <= b for a, b in zip(skipped, skipped[1:], strict=False)), skipped  # monotone
    # quality: threshold 0 computes every block, so it is within the noise floor of the baseline run twice
    nf = res.noise_floor_psnr
    assert nf is not None
    assert pts["0"].quality.psnr.worst >= min(nf.worst, 60.0) - 6.0
    assert pts["1000000"].quality.psnr.p50 < pts["0"].quality.psnr.p50
    for p in res.points:
        lo, hi = p.speedup_ci
        assert lo <= p.speedup <= hi and p.speedup > 0
        assert p.conditions.cache == f"first-block(threshold={p.value})"  # the cache enters the conditions
    assert res.baseline.conditions.cache == "none"
    # the working point respects the budget, and is the fastest passing value that is measurably faster:
    # CI low > 1 and above the timing noise floor's CI high (recomputed here from the stored numbers)
    wp = res.working_point
    assert wp is not None
    passing = [p for p in res.points if p.quality.psnr.p10 >= 30 and p.quality.psnr.worst >= 27]
    assert [p.passed for p in res.points] == [p in passing for p in res.points]
    faster = [p for p in passing if p.speedup_ci[0] > 1 and p.noise_floor is not None
              and p.speedup_ci[0] > p.noise_floor.high and p.skipped_steps != 0]
    assert [p.measurably_faster for p in passing] == [p in faster for p in passing]
    if faster:
        assert wp.value == max(faster, key=lambda p: p.speedup).value
    else:
        assert wp.value is None
    assert not pts["0"].measurably_faster  # skipped nothing
    # everything stored: baseline, noise floor, one run per value
    kinds = sorted(r.kind for r in stored)
    assert kinds == ["baseline", "noise-floor"] + ["point"] * len(values)
    assert all(r.status == "done" and r.manifest is not None for r in stored)
    # curve CSV: baseline row + one per value
    assert len(to_csv(res).strip().splitlines()) == 2 + len(values)


def test_budget_nothing_meets(tmp_path, factory, small):
    with RunStore.open(tmp_path / "s.sqlite") as st:
        res = run_sweep(small(["1000000"], gates=["psnr.p10>=1000"]), st, engine_factory=factory)
    assert res.working_point is not None and res.working_point.value is None
    assert "no value meets the quality budget" in res.working_point.message
    buf = io.StringIO()
    print_console(res, Console(file=buf, width=200))
    out = buf.getvalue()
    assert "no value meets the quality budget" in out and "noise floor" in out


class _Stop(Exception):
    pass


def test_resume_after_interruption(tmp_path, factory, shared_flux, small):
    values = ["0.1", "1000000"]
    path = tmp_path / "s.sqlite"

    def boom(msg: str) -> None:  # interrupted in the middle of the interleaved timing session
        if msg.startswith("timed block 2/"):
            raise _Stop("simulated interruption")

    with RunStore.open(path) as st, pytest.raises(_Stop):
        run_sweep(small(values), st, engine_factory=factory, on_event=boom)
    with RunStore.open(path) as st:
        first = st.list_runs()
        assert sorted((r.kind, r.status) for r in first) == [
            ("baseline", "done"), ("noise-floor", "done"), ("point", "failed"), ("point", "failed")]
        assert st.get_sweep(next(r.sweep_id for r in first if r.sweep_id)).status == "failed"  # type: ignore[union-attr]
        res = run_sweep(small(values), st, engine_factory=factory)
        # the identical command once more: everything comes from the store, nothing is timed again
        again = run_sweep(small(values), st, engine_factory=factory)
    assert res.sweep_id == again.sweep_id
    assert res.baseline.resumed and not any(p.resumed for p in res.points)
    assert all(p.resumed for p in again.points)
    assert [p.run_id for p in again.points] == [p.run_id for p in res.points]
    assert again.points[0].speedup == res.points[0].speedup  # same samples, same seed


def test_other_values_are_a_separate_sweep(tmp_path, factory, small):
    """Reproduction: `--values 0,0.2` then `--values 0.1` on one store got the same sweep id; the second
    replaced the first sweep's result and rewrote its baseline run's timing."""
    path = tmp_path / "s.sqlite"
    with RunStore.open(path) as st:
        first = run_sweep(small(["0", "0.2"]), st, engine_factory=factory)
        runs_before = {r.id: r.model_dump() for r in st.list_runs(limit=1000)}
        sweep_before = st.get_sweep(first.sweep_id)
        second = run_sweep(small(["0.1"]), st, engine_factory=factory)
        runs_after = {r.id: r.model_dump() for r in st.list_runs(limit=1000)}
        sweep_after = st.get_sweep(first.sweep_id)
        # the value set is part of the identity; the order of --values is not
        same = run_sweep(small(["0.2", "0"]), st, engine_factory=factory)
    assert second.sweep_id != first.sweep_id
    assert second.baseline.run_id != first.baseline.run_id and not second.baseline.resumed
    assert not any(p.resumed for p in second.points)
    assert same.sweep_id == first.sweep_id and all(p.resumed for p in same.points)
    # every run of the first sweep is unchanged, and its stored result still lists its own points
    assert {k: runs_after[k] for k in runs_before} == runs_before
    assert sweep_before is not None and sweep_after is not None
    assert sweep_after.result_json == sweep_before.result_json and sweep_after.status == "done"


def test_fingerprint_mismatch_refused_then_forced(tmp_path, factory, small):
    path = tmp_path / "s.sqlite"
    with RunStore.open(path) as st:
        first = run_sweep(small(["0.2"]), st, engine_factory=factory)
        base_id = first.baseline.run_id
        n_runs = len(st.list_runs())
        # the candidate deployment has compile on; the stored baseline had it off -> refused, nothing run
        compiled = small(["0.2"], baseline_run=base_id)
        compiled = compiled.model_copy(update={"engine": compiled.engine.model_copy(update={"compile": True})})
        with pytest.raises(UsageError) as exc:
            run_sweep(compiled, st, engine_factory=factory)
        assert "compile" in str(exc.value) and "--force" in str(exc.value)
        assert len(st.list_runs()) == n_runs
        # same deployment, but the stored baseline's fingerprint says compile on: refused, then --force
        base = st.get_run(base_id)  # stored runs are immutable: tamper with the file directly
        st.db.conn.execute("UPDATE runs SET fingerprint_json = ? WHERE id = ?",
                           (json.dumps({**base.fingerprint, "compile": True}, sort_keys=True), base_id))
        with pytest.raises(UsageError, match="compile"):
            run_sweep(small(["0.2"], baseline_run=base_id), st, engine_factory=factory)
        forced = run_sweep(small(["0.2"], baseline_run=base_id, force=True), st, engine_factory=factory)
    assert forced.forced and forced.fingerprint_differences == ["compile"]
    assert forced.baseline.run_id == base_id
    buf = io.StringIO()
    print_console(forced, Console(file=buf, width=200))
    assert "FORCED" in buf.getvalue() and "compile" in buf.getvalue()


def test_compare_stored_runs(tmp_path, factory, small):
    with RunStore.open(tmp_path / "s.sqlite") as st:
        res = run_sweep(small(["1000000"]), st, engine_factory=factory)
        b, c = res.baseline.run_id, res.points[0].run_id
        ok = compare_runs(st, b, c, allowed="cache")
        assert not ok.forced and ok.quality is not None
        # both runs from one interleaved session: the same paired ratio as the sweep, with its floor
        assert ok.paired and not ok.warnings and ok.speedup is not None and ok.noise_floor is not None
        assert ok.speedup.speedup == res.points[0].speedup
        assert ok.speedup.statistic == res.points[0].speedup_detail.statistic
        assert ok.quality.psnr.p50 == pytest.approx(res.points[0].quality.psnr.p50, abs=0.5)  # PNG round trip
        with pytest.raises(UsageError, match="cache"):
            compare_runs(st, b, c, allowed=None)
        forced = compare_runs(st, b, c, allowed=None, force=True)
    assert forced.forced and forced.fingerprint_differences == ["cache"]
    assert forced.speedup is not None and math.isfinite(forced.speedup.speedup)


def test_precision_option_sweep(tmp_path, factory, small):
    """An option axis: a fresh engine per value; only the swept fingerprint field differs (not forced)."""
    with RunStore.open(tmp_path / "s.sqlite") as st:
        res = run_sweep(small(["bfloat16"], axis="precision", steps=4), st, engine_factory=factory)
    p = res.points[0]
    assert p.conditions.precision == "bfloat16" and res.baseline.conditions.precision == "float32"
    assert not res.forced and p.skipped_steps is None
    # bfloat16 keeps ~8 bits of mantissa: the images move, but stay recognisably the same picture
    assert 15.0 < p.quality.psnr.p50 < math.inf


def test_import_is_light():
    import subprocess
    import sys

    code = ("import sys, diffbench.store, diffbench.sweep.runner, diffbench.report.sweep_report; "
            "print(sorted(m for m in ('torch', 'diffusers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_compare_runs_of_different_shapes_names_the_shapes(tmp_path, factory, small):
    """Reproduction: `runs compare` of runs with different shapes said only "outputs do not pair: 2 key(s)
    on one side only"."""
    from diffbench.errors import InputError

    with RunStore.open(tmp_path / "s.sqlite") as st:
        a = run_sweep(small(["1000000"], steps=4), st, engine_factory=factory)
        b = run_sweep(small(["1000000"], steps=4, height=32), st, engine_factory=factory)
        with pytest.raises(InputError) as exc:
            compare_runs(st, a.baseline.run_id, b.points[0].run_id)
    msg = str(exc.value)
    assert "shape" in msg and a.baseline.conditions.shape in msg and b.points[0].conditions.shape in msg


def test_failure_after_the_timing_marks_the_sweep_failed(tmp_path, factory, small):
    """A sweep that fails after its session (a nan budget once failed on its gates there) never stays
    'running' in the store."""

    def late(msg: str) -> None:
        if "psnr p10" in msg:  # emitted once the result is assembled, just before it is stored
            raise RuntimeError("late failure")

    with RunStore.open(tmp_path / "s.sqlite") as st:
        with pytest.raises(RuntimeError, match="late failure"):
            run_sweep(small(["0.1"], steps=4), st, engine_factory=factory, on_event=late)
        assert [sw.status for sw in st.list_sweeps()] == ["failed"]


def test_interrupt_is_stored_and_carries_the_partial_result(tmp_path, factory, small):
    from diffbench.sweep.runner import SweepInterrupted

    def ctrl_c(msg: str) -> None:
        if msg.startswith("timed block 2/"):
            raise KeyboardInterrupt

    with RunStore.open(tmp_path / "s.sqlite") as st:
        with pytest.raises(SweepInterrupted) as exc:
            run_sweep(small(["0.1"], steps=4), st, engine_factory=factory, on_event=ctrl_c)
        sw = st.get_sweep(exc.value.sweep_id)
        assert sw is not None and sw.status == "interrupted"
        part = exc.value.result
        assert part is not None and part.partial and part.interrupted and part.points == []
        assert st.get_run(part.baseline.run_id).status == "done"
        again = run_sweep(small(["0.1"], steps=4), st, engine_factory=factory)  # the same command resumes
    assert again.sweep_id == exc.value.sweep_id and again.baseline.resumed and not again.partial
