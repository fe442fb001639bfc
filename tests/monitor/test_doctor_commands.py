"""``doctor``'s confirming commands run as printed against the service they diagnose (issue 24 item 11).

A ``serve --engine sim`` (in this process) answers a few requests at its default size (a shape it labels); ``doctor p99 --metrics URL`` then prints
its checks. Each ``diffbench bench`` command it prints is run as printed (its trailing ``#`` note dropped as a
shell would, with ``--runs 2 --warmup 0`` appended to keep it short: the last value of an option wins): it
must target the service (``--engine http --url``, the model id the service reports) and succeed. Before,
it was ``diffbench bench --model sim ...``: a local run of a model directory named ``sim`` (exit 2). The
commands that need a local pipeline (``--compile``, ``--device``) name the engine the service reports.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator

import pytest

from diffbench.cli.main import main
from diffbench.core.httpget import request
from diffbench.engines.registry import EngineConfig, SimParams
from diffbench.server.background import run_in_background
from diffbench.server.config import ServerConfig

SIM = SimParams(realtime=False, compile_s=0.0, jitter=0.0, tail_prob=0.0)  # type: ignore[call-arg]


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with run_in_background(ServerConfig(engine=EngineConfig(engine="sim", sim=SIM)), mode="thread") as url:
        body = json.dumps({"prompt": "a fox", "size": "256x256", "num_inference_steps": 2}).encode()
        for _ in range(3):
            r = request(url + "/v1/images/generations", deadline_s=30, method="POST", body=body,
                        headers={"Content-Type": "application/json"})
            assert r.status == 200, r.body[:200]
        yield url


def test_confirming_commands_run_as_printed_against_the_service(sim_url, tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "doctor.json"
    assert main(["doctor", "p99", "--metrics", sim_url, "--json", str(out)]) == 0
    card = json.loads(request(sim_url + "/v1/models", deadline_s=10).body)["data"][0]
    commands = [c["command"] for c in json.loads(out.read_text())["checks"]]
    benches = [c for c in commands if c.startswith("diffbench bench --engine http")]
    assert benches, commands
    # what only a local pipeline can change (compile, device): a local run of the engine the service reports
    local = [c for c in commands if "diffbench bench" in c and "--engine http" not in c]
    assert local and all(f"diffbench bench --engine {card['engine']} --model {card['id']} " in c for c in local)
    monkeypatch.chdir(tmp_path)  # the commands write their --json beside them
    for cmd in benches:
        argv = shlex.split(cmd, comments=True)[1:]
        assert argv[argv.index("--url") + 1] == sim_url and argv[argv.index("--model") + 1] == card["id"]
        assert argv[argv.index("--steps") + 1] == str(card["default_steps"])
        capsys.readouterr()
        rc = main([*argv, "--runs", "2", "--warmup", "0", "--no-repro", "-q"])
        assert rc == 0, (cmd, capsys.readouterr().err)
    loads = [c for c in commands if c.startswith("diffbench load")]
    assert all(f"--url {sim_url} " in c for c in loads), loads


@pytest.mark.parametrize("symptom", ["p99", "artifacts"])
def test_sweep_commands_of_a_sim_service_name_a_pipeline_placeholder(symptom, sim_url, tmp_path) -> None:
    """A sim service stands for no pipeline and `sweep` has no sim engine: its sweep lines say PIPELINE_DIR
    (with a note) and the service's default steps (was: `diffbench sweep --model sim ...`, exit 2 as printed);
    local bench lines carry the service's steps too (was: the local default of 28)."""
    out = tmp_path / "doctor.json"
    assert main(["doctor", symptom, "--metrics", sim_url, "--json", str(out)]) == 0
    card = json.loads(request(sim_url + "/v1/models", deadline_s=10).body)["data"][0]
    commands = [c["command"] for c in json.loads(out.read_text())["checks"] if c.get("command")]
    sweeps = [shlex.split(c, comments=True) for c in commands if c.startswith("diffbench sweep")]
    assert sweeps, commands
    for argv in sweeps:
        assert argv[argv.index("--model") + 1] == "PIPELINE_DIR"
        assert argv[argv.index("--steps") + 1] == str(card["default_steps"])
    assert all("# PIPELINE_DIR:" in c for c in commands if c.startswith("diffbench sweep"))
    for c in commands:
        if c.startswith("diffbench bench --engine sim"):
            argv = shlex.split(c, comments=True)
            assert argv[argv.index("--steps") + 1] == str(card["default_steps"])
