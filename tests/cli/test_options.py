"""The shared pipeline flags (``--quantization``, ``--fuse-projections``, ``--offload``) of bench, serve and sweep."""

from __future__ import annotations

import pytest

from diffbench.cli.main import main
from diffbench.cli.options import pipeline_knobs
from diffbench.errors import UsageError


def test_pipeline_knobs_accept_every_mode_on_a_pipeline_engine():
    for mode in ("none", "int8-dynamic", "fp8"):
        pipeline_knobs("diffusers", mode, True, "sequential")
    pipeline_knobs("sim", "none", False)
    with pytest.raises(UsageError, match="--quantization 'int8'"):
        pipeline_knobs("diffusers", "int8", False)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [(["--engine", "sim", "--quantization", "int8-dynamic"], "--quantization: the sim engine has no pipeline"),
     (["--engine", "sim", "--fuse-projections"], "--fuse-projections: the sim engine has no pipeline"),
     (["--engine", "http", "--url", "http://127.0.0.1:9", "--fuse-projections"], "--fuse-projections: configures"),
     (["--quantization", "fp8"], "--quantization fp8 needs an NVIDIA GPU with FP8 tensor cores"),
     (["--model", "tiny-flux", "--quantization", "int8-dynamic", "--dtype", "float16"], "is not float32")],
)
def test_bench_refuses_a_knob_that_cannot_run(args, fragment, capsys, one_line_error):
    rc = main(["bench", *args, "--steps", "1", "--height", "64", "--width", "64", "--runs", "2"])
    one_line_error(rc, capsys.readouterr().err, 2, [fragment])
