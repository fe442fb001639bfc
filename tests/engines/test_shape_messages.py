"""Engine shape messages are neutral (no CLI flag or API field), so each caller names its own input."""

from __future__ import annotations

import pytest

from diffbench.engines.base import GenerationRequest
from diffbench.engines.diffusers_engine import PIPELINES, check_request, peek_pipeline_class
from diffbench.errors import ShapeError


def _req(w: int, h: int, frames: int | None = None) -> GenerationRequest:
    return GenerationRequest(prompt="p", width=w, height=h, frames=frames, steps=1)


@pytest.mark.parametrize(
    ("cls", "req", "expected"),
    [
        ("FluxPipeline", _req(100, 64), "width 100 is not a multiple of 16 for Flux; nearest valid 96 or 112"),
        ("FluxPipeline", _req(64, 40), "height 40 is not a multiple of 16 for Flux; nearest valid 32 or 48"),
        ("FluxPipeline", _req(8, 64), "width 8 is not a multiple of 16 for Flux; nearest valid 16"),
        ("StableDiffusionXLPipeline", _req(64, 60), "height 60 is not a multiple of 8"),
        ("WanPipeline", _req(64, 64, 10), "frames 10 is not of the form 4k+1 for Wan"),
        ("WanPipeline", _req(64, 64), "Wan is a video model"),
        ("FluxPipeline", _req(64, 64, 9), "frames 9: Flux is an image model"),
    ],
)
def test_messages_are_neutral(cls: str, req: GenerationRequest, expected: str) -> None:
    with pytest.raises(ShapeError) as exc:
        check_request(cls, req)
    msg = str(exc.value)
    assert expected in msg
    assert "--" not in msg and "size" not in msg  # the caller adds --shapes / --width / size


def test_valid_shapes_pass_and_multiples_are_the_table() -> None:
    for cls, (mult, is_video, tcomp, _) in PIPELINES.items():
        check_request(cls, _req(mult * 3, mult * 2, tcomp * 2 + 1 if is_video else None))


def test_peek_pipeline_class_without_loading(tmp_path) -> None:
    import json

    assert peek_pipeline_class("tiny-wan") == "WanPipeline"
    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionXLPipeline"}))
    assert peek_pipeline_class(str(tmp_path)) == "StableDiffusionXLPipeline"
    assert peek_pipeline_class(str(tmp_path / "missing")) is None


def test_library_engine_refuses_an_unknown_device() -> None:
    """Not only the CLI: an EngineConfig with device 'tpu' fails at start with the list of devices."""
    from diffbench.engines.config import EngineConfig
    from diffbench.engines.registry import create_engine
    from diffbench.errors import UsageError

    engine = create_engine(EngineConfig(model="tiny-flux", device="tpu"))
    with pytest.raises(UsageError, match=r"--device tpu: unknown device; valid devices: cpu, cuda, cuda:N, mps"):
        engine.start()
