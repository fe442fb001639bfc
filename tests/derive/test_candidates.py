"""Which candidates can run here: unavailable ones are skipped with their reason, decided without torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from diffbench.derive.candidates import lossless_candidates, lossy_i_candidates, skipped_by_user, unavailable
from diffbench.engines.config import EngineConfig

CPU = EngineConfig(model="tiny-flux", device="cpu")


def _by_name(cands: list, name: str):  # type: ignore[no-untyped-def]
    return next(c for c in cands if c.name == name)


def test_fp8_and_8bit_attention_on_a_cpu_are_skipped_with_their_reason() -> None:
    cands = lossy_i_candidates(CPU)
    fp8 = unavailable(_by_name(cands, "fp8 linear"), CPU, "FluxPipeline")
    assert fp8 is not None and "FP8" in fp8 and "cpu" in fp8
    sage = unavailable(_by_name(cands, "8-bit attention"), CPU, "FluxPipeline")
    assert sage is not None and "NVIDIA" in sage


def test_int8_dynamic_runs_on_a_cpu_only() -> None:
    int8 = _by_name(lossy_i_candidates(CPU), "int8 linear")
    assert unavailable(int8, CPU, "FluxPipeline") is None
    gpu = CPU.model_copy(update={"device": "cuda"})
    why = unavailable(int8, gpu, "FluxPipeline", probe_gpu=False)
    assert why is not None and "CPU" in why


def test_fused_projections_need_a_pipeline_that_offers_them() -> None:
    fuse = _by_name(lossless_candidates(CPU, []), "fuse-projections")
    assert unavailable(fuse, CPU, "FluxPipeline") is None
    why = unavailable(fuse, CPU, "WanPipeline")
    assert why is not None and "fuse_qkv_projections" in why


def test_a_cpu_tries_no_attention_backend_unless_asked() -> None:
    assert not [c for c in lossless_candidates(CPU, []) if c.name.startswith("attention")]
    named = lossless_candidates(CPU, ["_native_math"])
    assert named[0].update == {"attention_backend": "_native_math"}


def test_skip_names_a_candidate_or_its_family() -> None:
    cands = lossless_candidates(CPU, ["flash", "_flash_3"])
    assert all(skipped_by_user(c, ["attention"]) for c in cands if c.name.startswith("attention"))
    assert skipped_by_user(_by_name(cands, "compile"), ["compile"])
    assert not skipped_by_user(_by_name(cands, "compile"), ["fuse-projections"])


@pytest.mark.e2e  # runs a subprocess
def test_dry_run_prints_the_order_and_imports_no_torch(tmp_path) -> None:  # type: ignore[no-untyped-def]
    code = ("import sys, diffbench.cli.main as m\n"
            "rc = m.main(['derive', '--slo-p99', '3', '--qps', '2', '--out', sys.argv[1], '--dry-run'])\n"
            "import json; print(json.dumps({'rc': rc, 'torch': 'torch' in sys.modules}))\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "d")], capture_output=True, text=True,
                          timeout=120)
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert last == {"rc": 0, "torch": False}, proc.stderr
    order = [line[0] for line in proc.stdout.splitlines() if line[:1] in "①②③④⑤⑥⑦⑧"]
    assert order == sorted(order) and set(order) == set("①②③④⑤⑥⑦⑧")
    assert "fp8 linear: skip:" in proc.stdout
    assert not (tmp_path / "d").exists()  # a dry run writes nothing


def test_bfloat16_on_a_cpu_needs_native_bf16_flags(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from diffbench.derive.candidates import cpu_has_native_bf16

    plain = tmp_path / "plain"
    plain.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n")
    amx = tmp_path / "amx"
    amx.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16\n")
    assert not cpu_has_native_bf16(str(plain)) and cpu_has_native_bf16(str(amx))
    assert not cpu_has_native_bf16(str(tmp_path / "missing"))
    bf16 = _by_name(lossy_i_candidates(CPU), "bfloat16")
    why = unavailable(bf16, CPU, "FluxPipeline")
    assert (why is None) == cpu_has_native_bf16()
    if why is not None:
        assert "bfloat16" in why
