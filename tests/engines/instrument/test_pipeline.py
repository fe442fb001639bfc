"""diffbench.engines.instrument.pipeline on a pipeline-shaped toy: stage and step times, hooks, exporter calls,
memory by stage, the injected memory budget, FLOPs."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import pytest
import torch

from diffbench.engines.instrument.memory import hwm_available
from diffbench.engines.instrument.pipeline import attach, detach
from diffbench.errors import DeviceOutOfMemory, UsageError

from .toypipe import ToyDenoiser, ToyPipe, ToyVAE


class FakeExporter:
    def __init__(self) -> None:
        self.calls: list[dict] = []

    def observe_generation(self, **kw) -> None:
        self.calls.append(kw)


def test_stage_and_step_times_without_a_step_callback() -> None:
    # Sleeps are lower bounds: a stage that sleeps s takes at least s, whatever the machine's load.
    pipe = ToyPipe(ToyDenoiser(sleep_s=0.01), ToyVAE(sleep_s=0.03), encode_sleep_s=0.02)
    inst = attach(pipe, device="cpu", flops=False)
    out, st, mem, sig = inst.run({"num_inference_steps": 5, "cfg_calls": 2}, 1)
    assert len(st.step_s) == 5 and st.denoiser_calls == 10
    assert all(s >= 2 * 0.01 for s in st.step_s)  # two forwards of >= 10 ms each per step
    assert st.text_encode_s >= 0.02 and st.vae_decode_s >= 0.03
    assert st.denoise_s == pytest.approx(sum(st.step_s))
    parts = st.text_encode_s + st.denoise_s + st.vae_decode_s + st.other_s
    assert parts == pytest.approx(st.total_s, rel=1e-9)
    assert inst.last_denoiser_batch == 4 and sig.device == "cpu" and sig.recompiles == 0
    inst.detach()


def test_request_block_for_someone_elses_server_and_exporter_calls() -> None:
    pipe = ToyPipe()
    exp = FakeExporter()
    inst = attach(pipe, device="cpu", exporter=exp, flops=False)
    with inst.request(shape="256x256") as rec:
        pipe(num_inference_steps=3)
    assert rec.stages is not None and len(rec.stages.step_s) == 3
    with inst.request(shape="256x256", traffic="probe"):
        pipe(num_inference_steps=2)
    with inst.request(traffic="warmup"):  # startup warmups are not traffic: not exported
        pipe(num_inference_steps=2)
    assert [(c["shape"], c["traffic"], len(c["stages"].step_s)) for c in exp.calls] == [
        ("256x256", "user", 3), ("256x256", "probe", 2)]
    assert exp.calls[0]["memory"] is rec.memory and exp.calls[0]["signals"] is rec.signals
    pipe(num_inference_steps=2)  # outside a request: nothing recorded, nothing exported
    assert len(exp.calls) == 2
    inst.run({"num_inference_steps": 2, "width": 128, "height": 64, "num_images_per_prompt": 2}, 2)
    assert exp.calls[-1]["shape"] == "128x64b2"
    inst.run({"num_inference_steps": 1, "width": 128, "height": 64, "num_frames": 9}, 1)
    assert exp.calls[-1]["shape"] == "128x64f9"
    inst.detach()
    inst = attach(pipe, device="cpu", exporter=exp, flops=False, shape_of=lambda kw: f"s{kw['num_inference_steps']}")
    inst.run({"num_inference_steps": 2}, 1)
    assert exp.calls[-1]["shape"] == "s2"
    inst.detach()


def test_nested_request_and_detached_use_are_refused() -> None:
    pipe = ToyPipe()
    inst = attach(pipe, device="cpu", flops=False)
    with inst.request(), pytest.raises(UsageError, match="one at a time"), inst.request():
        pass
    with pytest.raises(UsageError, match="already instrumented"):
        attach(pipe, device="cpu")
    detach(inst)
    with pytest.raises(UsageError, match="detached"), inst.request():
        pass
    attach(pipe, device="cpu").detach()  # after detach it can be instrumented again


def test_detach_restores_the_pipeline() -> None:
    pipe = ToyPipe()
    before = (dict(pipe.__dict__), dict(pipe.scheduler.__dict__), dict(pipe.vae.__dict__),
              len(pipe.transformer._forward_pre_hooks))
    inst = attach(pipe, device="cpu")
    assert "step" in pipe.scheduler.__dict__ and "decode" in pipe.vae.__dict__
    inst.detach()
    inst.detach()  # idempotent
    after = (dict(pipe.__dict__), dict(pipe.scheduler.__dict__), dict(pipe.vae.__dict__),
             len(pipe.transformer._forward_pre_hooks))
    assert after == before


@pytest.mark.skipif(not hwm_available(), reason="needs /proc/self/clear_refs (Linux, writable)")
def test_memory_peak_by_stage_matches_a_known_allocation() -> None:
    n = 64 * 2**20  # 64 MiB touched inside vae.decode
    pipe = ToyPipe(vae=ToyVAE(alloc_bytes=n))
    inst = attach(pipe, device="cpu", flops=False)
    # The resident set is per process: garbage of earlier tests freed by the cyclic GC during the request
    # would lower it below its start (measured: a 64 MiB peak then reads 0). Collect first.
    gc.collect()
    _, _, mem, sig = inst.run({"num_inference_steps": 2}, 1)
    assert mem.kind == "cpu-rss" and mem.peak_stage == "vae_decode"
    # the kernel's high-water mark sees at least the pages touched (allow 5 % for page-size rounding)
    assert sig.stage_peak_bytes["vae_decode"] >= 0.95 * n
    assert mem.peak_allocated_bytes == sig.stage_peak_bytes["vae_decode"]
    assert sig.stage_peak_bytes["denoise"] < n / 4
    inst.detach()


@pytest.mark.skipif(not hwm_available(), reason="needs /proc/self/clear_refs (Linux, writable)")
def test_memory_budget_fails_the_big_request_and_the_instance_keeps_working() -> None:
    big = 64 * 2**20
    pipe = ToyPipe(vae=ToyVAE(alloc_bytes=big))
    exp = FakeExporter()
    budget = 16 * 2**20
    inst = attach(pipe, device="cpu", memory_budget_bytes=budget, exporter=exp, flops=False)
    gc.collect()  # see test_memory_peak_by_stage_matches_a_known_allocation
    with pytest.raises(DeviceOutOfMemory, match=f"injected memory budget of {budget} bytes at stage vae_decode"):
        inst.run({"num_inference_steps": 2}, 1)
    # the failed request's peak is still reported (the memory alert needs it), without stage times
    assert exp.calls[-1]["stages"] is None and exp.calls[-1]["memory"].peak_allocated_bytes > budget
    assert exp.calls[-1]["signals"].device_total_bytes == budget
    pipe.vae.alloc_bytes = 0
    _, st, mem, sig = inst.run({"num_inference_steps": 2}, 1)
    assert len(st.step_s) == 2 and mem.peak_allocated_bytes < budget and sig.device_total_bytes == budget
    inst.detach()
    with pytest.raises(UsageError, match="positive"):
        attach(ToyPipe(), device="cpu", memory_budget_bytes=0)


def test_measured_flops_equal_the_closed_form_of_a_linear() -> None:
    m, k, n, steps = 4, 16, 8, 3
    pipe = ToyPipe(ToyDenoiser(k=k, n=n))
    inst = attach(pipe, device="cpu")
    for _ in range(2):  # measured on the first request of the shape, then cached
        _, st, _, sig = inst.run({"num_inference_steps": steps, "m": m, "cfg_calls": 2}, 1)
        assert sig.flops == 2 * m * n * k * st.denoiser_calls
        assert st.denoiser_calls == 2 * steps
    assert len(inst._fpf) == 1
    _, _, _, sig = inst.run({"num_inference_steps": steps, "m": 2 * m}, 1)  # a new shape is measured again
    assert sig.flops == 2 * (2 * m) * n * k * steps
    inst.detach()


def test_ledger_flops_for_a_catalog_model() -> None:
    from diffbench.ledger.account import LedgerConfig, evaluate
    from diffbench.ledger.catalog import load_catalog

    inst = attach(ToyPipe(), device="cpu", model="flux.1-dev")
    kw = {"num_inference_steps": 2, "width": 512, "height": 512, "num_images_per_prompt": 2}
    _, _, _, sig = inst.run(kw, 2)
    ref = evaluate(load_catalog(), LedgerConfig(model="flux.1-dev", width=512, height=512, steps=2, gpu="h200"))
    assert sig.flops == pytest.approx(2 * ref.total_flops)  # the GPU does not change FLOPs
    inst.detach()


def test_build_info_labels() -> None:
    import diffbench

    inst = attach(ToyPipe(), device="cpu", flops=False)
    assert inst.build_info == {"version": diffbench.__version__, "torch": torch.__version__.split("+")[0],
                               "cuda": torch.version.cuda or "none", "gpu_model": "cpu"}
    inst.detach()


@pytest.mark.e2e  # runs a subprocess
def test_importing_diffbench_monitor_does_not_import_torch() -> None:
    code = ("import sys, diffbench.monitor as m; assert 'torch' not in sys.modules, 'torch imported'; "
            "assert callable(m.attach) and callable(m.detach)")
    env = dict(os.environ)
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_fake_cuda_path_records_events_and_syncs_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA code path with fake events: no torch.cuda.synchronize at all, one Event.synchronize per
    request, step times read from the events' elapsed_time."""
    import time

    syncs = {"device": 0, "event": 0}

    class FakeEvent:
        def __init__(self, enable_timing: bool = False) -> None:
            assert enable_timing
            self.t = None

        def record(self) -> None:
            self.t = time.perf_counter_ns()

        def synchronize(self) -> None:
            syncs["event"] += 1

        def elapsed_time(self, other: FakeEvent) -> float:
            return (other.t - self.t) / 1e6  # milliseconds, like torch.cuda.Event.elapsed_time

    cm = torch.cuda
    monkeypatch.setattr(cm, "Event", FakeEvent)
    monkeypatch.setattr(cm, "synchronize", lambda *a: syncs.__setitem__("device", syncs["device"] + 1))
    monkeypatch.setattr(cm, "mem_get_info", lambda *a: (10, 1000))
    monkeypatch.setattr(cm, "current_device", lambda: 0)
    for name in ("reset_peak_memory_stats",):
        monkeypatch.setattr(cm, name, lambda *a: None)
    for name in ("memory_allocated", "max_memory_allocated", "max_memory_reserved"):
        monkeypatch.setattr(cm, name, lambda *a: 100)
    pipe = ToyPipe(ToyDenoiser(sleep_s=0.005))
    inst = attach(pipe, device="cuda", flops=False)
    _, st, mem, sig = inst.run({"num_inference_steps": 6}, 1)
    assert syncs == {"device": 0, "event": 1}
    assert len(st.step_s) == 6 and all(s >= 0.005 for s in st.step_s)
    assert mem.kind == "cuda" and mem.peak_reserved_bytes == 100
    assert sig.device == "0" and sig.device_total_bytes == 1000
    n_events = len(inst._events)
    inst.run({"num_inference_steps": 6}, 1)
    assert len(inst._events) == n_events  # the pool is reused
    inst.detach()


def test_a_cancelled_token_stops_the_pipeline_at_the_next_scheduler_step() -> None:
    from diffbench.engines.cancel import Cancelled, CancelToken, cancellable

    token = CancelToken()
    forwards = [0]

    def count(_x: torch.Tensor) -> None:  # the 3rd forward cancels: the 3rd step still finishes
        forwards[0] += 1
        if forwards[0] == 3:
            token.cancel("disconnect")

    pipe = ToyPipe(ToyDenoiser(fn=count))
    exporter = FakeExporter()
    inst = attach(pipe, device="cpu", flops=False, exporter=exporter)
    with cancellable(token), pytest.raises(Cancelled) as info:
        inst.run({"num_inference_steps": 10}, 1)
    assert info.value.step == 3 and forwards[0] == 3 and token.stopped_at == 3
    assert len(token.steps_ns) == 4  # boundaries 0 (denoising starts), 1, 2, 3
    assert exporter.calls[-1]["stages"] is None  # exported as a failed request
    # the instrumentation is free again: the next request runs all its steps
    _, st, _, _ = inst.run({"num_inference_steps": 5}, 1)
    assert len(st.step_s) == 5
    inst.detach()
