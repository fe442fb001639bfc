"""The diffusers engine: a real diffusers pipeline on CPU or CUDA, timed stage by stage.

``model`` is either a tiny random-weight pipeline built offline (``tiny-flux``, ``tiny-sdxl``,
``tiny-wan``; see :mod:`diffbench.engines.tiny`) or a local pipeline directory loaded with
``DiffusionPipeline.from_pretrained(path, local_files_only=True)``. Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from diffbench.engines.adapters import adapter_hashes
from diffbench.engines.base import EngineInfo, GenerationRequest, GenerationResult
from diffbench.engines.config import EngineConfig
from diffbench.engines.images import StepsRule, edit_steps, prepare_image
from diffbench.errors import DeviceOutOfMemory, GenerationError, ModelError, ShapeError, UsageError, require

# pipeline class -> (spatial multiple, is_video, temporal compression, CFG mode)
# FLUX packs 2x2 latent patches over an 8x VAE -> multiples of 16; SDXL's UNet needs multiples of 8;
# Wan: 8x VAE with 2x2 patches -> 16, and a 4x temporal VAE -> frames = 4k + 1.
PIPELINES: dict[str, tuple[int, bool, int, str]] = {
    "FluxPipeline": (16, False, 1, "distilled (true CFG only with true_cfg_scale > 1)"),
    "StableDiffusionXLPipeline": (8, False, 1, "batched (1 call per step, batch x2)"),
    "StableDiffusionPipeline": (8, False, 1, "batched (1 call per step, batch x2)"),
    "StableDiffusion3Pipeline": (16, False, 1, "batched (1 call per step, batch x2)"),
    "WanPipeline": (16, True, 4, "separate (2 calls per step)"),
    "QwenImagePipeline": (16, False, 1, "separate (2 calls per step with true_cfg_scale > 1)"),
}
# Playback rate of each video pipeline's output and where it comes from (video-seconds = frames / fps).
VIDEO_FPS: dict[str, tuple[float, str]] = {
    "WanPipeline": (16.0, "Wan2.1 sample_fps 16 (wan/configs/shared_config.py)"),
}
# Image-to-image (edits): pipeline class -> (img2img class, inpainting class, steps rule of get_timesteps);
# built with ``from_pipe`` from the loaded pipeline's components (no second copy of the weights).
EDIT_PIPELINES: dict[str, tuple[str, str, StepsRule]] = {
    "FluxPipeline": ("FluxImg2ImgPipeline", "FluxInpaintPipeline", "flow"),
    "StableDiffusionXLPipeline": ("StableDiffusionXLImg2ImgPipeline", "StableDiffusionXLInpaintPipeline", "floor"),
    "StableDiffusionPipeline": ("StableDiffusionImg2ImgPipeline", "StableDiffusionInpaintPipeline", "floor"),
    "StableDiffusion3Pipeline": ("StableDiffusion3Img2ImgPipeline", "StableDiffusion3InpaintPipeline", "flow"),
    "QwenImagePipeline": ("QwenImageImg2ImgPipeline", "QwenImageInpaintPipeline", "flow"),
}
# The embedded tiny models and their pipeline classes (known without building them).
TINY_CLASSES = {"tiny-flux": "FluxPipeline", "tiny-sdxl": "StableDiffusionXLPipeline", "tiny-wan": "WanPipeline"}
DTYPES = ("float32", "bfloat16", "float16")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def config_hash(pipe: Any) -> str:
    """sha256 (first 16 hex) over the pipeline's and every component's config, sorted JSON."""
    h = hashlib.sha256()
    h.update(type(pipe).__name__.encode())
    for name, comp in sorted(pipe.components.items()):
        cfg = getattr(comp, "config", None)
        if cfg is None:
            continue
        as_dict = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)
        as_dict = {k: v for k, v in as_dict.items() if not k.startswith("_") and k != "transformers_version"}
        h.update(name.encode() + json.dumps(as_dict, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def _resolve_model_path(model: str) -> Path:
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "model_index.json").exists():
            raise ModelError(
                f"{path} has no model_index.json: --model must be a diffusers pipeline directory "
                "(as written by save_pretrained or a hub snapshot)"
            )
        return path
    if path.exists():
        raise ModelError(
            f"--model {model} is a file; give the pipeline directory that holds model_index.json"
        )
    if _HUB_ID.match(model) and not model.startswith((".", "/", "~")):
        raise ModelError(
            f"--model {model} looks like a hub id, but diffbench runs offline: weights must be a local "
            f"directory. On a machine with network access run `huggingface-cli download {model} --local-dir "
            f"DIR`, copy DIR here and pass --model DIR (or use tiny-flux, tiny-sdxl, tiny-wan)"
        )
    raise ModelError(
        f"--model {model}: no such directory; pass a local diffusers pipeline directory or one of "
        "tiny-flux, tiny-sdxl, tiny-wan"
    )


def peek_pipeline_class(model: str) -> str | None:
    """The pipeline class of ``model`` without loading it: a tiny model's, or ``_class_name`` of a local
    directory's ``model_index.json``; None when unknown or unsupported (loading then reports why)."""
    if model in TINY_CLASSES:
        return TINY_CLASSES[model]
    index = Path(model).expanduser() / "model_index.json"
    try:
        cls_name = json.loads(index.read_text()).get("_class_name") if index.is_file() else None
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    return cls_name if cls_name in PIPELINES else None


def _nearest(value: int, mult: int) -> str:
    lo, hi = value // mult * mult, (value // mult + 1) * mult
    return f"{lo} or {hi}" if lo > 0 else f"{hi}"


def check_request(cls_name: str, request: GenerationRequest) -> None:
    """Check a request against the constraints of pipeline class ``cls_name``.

    Messages are neutral ("width 100 is not a multiple of 16 for Flux; nearest valid 96 or 112"): they
    name the quantity, never a CLI flag or an API field, so each caller (``bench --shapes``, ``--width``,
    the server's ``size``) prefixes its own input name.

    Raises:
        ShapeError: height/width not a multiple of the spatial multiple; frames missing, given to an
            image model, or not 4k + 1 for a 4x temporal VAE; an edit (input image) for a model without an
            image-to-image pipeline, or a strength that leaves no denoising step.
    """
    mult, is_video, tcomp, _ = PIPELINES[cls_name]
    name = cls_name.replace("Pipeline", "")
    for field, value in (("width", request.width), ("height", request.height)):
        if value % mult:
            raise ShapeError(
                f"{field} {value} is not a multiple of {mult} for {name}; nearest valid {_nearest(value, mult)}"
            )
    if is_video and request.frames is None:
        raise ShapeError(
            f"{name} is a video model: the request gives no number of frames; "
            f"it takes {tcomp}k+1 frames, e.g. 1, 9 or 33"
        )
    if not is_video and request.frames is not None:
        raise ShapeError(f"frames {request.frames}: {name} is an image model and takes no frames")
    if is_video and request.frames is not None and (request.frames - 1) % tcomp:
        k = (request.frames - 1) // tcomp
        raise ShapeError(
            f"frames {request.frames} is not of the form {tcomp}k+1 for {name} (its VAE compresses time "
            f"{tcomp}x); nearest valid {tcomp * k + 1} or {tcomp * (k + 1) + 1}"
        )
    if request.is_edit:
        if cls_name not in EDIT_PIPELINES:
            raise ShapeError(
                f"{name} has no image-to-image pipeline here, so it cannot run an edit (an input image); "
                f"edits run on {', '.join(c.replace('Pipeline', '') for c in EDIT_PIPELINES)}"
            )
        run = edit_steps(request.steps, request.strength, EDIT_PIPELINES[cls_name][2])
        if run < 1:
            raise ShapeError(
                f"strength {request.strength:g} x {request.steps} steps leaves {run} denoising steps for {name} "
                f"(it runs int(steps x strength)); raise the strength or the steps"
            )


def steps_run(cls_name: str, request: GenerationRequest) -> int:
    """Denoising steps pipeline class ``cls_name`` runs for ``request``: ``request.steps`` for text-to-image,
    :func:`~diffbench.engines.images.edit_steps` under the class's rule for an edit."""
    if not request.is_edit or cls_name not in EDIT_PIPELINES:
        return request.steps
    return edit_steps(request.steps, request.strength, EDIT_PIPELINES[cls_name][2])


class DiffusersEngine:
    """Runs a diffusers pipeline. Synchronous from the caller's view except on CUDA (see ``sync``)."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.pipe: Any = None
        self._adapter: tuple[str, float] | None = None  # the active LoRA adapter and scale
        self.timer: Any = None
        self.instrumentation: Any = None  # diffbench.engines.instrument.pipeline.Instrumentation after start()
        self._info: EngineInfo | None = None
        self._torch: Any = None
        self._edit_pipes: dict[bool, Any] = {}  # inpainting? -> img2img / inpaint pipeline (from_pipe)

    # -- loading ------------------------------------------------------------------------------
    def _load(self) -> Any:
        from diffbench.engines.tiny import TINY_MODELS, build_tiny

        model = self.config.model
        if model in TINY_MODELS:
            return build_tiny(model)
        if model.startswith("tiny-"):
            raise ModelError(f"--model {model}: unknown tiny model; choose one of {', '.join(TINY_MODELS)}")
        path = _resolve_model_path(model)
        try:
            cls_name = json.loads((path / "model_index.json").read_text()).get("_class_name", "?")
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelError(f"{path / 'model_index.json'}: unreadable ({exc})") from exc
        if cls_name not in PIPELINES:
            raise ModelError(
                f"{path}: pipeline class {cls_name} is not supported; supported: {', '.join(sorted(PIPELINES))}"
            )
        diffusers = require("diffusers", "diffusers")
        try:
            return diffusers.DiffusionPipeline.from_pretrained(str(path), local_files_only=True)
        except Exception as exc:
            raise ModelError(
                f"{path}: cannot load the pipeline offline ({type(exc).__name__}: {exc})"
            ) from exc

    def start(self) -> EngineInfo:
        """Build or load the pipeline, move it to the device and dtype, apply backend, fused projections,
        quantization, cache and compile (in that order).

        Raises:
            ModelError: missing directory, hub id, unsupported pipeline class.
            UsageError: unknown dtype, device or attention backend; a quantization this device or dtype cannot
                run (:func:`~diffbench.engines.quantize.quantization_unavailable`, checked before loading);
                fused projections on a pipeline without them (:func:`~diffbench.engines.fusion.fusion_unavailable`).
            MissingDependencyError: the ``diffusers`` extra is not installed.
        """
        torch = require("torch", "diffusers")
        require("diffusers", "diffusers")
        self._torch = torch
        cfg = self.config
        if cfg.dtype not in DTYPES:
            raise UsageError(f"--dtype {cfg.dtype} is not supported; choose one of {', '.join(DTYPES)}")
        from diffbench.engines.config import check_device

        _check_device_available(torch, check_device(cfg.device))
        from diffbench.engines.quantize import quantization_unavailable

        unavailable = quantization_unavailable(cfg.quantization, cfg.device, cfg.dtype)
        if unavailable is None and cfg.fuse_projections and peek_pipeline_class(cfg.model) is not None:
            from diffbench.engines.fusion import fusion_unavailable

            unavailable = fusion_unavailable(str(peek_pipeline_class(cfg.model)))
        if unavailable is not None:  # before minutes of loading
            raise UsageError(unavailable)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        from diffbench.engines.logonce import install_once_filter

        install_once_filter()  # prompt-truncation warnings once per kind, not once per call
        pipe = self._load()
        cls_name = type(pipe).__name__
        if cls_name not in PIPELINES:
            raise ModelError(
                f"pipeline class {cls_name} is not supported; supported: {', '.join(sorted(PIPELINES))}"
            )
        if cfg.dtype != "float32":
            pipe = pipe.to(getattr(torch, cfg.dtype))
        if cfg.offload == "none":
            pipe = pipe.to(cfg.device)
        elif not cfg.device.startswith("cuda"):
            raise UsageError(
                f"--offload {cfg.offload} moves weights between host and GPU; it needs --device cuda"
            )
        elif cfg.offload == "model":
            pipe.enable_model_cpu_offload(device=cfg.device)
        else:
            pipe.enable_sequential_cpu_offload(device=cfg.device)
        if cfg.vae_tiling:
            pipe.vae.enable_tiling()
        pipe.set_progress_bar_config(disable=True)
        denoiser = getattr(pipe, "transformer", None) or getattr(pipe, "unet", None)
        backend = "default (torch SDPA)"
        if cfg.attention_backend:
            try:
                denoiser.set_attention_backend(cfg.attention_backend)
            except Exception as exc:
                from diffusers.models.attention_dispatch import AttentionBackendName

                names = ", ".join(b.value for b in AttentionBackendName if not b.value.startswith("_"))
                raise UsageError(
                    f"--attention-backend {cfg.attention_backend} cannot be used with {cls_name} here "
                    f"({exc}); known backends: {names}"
                ) from exc
            backend = cfg.attention_backend
        if cfg.fuse_projections:  # before quantizing: fusion concatenates the float weights
            from diffbench.engines.fusion import fuse_projections

            fuse_projections(pipe)
        if cfg.quantization != "none":
            from diffbench.engines.quantize import apply_quantization

            apply_quantization(pipe, cfg.quantization, cfg.device, cfg.dtype)
        if cfg.adapters:  # LoRA adapters: loaded once, none active until a request names one
            self._load_adapters(pipe)
        cache_desc = "none"
        if cfg.cache:
            cache_desc = _enable_cache(pipe, cfg.cache, cfg.model)
        if cfg.compile:
            denoiser.compile()
        from diffbench.engines.instrument.pipeline import attach

        self.pipe = pipe
        self.instrumentation = attach(pipe, device=cfg.device, model=cfg.model,
                                      memory_budget_bytes=cfg.memory_budget_bytes)
        self.timer = self.instrumentation
        mult, is_video, _, cfg_mode = PIPELINES[cls_name]
        self._info = EngineInfo(
            engine="diffusers",
            engine_version=_package_version("diffusers"),
            model=cfg.model,
            model_hash=config_hash(pipe),
            pipeline_class=cls_name,
            device=cfg.device,
            dtype=cfg.dtype,
            attention_backend=backend,
            compile=cfg.compile,
            cache=cache_desc,
            quantization=cfg.quantization,
            fused_projections=cfg.fuse_projections,
            parallelism="none (1 device)",
            adapters=adapter_hashes(cfg.adapters) if cfg.adapters else {},
            asynchronous=cfg.device.startswith("cuda"),
            is_video=is_video,
            default_steps=None,
            default_guidance=None,
            cfg=cfg_mode,
            fps=VIDEO_FPS.get(cls_name, (None, None))[0],
            fps_source=VIDEO_FPS.get(cls_name, (None, None))[1],
            details={
                "spatial_multiple": str(mult),
                "threads": str(torch.get_num_threads()),
                "deterministic_algorithms": str(torch.are_deterministic_algorithms_enabled()),
                "vae_tiling": str(cfg.vae_tiling),
                "offload": cfg.offload,
                **({"memory_budget_bytes": str(cfg.memory_budget_bytes)} if cfg.memory_budget_bytes else {}),
            },
        )
        return self._info

    def info(self) -> EngineInfo:
        """The conditions (after :meth:`start`)."""
        if self._info is None:
            raise UsageError("engine not started")
        return self._info

    # -- requests -----------------------------------------------------------------------------
    def peek_info(self) -> EngineInfo | None:
        """The conditions that can be known without loading the model (pipeline class, video or not), so
        a bad request is refused before minutes of loading; None when the class cannot be read cheaply."""
        if self._info is not None:
            return self._info
        cls_name = peek_pipeline_class(self.config.model)
        if cls_name is None:
            return None
        mult, is_video, _, cfg_mode = PIPELINES[cls_name]
        fps, fps_source = VIDEO_FPS.get(cls_name, (None, None))
        return EngineInfo(
            engine="diffusers", engine_version="(not loaded)", model=self.config.model,
            pipeline_class=cls_name, device=self.config.device, dtype=self.config.dtype,
            quantization=self.config.quantization, fused_projections=self.config.fuse_projections,
            is_video=is_video, cfg=cfg_mode, fps=fps, fps_source=fps_source,
        )

    def validate(self, request: GenerationRequest) -> None:
        """Check the shape against the pipeline's constraints (before or after :meth:`start`).

        Raises:
            ShapeError: see :func:`check_request`; an adapter the engine did not load.
        """
        info = self._info or self.peek_info()
        if info is None:
            raise UsageError("engine not started")
        check_request(info.pipeline_class or "", request)
        from diffbench.engines.adapters import check_adapter

        check_adapter(self.config.adapters, request.adapter)

    def _load_adapters(self, pipe: Any) -> None:
        """``load_lora_weights`` of every declared adapter (:mod:`diffbench.engines.adapters`), then none active.

        Raises:
            UsageError: adapters with quantized or fused projections (the LoRA layers would wrap the replaced
                linears), or an adapter diffusers cannot load into this pipeline (named).
        """
        cfg = self.config
        if cfg.quantization != "none" or cfg.fuse_projections:
            raise UsageError("--lora with --quantization or --fuse-projections is not supported: the LoRA layers "
                             "wrap the linear layers those replace")
        if not hasattr(pipe, "load_lora_weights"):
            raise UsageError(f"--lora: {type(pipe).__name__} has no LoRA loader in diffusers")
        for name, path in cfg.adapters.items():
            try:
                pipe.load_lora_weights(path, adapter_name=name)
            except Exception as exc:
                raise UsageError(f"--lora {name}={path}: diffusers cannot load it into {type(pipe).__name__} "
                                 f"({type(exc).__name__}: {str(exc)[:200]})") from exc
        pipe.disable_lora()
        self._adapter = None

    def _activate(self, request: GenerationRequest) -> float:
        """Make ``request``'s adapter (and scale) the active one; the seconds the swap took (synchronized),
        0.0 when it was already active."""
        wanted = (request.adapter, request.adapter_scale) if request.adapter is not None else None
        if wanted == self._adapter:
            return 0.0
        import time

        self.sync()
        t0 = time.perf_counter()
        if wanted is None:
            self.pipe.disable_lora()
        else:
            self.pipe.enable_lora()
            self.pipe.set_adapters([wanted[0]], [wanted[1]])
        self.sync()
        self._adapter = wanted
        return time.perf_counter() - t0

    def pipeline_kwargs(self, request: GenerationRequest) -> dict[str, Any]:
        """The keyword arguments passed to the pipeline for ``request`` (generator per image)."""
        torch = self._torch
        gen_device = "cpu"
        gens = [
            torch.Generator(device=gen_device).manual_seed(request.seed + i) for i in range(request.batch)
        ]
        kw: dict[str, Any] = dict(
            prompt=request.prompt,
            height=request.height,
            width=request.width,
            num_inference_steps=request.steps,
            num_images_per_prompt=request.batch,
            generator=gens if request.batch > 1 else gens[0],
            output_type="np",
        )
        cls_name = self.info().pipeline_class
        if request.negative_prompt is not None:
            kw["negative_prompt"] = request.negative_prompt
        if request.guidance is not None:
            kw["guidance_scale"] = request.guidance
        if cls_name == "WanPipeline":
            kw["num_frames"] = request.frames
            kw.pop("num_images_per_prompt")
            kw["num_videos_per_prompt"] = request.batch
        if self.config.model.startswith("tiny-") and cls_name in ("FluxPipeline", "WanPipeline"):
            from diffbench.engines.tiny import T5_MAX_LEN

            kw["max_sequence_length"] = T5_MAX_LEN
        return kw

    def edit_pipeline(self, inpaint: bool) -> Any:
        """The img2img (``inpaint=False``) or inpainting pipeline of the loaded model, built once with
        ``from_pipe`` from the same components (shared weights, VAE, scheduler, hooks) and instrumented.

        Raises:
            ShapeError: the pipeline class has no image-to-image pipeline (:data:`EDIT_PIPELINES`).
        """
        if inpaint in self._edit_pipes:
            return self._edit_pipes[inpaint]
        cls_name = self.info().pipeline_class or ""
        if cls_name not in EDIT_PIPELINES:
            raise ShapeError(f"{cls_name.replace('Pipeline', '')} has no image-to-image pipeline here, so it "
                             "cannot run an edit")
        import diffusers

        target = getattr(diffusers, EDIT_PIPELINES[cls_name][1 if inpaint else 0])
        level = diffusers.utils.logging.get_verbosity()
        diffusers.utils.logging.set_verbosity_error()  # from_pipe re-casts shared modules and warns about it
        try:
            edit = target.from_pipe(self.pipe)
        finally:
            diffusers.utils.logging.set_verbosity(level)
        edit.set_progress_bar_config(disable=True)
        self.instrumentation.add_pipeline(edit)
        self._edit_pipes[inpaint] = edit
        return edit

    def edit_kwargs(self, request: GenerationRequest, pipe: Any) -> dict[str, Any]:
        """:meth:`pipeline_kwargs` plus the input image (decoded, resized to width x height), the mask and
        the strength; arguments ``pipe.__call__`` does not take (SDXL img2img has no height/width: the
        image's size decides) are dropped.

        Raises:
            InputError: the input image or mask cannot be decoded.
        """
        import inspect

        kw = self.pipeline_kwargs(request)
        assert request.image is not None
        kw["image"] = prepare_image(request.image, request.width, request.height)
        kw["strength"] = request.strength
        if request.mask is not None:
            kw["mask_image"] = prepare_image(request.mask, request.width, request.height, mask=True, what="mask")
        accepted = inspect.signature(type(pipe).__call__).parameters
        return {k: v for k, v in kw.items() if k in accepted}

    def generate(self, request: GenerationRequest, *, traffic: str = "user") -> GenerationResult:
        """Run one generation; returns uint8 pixels, stage times, peak memory and the monitor's signals.

        ``traffic`` (``user``, ``probe``, ``warmup``) is passed to the exporter of ``self.instrumentation``
        when one is set (``engine.instrumentation.exporter = exporter``); warmups are not exported.

        An edit (``request.image`` set) runs the model's img2img pipeline (inpainting with ``request.mask``,
        white = repaint) built from the same components; the VAE encode of the input image is
        ``stages.image_encode_s`` and ``stages.step_s`` has one entry per step that ran
        (:func:`steps_run`, fewer than ``request.steps`` at strength < 1).

        Raises:
            ShapeError: an edit for a model without an img2img pipeline (see :func:`check_request`).
            InputError: an edit's input image or mask cannot be decoded.
            DeviceOutOfMemory: CUDA (or host) out of memory for this request, or its peak memory growth
                exceeded ``EngineConfig.memory_budget_bytes``; the engine keeps working afterwards.
            Cancelled: run under a cancelled token (:mod:`diffbench.engines.cancel`): stopped at a step boundary.
            GenerationError: any other failure inside the pipeline.
        """
        from diffbench.engines.cancel import Cancelled, plan_steps

        torch = self._torch
        plan_steps(steps_run(self.info().pipeline_class or "", request))
        swap_s = 0.0
        if self.config.adapters or request.adapter is not None:
            self.validate(request)  # an adapter that is not loaded: ShapeError
            swap_s = self._activate(request)
        pipe = None
        if request.is_edit:
            self.validate(request)
            pipe = self.edit_pipeline(request.mask is not None)
            kwargs = self.edit_kwargs(request, pipe)
        else:
            kwargs = self.pipeline_kwargs(request)
        try:
            with torch.inference_mode():
                out, stages, memory, signals = self.instrumentation.run(
                    kwargs, request.batch, traffic=traffic, pipe=pipe
                )
        except DeviceOutOfMemory as exc:  # the injected memory budget
            raise self._oom(f"{exc} ({request.shape_label()})") from exc
        except torch.cuda.OutOfMemoryError as exc:
            import gc

            gc.collect()
            torch.cuda.empty_cache()
            raise self._oom(f"out of memory at {request.shape_label()}: {exc}") from exc
        except MemoryError as exc:
            raise self._oom(f"host out of memory at {request.shape_label()}") from exc
        except (ShapeError, UsageError, Cancelled):
            raise
        except Exception as exc:
            raise GenerationError(
                f"generation failed at {request.shape_label()}: {type(exc).__name__}: {exc}"
            ) from exc
        arr = out.frames if hasattr(out, "frames") else out.images
        arr = np.asarray(arr)
        images = (np.clip(arr, 0.0, 1.0) * 255.0).round().astype(np.uint8)
        extra = {"denoiser_batch": float(self.instrumentation.last_denoiser_batch)}
        if self.config.adapters:
            extra["adapter_swap_s"] = swap_s
        return GenerationResult(images=images, stages=stages, memory=memory, extra=extra, signals=signals)

    def _oom(self, message: str) -> DeviceOutOfMemory:
        """A DeviceOutOfMemory carrying the failed request's measured ``memory`` (MemoryStats) and ``signals``
        (RequestSignals) as attributes, for the caller's exporter (the memory alert needs that peak)."""
        err = DeviceOutOfMemory(message)
        inst = self.instrumentation
        err.memory = inst.last_memory if inst is not None else None  # type: ignore[attr-defined]
        err.signals = inst.last_signals if inst is not None else None  # type: ignore[attr-defined]
        return err

    def sync(self) -> None:
        """``torch.cuda.synchronize()`` on CUDA; nothing on the CPU."""
        if self.config.device.startswith("cuda"):
            self._torch.cuda.synchronize()

    def clock(self) -> int:
        """``time.perf_counter_ns()``."""
        import time

        return time.perf_counter_ns()

    def stop(self) -> None:
        """Drop the pipeline and free device memory."""
        if self.instrumentation is not None:
            self.instrumentation.detach()
            self.instrumentation = self.timer = None
        self.pipe = None
        self._edit_pipes.clear()
        if self._torch is not None and self.config.device.startswith("cuda"):
            self._torch.cuda.empty_cache()


CACHE_START_STEPS = 28
"""Step count the cache configs of ``EngineConfig.cache`` are built for (diffusers' MagCache default; it
only matters for MagCache's ratio interpolation and TaylorSeer's first cached step, min(3, steps − 1))."""


def _enable_cache(pipe: Any, spec: str, model: str) -> str:
    """Enable the diffusers cache ``spec`` (``AXIS=VALUE``, e.g. ``first-block=0.1``) on the denoiser.

    Returns the fingerprint form (``first-block(threshold=0.1)``).

    Raises:
        UsageError: not AXIS=VALUE, an unknown axis or bad value (as ``sweep --values`` says it), or a
            pipeline that cannot take the cache.
    """
    from diffbench.engines.knobs import (
        CACHE_AXES,
        build_cache_config,
        check_cache_supported,
        describe_cache,
        parse_values,
    )

    axis, sep, value = spec.partition("=")
    axis, value = axis.strip(), value.strip()
    if not sep or not value:
        raise UsageError(f"cache {spec!r}: write AXIS=VALUE, e.g. first-block=0.1 (axes: {', '.join(CACHE_AXES)})")
    if axis not in CACHE_AXES:
        raise UsageError(f"cache {spec!r}: unknown cache {axis!r}; choose one of {', '.join(CACHE_AXES)}")
    (value,) = parse_values(axis, value)
    check_cache_supported(pipe, axis, model)
    denoiser = getattr(pipe, "transformer", None) or getattr(pipe, "unet", None)
    denoiser.enable_cache(build_cache_config(axis, value, pipe, CACHE_START_STEPS))
    return describe_cache(axis, value)


def _check_device_available(torch: Any, device: str) -> None:
    """Raise :class:`UsageError` when ``device`` (already syntax-checked) is not on this machine."""
    from diffbench.engines.config import DEVICES

    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageError(
                f"--device {device}: CUDA is not available on this machine (no CUDA GPU or a CPU-only torch); "
                f"use --device cpu (valid devices: {DEVICES})"
            )
        count = torch.cuda.device_count()
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= count:
            raise UsageError(
                f"--device {device}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
            )
    elif device == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise UsageError("--device mps: MPS (Apple GPU) is not available on this machine; use --device cpu")


def threads_in_use() -> int:
    """Intra-op threads torch will use (``OMP_NUM_THREADS`` or torch's default)."""
    return int(os.environ.get("OMP_NUM_THREADS", "0")) or (os.cpu_count() or 1)
