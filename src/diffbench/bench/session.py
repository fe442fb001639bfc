"""One ``diffbench bench`` session: options → workload → engine → protocol → streamed, versioned result."""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from diffbench.bench.coldstart import ColdStartClock
from diffbench.bench.inputs import EditInput
from diffbench.bench.limits import ShapeSpec
from diffbench.bench.outputs import OutputWriter
from diffbench.bench.protocol import BenchConfig, RunProgress, run_bench
from diffbench.bench.result import BenchResult, Conditions, Note, Protocol, ShapeResult
from diffbench.core import shapes as core_shapes
from diffbench.core.env import EnvInfo, capture_env
from diffbench.core.jsonio import write_json_atomic
from diffbench.core.stats import PERCENTILE_METHOD
from diffbench.engines.base import Engine, EngineInfo, GenerationRequest
from diffbench.engines.config import EngineConfig
from diffbench.engines.fingerprint import deployment_fingerprint
from diffbench.engines.registry import create_engine
from diffbench.errors import InputError, OutputError, UsageError
from diffbench.workload.prompts import Prompt, builtin_prompts, load_prompt_file

# Defaults per embedded model: (height, width, frames, steps). Tiny models use few steps so the default
# run (100 timed runs) finishes in well under a minute on 2 CPU cores.
MODEL_DEFAULTS: dict[str, tuple[int, int, int | None, int]] = {
    "tiny-flux": (256, 256, None, 8),
    "tiny-sdxl": (256, 256, None, 8),
    "tiny-wan": (128, 128, 9, 8),
    "sim": (1024, 1024, None, 28),
}
IMAGE_DEFAULT = (1024, 1024, None, 28)
VIDEO_DEFAULT = (480, 832, 81, 30)


class Shape(BaseModel):
    """A requested shape; None fields take the model's default. ``spec`` is the text it was parsed from
    (one ``--shapes`` entry), kept so that errors quote what the user wrote."""

    height: int | None = Field(default=None, gt=0)
    width: int | None = Field(default=None, gt=0)
    frames: int | None = Field(default=None, gt=0)
    spec: str | None = None

    def limit_spec(self) -> ShapeSpec:
        """This shape for :func:`~diffbench.bench.limits.check_limits`, quoting the options it came from."""
        w, h, f = self.width, self.height, self.frames
        if self.spec is not None:
            opt = f"--shapes {self.spec}"
            return ShapeSpec(size_option=opt, frames_option=f"{opt}: {f} frames", width=w, height=h, frames=f)
        size = " ".join(f"--{k} {v}" for k, v in (("width", w), ("height", h)) if v is not None)
        return ShapeSpec(size_option=size or "--width/--height", frames_option=f"--frames {f}",
                         width=w, height=h, frames=f)


def parse_shapes(text: str) -> list[Shape]:
    """``"256x256,768x512"`` or ``"832x480x33"``: WIDTHxHEIGHT[xFRAMES], comma separated.

    Width first, as in ``--size`` of ``load``/``ledger``/``plan`` and the OpenAI ``size`` field: a
    landscape 832x480 video is ``832x480x33``. (WxH and HxW cannot be told apart by syntax, so there is
    one convention and no guessing.)

    Raises:
        UsageError: malformed entries or non-positive values.
    """
    shapes = []
    for part in text.split(","):
        try:
            w, h, f = core_shapes.parse_size_frames(part, minimum=1)
        except core_shapes.SizeSyntaxError:
            raise UsageError(
                f"--shapes {part.strip()!r}: expected WIDTHxHEIGHT or WIDTHxHEIGHTxFRAMES with positive "
                "integers, comma separated (e.g. 1024x768,832x480x33)"
            ) from None
        spec = f"{w}x{h}" + (f"x{f}" if f is not None else "")
        shapes.append(Shape(width=w, height=h, frames=f, spec=spec))
    return shapes


class BenchOptions(BaseModel):
    """Everything ``diffbench bench`` accepts (validated once, then passed around)."""

    engine: EngineConfig = EngineConfig()
    shapes: list[Shape] = [Shape()]
    steps: int | None = Field(default=None, gt=0)
    guidance: float | None = None
    negative_prompt: str | None = None
    batch: int = Field(default=1, gt=0)
    prompts_file: Path | None = None
    num_prompts: int = Field(default=4, gt=0)
    seeds: list[int] = [0]
    protocol: BenchConfig = BenchConfig()
    json_path: Path | None = None
    markdown_path: Path | None = None
    save_outputs: Path | None = None
    edit_inputs: list[EditInput] = Field(default=[], description="input pictures: an img2img bench when given")
    strength: float = Field(default=0.6, gt=0, le=1, description="an edit's strength")


def _defaults(engine: EngineConfig, info: EngineInfo) -> tuple[int, int, int | None, int]:
    """(height, width, frames, steps) when the options give none. A remote service (``http``) is known by
    the model it reports: an embedded tiny model's defaults, else the image default with the service's
    ``default_steps`` when it reports them."""
    if engine.engine == "sim":
        return MODEL_DEFAULTS["sim"]
    model = info.model if engine.engine == "http" else engine.model
    if model in MODEL_DEFAULTS:
        return MODEL_DEFAULTS[model]
    h, w, f, steps = VIDEO_DEFAULT if info.is_video else IMAGE_DEFAULT
    return h, w, f, info.default_steps if engine.engine == "http" and info.default_steps else steps


def build_workload(opts: BenchOptions, info: EngineInfo) -> list[GenerationRequest]:
    """Prompts × seeds × shapes as requests (shape-major order); with ``edit_inputs``, input images ×
    prompts × seeds per shape, each an edit at ``strength`` whose ``prompt_id`` names its input
    (:mod:`diffbench.bench.inputs`)."""
    dh, dw, df, ds = _defaults(opts.engine, info)
    prompts: list[Prompt] = (
        load_prompt_file(opts.prompts_file) if opts.prompts_file else builtin_prompts(opts.num_prompts)
    )
    out = []
    for shape in opts.shapes:
        frames = shape.frames if shape.frames is not None else (df if info.is_video else None)
        inputs: list[EditInput | None] = list(opts.edit_inputs) or [None]
        for inp, p, seed in itertools.product(inputs, prompts, opts.seeds):
            edit = {} if inp is None else dict(image=inp.data, mask=inp.mask, strength=opts.strength)
            out.append(
                GenerationRequest(
                    prompt=p.text,
                    prompt_id=p.prompt_id if inp is None else f"{p.prompt_id}@{inp.tag}",
                    negative_prompt=opts.negative_prompt,
                    height=shape.height or dh,
                    width=shape.width or dw,
                    frames=frames,
                    steps=opts.steps or ds,
                    guidance=opts.guidance,
                    batch=opts.batch,
                    seed=seed,
                    **edit,  # type: ignore[arg-type]
                )
            )
    return out


def _conditions(
    info: EngineInfo, requests: list[GenerationRequest], env_hw: str, driver: str | None, cuda: str | None
) -> Conditions:
    """The ``conditions`` of a bench result: what ran (``info``: the started engine), on which workload
    (``requests``: every request of :func:`build_workload`, non-empty) and where (``env_hw``: GPU names or the
    CPU; ``driver``/``cuda``: versions or None)."""
    from diffbench.bench.protocol import shape_label

    first = requests[0]
    labels = list(dict.fromkeys(shape_label(r) for r in requests))
    return Conditions(
        model=info.model,
        model_hash=info.model_hash,
        pipeline=info.pipeline_class,
        shape=labels[0],
        shapes=labels,
        steps=first.steps,
        cfg=info.cfg,
        guidance=first.guidance,
        batch=first.batch,
        engine=info.engine,
        engine_version=info.engine_version,
        attention_backend=info.attention_backend,
        parallelism=info.parallelism,
        precision=info.dtype,
        cache=info.cache,
        compile=info.compile,
        device=info.device,
        hardware=env_hw,
        driver=driver,
        cuda=cuda,
        seeds=list(dict.fromkeys(r.seed for r in requests)),
        prompts=len({r.prompt_id.rsplit("@", 1)[0] if r.is_edit else r.prompt_id for r in requests}),
        strength=first.strength if first.is_edit else None,
        input_images=len({r.image for r in requests}) if first.is_edit else None,
        inpaint=(first.mask is not None) if first.is_edit else None,
        **optional_conditions(info),
    )


def optional_conditions(info: EngineInfo) -> dict[str, object]:
    """The conditions of the optional deployment options (quantization, fused projections), only when used."""
    out: dict[str, object] = {}
    if info.quantization != "none":
        out["quantization"] = info.quantization
    if info.fused_projections:
        out["fused_projections"] = True
    return out


def base_result(cfg: BenchConfig, info: EngineInfo, requests: list[GenerationRequest], env: EnvInfo,
                hardware: str, outputs_dir: str | None = None) -> BenchResult:
    """The result of a bench before its first run (no shapes yet): created now, its conditions (what ran,
    on which workload, where), ``env`` and the measurement protocol of ``cfg``. ``hardware`` names where it
    runs (GPU names or the CPU); ``outputs_dir`` is the ``--save-outputs`` directory, if any. The
    single-process session and the Ray bench both start from it and fill in ``shapes`` as runs finish."""
    return BenchResult(
        created_unix=time.time(),
        conditions=_conditions(info, requests, hardware, env.driver, env.cuda),
        env=env,
        protocol=Protocol(
            warmup_per_shape=None if cfg.warmup_auto else cfg.warmup,
            warmup_auto=cfg.warmup_auto,
            max_warmup=cfg.max_warmup if cfg.warmup_auto else None,
            runs_per_shape=cfg.runs,
            synchronized=cfg.sync,
            percentile_method=PERCENTILE_METHOD,
        ),
        outputs_dir=outputs_dir,
    )


def engine_fingerprint(engine: Engine, info: EngineInfo, env: EnvInfo) -> dict[str, object]:
    """The deployment fingerprint of what generates the outputs: the engine's own when it has one (a remote
    service reports its own; :meth:`~diffbench.engines.http_engine.HttpEngine.fingerprint`), else
    :func:`~diffbench.engines.fingerprint.deployment_fingerprint` of this process."""
    own = getattr(engine, "fingerprint", None)
    return own(env) if callable(own) else deployment_fingerprint(info, env)


def preflight(opts: BenchOptions, engine: Engine) -> None:
    """Validate every request of the workload before the model is loaded, when the engine can tell its
    pipeline class without loading (``peek_info``): a bad shape is refused in milliseconds, not after
    minutes of loading.

    Raises:
        ShapeError: a request the model cannot take.
    """
    peek = getattr(engine, "peek_info", None)
    early = peek() if callable(peek) else None
    if early is None:
        return
    for r in build_workload(opts, early):
        engine.validate(r)


def run_session(
    opts: BenchOptions,
    engine: Engine | None = None,
    on_update: Callable[[BenchResult], None] | None = None,
    on_run: RunProgress | None = None,
) -> BenchResult:
    """Run the whole bench and return the final result; the JSON (if asked) is rewritten as runs finish.

    ``on_update`` gets the (partial) result after every timed run; ``on_run`` gets a
    :class:`~diffbench.bench.progress.RunEvent` after every warmup and timed run (the live progress line).

    On KeyboardInterrupt the partial result is written (``partial: true``, ``interrupted: true``) and the
    interrupt is re-raised.
    """
    engine = engine or create_engine(opts.engine)
    preflight(opts, engine)
    cold = ColdStartClock()
    info = cold.start_engine(engine)
    on_run = cold.watch(on_run)
    try:
        requests = build_workload(opts, info)
        env = capture_env()
        hw = ", ".join(g.name for g in env.gpus) if info.device.startswith("cuda") else env.cpu
        base = base_result(opts.protocol, info, requests, env, hw)
        writer = None
        if opts.save_outputs:
            fp = engine_fingerprint(engine, info, env)
            writer = OutputWriter(opts.save_outputs, base.conditions.model_dump(mode="json"), fp,
                                  inputs={i.sha256: i.name for i in opts.edit_inputs})
            base = base.model_copy(update={"outputs_dir": str(opts.save_outputs)})

        state = {"result": base}
        write_failed: list[OutputError] = []  # a --json write failed mid-run (warned once)

        def assemble(shapes: list[ShapeResult], partial: bool, interrupted: bool = False) -> BenchResult:
            r = base.model_copy(update={"shapes": shapes, "partial": partial, "interrupted": interrupted,
                                        "cold_start": cold.result(shapes)})
            r = r.with_primary()
            if any(w.code == "unsynchronized" for w in r.warnings) or not opts.protocol.sync:
                r = r.model_copy(update={"valid": False})
            if not partial or interrupted:
                from diffbench.bench.stability import load_notes

                r.warnings.extend(load_notes(info, opts.engine.threads))
            if interrupted:
                r.warnings.append(
                    Note(code="interrupted", message="interrupted: results cover the runs done so far")
                )
            return r

        def progress(shapes: list[ShapeResult]) -> None:
            state["result"] = assemble(shapes, partial=True)
            try:
                write_result(opts, state["result"], markdown=False)
            except OutputError as exc:  # a full disk mid-run: warned once, the run goes on (final write raises)
                if not write_failed:
                    write_failed.append(exc)
                    print(f"warning: {exc}; the run goes on (--json is written again at the end)", file=sys.stderr,
                          flush=True)
            if on_update:
                on_update(state["result"])

        try:
            shapes = run_bench(engine, requests, opts.protocol, on_output=writer, on_progress=progress,
                               on_run=on_run)
        except KeyboardInterrupt:
            partial = assemble(state["result"].shapes, partial=True, interrupted=True)
            try:
                write_result(opts, partial, markdown=True)
            except OutputError as exc:  # the interrupt is what is reported; the output error beside it
                print(f"warning: {exc}", file=sys.stderr, flush=True)
            if on_update:
                on_update(partial)
            raise
        final = assemble(shapes, partial=False)
        write_result(opts, final, markdown=True)
        return final
    finally:
        engine.stop()


def write_result(opts: BenchOptions, result: BenchResult, markdown: bool) -> None:
    """Write ``result`` to ``opts.json_path`` (atomically) and, when ``markdown``, its Markdown to
    ``opts.markdown_path``; either path may be None (nothing written there).

    Raises:
        OutputError: the JSON cannot be written (the message names ``--json``).
        InputError: the Markdown file cannot be written (the message names ``--markdown``).
    """
    if opts.json_path:
        try:
            write_json_atomic(opts.json_path, result.model_dump(mode="json"))
        except OutputError as exc:
            raise OutputError(f"--json {exc}") from exc
    if markdown and opts.markdown_path:
        from diffbench.bench.render import to_markdown

        try:
            opts.markdown_path.write_text(to_markdown(result))
        except OSError as exc:
            raise InputError(
                f"--markdown {opts.markdown_path}: cannot write ({exc.strerror or exc}); choose a writable path"
            ) from exc
