"""The built-in catalog, user overrides and the errors a bad catalog file gets (field and line)."""

from __future__ import annotations

import pytest

from diffbench.errors import InputError, ModelError, UsageError
from diffbench.ledger import LedgerConfig, evaluate, get_gpu, get_model, load_catalog

MODELS = ["flux.1-dev", "flux.1-schnell", "sdxl-base", "sd3.5-large", "sd3.5-medium", "wan2.1-1.3b", "wan2.1-14b",
          "wan2.2-a14b", "qwen-image", "hunyuanvideo", "cogvideox-5b"]
GPUS = ["h100-sxm", "h100-pcie", "h200", "b200", "a100-sxm-80gb", "l40s", "rtx-4090", "l4", "a10g"]


def test_builtin_has_the_planning_set():
    cat = load_catalog()
    assert set(MODELS) <= set(cat.models)
    assert set(GPUS) <= set(cat.gpus)
    # NVIDIA datasheets: dense BF16 / FP8 peaks and memory
    h100 = cat.gpus["h100-sxm"]
    assert (h100.bf16_tflops, h100.fp8_tflops, h100.memory_gib, h100.nvlink_gbps) == (989, 1979, 80, 450)
    assert cat.gpus["a100-sxm-80gb"].fp8_tflops is None
    assert cat.gpus["l40s"].nvlink_gbps is None
    assert cat.gpus["b200"].provisional


def test_unknown_model_and_gpu_suggest_closest():
    cat = load_catalog()
    with pytest.raises(ModelError, match=r"unknown model 'flux-dev'.*did you mean 'flux.1-dev'.*valid --model"):
        get_model(cat, "flux-dev")
    with pytest.raises(UsageError, match=r"unknown GPU 'h100'.*did you mean .*'h100-sxm'.*valid --gpu.*l40s"):
        get_gpu(cat, "h100")


def test_user_catalog_extends_and_overrides(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text(
        "gpus:\n"
        "  h100-sxm:\n"
        "    bf16_tflops: 900\n"
        "  my-card:\n"
        "    display_name: My card\n"
        "    arch: ada\n"
        "    bf16_tflops: 200\n"
        "    memory_gib: 32\n"
        "    mem_bw_gbps: 1000\n"
        "    pcie_gbps: 25\n"
        "    source: our lab measurement\n"
    )
    cat = load_catalog(f)
    assert cat.gpus["h100-sxm"].bf16_tflops == 900
    assert cat.gpus["h100-sxm"].fp8_tflops == 1979  # untouched fields survive
    r = evaluate(cat, LedgerConfig(model="sdxl-base", width=1024, height=1024, gpu="my-card"))
    assert r.gpu_name == "My card"


def test_invalid_field_names_field_and_line(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("gpus:\n  h100-sxm:\n    bf16_tflops: fast\n")
    with pytest.raises(InputError) as exc:
        load_catalog(f)
    msg = str(exc.value)
    assert "gpus.h100-sxm.bf16_tflops" in msg and f"{f}:3" in msg


def test_unknown_field_and_missing_field(tmp_path):
    f = tmp_path / "typo.yaml"
    f.write_text("models:\n  flux.1-dev:\n    default_stepz: 10\n")
    with pytest.raises(InputError, match=r"typo.yaml:3.*default_stepz"):
        load_catalog(f)
    g = tmp_path / "missing.yaml"
    g.write_text("gpus:\n  new-gpu:\n    display_name: X\n    arch: ada\n")
    with pytest.raises(InputError, match=r"missing.yaml:2: field gpus.new-gpu.bf16_tflops: Field required"):
        load_catalog(g)


def test_yaml_syntax_error_and_missing_file(tmp_path):
    f = tmp_path / "broken.yaml"
    f.write_text("gpus:\n  h100-sxm: {bf16_tflops: 1\n  x: 2\n")
    with pytest.raises(InputError, match=r"broken.yaml:\d+: invalid YAML"):
        load_catalog(f)
    with pytest.raises(InputError, match="file not found"):
        load_catalog(tmp_path / "nope.yaml")


def test_partial_override_deep_merges_onto_the_builtin_entry(tmp_path):
    """An override of only ``denoiser.blocks`` keeps the rest of the built-in denoiser (it once kept nothing else)."""
    f = tmp_path / "blocks.yaml"
    f.write_text(
        "models:\n"
        "  flux.1-dev:\n"
        "    denoiser:\n"
        "      blocks:\n"
        "        - {name: double-stream, count: 10, tok_params_d2: 12, weights_d2: 36}\n"
    )
    builtin = load_catalog().models["flux.1-dev"]
    mine = load_catalog(f).models["flux.1-dev"]
    assert [(b.name, b.count) for b in mine.denoiser.blocks] == [("double-stream", 10)]  # lists are replaced
    for field in ("hidden", "heads", "head_dim", "params", "extra_params", "source"):
        assert getattr(mine.denoiser, field) == getattr(builtin.denoiser, field), field
    assert mine.vae == builtin.vae and mine.text_encoders == builtin.text_encoders
    # the override takes effect: 10 of the 57 blocks -> denoise FLOPs per forward drop accordingly
    cfg = LedgerConfig(model="flux.1-dev", width=1024, height=1024, gpu="h100-sxm")
    assert evaluate(load_catalog(f), cfg).forward.total < evaluate(load_catalog(), cfg).forward.total


def test_error_in_a_partial_override_names_the_user_file(tmp_path):
    f = tmp_path / "partial.yaml"
    f.write_text(
        "models:\n"
        "  flux.1-dev:\n"
        "    denoiser:\n"
        "      blocks:\n"
        "        - {name: double-stream, count: -1, tok_params_d2: 12, weights_d2: 36}\n"
        "        - {name: single-stream, count: 38, tok_params_d2: 12}\n"
    )
    with pytest.raises(InputError) as exc:
        load_catalog(f)
    msg = str(exc.value)
    assert f"{f}:5" in msg and "denoiser.blocks.0.count" in msg and "catalog.yaml" not in msg
    f.write_text(f.read_text().replace("count: -1", "count: 19"))
    with pytest.raises(InputError) as exc:  # a field missing from the user's list entry: the user's line
        load_catalog(f)
    msg = str(exc.value)
    assert f"{f}:6" in msg and "blocks.1.weights_d2" in msg and "catalog.yaml" not in msg


STEP_COUNT_EXCEPTIONS = {"flux.1-schnell": 4}
"""Timestep-distilled checkpoints whose model card passes fewer steps than the pipeline class's default."""


@pytest.mark.slow
@pytest.mark.parametrize("model_id", sorted(load_catalog().models))
def test_default_steps_match_the_cited_diffusers_pipeline(model_id) -> None:
    """Each model's default step count is the ``num_inference_steps`` default of the diffusers pipeline its
    catalog entry cites (read from the installed diffusers, not from the catalog)."""
    import importlib
    import inspect
    import re

    pytest.importorskip("diffusers")
    spec = load_catalog().models[model_id]
    m = re.search(r"github\.com/huggingface/diffusers/blob/[0-9a-f]+/src/(diffusers/pipelines/\S+?)\.py#L\d+",
                  spec.default_steps_source)
    assert m, spec.default_steps_source
    module = importlib.import_module(m.group(1).replace("/", "."))
    defaults = {obj.__call__.__qualname__: inspect.signature(obj.__call__).parameters["num_inference_steps"].default
                for _, obj in inspect.getmembers(module, inspect.isclass)
                if obj.__module__ == module.__name__ and "num_inference_steps" in inspect.signature(obj.__call__).parameters}
    assert len(set(defaults.values())) == 1, defaults
    pipeline_default = next(iter(defaults.values()))
    assert spec.default_steps == STEP_COUNT_EXCEPTIONS.get(model_id, pipeline_default)


def test_amd_gpus_backends_and_hardware_rules():
    cat = load_catalog()
    mi = cat.gpus["mi300x"]
    # AMD MI300X data sheet: 1,307.4 TF BF16 and 2,614.9 TF FP8 dense, 192 GB, 5.3 TB/s
    assert (mi.arch, mi.vendor, mi.bf16_tflops, mi.fp8_tflops, mi.memory_gib) == ("cdna3", "amd", 1307.4, 2614.9, 192)
    assert cat.gpus["mi355x"].arch == "cdna4" and cat.gpus["h100-sxm"].vendor == "nvidia"
    assert "cdna3" in cat.optimizations.fp8_linear.archs
    assert not {"cdna3", "cdna4"} & set(cat.optimizations.int4_linear.requires_arch)
    kw = dict(model="flux.1-dev", width=1024, height=1024, steps=28)
    with pytest.raises(UsageError, match="--attention fa3: needs a hopper GPU"):
        evaluate(cat, LedgerConfig(**kw, gpu="mi300x", attention="fa3"))
    with pytest.raises(UsageError, match="--attention ck: needs a cdna3/cdna4 GPU"):
        evaluate(cat, LedgerConfig(**kw, gpu="h100-sxm", attention="ck"))
    ck = evaluate(cat, LedgerConfig(**kw, gpu="mi300x", attention="ck"))
    assert ck.etas.attention == pytest.approx(cat.optimizations.attention_backends["ck"].eta)
    # the sdpa resolution rules name backends of the catalog, one per architecture at least for AMD
    rules = {(r.torch, r.arch): r.backend for r in cat.optimizations.sdpa_resolution}
    assert rules[("any", "cdna3")] == "ck" and rules[("2.5", "hopper")] == "cudnn"


def test_eight_bit_attention_may_exceed_the_bf16_peak_only_on_8_bit_tensor_cores(tmp_path):
    ok = tmp_path / "ok.yaml"
    ok.write_text("optimizations:\n  attention_backends:\n    sage:\n      eta_by_arch: {ada: 1.6}\n")
    assert load_catalog(ok).optimizations.attention_backends["sage"].eta_by_arch["ada"] == 1.6
    bad = tmp_path / "bad.yaml"
    bad.write_text("optimizations:\n  attention_backends:\n    flash2:\n      eta: 1.2\n")
    with pytest.raises(InputError, match=r"attention_backends.flash2.*eta 1.2: must be in \(0, 1\]"):
        load_catalog(bad)
    rule = tmp_path / "rule.yaml"
    rule.write_text("optimizations:\n  sdpa_resolution:\n    - {torch: any, arch: ada, backend: flash9, source: x}\n")
    with pytest.raises(InputError, match="backend 'flash9' is not an attention backend"):
        load_catalog(rule)
