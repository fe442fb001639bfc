"""Cancel at the next denoising step: the token, the checkpoint, and the simulated engine's step-wise wait."""

from __future__ import annotations

import pytest

from diffbench.engines.base import GenerationRequest
from diffbench.engines.cancel import REASONS, Cancelled, CancelToken, cancellable, checkpoint, current
from diffbench.engines.config import EngineConfig, SimParams
from diffbench.engines.registry import create_engine
from diffbench.metrics.names import CANCEL_REASONS

REQ = GenerationRequest(prompt="a", height=1024, width=1024, steps=28)


def _engine(**kw):
    e = create_engine(EngineConfig(engine="sim", sim=SimParams(jitter=0, tail_prob=0, compile_s=0, **kw)))
    e.start()
    return e


class CancelAt(CancelToken):
    """A token cancelled by the generation itself when it reaches step ``at`` (a deterministic cancel)."""

    def __init__(self, at: int, reason: str = "disconnect") -> None:
        super().__init__()
        self.at = at
        self.cancel_reason = reason

    def check(self, step: int, steps: int | None = None) -> None:
        if step == self.at:
            self.cancel(self.cancel_reason)
        super().check(step, steps)


def test_the_first_cancel_wins_and_reasons_are_the_exported_ones() -> None:
    assert REASONS == CANCEL_REASONS
    t = CancelToken()
    assert not t.cancelled and t.release_s() is None
    assert t.cancel("deleted") and not t.cancel("drain")
    assert t.reason == "deleted" and t.requested_ns is not None
    with pytest.raises(ValueError, match="one of disconnect, deleted, drain"):
        CancelToken().cancel("bored")


def test_a_checkpoint_outside_a_cancellable_block_does_nothing() -> None:
    assert current() is None
    checkpoint(3, 8)
    t = CancelToken()
    t.cancel("drain")
    with cancellable(t):
        assert current() is t
        with pytest.raises(Cancelled) as info:
            checkpoint(2, 8)
    assert current() is None
    assert (info.value.reason, info.value.step, info.value.steps) == ("drain", 2, 8)
    assert t.stopped_at == 2 and len(t.steps_ns) == 1


def test_an_uncancelled_token_logs_every_step_of_the_sim() -> None:
    e = _engine(launch_s=0.0)
    t = CancelToken()
    t0 = e.clock()
    with cancellable(t):
        res = e.generate(REQ)
        e.sync()
    # boundaries 0..28, the whole generation ran: the clock is where the device finished
    assert len(t.steps_ns) == REQ.steps + 1 and t.total_steps == REQ.steps and t.stopped_at is None
    assert (e.clock() - t0) / 1e9 == pytest.approx(res.stages.total_s)


@pytest.mark.parametrize("at", [0, 1, 11, 27])
def test_the_sim_stops_at_the_step_boundary_and_frees_its_device(at: int) -> None:
    e = _engine(launch_s=0.0)
    t = CancelAt(at)
    t0 = e.clock()
    with cancellable(t), pytest.raises(Cancelled) as info:
        e.generate(REQ)
        e.sync()
    assert (info.value.step, info.value.steps) == (at, REQ.steps)
    # virtual time: the device stopped after the text encode and `at` steps (closed form, no jitter)
    assert (e.clock() - t0) / 1e9 == pytest.approx(e.p.text_encode_s + at * e.p.step_s)
    assert e.pending_s() == 0.0
    # the next generation starts on a free device and runs to the end
    t1 = e.clock()
    res = e.generate(REQ)
    e.sync()
    assert (e.clock() - t1) / 1e9 == pytest.approx(res.stages.total_s)


@pytest.mark.slow
def test_the_realtime_sim_stops_within_one_step_of_the_cancel() -> None:
    import threading
    import time

    e = _engine(realtime=True, launch_s=0.0, step_s=0.02, text_encode_s=0.0, vae_decode_s=0.0, other_s=0.0)
    req = REQ.model_copy(update={"steps": 500})  # 10 s when not cancelled
    t = CancelToken()

    def cancel_after_5_steps() -> None:
        while len(t.steps_ns) < 6:
            time.sleep(0.001)
        t.cancel("deleted")

    threading.Thread(target=cancel_after_5_steps, daemon=True).start()
    with cancellable(t), pytest.raises(Cancelled) as info:
        e.generate(req)
        e.sync()
    released = time.perf_counter_ns()
    step = t.step_s()
    assert step is not None and step > 0
    assert info.value.step >= 5 and info.value.step < req.steps
    # released within one measured step of the cancel, plus two steps of slack for a loaded machine
    assert (released - t.requested_ns) / 1e9 <= 3 * step
