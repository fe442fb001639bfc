"""Every bad input of ``diffbench plan`` in one table: args → exit code → message fragments.

``--qps inf`` once gave a traceback and messages named ``--slo-p99-s`` / ``--quality-budget-db``
(flags that do not exist); every numeric option is tried with nan, inf and out-of-range values.
"""

from __future__ import annotations

import pytest

from diffbench.cli.main import main

BASE = ["--model", "flux.1-dev", "--size", "1024x1024", "--gpu", "h100-sxm", "--slo-p99", "5", "--qps", "1"]


def _with(**change: str) -> list[str]:
    argv = list(BASE)
    for k, v in change.items():
        flag = "--" + k.replace("_", "-")
        if flag in argv:
            argv[argv.index(flag) + 1] = v
        else:
            argv += [flag, v]
    return argv


ROWS: list[tuple[list[str], int, list[str]]] = [
    (_with(qps="inf"), 2, ["--qps inf", "finite"]),
    (_with(gpu_hour_price="-1"), 2, ["--gpu-hour-price must be >= 0", "got -1"]),
    (_with(gpu_hour_price="nan"), 2, ["--gpu-hour-price must be a finite price per GPU-hour", "got nan"]),
    (_with(qps="nan"), 2, ["--qps nan", "finite"]),
    (_with(qps="0"), 2, ["--qps 0", "> 0"]),
    (_with(qps="-3"), 2, ["--qps -3", "> 0"]),
    (_with(slo_p99="-1"), 2, ["--slo-p99 -1", "> 0"]),
    (_with(slo_p99="nan"), 2, ["--slo-p99 nan", "finite"]),
    (_with(slo_p99="inf"), 2, ["--slo-p99 inf", "finite"]),
    (_with(quality_budget="-3"), 2, ["--quality-budget -3", "(0, 100]"]),
    (_with(quality_budget="nan"), 2, ["--quality-budget nan", "(0, 100]"]),
    (_with(quality_budget="inf"), 2, ["--quality-budget inf", "(0, 100]"]),
    (_with(headroom="0.5"), 2, ["--headroom 0.5", "[1, 10]"]),
    (_with(headroom="nan"), 2, ["--headroom nan", "[1, 10]"]),
    (_with(cfg="-1"), 2, ["--cfg -1", "[0, 50]"]),
    (_with(cfg="nan"), 2, ["--cfg nan", "finite"]),
    (_with(steps="0"), 2, ["--steps 0", "[1, 1000]"]),
    (_with(steps="1000000"), 2, ["--steps 1000000", "[1, 1000]"]),
    (_with(text_tokens="0"), 2, ["--text-tokens 0", "[1, 8192]"]),
    (_with(gpus_per_node="0"), 2, ["--gpus-per-node 0", "[1, 72]"]),
    (_with(gpus_per_node="1000"), 2, ["--gpus-per-node 1000", "[1, 72]"]),
    (_with(size="100000x100000"), 2, ["--size 100000x100000", "16384"]),
    (_with(size="1020x1024"), 2, ["--size", "width 1020 is not a multiple of 16"]),
    (_with(json="{tmp}/typo/p.json"), 2, ["--json", "does not exist", "--mkdir"]),
    # the queueing-aware count is simulated up to 100,000 instances; past that, a clear refusal
    (_with(qps="100000", slo_p99="1", quality_budget="30"), 2, ["--qps 100000", "100,000 instances", "pools"]),
    # a rate so low that the simulated arrival times lose the service time's precision (p99 0.00 s once)
    (_with(qps="1e-300"), 2, ["--qps 1e-300", "[0.0001, 1e+06]"]),
    (_with(text_tokens="8192"), 2, ["--text-tokens 8192", "at most 512"]),
    ([*BASE, "--lossy"], 2, ["--lossy", "--quality-budget", "lossless"]),
    ([*BASE, "--catalog", "{tmp}/huge_peaks.yaml"], 2, ["huge_peaks.yaml:3", "gpus.h100-sxm.bf16_tflops"]),
    ([*BASE, "--replace-anchors"], 2, ["--replace-anchors", "--catalog"]),
]


@pytest.mark.parametrize(("args", "code", "fragments"), ROWS, ids=[" ".join(r[2][:1]) for r in ROWS])
def test_bad_input(args, code, fragments, tmp_path, capsys, one_line_error) -> None:
    (tmp_path / "huge_peaks.yaml").write_text("gpus:\n  h100-sxm:\n    bf16_tflops: 1.0e+300\n"
                                              "    fp8_tflops: 1.0e+300\n    mem_bw_gbps: 1.0e+300\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    rc = main(["plan", *argv])
    err = capsys.readouterr().err
    one_line_error(rc, err, code, fragments)
    for ghost in ("--slo-p99-s", "--quality-budget-db"):  # flags that do not exist are never named
        assert ghost not in err
    assert not (tmp_path / "typo").exists()


def test_one_gpu_per_node_gives_a_reason(tmp_path) -> None:
    """`--gpus-per-node 1` with a missed SLO: the multi-GPU step says why it cannot split the request."""
    import json

    out = tmp_path / "p.json"
    assert main(["plan", *_with(slo_p99="1", gpus_per_node="1"), "--json", str(out)]) == 1  # the SLO is missed
    step = next(s for s in json.loads(out.read_text())["steps"] if s["name"] == "multi-GPU")
    assert step["applied"] is False
    assert "1 GPU per node" in step["reason"] and "--gpus-per-node" in step["reason"]
    assert not step["reason"].rstrip().endswith("node")  # a sentence with its reason, not a dangling clause


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [("slo_p99_s", -1.0, "--slo-p99"), ("quality_budget_db", float("nan"), "--quality-budget"),
     ("qps", float("inf"), "--qps"), ("headroom", 0.5, "--headroom")],
)
def test_library_config_errors_name_the_real_flag(field, value, flag) -> None:
    """PlanConfig itself refuses nan/inf, and its errors are mapped to flags that exist."""
    from pydantic import ValidationError

    from diffbench.cli.options import config_error
    from diffbench.plan.models import PlanConfig

    kw = dict(model="flux.1-dev", width=1024, height=1024, gpu="h100-sxm", slo_p99_s=5.0, qps=1.0)
    kw[field] = value
    with pytest.raises(ValidationError) as exc:
        PlanConfig(**kw)
    msg = str(config_error(exc.value))
    assert msg.startswith(f"{flag} ") and "-s " not in msg.split(":")[0] and "-db" not in msg


# --workload, --service-from, --service-cv. Files named in FILES are written to {tmp} first.
NO_SIZE = [a for a in BASE if a not in ("--size", "1024x1024")]
FILES = {
    "bad.yaml": "shapes: [unclosed\n",
    "typo.yaml": "shapes:\n  - {width: 1024, height: 1024, steps: 28, wieght: 2}\n",
    "empty.yaml": "shapes: []\n",
    "odd.yaml": "shapes:\n  - {width: 1020, height: 1024, steps: 28}\n",
    "plan.json": '{"kind": "diffbench.plan", "latency_s": 1.0}',
    "nolat.json": '{"kind": "diffbench.bench", "shapes": []}',
    "broken.json": '{"kind": "diffbench.bench", ',
    "one.yaml": "shapes:\n  - {width: 1024, height: 1024, steps: 28}\n",
}
FILE_ROWS: list[tuple[list[str], int, list[str]]] = [
    ([*NO_SIZE, "--workload", "{tmp}/missing.yaml"], 2, ["--workload", "missing.yaml", "not found"]),
    ([*NO_SIZE, "--workload", "{tmp}/bad.yaml"], 2, ["--workload", "bad.yaml", "not valid"]),
    ([*NO_SIZE, "--workload", "{tmp}/typo.yaml"], 2, ["--workload", "wieght"]),
    ([*NO_SIZE, "--workload", "{tmp}/empty.yaml"], 2, ["--workload", "shapes"]),
    ([*NO_SIZE, "--workload", "{tmp}/odd.yaml"], 2, ["--workload", "1020x1024", "multiple of 16"]),
    ([*BASE, "--workload", "{tmp}/typo.yaml"], 2, ["--size", "--workload", "exactly one"]),
    (NO_SIZE, 2, ["--size", "--workload", "exactly one"]),
    # fresh-user trial: an image workload on a video model was planned as video; --frames/--steps were ignored
    ([*[a if a != "flux.1-dev" else "wan2.1-14b" for a in NO_SIZE], "--workload", "{tmp}/one.yaml"], 2,
     ["an image workload for Wan2.1-T2V-14B, a video model", "kind: video"]),
    ([*NO_SIZE, "--workload", "{tmp}/one.yaml", "--frames", "9"], 2, ["--steps/--frames with --workload"]),
    ([*BASE, "--service-from", "{tmp}/plan.json"], 2, ["--service-from", "diffbench.plan", "not a bench result"]),
    ([*BASE, "--service-from", "{tmp}/nolat.json"], 2, ["--service-from", "no latencies"]),
    ([*BASE, "--service-from", "{tmp}/broken.json"], 2, ["--service-from", "not valid JSON"]),
    ([*BASE, "--service-from", "{tmp}/none.json"], 2, ["--service-from", "not found"]),
    ([*BASE, "--service-cv", "2"], 2, ["--service-cv 2", "[0, 1]"]),
    ([*BASE, "--service-cv", "-0.1"], 2, ["--service-cv -0.1", "[0, 1]"]),
    ([*BASE, "--service-cv", "nan"], 2, ["--service-cv nan", "finite"]),
    ([*BASE, "--service-cv", "0.2", "--service-from", "{tmp}/plan.json"], 2, ["--service-cv", "--service-from"]),
]


@pytest.mark.parametrize(("args", "code", "fragments"), FILE_ROWS,
                         ids=[f"{k}-{r[2][0]}" for k, r in enumerate(FILE_ROWS)])
def test_bad_file_input(args, code, fragments, tmp_path, capsys, one_line_error) -> None:
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    rc = main(["plan", *[a.replace("{tmp}", str(tmp_path)) for a in args]])
    one_line_error(rc, capsys.readouterr().err, code, fragments)


def test_a_plan_that_misses_the_slo_exits_1_with_its_report(tmp_path, capsys) -> None:
    """A plan whose chosen configuration misses the p99 SLO once exited 0; the report and JSON still come out."""
    import json

    out = tmp_path / "p.json"
    rc = main(["plan", *_with(slo_p99="1", gpus_per_node="1"), "--json", str(out)])
    cap = capsys.readouterr()
    data = json.loads(out.read_text())
    assert rc == 1 and data["slo_met"] is False
    assert data["sizing"]["p99_s"] > 1.0  # the chosen layout's p99 with queueing is over the 1 s SLO
    assert "serving" in cap.out  # the report is printed
    lines = [ln for ln in cap.err.splitlines() if ln]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--slo-p99 1" in lines[0]
    assert main(["plan", *BASE, "--json", str(out)]) == 0  # 5 s is met
    assert json.loads(out.read_text())["slo_met"] is True


def test_default_steps_are_the_pipeline_default(tmp_path) -> None:
    """Without --steps the planner planned FLUX.1-dev at 50 steps; diffusers' FluxPipeline runs 28."""
    import json

    out = tmp_path / "p.json"
    assert main(["plan", *BASE, "--json", str(out)]) == 0
    assert json.loads(out.read_text())["steps_count"] == 28
