"""``diffbench sweep`` and ``diffbench runs`` through the CLI entry point (exit codes and stored data)."""

from __future__ import annotations

import json

import pytest

from diffbench.cli.main import main
from diffbench.store.runs import RunStore

FAST = ["--height", "64", "--width", "64", "--steps", "6", "--num-prompts", "2", "--runs", "2", "--warmup", "0"]


@pytest.mark.slow
def test_sweep_then_runs(tmp_path, capsys):
    store = str(tmp_path / "s.sqlite")
    rc = main(["sweep", "--model", "tiny-flux", "--cache", "first-block", "--values", "0.1,1000000",
               "--budget", "30", "--store", store, "--json", str(tmp_path / "c.json"),
               "--csv", str(tmp_path / "c.csv"), *FAST])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "working point" in out or "no value meets" in out or "no value is measurably faster" in out
    assert "timing noise floor" in out
    assert "noise floor" in out and "first-block(threshold=0.1)" in out
    doc = json.loads((tmp_path / "c.json").read_text())
    assert {"baseline", "points", "working_point"} <= set(doc)
    for p in doc["points"]:
        assert {"value", "speedup", "speedup_ci", "quality", "skipped_steps"} <= set(p)
        assert {"p50", "p10", "worst"} <= set(p["quality"]["psnr"])
    assert (tmp_path / "c.csv").read_text().count("\n") == 4  # header, baseline, 2 points
    with RunStore.open(tmp_path / "s.sqlite") as st:
        runs = st.list_runs()
        base = next(r for r in runs if r.kind == "baseline")
        point = next(r for r in runs if r.kind == "point")
    assert main(["runs", "--store", store]) == 0
    listing = capsys.readouterr().out
    assert doc["sweep_id"] in listing and base.id in listing
    assert main(["runs", "show", doc["sweep_id"], "--store", store]) == 0
    shown = capsys.readouterr().out
    assert doc["sweep_id"] in shown and "conditions" in shown
    assert main(["runs", "show", point.id[:6], "--store", store]) == 0
    assert "fingerprint" in capsys.readouterr().out
    # comparing runs whose fingerprints differ in the cache, with no field allowed to differ: refused
    assert main(["runs", "compare", base.id, point.id, "--allow", "none", "--store", store]) == 2
    assert "cache" in capsys.readouterr().err
    assert main(["runs", "compare", base.id, point.id, "--store", store]) == 0


def test_cache_on_unet_pipeline_is_a_clear_error(tmp_path, capsys):
    rc = main(["sweep", "--model", "tiny-sdxl", "--cache", "first-block", "--values", "0.1",
               "--store", str(tmp_path / "s.sqlite"), *FAST])
    err = capsys.readouterr().err
    assert rc == 2
    assert "StableDiffusionXLPipeline" in err and "--option precision" in err


@pytest.mark.parametrize("values", ["-0.1", "abc"])
def test_out_of_range_values(tmp_path, capsys, values):
    rc = main(["sweep", "--cache", "first-block", "--values", values, "--store", str(tmp_path / "s.sqlite")])
    assert rc == 2 and "threshold" in capsys.readouterr().err


def test_interval_below_one(tmp_path, capsys):
    rc = main(["sweep", "--cache", "taylorseer", "--values", "0", "--store", str(tmp_path / "s.sqlite")])
    assert rc == 2 and ">= 1" in capsys.readouterr().err


def test_newer_store_schema_exits_4(tmp_path, capsys):
    import sqlite3

    path = tmp_path / "s.sqlite"
    RunStore.open(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE schema_version SET version = 999")
    assert main(["runs", "--store", str(path)]) == 4
    assert "newer" in capsys.readouterr().err


@pytest.mark.slow
def test_ctrl_c_writes_partial_json_and_says_how_to_resume(tmp_path, capsys, monkeypatch):
    """Reproduction: Ctrl-C on `sweep` exited 130 with no output and no --json."""
    import diffbench.sweep.runner as runner

    orig = runner.run_sweep

    def interrupted(opts, st, on_event=None, **kw):
        def ev(msg: str) -> None:
            if msg.startswith("timed block 2/"):
                raise KeyboardInterrupt

        return orig(opts, st, on_event=ev, **kw)

    monkeypatch.setattr(runner, "run_sweep", interrupted)
    store, out = tmp_path / "s.sqlite", tmp_path / "c.json"
    rc = main(["sweep", "--model", "tiny-flux", "--cache", "first-block", "--values", "0.1", "--store", str(store),
               "--json", str(out), *FAST])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 130
    assert "interrupted" in err and "rerun the same command to resume" in err and str(out) in err
    doc = json.loads(out.read_text())
    assert doc["partial"] is True and doc["interrupted"] is True and doc["points"] == []
    with RunStore.open(store) as st:
        assert st.get_sweep(doc["sweep_id"]).status == "interrupted"  # type: ignore[union-attr]
