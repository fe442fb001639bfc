"""The compile counter (diffbench.monitor.compile_counter): dynamo's start callback, one per process, recompiles after warmup."""

from __future__ import annotations

import torch
import torch._dynamo

from diffbench.engines.instrument import compile_counter
from diffbench.engines.instrument.pipeline import attach

from .toypipe import ToyDenoiser, ToyPipe


def test_start_callback_counts_first_compile_and_each_recompile() -> None:
    # observed on torch 2.13: inputs of rank 1, 1, 2, 3 -> 3 compilation starts.
    torch._dynamo.reset()
    counter = compile_counter.acquire()
    counter.ensure()
    try:
        from torch._dynamo.utils import counters

        f = torch.compile(lambda x: x * 2 + 1, backend="eager", dynamic=False)
        before, graphs = counter.starts, counters["stats"]["unique_graphs"]
        for shape in ((3,), (4,), (2, 3), (2, 3, 4)):
            f(torch.ones(shape))
        # static shapes: every new shape compiles (4 starts); independent count: dynamo's own statistic
        assert counter.starts - before == counters["stats"]["unique_graphs"] - graphs == 4
    finally:
        compile_counter.release()


def test_ranks_1_1_2_3_start_three_compilations() -> None:
    torch._dynamo.reset()
    counter = compile_counter.acquire()
    counter.ensure()
    try:
        f = torch.compile(lambda x: x.sum(), backend="eager")
        before = counter.starts
        for x in (torch.ones(3), torch.ones(3), torch.ones(2, 3), torch.ones(2, 3, 4)):
            f(x)
        assert counter.starts - before == 3
    finally:
        compile_counter.release()


def test_attach_and_detach_do_not_leak_callbacks() -> None:
    handler = torch._dynamo.callback_handler
    held = compile_counter.COUNTER.registered  # another test's instrumentation may still hold it
    n0 = len(handler.start_callbacks)
    insts = [attach(ToyPipe(), device="cpu", flops=False) for _ in range(3)]
    for inst in insts:
        inst.run({"num_inference_steps": 1}, 1)
    assert handler.start_callbacks.count(compile_counter.COUNTER._on_start) == 1  # one shared counter
    assert len(handler.start_callbacks) == n0 + (0 if held else 1)
    for inst in insts:
        inst.detach()
    assert len(handler.start_callbacks) == n0
    if not held:
        compile_counter.release()  # an extra release is ignored
        assert len(handler.start_callbacks) == n0 and not compile_counter.COUNTER.registered


def test_dynamo_reset_does_not_silence_the_counter() -> None:
    # torch._dynamo.reset() clears every registered callback; the next request registers ours again
    inst = attach(ToyPipe(), device="cpu", flops=False)
    torch._dynamo.reset()
    fn = torch.compile(lambda x: x + 1, backend="eager")
    inst.pipe.transformer.fn = lambda x: fn(x)
    inst.mark_warm()
    _, _, _, sig = inst.run({"num_inference_steps": 1}, 1)
    assert sig.recompiles == 1
    inst.detach()


def test_recompiles_are_counted_after_mark_warm_only() -> None:
    torch._dynamo.reset()
    fn = torch.compile(lambda x: x.sum(), backend="eager")
    ranks = iter([1, 1, 2, 3])
    pipe = ToyPipe(ToyDenoiser(fn=lambda x: fn(torch.ones((2,) * next(ranks)))))
    inst = attach(pipe, device="cpu", flops=False)
    _, _, _, sig = inst.run({"num_inference_steps": 1}, 1)  # first compile (warmup)
    assert sig.recompiles == 0
    inst.mark_warm()
    _, _, _, sig = inst.run({"num_inference_steps": 1}, 1)  # same rank: no compile
    assert sig.recompiles == 0
    _, _, _, sig = inst.run({"num_inference_steps": 2}, 1)  # ranks 2 and 3: two recompiles
    assert sig.recompiles == 2
    inst.detach()
