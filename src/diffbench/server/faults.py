"""Fault injection for drills: ``POST /admin/faults`` changes the running engine behind the monitor's back.

Installed only by ``diffbench serve --enable-faults`` (never otherwise). A drill models a *silent*
regression: a configuration pushed to a live service without a restart, so the deployment fingerprint the
service reports (``/v1/models``, ``diffusion_build_info``) does not change; only the signals do.

Body (JSON object, every key optional, at least one):

==================  ===========================  ==============================================================
key                 value                        effect
==================  ===========================  ==============================================================
``cache``           ``"AXIS=VALUE"`` or null     the step cache on the denoiser (axes of
                                                 :mod:`diffbench.engines.knobs`, e.g. ``"first-block=0.6"``).
                                                 The same axis as the running cache: its knob is changed in
                                                 place on the existing hooks (instrumentation that counts the
                                                 cache's decisions keeps counting); another axis or none: the
                                                 cache is replaced (``disable_cache`` + ``enable_cache``).
``vae_tiling``      bool                         ``pipe.vae.enable_tiling()`` / ``disable_tiling()``
``step_delay_s``    number >= 0                  a sleep before every denoiser forward (0 removes it)
``calibration``     path of a calibration file   loaded into the running exporter (baseline gauges), so a
                                                 drill can calibrate a service under its own traffic; refused
                                                 (409) unless its fingerprint is the service's
==================  ===========================  ==============================================================

Changes are applied between generations: every ``engine.generate`` of the service runs under the
controller's lock, and the handler takes that lock in a thread, so a change never lands inside a running
generation. Answers 200 with the new state, 400 for a bad body (the field and the fix named), 409 when
the engine has no diffusers pipeline (e.g. the sim engine). ``GET /admin/faults`` returns the state.
"""

# No ``from __future__ import annotations``: FastAPI reads the route annotations at runtime.
import asyncio
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from diffbench.errors import DiffbenchError
from diffbench.server.http_errors import APIError

KEYS = ("cache", "vae_tiling", "step_delay_s", "calibration")
_WRAPPED = "_diffbench_fault_lock"


@dataclass
class FaultState:
    """What the controller has set: ``cache`` (``AXIS=VALUE`` or None), ``vae_tiling`` (None = untouched),
    ``step_delay_s`` (seconds)."""

    cache: str | None = None
    vae_tiling: bool | None = None
    step_delay_s: float = 0.0


def _pipe_of(engine: Any) -> Any:
    """The diffusers pipeline inside ``engine`` (through wrappers that keep it as ``inner``), or None."""
    seen = 0
    while engine is not None and seen < 5:
        pipe = getattr(engine, "pipe", None)
        if pipe is not None:
            return pipe
        engine = getattr(engine, "inner", None) or getattr(engine, "engine", None)
        seen += 1
    return None


def parse_faults(body: Any) -> dict[str, Any]:
    """Check a ``POST /admin/faults`` body; returns the changes with canonical values.

    Raises:
        APIError: 400 naming the field and what it takes.
    """
    from diffbench.engines.knobs import CACHE_AXES, parse_values

    if not isinstance(body, dict) or not body:
        raise APIError(400, f"the body must be a JSON object with one or more of {', '.join(KEYS)}, "
                       'e.g. {"cache": "first-block=0.6"}', code="invalid_value")
    unknown = sorted(set(body) - set(KEYS))
    if unknown:
        raise APIError(400, f"unknown fault(s) {', '.join(unknown)}; known: {', '.join(KEYS)}",
                       param=unknown[0])
    out: dict[str, Any] = {}
    if "cache" in body:
        raw = body["cache"]
        if raw is None or raw == "none":
            out["cache"] = None
        else:
            if not isinstance(raw, str) or "=" not in raw:
                raise APIError(400, f"cache: {raw!r} must be AXIS=VALUE (axes: {', '.join(CACHE_AXES)}), "
                               "e.g. first-block=0.6, or null to disable the cache", param="cache")
            axis, value = (p.strip() for p in raw.split("=", 1))
            if axis not in CACHE_AXES:
                raise APIError(400, f"cache: unknown axis {axis!r}; choose one of {', '.join(CACHE_AXES)}",
                               param="cache")
            try:
                (canon,) = parse_values(axis, value)
            except (DiffbenchError, ValueError) as exc:
                raise APIError(400, f"cache: {exc}".replace("--values", axis), param="cache") from exc
            out["cache"] = f"{axis}={canon}"
    if "vae_tiling" in body:
        if not isinstance(body["vae_tiling"], bool):
            raise APIError(400, f"vae_tiling: {body['vae_tiling']!r} must be true or false", param="vae_tiling")
        out["vae_tiling"] = body["vae_tiling"]
    if "step_delay_s" in body:
        v = body["step_delay_s"]
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise APIError(400, f"step_delay_s: {v!r} must be a finite number of seconds >= 0",
                           param="step_delay_s")
        out["step_delay_s"] = float(v)
    if "calibration" in body:
        if not isinstance(body["calibration"], str) or not body["calibration"]:
            raise APIError(400, f"calibration: {body['calibration']!r} must be the path of a calibration file "
                           "(diffbench monitor calibrate)", param="calibration")
        out["calibration"] = body["calibration"]
    return out


class FaultController:
    """Holds the lock every generation runs under and applies fault changes to the engine's pipeline."""

    def __init__(self, engine: Any, *, steps: int = 8, service: Any = None) -> None:
        self.engine = engine
        self.service = service
        self.steps = steps
        self.lock = threading.Lock()
        self.state = FaultState()
        self._delay_handle: Any = None
        cfg = getattr(engine, "config", None)
        self.state.cache = getattr(cfg, "cache", None)
        self.wrap(engine)

    def wrap(self, engine: Any) -> None:
        """Make ``engine.generate`` run under :attr:`lock` (idempotent; an instance attribute)."""
        if getattr(engine, _WRAPPED, None) is self.lock:
            return
        inner = engine.generate
        lock = self.lock

        def generate(request: Any, *args: Any, **kwargs: Any) -> Any:
            with lock:
                return inner(request, *args, **kwargs)

        engine.generate = generate
        setattr(engine, _WRAPPED, lock)

    def apply(self, changes: dict[str, Any]) -> FaultState:
        """Apply ``changes`` (from :func:`parse_faults`) between generations; returns the new state.

        Raises:
            APIError: 409 when the engine has no diffusers pipeline; 400 when the pipeline refuses the cache.
        """
        with self.lock:
            if "calibration" in changes:
                self._load_calibration(changes["calibration"])
            if not set(changes) - {"calibration"}:
                return FaultState(**vars(self.state))
            pipe = _pipe_of(self.engine)
            if pipe is None:
                raise APIError(409, "this engine has no diffusers pipeline to change (faults need "
                               "--engine diffusers)", code="unsupported")
            if "cache" in changes:
                self._set_cache(pipe, changes["cache"])
            if "vae_tiling" in changes:
                vae = getattr(pipe, "vae", None)
                if vae is None or not hasattr(vae, "enable_tiling"):
                    raise APIError(409, "vae_tiling: the pipeline's VAE has no enable_tiling",
                                   param="vae_tiling", code="unsupported")
                if changes["vae_tiling"]:
                    vae.enable_tiling()
                else:
                    vae.disable_tiling()
                self.state.vae_tiling = changes["vae_tiling"]
            if "step_delay_s" in changes:
                self._set_delay(pipe, changes["step_delay_s"])
            return FaultState(**vars(self.state))

    def _load_calibration(self, path: str) -> None:
        from diffbench.monitor.calibration import read_calibration

        exporter = getattr(self.service, "exporter", None)
        if exporter is None:
            raise APIError(409, "calibration: the service has no exporter to load it into", param="calibration",
                           code="unsupported")
        try:
            cal = read_calibration(path)
        except DiffbenchError as exc:
            raise APIError(400, f"calibration: {exc}", param="calibration") from exc
        mine = getattr(self.service, "fingerprint_id", None)
        if mine and cal.fingerprint_id != mine:
            raise APIError(409, f"calibration: {path} was measured on deployment {cal.fingerprint_id}, this "
                           f"service is {mine}; a baseline is valid only for its deployment: recalibrate",
                           param="calibration", code="fingerprint_mismatch")
        exporter.load_calibration(cal)

    def _set_cache(self, pipe: Any, spec: str | None) -> None:
        from diffbench.engines.knobs import build_cache_config, cache_knob, check_cache_supported

        denoiser = getattr(pipe, "transformer", None) or getattr(pipe, "unet", None)
        current = self.state.cache
        if spec is not None:
            axis, value = spec.split("=", 1)
            try:
                check_cache_supported(pipe, axis, getattr(getattr(self.engine, "config", None), "model", "?"))
            except DiffbenchError as exc:
                raise APIError(400, f"cache: {exc}", param="cache") from exc
            if current is not None and current.split("=", 1)[0] == axis:
                knob = cache_knob(axis)
                changed = 0
                for hook in _hooks(denoiser):
                    if hasattr(hook, knob):
                        setattr(hook, knob, type(getattr(hook, knob))(float(value)))
                        changed += 1
                if changed:
                    self.state.cache = spec
                    return
            if getattr(denoiser, "is_cache_enabled", False):
                denoiser.disable_cache()
            denoiser.enable_cache(build_cache_config(axis, value, pipe, self.steps))
        elif getattr(denoiser, "is_cache_enabled", False):
            denoiser.disable_cache()
        self.state.cache = spec

    def _set_delay(self, pipe: Any, delay: float) -> None:
        denoiser = getattr(pipe, "transformer", None) or getattr(pipe, "unet", None)
        if self._delay_handle is not None:
            self._delay_handle.remove()
            self._delay_handle = None
        if delay > 0:
            self._delay_handle = denoiser.register_forward_pre_hook(lambda *_: time.sleep(delay))
        self.state.step_delay_s = delay


def _hooks(module: Any) -> list[Any]:
    """Every diffusers ``ModelHook`` registered on ``module`` or its submodules."""
    out = []
    for sub in module.modules():
        registry = getattr(sub, "_diffusers_hook", None)
        if registry is not None:
            out.extend(getattr(registry, "hooks", {}).values())
    return out


def install_fault_routes(app: Any, service: Any) -> FaultController:
    """Add ``POST /admin/faults`` and ``GET /admin/faults`` to ``app`` over ``service``'s engine.

    Call before the service's worker starts (``create_app`` time), so every generation runs under the
    controller's lock. Returns the controller (``app.state.faults``).
    """
    from fastapi import Request

    controller = FaultController(service.engine, steps=service.config.default_steps or 8, service=service)
    app.state.faults = controller

    def _check_worker() -> None:
        worker = getattr(service, "worker", None)
        eng = getattr(worker, "engine", None)
        if eng is not None and eng is not controller.engine:
            controller.wrap(eng)

    @app.get("/admin/faults")
    async def get_faults() -> dict[str, Any]:
        return {"state": vars(controller.state)}

    @app.post("/admin/faults")
    async def post_faults(request: Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError as exc:
            raise APIError(400, f"the body is not JSON ({exc}); send e.g. {{\"vae_tiling\": false}}") from exc
        changes = parse_faults(body)
        _check_worker()
        t0 = time.perf_counter()
        state = await asyncio.to_thread(controller.apply, changes)
        return {"applied": changes, "state": vars(state), "waited_s": time.perf_counter() - t0}

    return controller
