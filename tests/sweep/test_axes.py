"""The sweep's one axis from --cache/--option, and the fingerprint field each axis changes."""

from __future__ import annotations

import pytest

from diffbench.engines.knobs import CACHE_AXES, OPTION_AXES
from diffbench.errors import UsageError
from diffbench.sweep.axes import AXIS_FIELD, axis_name


def test_axis_name():
    assert axis_name("pab", None) == "pab"
    assert axis_name(None, "precision") == "precision"
    for cache, option in ((None, None), ("pab", "compile"), ("teacache", None), (None, "sparsity")):
        with pytest.raises(UsageError):
            axis_name(cache, option)


def test_http_sweep_may_name_any_lower_case_server_option():
    assert axis_name(None, "cfg-parallel", any_option=True) == "cfg-parallel"
    with pytest.raises(UsageError, match="lower case"):
        axis_name(None, "CFG", any_option=True)


def test_every_axis_changes_one_fingerprint_field():
    assert set(AXIS_FIELD) == set(CACHE_AXES) | set(OPTION_AXES)
    assert {AXIS_FIELD[a] for a in CACHE_AXES} == {"cache"}
    assert AXIS_FIELD["attention-backend"] == "attention_backend"


def test_quantization_and_fused_projections_are_option_axes():
    from diffbench.engines.knobs import parse_values

    assert AXIS_FIELD["quantization"] == "quantization"
    assert AXIS_FIELD["fuse-projections"] == "fused_projections"
    assert axis_name(None, "quantization") == "quantization"
    assert parse_values("quantization", "none,INT8-dynamic,fp8") == ["none", "int8-dynamic", "fp8"]
    assert parse_values("fuse-projections", "off,on") == ["off", "on"]
    with pytest.raises(UsageError, match="quantization must be one of none, int8-dynamic, fp8"):
        parse_values("quantization", "int4")
    with pytest.raises(UsageError, match="fuse-projections takes on or off"):
        parse_values("fuse-projections", "maybe")


def test_each_value_gets_its_engine_config_and_predicted_fingerprint():
    from diffbench.engines.config import EngineConfig
    from diffbench.sweep.runner import _point_config, _predicted_fp

    base = EngineConfig(model="tiny-flux")
    assert _point_config(base, "quantization", "int8-dynamic").quantization == "int8-dynamic"
    assert _point_config(base, "fuse-projections", "on").fuse_projections is True
    fp = {"model": "tiny-flux", "precision": "float32"}
    assert _predicted_fp(fp, "quantization", "quantization", "int8-dynamic") == {**fp, "quantization": "int8-dynamic"}
    assert _predicted_fp(fp, "fuse-projections", "fused_projections", "on") == {**fp, "fused_projections": True}
    # the default of an optional field is its absence (as deployment_fingerprint leaves it out)
    assert _predicted_fp({**fp, "quantization": "fp8"}, "quantization", "quantization", "none") == fp
    assert _predicted_fp(fp, "fuse-projections", "fused_projections", "off") == fp


def test_sweep_option_quantization_parses_through_the_cli(tmp_path, monkeypatch, capsys):
    from diffbench.cli.main import main

    seen = []

    def stop(opts, engine=None):
        seen.append(opts)
        raise UsageError("stopped after parsing")

    monkeypatch.setattr("diffbench.sweep.runner.preflight", stop)
    rc = main(["sweep", "--option", "quantization", "--values", "int8-dynamic", "--fuse-projections",
               "--store", str(tmp_path / "s.sqlite")])
    assert rc == 2 and "stopped after parsing" in capsys.readouterr().err
    (opts,) = seen
    assert opts.axis == "quantization" and opts.values == ["int8-dynamic"]
    assert opts.engine.fuse_projections is True and opts.engine.quantization == "none"
