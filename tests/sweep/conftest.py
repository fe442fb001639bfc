"""One started tiny-flux engine shared by the sweep tests (building one costs seconds)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from diffbench.engines.base import EngineInfo, GenerationRequest, GenerationResult
from diffbench.engines.config import EngineConfig
from diffbench.sweep.models import SweepOptions

BASE = EngineConfig(model="tiny-flux")


class SharedEngine:
    """Delegates to a started engine, counts generations, and survives ``stop()``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.generations = 0

    @property
    def pipe(self) -> Any:
        return self.inner.pipe

    def start(self) -> EngineInfo:
        return self.inner.info()

    def info(self) -> EngineInfo:
        return self.inner.info()

    def validate(self, request: GenerationRequest) -> None:
        self.inner.validate(request)

    def generate(self, request: GenerationRequest) -> GenerationResult:
        self.generations += 1
        return self.inner.generate(request)

    def sync(self) -> None:
        self.inner.sync()

    def clock(self) -> int:
        return self.inner.clock()

    def stop(self) -> None:
        return None


@pytest.fixture(scope="session")
def shared_flux() -> SharedEngine:
    from diffbench.engines.diffusers_engine import DiffusersEngine

    eng = DiffusersEngine(BASE)
    eng.start()
    return SharedEngine(eng)


@pytest.fixture
def factory(shared_flux):
    """Engine factory: the shared engine for the base config, a real new engine otherwise."""
    shared_flux.generations = 0

    def make(cfg: EngineConfig) -> Any:
        if cfg == BASE:
            return shared_flux
        from diffbench.engines.registry import create_engine

        return create_engine(cfg)

    return make


def _small(values: list[str], **kw: Any) -> SweepOptions:
    """A fast sweep: 64x64, 10 steps, 2 prompts, no warmup, 2 timed runs."""
    base = dict(engine=BASE, axis="first-block", values=values, height=64, width=64, steps=10, num_prompts=2,
                seeds=[0], warmup=0, runs=2, bootstrap_resamples=200)
    base.update(kw)
    return SweepOptions(**base)


@pytest.fixture
def small():
    """Builds fast sweep options: ``small(values, **overrides)``."""
    return _small


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Sweep tests time configurations against each other: with other processes on the cores, two OpenMP
    intra-op threads wait on each other for whole time slices (generations 10-40x slower and erratic); one
    thread keeps the timing stable. Restored after each test (only when torch is already imported)."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
