"""Workload files (a weighted mix of shapes, steps and frames), prompt files, and the request plan.

A workload file is YAML or JSON validated by pydantic with ``extra="forbid"``: an unknown or misspelt
field is an error that names the field. Example::

    kind: image            # or "video" (async jobs on /v1/videos)
    model: tiny-flux       # optional, sent as "model"
    shapes:
      - {width: 256, height: 256, steps: 8, weight: 3}
      - {size: 512x384, steps: 4, weight: 1, guidance: 3.5, negative_prompt: "blurry"}
    prompts: ["a lighthouse at dusk"]   # or prompt_file: prompts.txt (one prompt per line)

A LoRA mix (``serve --lora NAME=DIR`` on the service; the ``vllm-omni`` dialect sends ``lora``)::

    shapes:
      - {size: 512x512, steps: 8, weight: 2}                      # the base model
      - {size: 512x512, steps: 8, weight: 1, adapter: style}      # {"lora": {"name": "style", "scale": 1.0}}
      - {size: 512x512, steps: 8, weight: 1, adapter: style, adapter_scale: 0.5}

Sizes follow the OpenAI convention ``"WIDTHxHEIGHT"``.

Edits (image-to-image, ``POST /v1/images/edits`` or a chat ``image_url`` part)::

    kind: edit
    images: inputs/        # a folder of .png/.jpg/.jpeg/.webp input pictures (relative to the workload file)
    masks: masks/          # optional: one mask per image, paired by sorted file name (white = repaint)
    strength: 0.6          # optional, in (0, 1]; sent by the dialects that take it
    shapes: [{size: 512x512, steps: 8}]

Request ``i`` sends the ``i``-th input picture modulo their count, in file-name order (round-robin, the same
for every seed; the shape mix and the request seeds follow ``--seed`` as for generations).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from diffbench.core import shapes as core_shapes
from diffbench.errors import InputError, UsageError
from diffbench.workload.warmkey import WarmupKey, cfg_state

MAX_SIDE = 16384
MAX_STEPS = 1000
MAX_FRAMES = 10000

DEFAULT_PROMPTS: tuple[str, ...] = (
    "a lighthouse at dusk, oil painting",
    "a red fox in fresh snow, photograph",
    "an isometric city block at night, neon",
    "a bowl of ramen on a wooden table, studio light",
)
"""Used only when neither the workload nor ``--prompts`` gives prompts; the report names the source."""


def size_field(text: str) -> tuple[int, int]:
    """``"WIDTHxHEIGHT"`` → (width, height) in pixels.

    Raises:
        ValueError: when the text is not two positive integers joined by ``x``.
    """
    try:
        return core_shapes.parse_size(text)
    except core_shapes.SizeSyntaxError:
        raise ValueError(f"size must look like WIDTHxHEIGHT (e.g. 1024x1024), got {text!r}") from None


class ShapeMix(BaseModel):
    """One entry of the mix: a shape with its steps (and frames for video), drawn with ``weight``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    width: int = Field(gt=0, le=MAX_SIDE, description="pixels")
    height: int = Field(gt=0, le=MAX_SIDE, description="pixels")
    steps: int = Field(gt=0, le=MAX_STEPS, description="denoising steps")
    frames: int | None = Field(default=None, gt=0, le=MAX_FRAMES, description="video frames (video only)")
    fps: int | None = Field(default=None, gt=0, le=240)
    guidance: float | None = Field(default=None, ge=0, le=100, description="CFG scale")
    negative_prompt: str | None = None
    n: int = Field(default=1, gt=0, le=10, description="images per request")
    weight: float = Field(default=1.0, gt=0)
    adapter: str | None = Field(default=None, min_length=1, max_length=64,
                                description="LoRA adapter the service loaded (serve --lora NAME=DIR), sent as "
                                            "the images API's lora field (kind image, vllm-omni dialect)")
    adapter_scale: float = Field(default=1.0, ge=0, le=4, allow_inf_nan=False, description="the adapter's scale")

    @model_validator(mode="before")
    @classmethod
    def _size_shorthand(cls, data: object) -> object:
        if isinstance(data, dict) and "size" in data:
            data = dict(data)
            size = data.pop("size")
            if "width" in data or "height" in data:
                raise ValueError("give either size or width/height, not both")
            w, h = size_field(str(size))
            data["width"], data["height"] = w, h
        return data

    @property
    def size(self) -> str:
        """OpenAI ``size`` string ``WIDTHxHEIGHT``."""
        return f"{self.width}x{self.height}"

    def warmup_key(self, *, edit: bool = False, mask: bool = False, strength: float | None = None) -> WarmupKey:
        """The :class:`~diffbench.workload.warmkey.WarmupKey` of a request of this shape (``edit``, ``mask``,
        ``strength``: a kind edit workload's, which every request of the workload shares)."""
        return WarmupKey(width=self.width, height=self.height, frames=self.frames, steps=self.steps, batch=self.n,
                         cfg=cfg_state(self.guidance), negative=self.negative_prompt is not None, edit=edit,
                         mask=edit and mask, strength=strength if edit else None, adapter=self.adapter,
                         adapter_scale=self.adapter_scale if self.adapter is not None else None)

    def label(self) -> str:
        """Breakdown key: the label of its warm-up key (:meth:`WarmupKey.label
        <diffbench.workload.warmkey.WarmupKey.label>`), e.g. ``512x384 s8``, ``832x480 f33 s30`` (width x
        height), ``64x64 s2 n4`` (4 images per request), ``512x512 s8 cfg neg`` (guidance above 1 and a
        negative prompt) or, with a LoRA adapter, ``512x384 s8 lora=style`` (``lora=style@0.5`` at another
        scale): rows break down by warm-up key, so a batch, guidance or adapter that compiles its own graph
        has its own row."""
        return self.warmup_key().label()


class Workload(BaseModel):
    """A workload file. ``extra`` holds additional JSON scalars sent as-is in every request body."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["image", "video", "edit"] = "image"
    model: str | None = None
    shapes: list[ShapeMix] = Field(min_length=1)
    prompts: list[str] | None = None
    prompt_file: str | None = None
    images: str | None = Field(default=None, description="kind edit: folder of input pictures")
    masks: str | None = Field(default=None, description="kind edit: folder of masks, one per input picture")
    strength: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False, strict=True,
                                     description="kind edit: share of the schedule")
    extra: dict[str, str | int | float | bool] = {}

    @model_validator(mode="after")
    def _video_frames(self) -> Workload:
        if self.kind == "edit":
            if self.images is None:
                raise ValueError("images: a kind edit workload needs images: DIR (a folder of input pictures)")
            for i, s in enumerate(self.shapes):
                if s.frames is not None:
                    raise ValueError(f"shapes[{i}]: an edit makes images; drop frames")
        else:
            given = [k for k in ("images", "masks", "strength") if getattr(self, k) is not None]
            if given:
                raise ValueError(f"{', '.join(given)}: only a kind edit workload takes input images; add "
                                 "kind: edit or drop them")
        if self.kind == "video":
            for i, s in enumerate(self.shapes):
                if s.frames is None:
                    raise ValueError(
                        f"shapes[{i}]: a video workload needs frames on every shape (servers default to 1)"
                    )
        if self.kind != "image":
            for i, s in enumerate(self.shapes):
                if s.adapter is not None:
                    raise ValueError(f"shapes[{i}]: adapter (LoRA) is sent with the images API's lora field; "
                                     "only a kind image workload takes it")
        if self.prompts is not None and not [p for p in self.prompts if p.strip()]:
            raise ValueError("prompts is empty; give at least one prompt or drop the field")
        return self


def default_workload(width: int = 256, height: int = 256, steps: int = 4, frames: int | None = None) -> Workload:
    """A single-shape workload (used when no ``--workload`` is given)."""
    kind: Literal["image", "video"] = "video" if frames else "image"
    return Workload(kind=kind, shapes=[ShapeMix(width=width, height=height, steps=steps, frames=frames)])


def _format_validation(path: Path, exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field (check its spelling; allowed fields are listed in the workload docs)"
        lines.append(f"{where}: {msg}")
    return f"--workload {path}: " + "; ".join(lines)


def load_workload(path: str | Path) -> Workload:
    """Read and validate a workload file (``.yaml``/``.yml``/``.json``).

    Raises:
        InputError: missing or unreadable file, bad YAML/JSON, an unknown field (named), or an invalid
            shape (named, with the bound it violates).
    """
    from diffbench.core.textfile import read_text_input

    p = Path(path)
    text = read_text_input(p, "--workload", "a YAML or JSON mapping with 'shapes'")
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except (ValueError, Exception) as exc:  # json.JSONDecodeError / yaml.YAMLError
        raise InputError(f"--workload {p} is not valid {p.suffix.lstrip('.').upper() or 'YAML'}: "
                         f"{' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise InputError(f"--workload {p} must hold a mapping with at least 'shapes', got "
                         f"{type(data).__name__}")
    try:
        wl = Workload.model_validate(data)
    except ValidationError as exc:
        raise InputError(_format_validation(p, exc)) from None
    if wl.prompt_file is not None:
        pf = Path(wl.prompt_file)
        if not pf.is_absolute():
            pf = p.parent / pf
        wl = wl.model_copy(update={"prompt_file": str(pf)})
    if wl.kind == "edit":
        folders = {k: str(d if (d := Path(v)).is_absolute() else p.parent / d)
                   for k in ("images", "masks") if (v := getattr(wl, k)) is not None}
        wl = wl.model_copy(update=folders)
        edit_inputs(wl.images, wl.masks)  # checked now: a bad folder fails before any request
    return wl


INPUT_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")


def _pictures(folder: str, field: str) -> list[Path]:
    d = Path(folder)
    if not d.is_dir():
        raise InputError(f"--workload {field}: {d} is not a folder; give a folder of {'/'.join(INPUT_SUFFIXES)} "
                         "files")
    files = sorted(f for f in d.iterdir() if f.is_file() and f.suffix.lower() in INPUT_SUFFIXES)
    if not files:
        raise InputError(f"--workload {field}: {d} holds no {'/'.join(INPUT_SUFFIXES)} file; put the input "
                         + ("pictures" if field == "images" else "masks") + " there")
    return files


def _picture_size(path: Path, field: str) -> tuple[int, int]:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            img.load()
            return img.size
    except Image.DecompressionBombError as exc:
        raise InputError(f"--workload {field}: {path} is too large a picture to decode "
                         f"({' '.join(str(exc).split())[:100]}); resize it (an edit input is resized to the shape "
                         "anyway)") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise InputError(f"--workload {field}: {path} does not decode as an image "
                         f"({' '.join(str(exc).split())[:100]}); replace or remove it") from None


@functools.lru_cache(maxsize=8)
def edit_inputs(images: str | None, masks: str | None) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    """The input pictures of an edit workload and their masks, in file-name order (absolute paths).

    Every file is decoded once (Pillow) to check it; masks pair with images by position in that order and
    must have the same width and height.

    Raises:
        InputError: a folder that is missing or holds no picture, a file that does not decode, a mask count
            other than the image count, or a mask of another size than its image (both files named).
    """
    if images is None:
        raise InputError("--workload images: a kind edit workload needs images: DIR")
    files = _pictures(images, "images")
    sizes = [_picture_size(f, "images") for f in files]
    if masks is None:
        return tuple(str(f) for f in files), None
    mask_files = _pictures(masks, "masks")
    if len(mask_files) != len(files):
        raise InputError(f"--workload masks: {masks} holds {len(mask_files)} masks for {len(files)} images in "
                         f"{images}; give one mask per image (paired by sorted file name)")
    for f, m, size in zip(files, mask_files, sizes, strict=True):
        ms = _picture_size(m, "masks")
        if ms != size:
            raise InputError(f"--workload masks: {m} is {ms[0]}x{ms[1]} but its image {f} is {size[0]}x{size[1]}; "
                             "a mask must have its image's size")
    return tuple(str(f) for f in files), tuple(str(m) for m in mask_files)


def load_prompts(path: str | Path, option: str = "--prompts") -> list[str]:
    """Prompts from a file (``option`` names the file's source in messages).

    The one prompt-file format of every ``--prompts``: :func:`diffbench.workload.prompts.read_prompts` (one
    prompt per line with ``#`` comments, or AIPerf's JSONL rows ``{"text": ...}``).

    Raises:
        InputError: as ``read_prompts`` (never silently replaced by a dummy prompt).
    """
    from diffbench.workload.prompts import read_prompts

    return read_prompts(path, option)


class ReferenceRequest(BaseModel):
    """A fixed request replayed from ``load --reference DIR`` (read by the CLI from a ``bench --save-outputs``
    or ``probe --record-reference`` manifest) with the reference image of each batch index.

    ``files``: absolute PNG paths, one per batch index (``n`` of them); for a video (``frames`` set) one path,
    an MP4 or a folder of PNG frames. ``steps`` None: the service's default.
    """

    model_config = ConfigDict(frozen=True)

    label: str
    prompt: str
    seed: int
    width: int
    height: int
    steps: int | None
    guidance: float | None = None
    frames: int | None = None
    """Video frames (a video reference, replayed through the videos API and scored by its worst frame)."""
    fps: int | None = None
    files: tuple[str, ...]

    @property
    def n(self) -> int:
        return len(self.files)


class RequestSpec(BaseModel):
    """What one request asks for (drawn from the workload by :func:`plan_requests`)."""

    model_config = ConfigDict(frozen=True)

    index: int
    kind: Literal["image", "video", "edit"]
    prompt: str
    shape: ShapeMix
    seed: int
    model: str | None = None
    extra: dict[str, str | int | float | bool] = {}
    image: str | None = None
    """kind edit: path of the input picture (read and cached by the backend)."""
    mask: str | None = None
    strength: float | None = None
    reference: ReferenceRequest | None = None
    """``load --reference``: the reference this request replays (its answer is scored against it)."""


def resolve_prompts(workload: Workload, prompt_file: str | Path | None) -> tuple[list[str], str]:
    """Prompts and where they came from (``--prompts`` file, workload file, workload list, built-in)."""
    if prompt_file is not None:
        return load_prompts(prompt_file), f"file {prompt_file}"
    if workload.prompt_file is not None:
        return load_prompts(workload.prompt_file, "--workload prompt_file"), f"file {workload.prompt_file}"
    if workload.prompts:
        return [p for p in workload.prompts if p.strip()], "workload prompts"
    return list(DEFAULT_PROMPTS), "built-in prompts"


class RequestPlanner:
    """Draws request specs from a workload with a seeded generator (``numpy.random.Generator``).

    Shapes are drawn by weight, prompts cycle in order, request seeds are ``seed_base + index``.
    Every call to :meth:`next` returns a new spec with a consecutive index.

    With ``references`` (``load --reference``), request ``i`` replays a reference when
    ``floor((i + 1)·sample) > floor(i·sample)`` (``sample`` = ``--quality-sample`` F in (0, 1]; None: 1, every
    request): a fraction F of the schedule, evenly spread, at the schedule's own arrival times; the
    references are taken in turn. The workload's draws are not consumed by a reference request.
    """

    def __init__(self, workload: Workload, prompts: Sequence[str], seed: int = 0,
                 references: Sequence[ReferenceRequest] = (), sample: float | None = None) -> None:
        if not prompts:
            raise UsageError("no prompts to send; give --prompts FILE or prompts in the workload")
        self.workload = workload
        self.prompts = list(prompts)
        self._rng = np.random.default_rng(seed)
        w = np.array([s.weight for s in workload.shapes], dtype=np.float64)
        self._p = w / w.sum()
        self._seed_base = int(seed) * 1_000_003
        self._i = 0
        self._inputs: tuple[tuple[str, ...], tuple[str, ...] | None] | None = None
        self._refs = tuple(references)
        self._sample = 1.0 if sample is None else float(sample)
        self._n_refs = 0
        if workload.kind == "edit":
            self._inputs = edit_inputs(workload.images, workload.masks)

    def next(self) -> RequestSpec:
        """The next request spec."""
        i = self._i
        self._i += 1
        if self._refs and math.floor((i + 1) * self._sample) > math.floor(i * self._sample):
            ref = self._refs[self._n_refs % len(self._refs)]
            self._n_refs += 1
            return self._reference_spec(i, ref)
        k = int(self._rng.choice(len(self._p), p=self._p)) if len(self._p) > 1 else 0
        return self._workload_spec(i, self.workload.shapes[k])

    def _workload_spec(self, i: int, shape: ShapeMix) -> RequestSpec:
        return RequestSpec(
            index=i,
            kind=self.workload.kind,
            prompt=self.prompts[i % len(self.prompts)],
            shape=shape,
            seed=(self._seed_base + i) % (2**31),
            model=self.workload.model,
            extra=self.workload.extra,
            **self._edit_fields(i),
        )

    @staticmethod
    def reference_shape(ref: ReferenceRequest) -> ShapeMix:
        """The shape a reference request is sent with (steps None: 1 in the label; the service's default is
        sent only when the dialect sends no steps)."""
        return ShapeMix(width=ref.width, height=ref.height, steps=ref.steps or 1, n=ref.n, guidance=ref.guidance,
                        frames=ref.frames, fps=ref.fps)

    def _reference_spec(self, i: int, ref: ReferenceRequest) -> RequestSpec:
        return RequestSpec(index=i, kind="image" if ref.frames is None else "video", prompt=ref.prompt,
                           shape=self.reference_shape(ref), seed=ref.seed, model=self.workload.model,
                           extra=self.workload.extra, reference=ref)

    def warmup_keys(self) -> list[tuple[ShapeMix, ReferenceRequest | None]]:
        """What the run will send, one entry per workload shape and per reference, for the warm-up: the
        workload's shapes (left out when every request replays a reference, ``sample`` 1), then each
        reference (its answers are checked and scored like a measured one's, and discarded)."""
        out: list[tuple[ShapeMix, ReferenceRequest | None]] = []
        if not self._refs or self._sample < 1.0:
            out += [(shape, None) for shape in self.workload.shapes]
        return out + [(self.reference_shape(ref), ref) for ref in self._refs]

    def warm_spec(self, shape: ShapeMix, ref: ReferenceRequest | None = None) -> RequestSpec:
        """A warm-up request: one of the workload with ``shape``, or replaying ``ref``. It takes the next index
        and, for a workload shape, the same random draw :meth:`next` makes (so the measured requests that
        follow are the ones a run without this warm-up path would send); it never takes a reference's turn."""
        i = self._i
        self._i += 1
        if ref is not None:
            return self._reference_spec(i, ref)
        if len(self._p) > 1:
            self._rng.choice(len(self._p), p=self._p)
        return self._workload_spec(i, shape)

    def _edit_fields(self, i: int) -> dict[str, object]:
        """kind edit: the ``i``-th input picture (round-robin in file-name order), its mask, the strength."""
        if self._inputs is None:
            return {}
        images, masks = self._inputs
        k = i % len(images)
        return {"image": images[k], "mask": masks[k] if masks else None, "strength": self.workload.strength}

    def take(self, n: int) -> list[RequestSpec]:
        """The next ``n`` specs."""
        return [self.next() for _ in range(n)]

    def stream(self, n: int) -> PlannedSpecs:
        """The next ``n`` specs, drawn one by one as a runner reads them in order (nothing materialized)."""
        return PlannedSpecs(self, n)


class PlannedSpecs(Sequence[RequestSpec]):
    """``n`` specs of a :class:`RequestPlanner`, drawn lazily; must be read in order, each index once
    (the open-loop dispatcher does), so a long schedule never holds every spec in memory.

    Raises:
        IndexError: an index read out of order or beyond ``n``.
    """

    def __init__(self, planner: RequestPlanner, n: int) -> None:
        self._planner, self._n, self._next = planner, n, 0

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> RequestSpec:  # type: ignore[override]
        if i != self._next or i >= self._n:
            raise IndexError(f"planned specs are read in order: expected index {self._next}, got {i}")
        self._next += 1
        return self._planner.next()
