"""`diffbench bench` end to end: the acceptance command, the JSON schema, bad inputs, partial results."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from diffbench.cli.main import main


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _bench(*args: str) -> int:
    return main(["bench", *args])


@pytest.mark.slow
def test_acceptance_tiny_flux_json(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    md = tmp_path / "r.md"
    rc = _bench(
        "--model",
        "tiny-flux",
        "--height",
        "128",
        "--width",
        "128",
        "--steps",
        "4",
        "--warmup",
        "1",
        "--runs",
        "5",
        "--json",
        str(out),
        "--markdown",
        str(md),
    )
    assert rc == 0
    r = json.loads(out.read_text())
    assert r["schema_version"] == 1 and r["partial"] is False and r["valid"] is True
    for key in (
        "model",
        "shape",
        "steps",
        "cfg",
        "engine",
        "engine_version",
        "attention_backend",
        "parallelism",
        "precision",
        "cache",
        "hardware",
        "driver",
        "cuda",
    ):
        assert key in r["conditions"]
    assert r["conditions"]["steps"] == 4
    for key in ("n", "mean", "p50", "p90", "p99"):
        assert key in r["latency_s"]
    assert r["latency_s"]["n"] == 5 and len(r["warmup_s"]) == 1
    st = r["stages_s"]
    parts = st["text_encode"] + st["denoise"] + st["vae_decode"] + st["other"]
    assert parts == pytest.approx(st["end_to_end"], rel=0.05)
    assert st["end_to_end"] == pytest.approx(r["latency_s"]["mean"], rel=1e-9)
    assert st["text_encode"] > 0 and st["denoise"] > 0 and st["vae_decode"] > 0
    # the hooks capture most of the time: "other" is the small remainder, not a hiding place
    assert st["other"] < 0.3 * st["end_to_end"]
    assert r["step_s"]["n"] == 5 * 4 and r["step_s"]["steps_per_run"] == 4 and r["step_s"]["median"] > 0
    mem = r["memory"]
    assert {"peak_allocated_bytes", "peak_reserved_bytes", "peak_stage"} <= set(mem)
    assert mem["kind"] == "cpu-rss"
    assert r["repro"]["reproducible"] is True
    # same seed, same process, eval mode: bitwise identical (observed on CPU torch)
    assert r["repro"]["psnr_db"] == "inf"
    assert {"torch", "diffusers", "transformers"} <= set(r["env"]["packages"])
    assert r["env"]["torch_threads"] >= 1
    assert "## 128x128 s4 b1" in md.read_text()


@pytest.mark.slow
def test_cfg_forwards_are_counted(tmp_path: Path) -> None:
    out = tmp_path / "w.json"
    rc = _bench(
        "--model",
        "tiny-wan",
        "--height",
        "64",
        "--width",
        "64",
        "--frames",
        "5",
        "--steps",
        "3",
        "--guidance",
        "5.0",
        "--warmup",
        "1",
        "--runs",
        "2",
        "--no-repro",
        "--json",
        str(out),
    )
    assert rc == 0
    w = json.loads(out.read_text())
    assert w["step_s"]["denoiser_calls_per_step"] == 2  # Wan: CFG as two forwards
    # a video model counts videos and seconds of video, not images: batch / mean latency, × frames ÷ fps
    assert w["throughput_images_per_s"] is None
    assert w["throughput_videos_per_s"] == pytest.approx(1 / w["latency_s"]["mean"], rel=1e-9)
    assert w["fps"] == 16 and "sample_fps" in w["shapes"][0]["fps_source"]
    assert w["video_seconds_per_s"] == pytest.approx(w["throughput_videos_per_s"] * 5 / 16, rel=1e-9)
    out2 = tmp_path / "x.json"
    rc = _bench(
        "--model",
        "tiny-sdxl",
        "--height",
        "64",
        "--width",
        "64",
        "--steps",
        "3",
        "--guidance",
        "5.0",
        "--warmup",
        "1",
        "--runs",
        "2",
        "--no-repro",
        "--json",
        str(out2),
    )
    assert rc == 0
    step = json.loads(out2.read_text())["step_s"]
    assert step["denoiser_calls_per_step"] == 1 and step["denoiser_batch"] == 2  # SDXL batches CFG


def test_save_outputs_manifest(tmp_path: Path) -> None:
    d = tmp_path / "A"
    rc = _bench(
        "--model",
        "tiny-flux",
        "--height",
        "64",
        "--width",
        "64",
        "--steps",
        "2",
        "--warmup",
        "0",
        "--runs",
        "4",
        "--num-prompts",
        "2",
        "--seeds",
        "0,1",
        "--save-outputs",
        str(d),
    )
    assert rc == 0
    m = json.loads((d / "manifest.json").read_text())
    keys = {(e["prompt_id"], e["seed"]) for e in m["entries"]}
    assert keys == {("p00", 0), ("p00", 1), ("p01", 0), ("p01", 1)}
    for e in m["entries"]:
        assert hashlib.sha256((d / e["file"]).read_bytes()).hexdigest() == e["sha256"]
        assert (e["height"], e["width"]) == (64, 64)
    assert m["fingerprint"]["model"] == "tiny-flux" and "torch" in m["fingerprint"]


def test_local_pipeline_directory_loads_offline(tmp_path: Path) -> None:
    from diffbench.engines.tiny import build_tiny

    build_tiny("tiny-flux").save_pretrained(tmp_path / "flux")
    out = tmp_path / "l.json"
    rc = _bench(
        "--model",
        str(tmp_path / "flux"),
        "--height",
        "64",
        "--width",
        "64",
        "--steps",
        "2",
        "--warmup",
        "0",
        "--runs",
        "2",
        "--json",
        str(out),
    )
    assert rc == 0
    assert json.loads(out.read_text())["conditions"]["pipeline"] == "FluxPipeline"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "/nonexistent/model"], "no such directory"),
        (["--model", "black-forest-labs/FLUX.1-dev"], "looks like a hub id"),
        (["--model", "tiny-flux", "--height", "100"], "not a multiple of 16"),
        (
            ["--model", "tiny-wan", "--frames", "10", "--height", "64", "--width", "64"],
            "not of the form 4k+1",
        ),
        (["--model", "tiny-flux", "--frames", "9"], "image model"),
        (["--engine", "nope"], "choose one of"),
        (["--seeds", "a,b"], "comma-separated integers"),
        (["--shapes", "64by64"], "WIDTHxHEIGHT"),
        (["--prompts", "/nonexistent.txt"], "file not found"),
        (["--offload", "model"], "needs --device cuda"),
        (["--offload", "everything"], "choose none, model or sequential"),
        pytest.param(
            ["--device", "cuda"],
            "CUDA is not available",
            marks=pytest.mark.skipif(_has_cuda(), reason="this machine has CUDA"),
        ),
    ],
)
def test_bad_input_gives_one_line_error(args: list[str], message: str, capsys) -> None:
    rc = _bench(*args, "--runs", "1", "--warmup", "0")
    assert rc != 0
    err = capsys.readouterr().err
    assert message in err and err.startswith("error:")


def test_unsupported_pipeline_class(tmp_path: Path, capsys) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model_index.json").write_text(json.dumps({"_class_name": "KandinskyPipeline"}))
    assert _bench("--model", str(tmp_path / "m"), "--runs", "1") == 2
    err = capsys.readouterr().err
    assert "KandinskyPipeline is not supported" in err and "FluxPipeline" in err


def test_steps_zero_is_rejected(capsys) -> None:
    assert _bench("--steps", "0") == 2
    assert "--steps" in capsys.readouterr().err


def test_no_sync_is_refused(tmp_path: Path, capsys) -> None:
    out = tmp_path / "n.json"
    assert _bench("--engine", "sim", "--runs", "5", "--warmup", "1", "--no-sync", "--json", str(out)) == 2
    assert "refused" in capsys.readouterr().err
    r = json.loads(out.read_text())
    assert r["valid"] is False and any(w["code"] == "unsynchronized" for w in r["warnings"])


def test_sim_acceptance_warmup_zero_vs_two(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert _bench("--engine", "sim", "--warmup", "0", "--runs", "10", "--json", str(a)) == 0
    assert _bench("--engine", "sim", "--warmup", "2", "--runs", "10", "--json", str(b)) == 0
    ra, rb = json.loads(a.read_text()), json.loads(b.read_text())
    assert ra["latency_s"]["mean"] > 1.2 * rb["latency_s"]["mean"]
    assert {"no_warmup", "first_run_outlier"} <= {w["code"] for w in ra["warnings"]}
    assert not {"no_warmup", "first_run_outlier"} & {w["code"] for w in rb["warnings"]}


def test_oom_in_one_shape_is_recorded_and_the_rest_reported(tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    rc = _bench(
        "--engine",
        "sim",
        "--shapes",
        "512x512,2048x2048,1024x1024",
        "--runs",
        "3",
        "--warmup",
        "1",
        "--sim-fail-above-pixels",
        str(1024 * 1024),
        "--json",
        str(out),
    )
    assert rc == 0
    r = json.loads(out.read_text())
    assert [s["error"] is None for s in r["shapes"]] == [True, False, True]
    assert "out of memory at 2048x2048" in r["shapes"][1]["error"]
    assert r["latency_s"]["n"] == 3 and any(w["code"] == "shape_failed" for w in r["warnings"])


def test_interrupt_leaves_a_valid_partial_json(tmp_path: Path) -> None:
    from diffbench.bench.protocol import BenchConfig
    from diffbench.bench.session import BenchOptions, run_session
    from diffbench.engines.config import EngineConfig

    out = tmp_path / "p.json"
    opts = BenchOptions(
        engine=EngineConfig(engine="sim"), protocol=BenchConfig(warmup=1, runs=50), json_path=out
    )
    seen = []

    def interrupt(result) -> None:
        seen.append(result)
        if len(seen) == 7:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_session(opts, on_update=interrupt)
    r = json.loads(out.read_text())
    assert r["partial"] is True and r["interrupted"] is True
    assert len(r["shapes"][0]["samples_s"]) == 7


@pytest.mark.slow
def test_batch_outputs_and_throughput(tmp_path: Path) -> None:
    out, d = tmp_path / "b.json", tmp_path / "B"
    rc = _bench(
        "--model",
        "tiny-flux",
        "--height",
        "64",
        "--width",
        "64",
        "--steps",
        "2",
        "--batch",
        "2",
        "--warmup",
        "1",
        "--runs",
        "3",
        "--json",
        str(out),
        "--save-outputs",
        str(d),
    )
    assert rc == 0
    r = json.loads(out.read_text())
    assert r["throughput_images_per_s"] == pytest.approx(2 / r["latency_s"]["mean"])
    assert r["repro"]["deterministic_algorithms"] is False and r["repro"]["threads"] >= 1
    keys = {(e["prompt_id"], e["index"]) for e in json.loads((d / "manifest.json").read_text())["entries"]}
    # every workload request is saved (4 built-in prompts), not only the 3 that the timed runs reached
    assert keys == {(p, i) for p in ("p00", "p01", "p02", "p03") for i in (0, 1)}


def test_unwritable_json_path_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    assert _bench("--engine", "sim", "--runs", "2", "--warmup", "0", "--json", str(blocker / "r.json")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "--json" in err and "not a directory" in err


def test_missing_optional_dependency_names_the_extra(monkeypatch, capsys) -> None:
    import diffbench.bench.session as session

    def missing(*_a, **_k):
        raise ModuleNotFoundError("No module named 'torchmetrics'", name="torchmetrics")

    monkeypatch.setattr(session, "run_session", missing)
    assert _bench("--engine", "sim", "--runs", "1") == 3
    err = capsys.readouterr().err
    assert "torchmetrics is not installed" in err and "'quality' extra" in err


def test_tiny_pipelines_are_in_eval_mode() -> None:
    from diffbench.engines.tiny import TINY_MODELS, build_tiny

    for name in TINY_MODELS:
        pipe = build_tiny(name)
        assert not any(getattr(c, "training", False) for c in pipe.components.values()), name


@pytest.mark.slow
def test_shapes_are_width_by_height(tmp_path: Path) -> None:
    """`--shapes 64x32` is 64 wide and 32 high (as --size and the OpenAI size field): the saved image says so."""
    out, d = tmp_path / "s.json", tmp_path / "S"
    rc = _bench("--model", "tiny-flux", "--shapes", "64x32", "--steps", "1", "--warmup", "0", "--runs", "1",
                "--num-prompts", "1", "--no-repro", "--json", str(out), "--save-outputs", str(d))
    assert rc == 0
    from PIL import Image

    entry = json.loads((d / "manifest.json").read_text())["entries"][0]
    assert Image.open(d / entry["file"]).size == (64, 32)  # PIL: (width, height)
    r = json.loads(out.read_text())
    assert (r["shapes"][0]["width"], r["shapes"][0]["height"]) == (64, 32)
    assert r["shapes"][0]["shape"] == "64x32 s1 b1" and r["conditions"]["shape"] == "64x32 s1 b1"


def test_multi_shape_summary_at_the_top(tmp_path: Path, capsys) -> None:
    out, md = tmp_path / "m.json", tmp_path / "m.md"
    rc = _bench("--engine", "sim", "--shapes", "512x256,256x256x9", "--runs", "4", "--warmup", "1", "--fps", "8",
                "--json", str(out), "--markdown", str(md))
    assert rc == 0
    text = capsys.readouterr().out
    r = json.loads(out.read_text())
    labels = ["512x256 s28 b1", "256x256 f9 s28 b1"]
    assert r["conditions"]["shapes"] == labels and [h["shape"] for h in r["summary"]] == labels
    assert r["primary_shape"] == labels[0]
    img, vid = r["shapes"]
    for h, s in zip(r["summary"], r["shapes"], strict=True):
        assert h["p50_s"] == s["latency_s"]["p50"] and h["n"] == 4
    assert r["summary"][0]["throughput"] == pytest.approx(1 / img["latency_s"]["mean"], rel=1e-9)
    assert r["summary"][1]["throughput_unit"] == "videos/s" and vid["throughput_images_per_s"] is None
    assert vid["fps"] == 8 and vid["fps_source"] == "--fps"  # the override wins over the engine's 16
    assert vid["video_seconds_per_s"] == pytest.approx(vid["throughput_videos_per_s"] * 9 / 8, rel=1e-9)
    head = text[: text.index(labels[0], text.index("summary"))]
    assert "summary" in head
    top = text[: text.index("per-step")]  # both shapes appear before the first per-shape table
    assert all(label.split(" s")[0] in top for label in labels)
    assert "videos/s" in top and "images/s" in top
    m = md.read_text()
    assert m.index("## Summary") < m.index(f"## {labels[0]}")
    assert all(f"| {label} |" in m for label in labels)


def test_interrupt_during_warmup_keeps_the_warmups_and_says_what_was_measured(tmp_path: Path, monkeypatch,
                                                                               capsys) -> None:
    from diffbench.engines.sim import SimEngine

    real = SimEngine.generate
    calls = []

    def generate(self, request):
        calls.append(1)
        if len(calls) == 3:  # Ctrl-C in the third of four warmup runs
            raise KeyboardInterrupt
        return real(self, request)

    monkeypatch.setattr(SimEngine, "generate", generate)
    out = tmp_path / "w.json"
    rc = _bench("--engine", "sim", "--warmup", "4", "--runs", "5", "--json", str(out))
    cap = capsys.readouterr()
    r = json.loads(out.read_text())
    assert rc == 130 and r["partial"] is True and r["interrupted"] is True
    assert len(r["shapes"][0]["warmup_s"]) == 2 and r["shapes"][0]["samples_s"] == []
    assert r["warmup_s"] == r["shapes"][0]["warmup_s"]  # the top level shows the warmups that ran
    err = " ".join(cap.err.split())
    assert "2 warmup runs" in err and "0 timed runs" in err and str(out) in err, cap.err


def test_interrupt_during_timed_runs_prints_a_partial_summary(tmp_path: Path, monkeypatch, capsys) -> None:
    from diffbench.engines.sim import SimEngine

    real = SimEngine.generate
    calls = []

    def generate(self, request):
        calls.append(1)
        if len(calls) == 1 + 6 + 1:  # 1 warmup + 6 timed runs, then Ctrl-C in the next
            raise KeyboardInterrupt
        return real(self, request)

    monkeypatch.setattr(SimEngine, "generate", generate)
    out = tmp_path / "t.json"
    rc = _bench("--engine", "sim", "--warmup", "1", "--runs", "50", "--json", str(out))
    err = " ".join(capsys.readouterr().err.split())
    r = json.loads(out.read_text())
    assert rc == 130 and len(r["shapes"][0]["samples_s"]) == 6
    p50 = float(np.median(r["shapes"][0]["samples_s"]))
    assert "1 warmup runs" in err and "6 timed runs" in err and f"p50 {p50:.4g} s" in err, err
