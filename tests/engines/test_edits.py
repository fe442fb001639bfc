"""Edits (image-to-image, inpainting) in the diffusers engine on tiny-flux (random weights, CPU).

Independent references: the VAE encode time measured by a class-level wrapper installed before the engine
(the engine's image_encode stage must contain it), the denoising steps counted by a forward pre-hook of the
test's own on the transformer (FLUX, no CFG: one forward per step), and the step counts of diffusers 0.42
``FluxImg2ImgPipeline.get_timesteps`` worked by hand.
"""

from __future__ import annotations

import io
import time

import numpy as np
import pytest

from diffbench.engines.base import GenerationRequest
from diffbench.engines.config import EngineConfig
from diffbench.engines.diffusers_engine import DiffusersEngine, check_request
from diffbench.engines.images import edit_steps
from diffbench.errors import InputError, ShapeError

pytestmark = pytest.mark.slow

pytest.importorskip("diffusers")


def _png(seed: int, size: tuple[int, int] = (40, 48), gray: bool = False) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(seed)
    arr = rng.integers(0, 256, (size[1], size[0]) + (() if gray else (3,)), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return buf.getvalue()


ENCODES: list[float] = []  # seconds inside AutoencoderKL.encode, measured outside the engine's hooks


@pytest.fixture(scope="module")
def engine():
    from diffusers import AutoencoderKL

    orig = AutoencoderKL.encode

    def timed(self, *args, **kwargs):
        t0 = time.perf_counter_ns()
        try:
            return orig(self, *args, **kwargs)
        finally:
            ENCODES.append((time.perf_counter_ns() - t0) / 1e9)

    mp = pytest.MonkeyPatch()
    mp.setattr(AutoencoderKL, "encode", timed)  # before start: the engine's wrapper calls this one
    e = DiffusersEngine(EngineConfig(model="tiny-flux"))
    e.start()
    calls = [0]
    handle = e.pipe.transformer.register_forward_pre_hook(lambda m, a: calls.__setitem__(0, calls[0] + 1))
    e.forwards = calls  # type: ignore[attr-defined]
    yield e
    handle.remove()
    e.stop()
    mp.undo()


def _req(**kw) -> GenerationRequest:
    base = dict(prompt="a red barn", height=64, width=64, steps=8, seed=3, image=_png(1), strength=0.6)
    base.update(kw)
    return GenerationRequest(**base)


def _run(engine, req):
    engine.forwards[0] = 0
    ENCODES.clear()
    res = engine.generate(req)
    return res, engine.forwards[0], list(ENCODES)


def test_stage_split_reconciles_and_image_encode_is_the_vae_encode(engine) -> None:
    res, _, encodes = _run(engine, _req())
    st = res.stages
    assert len(encodes) == 1  # one VAE encode of the input picture
    # the stage brackets the same call the class-level wrapper timed: it contains it, plus two clock reads
    # (slack for a preemption on a busy machine; the whole request takes far longer)
    assert encodes[0] <= st.image_encode_s <= encodes[0] + 0.02 + 0.1 * encodes[0]  # 20 ms: a preemption
    parts = st.text_encode_s + st.image_encode_s + st.denoise_s + st.vae_decode_s + st.other_s
    assert parts == pytest.approx(st.total_s, rel=1e-9, abs=1e-9)
    assert min(st.text_encode_s, st.denoise_s, st.vae_decode_s) > 0
    assert res.images.shape == (1, 64, 64, 3) and res.images.dtype == np.uint8


@pytest.mark.parametrize(("strength", "expected"), [
    (0.5, 4),  # t_start = int(8 - 4.0) = 4 -> 4 of 8 steps
    (0.6, 5),  # t_start = int(8 - 4.8) = 3 -> 5 of 8 steps (int(8 x 0.6) would be 4: Flux rounds up)
    (1.0, 8),
])
def test_steps_that_ran_are_counted_by_a_denoiser_hook(engine, strength: float, expected: int) -> None:
    res, forwards, _ = _run(engine, _req(strength=strength))
    assert forwards == expected  # the test's own hook on the transformer
    assert len(res.stages.step_s) == expected and res.stages.denoiser_calls == expected
    assert edit_steps(8, strength, "flow") == expected


def test_same_input_and_seed_give_identical_pixels_a_different_input_does_not(engine) -> None:
    a, _, _ = _run(engine, _req())
    b, _, _ = _run(engine, _req())
    c, _, _ = _run(engine, _req(image=_png(2)))
    d, _, _ = _run(engine, _req(seed=4))
    assert np.array_equal(a.images, b.images)
    assert not np.array_equal(a.images, c.images)
    assert not np.array_equal(a.images, d.images)


def test_inpainting_with_a_mask_encodes_image_and_masked_image(engine) -> None:
    res, forwards, encodes = _run(engine, _req(mask=_png(5, gray=True), strength=0.5))
    assert len(encodes) == 2  # FluxInpaintPipeline encodes the image and the masked image
    assert encodes[0] + encodes[1] <= res.stages.image_encode_s
    assert forwards == 4 and res.images.shape == (1, 64, 64, 3)


def test_text_to_image_still_has_no_image_encode(engine) -> None:
    res, forwards, encodes = _run(engine, _req(image=None))
    assert encodes == [] and res.stages.image_encode_s == 0.0 and forwards == 8


def test_an_undecodable_input_image_is_an_input_error(engine) -> None:
    with pytest.raises(InputError, match="input image: not a decodable image"):
        engine.generate(_req(image=b"not a picture"))


def test_a_model_without_img2img_is_a_clear_error() -> None:
    req = GenerationRequest(prompt="x", height=64, width=64, frames=9, steps=4, image=_png(1))
    with pytest.raises(ShapeError, match="Wan has no image-to-image pipeline"):
        check_request("WanPipeline", req)
    # SDXL runs int(steps x strength) steps: 4 x 0.2 leaves none, refused before the pipeline runs
    with pytest.raises(ShapeError, match="leaves 0 denoising steps"):
        check_request("StableDiffusionXLPipeline", _req(steps=4, strength=0.2))


def test_detach_restores_the_vae_encode() -> None:
    e = DiffusersEngine(EngineConfig(model="tiny-flux"))
    e.start()
    e.generate(_req(steps=2))
    vae = e.pipe.vae
    assert "encode" in vae.__dict__
    e.stop()
    assert "encode" not in vae.__dict__ and "decode" not in vae.__dict__
