"""A LoRA-mixing workload under load (issue: LoRA-switching workloads): ``--workload`` shapes name adapters
with weights, the service (``serve --lora``) swaps them per request, rows break down by adapter and count
the swaps, and the service exports them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diffbench.cli.main import main
from diffbench.engines.config import EngineConfig, SimParams
from diffbench.load.client.control import read_jsonl
from diffbench.load.client.dialects import image_body
from diffbench.load.client.workload import ShapeMix, Workload
from diffbench.server.background import run_in_background
from diffbench.server.config import ServerConfig

WORKLOAD = """kind: image
shapes:
  - {size: 64x64, steps: 2, weight: 2}
  - {size: 64x64, steps: 2, weight: 1, adapter: a}
  - {size: 64x64, steps: 2, weight: 1, adapter: b, adapter_scale: 0.5}
"""


def test_a_shape_with_an_adapter_sends_the_lora_field_and_has_its_own_label() -> None:
    from diffbench.load.client.workload import RequestSpec

    mix = ShapeMix(width=64, height=64, steps=2, adapter="b", adapter_scale=0.5)
    assert mix.label() == "64x64 s2 lora=b@0.5" and ShapeMix(width=64, height=64, steps=2, adapter="a").label() == \
        "64x64 s2 lora=a"
    spec = RequestSpec(index=0, kind="image", prompt="p", shape=mix, seed=1)
    assert image_body(spec, "vllm-omni")["lora"] == {"name": "b", "scale": 0.5}
    with pytest.raises(ValueError, match="only a kind image workload takes it"):
        Workload(kind="video", shapes=[ShapeMix(width=64, height=64, steps=2, frames=5, adapter="a")])


def test_adapters_need_the_vllm_omni_dialect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wl = tmp_path / "wl.yaml"
    wl.write_text(WORKLOAD)
    rc = main(["load", "--url", "http://127.0.0.1:9", "--workload", str(wl), "--dialect", "sglang", "--rates", "1",
               "--duration", "1"])
    assert rc == 2 and "use --dialect vllm-omni" in capsys.readouterr().err


def _mix_under_load(cfg: ServerConfig, tmp_path: Path) -> None:
    wl = tmp_path / "wl.yaml"
    wl.write_text(WORKLOAD)
    out, jl = tmp_path / "r.json", tmp_path / "r.jsonl"
    with run_in_background(cfg, mode="thread") as url:
        assert main(["load", "--url", url, "--workload", str(wl), "--rates", "4", "--duration", "3", "--arrival",
                     "constant", "--warmup", "1", "--timeout", "120", "--json", str(out), "--jsonl", str(jl)]) == 0
        from diffbench.core.httpget import request

        metrics = request(f"{url}/metrics", deadline_s=10).body.decode()
    (row,) = json.loads(out.read_text())["rates"]
    recs = read_jsonl(jl)
    # latency by adapter: one per-shape row per adapter (and the base model)
    assert set(row["per_shape"]) == {"64x64 s2", "64x64 s2 lora=a", "64x64 s2 lora=b@0.5"}
    assert sum(v["n"] for v in row["per_shape"].values()) == row["n"] == len(recs)
    # the swaps, recounted from the records' adapter_swap stage; the mix alternates, so some swapped
    swapped = sum(1 for r in recs if r.outcome == "ok" and r.server_stages_s.get("adapter_swap", 0.0) > 0)
    assert row["adapter_swaps"] == swapped and 0 < swapped <= row["n_ok"]
    # the service counted at least those (and the warm-ups' swaps) and timed each
    exported = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                   if line.startswith("diffusion_adapter_swaps_total{"))
    count = next(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                 if line.startswith("diffusion_adapter_swap_duration_seconds_count{"))
    assert exported == count >= swapped


@pytest.mark.slow
def test_a_lora_mix_against_the_sim_service(tmp_path: Path) -> None:
    sim = SimParams(realtime=True, compile_s=0.0, jitter=0.0, tail_prob=0.0, step_s=0.001)
    _mix_under_load(ServerConfig(engine=EngineConfig(engine="sim", sim=sim, adapters={"a": "/a", "b": "/b"})),
                    tmp_path)


@pytest.mark.slow  # two PEFT adapters made offline, tiny-flux served on the CPU
def test_two_tiny_adapters_swapped_under_load(tmp_path: Path) -> None:
    from tests.lora_adapters import make_adapters

    from diffbench.engines.adapters import parse_adapters

    made = make_adapters(tmp_path / "loras")
    cfg = ServerConfig(engine=EngineConfig(engine="diffusers", model="tiny-flux",
                                           adapters=parse_adapters([f"{k}={v}" for k, v in made.items()])))
    _mix_under_load(cfg, tmp_path)
