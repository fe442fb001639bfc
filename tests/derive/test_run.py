"""The derivation executed on tiny-flux (CPU): every step recorded, Ctrl-C keeps the finished steps and a
rerun reuses them, a changed deployment regenerates the baseline, and what derive emits starts a service
that the probe passes against the emitted references."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from diffbench.derive.measure import compare_configs
from diffbench.derive.models import DeriveConfig, DeriveResult
from diffbench.derive.run import DeriveInterrupted, run_derive
from diffbench.engines.config import EngineConfig
from diffbench.engines.registry import create_engine
from diffbench.store.runs import RunStore

pytestmark = pytest.mark.slow
SRC = Path(__file__).resolve().parents[2] / "src"


def _cfg(out: Path, **kw: object) -> DeriveConfig:
    base: dict[str, object] = dict(
        engine=EngineConfig(model="tiny-flux", threads=1), width=64, height=64, steps=4, slo_p99_s=30.0, qps=0.05,
        runs=4, max_warmup=4, cache_values=["0.3"], skip=["compile", "bfloat16"], out=out)
    base.update(kw)
    return DeriveConfig(**base)  # type: ignore[arg-type]


def test_every_step_is_recorded_with_a_decision_and_reason(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path / "d")
    with RunStore.open(tmp_path / "runs.sqlite", mkdir=True) as st:
        res = run_derive(cfg, st)
    assert not res.partial and not res.interrupted
    on_disk = DeriveResult.model_validate_json((cfg.out / "derive.json").read_text())
    assert [s.candidate for s in on_disk.steps] == [s.candidate for s in res.steps]
    stages = [s.stage for s in res.steps]
    assert stages == sorted(stages) and set(stages) == {1, 2, 3, 4, 5, 6, 7, 8}
    assert all(s.decision and s.reason for s in res.steps)
    skipped = {s.candidate: s.reason for s in res.steps if s.decision == "skipped"}
    assert "FP8" in skipped["fp8 linear"] and skipped["compile"] == "skipped by --skip"
    measured = [s for s in res.steps if s.measured is not None]
    assert measured, "nothing was measured"
    for s in measured:  # the interval and the floor are beside every measured speed-up
        m = s.measured
        assert m is not None and m.ci[0] <= m.speedup <= m.ci[1] and m.noise_floor is not None
    assert res.final is not None and res.final.message
    assert res.serve_command and "--model tiny-flux" in res.serve_command
    for name in ("calibration", "references", "serve_command", "bench_final"):
        assert (cfg.out / res.outputs[name]).exists()
    script = (cfg.out / res.outputs["serve_command"]).read_text().splitlines()[-1]
    assert script == f'exec {res.serve_command} "$@"'  # extra arguments (--port) reach serve


def test_ctrl_c_keeps_finished_steps_and_a_rerun_reuses_them(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path / "d", cache_values=["0.3"])

    def stop_at_lossy(msg: str) -> None:
        if msg.startswith("③"):
            raise KeyboardInterrupt

    with RunStore.open(tmp_path / "runs.sqlite", mkdir=True) as st:
        with pytest.raises(DeriveInterrupted) as info:
            run_derive(cfg, st, event=stop_at_lossy)
        partial = DeriveResult.model_validate_json((cfg.out / "derive.json").read_text())
        assert partial.partial and partial.interrupted
        done = [s for s in partial.steps if s.measured is not None and s.stage == 2]
        assert done and [s.candidate for s in info.value.result.steps] == [s.candidate for s in partial.steps]
        res = run_derive(cfg, st)
    again = {s.candidate: s for s in res.steps if s.stage == 2 and s.measured is not None}
    for s in done:
        m = again[s.candidate].measured
        assert m is not None and m.resumed and m.run_id == s.measured.run_id  # type: ignore[union-attr]


def test_a_changed_fingerprint_regenerates_the_baseline(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path / "d", runs=2)
    a = EngineConfig(model="tiny-flux", threads=1)
    b = a.model_copy(update={"dtype": "bfloat16"})  # another deployment: another fingerprint
    cand = {"fused": a.model_copy(update={"fuse_projections": True})}
    with RunStore.open(tmp_path / "runs.sqlite", mkdir=True) as st:
        m1, r1 = compare_configs(cfg, st, a, cand, create_engine, _quiet)
        _, r2 = compare_configs(cfg, st, b, {"fused": b.model_copy(update={"fuse_projections": True})},
                                create_engine, _quiet)
        m3, r3 = compare_configs(cfg, st, a, cand, create_engine, _quiet)
    assert r2.baseline.run_id != r1.baseline.run_id and not r2.baseline.resumed
    # the same deployment again finds its baseline and its point in the store
    assert r3.baseline.run_id == r1.baseline.run_id and r3.baseline.resumed
    assert m3["fused"].resumed and m3["fused"].run_id == m1["fused"].run_id
    assert r1.baseline.conditions.precision == "float32" and r2.baseline.conditions.precision == "bfloat16"


def _quiet(_m: str) -> None:
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.e2e
def test_the_emitted_serve_command_passes_the_probe_with_the_emitted_references(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path / "d")
    with RunStore.open(tmp_path / "runs.sqlite", mkdir=True) as st:
        res = run_derive(cfg, st)
    args = shlex.split(res.serve_command or "")
    assert args[:2] == ["diffbench", "serve"]
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "diffbench.cli.main", *args[1:], "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline
            time.sleep(0.2)
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:  # the calibration's baselines are served
            metrics = r.read().decode()
        assert 'diffusion_denoise_step_baseline_seconds{model="tiny-flux",shape="64x64"}' in metrics
        probe = subprocess.run(
            [sys.executable, "-m", "diffbench.cli.main", "probe", "--url", url, "--reference",
             str(cfg.out / res.outputs["references"]), "--once", "--psnr-threshold", "30"],
            env=env, capture_output=True, text=True, timeout=300)
        assert probe.returncode == 0, probe.stdout + probe.stderr
        assert " ok " in probe.stdout
    finally:
        proc.terminate()
        served, _ = proc.communicate(timeout=60)
    assert "diffbench serve:" in served
    assert "measured on another deployment" not in served  # the calibration is this deployment's


def test_a_missed_slo_tries_the_few_step_model_without_a_step_cache(tmp_path: Path) -> None:
    # an SLO no CPU meets: ⑤ misses it, no ledger for layouts (no --gpu), ⑥ redoes ② and ③ on the few-step model
    cfg = _cfg(tmp_path / "d", slo_p99_s=0.001, qps=1.0, few_step_model="tiny-flux", few_step_steps=2,
               skip=["compile", "bfloat16", "fuse-projections", "int8"])
    with RunStore.open(tmp_path / "runs.sqlite", mkdir=True) as st:
        res = run_derive(cfg, st)
    by = {(s.stage, s.candidate): s for s in res.steps}
    assert by[(5, "p99 with queueing")].reason.startswith("misses the SLO")
    assert by[(5, "multi-GPU layouts")].decision == "skipped" and "--gpu" in by[(5, "multi-GPU layouts")].reason
    six = [s for s in res.steps if s.stage == 6]
    assert any(s.candidate.startswith("few-step model tiny-flux (2 steps)") for s in six)
    cache = next(s for s in six if s.candidate == "step cache")
    assert cache.decision == "skipped" and "few steps" in cache.reason
    assert "--default-steps 2" in (res.serve_command or "")
