"""The simulated device behaves like a GPU for the measurement protocol."""

from __future__ import annotations

import numpy as np
import pytest

from diffbench.engines.base import GenerationRequest
from diffbench.engines.config import EngineConfig, SimParams
from diffbench.engines.registry import create_engine
from diffbench.errors import DeviceOutOfMemory

REQ = GenerationRequest(prompt="a", height=1024, width=1024, steps=28)


def _engine(**kw):
    e = create_engine(EngineConfig(engine="sim", sim=SimParams(**kw)))
    e.start()
    return e


def test_launch_is_asynchronous_and_sync_waits() -> None:
    e = _engine(jitter=0, tail_prob=0, compile_s=0)
    t0 = e.clock()
    res = e.generate(REQ)
    t_launch = (e.clock() - t0) / 1e9
    e.sync()
    t_done = (e.clock() - t0) / 1e9
    assert t_launch == pytest.approx(e.p.launch_s)
    assert t_done == pytest.approx(e.p.launch_s + res.stages.total_s)
    assert res.stages.total_s == pytest.approx(
        e.p.text_encode_s + 28 * e.p.step_s + e.p.vae_decode_s + e.p.other_s
    )


def test_first_call_per_shape_pays_compile() -> None:
    e = _engine(jitter=0, tail_prob=0, compile_s=3.0)
    t0 = e.clock()
    e.generate(REQ)
    first = (e.clock() - t0) / 1e9
    e.sync()
    t1 = e.clock()
    e.generate(REQ)
    second = (e.clock() - t1) / 1e9
    assert first == pytest.approx(3.0 + e.p.launch_s)
    assert second == pytest.approx(e.p.launch_s)
    other = REQ.model_copy(update={"height": 512})
    t2 = e.clock()
    e.generate(other)
    assert (e.clock() - t2) / 1e9 == pytest.approx(3.0 + e.p.launch_s)


def test_deterministic_for_a_seed() -> None:
    a, b = _engine(seed=3), _engine(seed=3)
    ra, rb = a.generate(REQ), b.generate(REQ)
    assert ra.stages.step_s == rb.stages.step_s
    assert (ra.images == rb.images).all()


def test_simulated_oom() -> None:
    e = _engine(fail_above_pixels=512 * 512)
    with pytest.raises(DeviceOutOfMemory, match="1024x1024"):
        e.generate(REQ)


def _png(value: int) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (value, 0, 0)).save(buf, "PNG")
    return buf.getvalue()


def test_an_edit_adds_the_image_encode_and_runs_int_steps_x_strength() -> None:
    """Closed form on a jitter-free device: an edit at strength 0.6 of 28 steps runs int(16.8) = 16 steps and
    adds the VAE encode (VAE_ENCODE_RATIO x the decode at the same shape; 512² = a quarter of the 1024²
    reference)."""
    from diffbench.engines.sim import VAE_ENCODE_RATIO

    e = _engine(jitter=0, tail_prob=0, compile_s=0)
    t2i = e.generate(GenerationRequest(prompt="a", height=512, width=512, steps=28))
    edit = e.generate(GenerationRequest(prompt="a", height=512, width=512, steps=28, image=_png(1), strength=0.6))
    p, scale = e.p, 0.25
    enc = VAE_ENCODE_RATIO * p.vae_decode_s * scale
    assert len(edit.stages.step_s) == 16 and edit.stages.denoiser_calls == 16 and len(t2i.stages.step_s) == 28
    assert edit.stages.image_encode_s == pytest.approx(enc) and t2i.stages.image_encode_s == 0
    assert edit.stages.total_s == pytest.approx(
        p.text_encode_s + enc + 16 * p.step_s * scale + p.vae_decode_s * scale + p.other_s)
    st = edit.stages
    assert st.text_encode_s + st.image_encode_s + st.denoise_s + st.vae_decode_s + st.other_s == \
        pytest.approx(st.total_s)
    # the edit is its own compiled shape: a warm text-to-image shape does not warm it
    assert GenerationRequest(prompt="a", height=512, width=512, steps=28).warmup_key != \
        GenerationRequest(prompt="a", height=512, width=512, steps=28, image=_png(1)).warmup_key


def test_edit_outputs_depend_on_the_input_image() -> None:
    e = _engine()
    req = GenerationRequest(prompt="a", height=32, width=32, steps=4, image=_png(1))
    a, b = e.generate(req).images, e.generate(req).images
    c = e.generate(req.model_copy(update={"image": _png(2)})).images
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_an_edit_with_no_step_left_is_refused() -> None:
    from diffbench.errors import ShapeError

    e = _engine()
    with pytest.raises(ShapeError, match="leaves 0 denoising steps"):
        e.validate(GenerationRequest(prompt="a", height=32, width=32, steps=4, image=_png(1), strength=0.2))


def test_a_first_calls_compile_is_in_its_stage_split() -> None:
    """Fresh-user trial: `serve --engine sim` answered a new shape with service_time_s 5.03 s and stages adding up
    to 0.025 s: the compile (host time before the launch) was in no stage. It is now in "other"."""
    e = _engine(jitter=0, tail_prob=0, compile_s=3.0)
    t0 = e.clock()
    first = e.generate(REQ)
    e.sync()
    wall = (e.clock() - t0) / 1e9
    second = e.generate(REQ)
    st = first.stages
    parts = st.text_encode_s + st.image_encode_s + st.denoise_s + st.vae_decode_s + st.other_s
    assert parts == pytest.approx(st.total_s) and st.total_s == pytest.approx(wall - e.p.launch_s)
    assert st.other_s == pytest.approx(second.stages.other_s + 3.0)
