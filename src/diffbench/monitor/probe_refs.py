"""The probe's references: which fixed requests it replays, and the outputs it compares the answers with.

A reference directory is an outputs manifest (:mod:`diffbench.core.manifest`), written either by
``diffbench bench --save-outputs DIR`` or by the probe's own first pass (``diffbench probe
--record-reference DIR``, through the same :class:`~diffbench.bench.outputs.OutputWriter`, so the two are
one format). Images are PNG files, videos folders of PNG frames.

Batch composition: same-seed outputs move with the batch size (huggingface/diffusers
#2659, #11016), so the probe replays each reference batch exactly as it was made. Entries sharing
``(prompt_id, seed, width, height, frames, steps)`` form one batch; their ``index`` values must be
``0 … n-1`` and ``n`` is the request's ``n``. A manifest whose ``conditions.batch`` says another size is
refused rather than replayed with a different composition.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from diffbench.core.manifest import MANIFEST_NAME, Manifest, ManifestEntry, read_manifest
from diffbench.errors import InputError, UsageError

RECORD_PROMPT = "a red lighthouse on a rocky coast at dusk, photograph"
"""Default prompt of a recorded probe (any fixed text works; it only has to stay the same)."""


@dataclass(frozen=True)
class ProbeCase:
    """One request the probe replays: a prompt, seed, shape and step count, with ``n`` images per call.

    ``frames`` is None for an image; for a video ``n`` is 1 (the videos API makes one video per job).
    ``steps`` None sends no step count (the service's default); a recorded case always has one.
    ``entries`` are the reference outputs, ordered by batch index (empty while recording).
    """

    prompt_id: str
    prompt: str
    seed: int
    width: int
    height: int
    frames: int | None
    steps: int | None
    n: int
    guidance: float | None = None
    entries: tuple[ManifestEntry, ...] = ()

    @property
    def is_video(self) -> bool:
        return self.frames is not None

    @property
    def label(self) -> str:
        """``p0 s5 64x64 b2`` / ``p0 s5 32x32f9``: prompt id, seed, WxH[fF], batch when > 1."""
        f = f"f{self.frames}" if self.frames is not None else ""
        b = f" b{self.n}" if self.n > 1 else ""
        return f"{self.prompt_id} s{self.seed} {self.width}x{self.height}{f}{b}"


@dataclass
class References:
    """A loaded reference directory: the manifest and the cases it defines."""

    directory: Path
    manifest: Manifest
    cases: list[ProbeCase]
    _arrays: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def array(self, entry: ManifestEntry) -> np.ndarray:
        """The reference output of ``entry``: uint8 ``(H, W, 3)`` image or ``(T, H, W, 3)`` video.

        Raises:
            InputError: the file is missing, unreadable, or not what the manifest says (names the file).
        """
        from diffbench.quality.io import load_any

        if entry.file in self._arrays:
            return self._arrays[entry.file]
        loaded = load_any(self.directory / entry.file)
        arr = loaded.array
        if arr.dtype != np.uint8:
            raise InputError(f"{loaded.path}: reference must be 8-bit (uint8), got {arr.dtype}; "
                             "re-record the references")
        want = (entry.frames, entry.height, entry.width) if entry.frames else (entry.height, entry.width)
        got = tuple(arr.shape[:-1]) if arr.ndim >= 3 else tuple(arr.shape)
        if got != want:
            raise InputError(f"{loaded.path}: shape {arr.shape} does not match the manifest "
                             f"({'x'.join(map(str, want))}); re-record the references")
        self._arrays[entry.file] = arr
        return arr


def _cond_int(cond: dict[str, object], key: str) -> int | None:
    v = cond.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _cond_float(cond: dict[str, object], key: str) -> float | None:
    v = cond.get(key)
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)):
        return float(v)
    return None


def group_cases(manifest: Manifest, source: Path) -> list[ProbeCase]:
    """Group the manifest's entries into the requests that made them (one batch each).

    Args:
        manifest: the outputs manifest.
        source: its directory (named in errors).

    Returns:
        Cases in manifest order of their first entry.

    Raises:
        InputError: no entries, an entry without a prompt, a batch with missing or repeated indices,
            a batch size other than ``conditions.batch``, or a video batch of more than one.
    """
    path = source / MANIFEST_NAME
    if not manifest.entries:
        raise InputError(f"{path}: the manifest lists no outputs; record references with "
                         "diffbench probe --record-reference DIR or bench --save-outputs DIR")
    cond = manifest.conditions or {}
    batch = _cond_int(cond, "batch")
    guidance = _cond_float(cond, "guidance")
    cond_steps = _cond_int(cond, "steps")
    groups: dict[tuple[object, ...], list[ManifestEntry]] = defaultdict(list)
    for e in manifest.entries:
        groups[(e.prompt_id, e.seed, e.width, e.height, e.frames, e.steps)].append(e)
    cases: list[ProbeCase] = []
    for (pid, seed, w, h, frames, steps), entries in groups.items():
        entries = sorted(entries, key=lambda e: e.index)
        indices = [e.index for e in entries]
        n = len(entries)
        where = f"{path}: outputs of prompt {pid!r} seed {seed} at {w}x{h}"
        if indices != list(range(n)):
            raise InputError(f"{where} have batch indices {indices}, not 0..{n - 1}: the batch that made them "
                             "is incomplete, so it cannot be replayed as it ran; re-record the references")
        if batch is not None and n != batch:
            raise InputError(f"{where}: {n} outputs but conditions.batch is {batch}; the probe replays the "
                             "reference's exact batch composition, so the manifest must hold whole batches")
        if frames is not None and n > 1:
            raise InputError(f"{where}: a batch of {n} videos; the videos API makes one video per job, so "
                             "this reference cannot be replayed; record video references with batch 1")
        prompt = entries[0].prompt
        if not prompt.strip():
            raise InputError(f"{where}: the manifest has no prompt text for it; a probe must replay the exact "
                             "prompt: re-record with diffbench probe --record-reference DIR")
        cases.append(ProbeCase(prompt_id=pid, prompt=prompt, seed=seed, width=w, height=h, frames=frames,
                               steps=steps if steps is not None else cond_steps, n=n, guidance=guidance,
                               entries=tuple(entries)))
    return cases


def load_references(directory: Path, *, option: str = "--reference", verify_sha256: bool = True) -> References:
    """Read a reference directory: manifest, cases, and (by default) every file's sha256.

    Raises:
        InputError: the directory or its manifest is missing or invalid, a listed file is missing or
            changed since it was recorded (sha256), or the entries do not form whole batches.
    """
    from diffbench.quality.pairing import sha256_of

    d = Path(directory)
    if not d.is_dir():
        what = "does not exist" if not d.exists() else "is not a directory"
        raise InputError(f"{option} {d} {what}; give a directory holding {MANIFEST_NAME} (from bench "
                         "--save-outputs DIR or probe --record-reference DIR)")
    manifest = read_manifest(d)
    if manifest is None:
        raise InputError(f"{option} {d}: no {MANIFEST_NAME} in it; make references with bench --save-outputs "
                         "DIR or diffbench probe --record-reference DIR")
    cases = group_cases(manifest, d)
    if verify_sha256:
        for e in manifest.entries:
            p = d / e.file
            if not p.exists():
                raise InputError(f"{option} {d}: {e.file} is listed in the manifest but missing; "
                                 "re-record the references")
            if sha256_of(p) != e.sha256:
                raise InputError(f"{option} {d}: {e.file} changed since it was recorded (sha256 differs from "
                                 "the manifest); re-record the references")
    return References(directory=d, manifest=manifest, cases=cases)


def record_cases(
    prompts: list[str], *, seed: int, width: int, height: int, frames: int | None, steps: int | None, n: int,
    guidance: float | None,
) -> list[ProbeCase]:
    """The cases of a recording run: one per prompt (ids ``probe0``, ``probe1`` …), same seed and shape.

    Raises:
        UsageError: no prompt, an empty prompt, or a video with ``n`` > 1.
    """
    if not prompts:
        raise UsageError("--prompt: give at least one prompt to record")
    for p in prompts:
        if not p.strip():
            raise UsageError("--prompt: an empty prompt cannot be recorded; give some text")
    if frames is not None and n != 1:
        raise UsageError(f"--n {n} with --frames: the videos API makes one video per job; use --n 1")
    return [ProbeCase(prompt_id=f"probe{i}", prompt=p, seed=seed, width=width, height=height, frames=frames,
                      steps=steps, n=n, guidance=guidance) for i, p in enumerate(prompts)]


def write_references(
    directory: Path, cases: list[tuple[ProbeCase, int, np.ndarray]], *, conditions: dict[str, object],
    fingerprint: dict[str, object] | None,
) -> References:
    """Write recorded answers as a reference directory (PNG files + manifest), then read it back.

    Args:
        directory: the ``--record-reference`` directory (its parent was checked before the run).
        cases: ``(case, steps_used, images)`` with images uint8 ``(n, H, W, 3)`` or ``(1, F, H, W, 3)``.
        conditions: the manifest's ``conditions`` (model, steps, batch, guidance …).
        fingerprint: the service's deployment fingerprint (None only with ``--allow-unfingerprinted``).

    Raises:
        InputError: the directory cannot be written.
    """
    from diffbench.bench.outputs import OutputWriter
    from diffbench.engines.base import GenerationRequest

    writer = OutputWriter(directory, conditions, fingerprint)
    for case, steps, images in cases:
        req = GenerationRequest(prompt=case.prompt, prompt_id=case.prompt_id, height=case.height, width=case.width,
                                frames=case.frames, steps=steps, batch=case.n, seed=case.seed)
        writer(req, images)
    return load_references(directory, option="--record-reference")
