"""``serve --warmup`` warms the keys the service declares: the --warmup sizes and every --shapes label at its
batch and frames, once per warm-up key; the first request of a declared batch then pays no compile."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from diffbench.engines.registry import EngineConfig
from diffbench.engines.sim import SimEngine
from diffbench.server.app import create_app
from diffbench.server.config import Limits
from diffbench.server.warmup import warmup_requests

from .conftest import sim_config, sim_params


def _engine(**kw: object) -> SimEngine:
    return SimEngine(EngineConfig(engine="sim", sim=sim_params(**kw)))


def test_the_declared_shapes_are_warmed_once_per_key() -> None:
    cfg = sim_config(warmup_sizes=("64x64",), shapes=("64x64", "64x64b4", "32x32b2", "64x64f9"))
    reqs = warmup_requests(cfg, _engine(), steps=3, frames=None)
    # 64x64 (from --warmup, and again in --shapes: one key), 64x64 at n 4, 32x32 at n 2; the video label is
    # skipped on an image model
    assert [(r.width, r.height, r.frames, r.batch, r.steps) for r in reqs] == [
        (64, 64, None, 1, 3), (64, 64, None, 4, 3), (32, 32, None, 2, 3)]
    assert len({r.warmup_key for r in reqs}) == len(reqs)


def test_a_video_service_warms_labels_without_frames_at_its_default_frames() -> None:
    cfg = sim_config(warmup_sizes=("64x64",), shapes=("64x64f9", "32x32"))
    reqs = warmup_requests(cfg, _engine(), steps=2, frames=5)
    assert [(r.width, r.height, r.frames, r.batch) for r in reqs] == [(64, 64, 5, 1), (64, 64, 9, 1), (32, 32, 5, 1)]


def test_nothing_without_warmup_and_refused_shapes_are_skipped() -> None:
    assert warmup_requests(sim_config(shapes=("64x64b4",)), _engine(), steps=2, frames=None) == []
    limits = Limits(max_pixels=64 * 64 * 2)  # n 4 at 64x64 is above the service's --max-pixels
    cfg = sim_config(warmup_sizes=("64x64",), shapes=("64x64b4", "64x64b2"), limits=limits)
    assert [r.batch for r in warmup_requests(cfg, _engine(), steps=2, frames=None)] == [1, 2]


@pytest.mark.parametrize("declared", [False, True])
def test_the_first_request_of_a_declared_batch_pays_no_compile(declared: bool) -> None:
    compile_s = 0.3  # the sim pays this once per new warm-up key, like torch.compile
    engine = _engine(compile_s=compile_s)
    shapes = ("64x64", "64x64b4") if declared else ()
    with TestClient(create_app(sim_config(warmup_sizes=("64x64",), shapes=shapes), engine=engine)) as c:
        first = c.post("/v1/images/generations", json={"prompt": "a", "size": "64x64", "n": 4}).json()
        assert (first["service_time_s"] < compile_s) is declared
    assert engine.launches == (3 if declared else 2)  # warm-ups + the request
