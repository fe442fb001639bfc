"""Shared fixtures: a fast, deterministic simulated engine behind the reference service."""

from __future__ import annotations

import threading

import pytest

from diffbench.engines.base import GenerationRequest, GenerationResult
from diffbench.engines.registry import EngineConfig, SimParams
from diffbench.engines.sim import SimEngine
from diffbench.errors import ShapeError
from diffbench.server.config import ServerConfig


@pytest.fixture(autouse=True)
def _service_log_reaches_caplog(monkeypatch: pytest.MonkeyPatch) -> None:
    """``serve`` run in-process by an earlier test (``server.runner.service_log``) leaves the ``diffbench.server``
    logger with ``propagate = False`` and its ``--log-level`` for the rest of the process, and a library's
    ``logging.config.dictConfig`` would disable it. Each test here starts
    from the logger's defaults again (restored after), so the tests that read the step log through ``caplog`` do
    not depend on the order of the suite. (A full run once found no step-log record in the tiny-flux cancel test;
    its cause was not established: that test passes here after ``service_log("warning")`` even without this.)"""
    import logging

    log = logging.getLogger("diffbench.server")
    monkeypatch.setattr(log, "propagate", True)
    monkeypatch.setattr(log, "level", logging.NOTSET)
    monkeypatch.setattr(log, "disabled", False)  # logging.config.dictConfig disables existing loggers by default


def sim_params(**kw: object) -> SimParams:
    """Realtime sim without compile, jitter or tails (service time = launch + stages, exactly)."""
    base = {
        "realtime": True,
        "compile_s": 0.0,
        "jitter": 0.0,
        "tail_prob": 0.0,
        "step_s": 0.001,
        "text_encode_s": 0.001,
        "vae_decode_s": 0.001,
        "other_s": 0.001,
        "launch_s": 0.0,
    }
    base.update(kw)
    return SimParams(**base)  # type: ignore[arg-type]


def sim_config(sim: SimParams | None = None, **kw: object) -> ServerConfig:
    return ServerConfig(engine=EngineConfig(engine="sim", sim=sim or sim_params()), **kw)  # type: ignore[arg-type]


class GatedSim(SimEngine):
    """A sim engine whose generate blocks until ``gate`` is set; records the peak concurrency."""

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        self.gate = threading.Event()
        self.entered = threading.Event()
        self._lock = threading.Lock()
        self.active = 0
        self.max_active = 0
        self.prompts: list[str] = []

    def generate(self, request: GenerationRequest) -> GenerationResult:
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.prompts.append(request.prompt)
        self.entered.set()
        try:
            if not self.gate.wait(timeout=20):
                raise TimeoutError("test gate never opened")
            if request.prompt == "boom":
                raise RuntimeError("injected failure")
            return super().generate(request)
        finally:
            with self._lock:
                self.active -= 1


@pytest.fixture
def gated_engine() -> GatedSim:
    return GatedSim(EngineConfig(engine="sim", sim=sim_params()))


class WanLikeSim(SimEngine):
    """A simulated video model with Wan's constraints: sides multiples of 16, frames of the form 4k + 1.

    Its ShapeError messages name CLI flags (``--width``, ``--frames``), as engine messages used to, so
    the tests check that the service words them with API field names.
    """

    def start(self):  # type: ignore[no-untyped-def]
        info = super().start()
        self._info = info.model_copy(update={"is_video": True, "pipeline_class": "WanLikeSim"})
        return self._info

    def validate(self, request: GenerationRequest) -> None:
        for flag, value in (("--width", request.width), ("--height", request.height)):
            if value % 16:
                raise ShapeError(f"{flag} {value} is not a multiple of 16; use {value // 16 * 16 or 16}")
        if request.frames is None:
            raise ShapeError("this is a video model: give --frames (4k+1)")
        if (request.frames - 1) % 4:
            k = (request.frames - 1) // 4
            raise ShapeError(
                f"--frames {request.frames} is not of the form 4k+1; use {4 * k + 1} or {4 * k + 5}"
            )


@pytest.fixture
def wan_like() -> WanLikeSim:
    return WanLikeSim(EngineConfig(engine="sim", sim=sim_params()))
