"""Pair candidate outputs with baseline outputs: by manifest keys, else by relative path.

- Both directories hold ``manifest.json`` → pairs match by ``(prompt_id, seed, index)``; the manifest's
  size / frame count and sha256 are checked against each other and against the file.
- Otherwise → pairs match by relative path (files with a supported extension, and frame folders).
- A missing counterpart, a shape mismatch or a changed file is a :class:`PairError`; nothing is dropped.
- With two manifests, their generation settings (``conditions``: batch, steps, guidance, shape, ...;
  ``fingerprint``: model, precision, engine, cache, torch/diffusers versions, device, ...) and the paired
  entries' steps are compared: every field that differs is a :class:`SettingDiff` (reported, never a
  failure: the option under test is expected to differ, anything else explains a pixel difference,
  e.g. batch 1 vs 2 of the same seed changes pixels).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from diffbench.core.manifest import MANIFEST_NAME, Manifest, ManifestEntry, read_manifest
from diffbench.errors import InputError
from diffbench.quality.io import ARRAY_EXTS, IMAGE_EXTS, VIDEO_EXTS, is_frame_folder
from diffbench.quality.models import PairError, SettingDiff

# Files that may sit next to outputs and are not outputs.
METADATA_EXTS = frozenset({".json", ".jsonl", ".csv", ".txt", ".md", ".log", ".yaml", ".yml", ".html"})


@dataclass
class PairSpec:
    key: str
    baseline: Path
    candidate: Path
    prompt: str | None = None


@dataclass
class Pairing:
    mode: str
    pairs: list[PairSpec] = field(default_factory=list)
    errors: list[PairError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    settings_diff: list[SettingDiff] = field(default_factory=list)


def sha256_of(path: Path) -> str:
    """sha256 of a file, or of a frame folder's files concatenated in name order (manifest rule)."""
    h = hashlib.sha256()
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    for f in files:
        with f.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def scan_outputs(root: Path, notes: list[str] | None = None) -> tuple[dict[str, Path], list[PairError]]:
    """Map relative path → output path under ``root`` (images, arrays, videos, frame folders).

    Unsupported files are returned as errors (metadata files such as .json/.csv/.txt are skipped).

    Symbolic links are followed (a folder of links to outputs kept elsewhere is compared like a copy), but
    every real directory and every real file is taken once (by ``(st_dev, st_ino)``):

    - a directory link that points at its own folder, a parent, or the root's parent (a loop) is not followed;
    - a second path to a directory or file already taken (a link or hard link inside the tree) is skipped;
      the real path wins over a link path (real folders are walked before any link is followed).

    Each skipped path is named in ``notes`` (appended to, when given).

    Raises:
        InputError: ``root`` is not a directory, or holds no output at all.
    """
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"{root}: not a directory (give a run output directory or a folder of images)")
    found: dict[str, Path] = {}
    errors: list[PairError] = []
    notes = notes if notes is not None else []
    root_real = root.resolve()
    seen_dirs: dict[tuple[int, int], str] = {}
    seen_files: dict[tuple[int, int], str] = {}

    def ident(p: Path) -> tuple[int, int]:
        st = p.stat()
        return st.st_dev, st.st_ino

    def take_dir(p: Path, rel: str) -> bool:
        """Whether the directory ``p`` is new (not reached before); notes a loop or an alias."""
        real = p.resolve()
        if p.is_symlink() and (p.parent.resolve().is_relative_to(real) or root_real.is_relative_to(real)):
            notes.append(f"{root / rel}: symlink to {real}, a folder that contains it (a loop); not followed")
            return False
        key = ident(p)
        if key in seen_dirs:
            notes.append(f"{root / rel}: the same folder as {root / seen_dirs[key]} (a link); counted once")
            return False
        seen_dirs[key] = rel or "."
        return True

    def take_file(p: Path, rel: str) -> None:
        ext = p.suffix.lower()
        if ext in IMAGE_EXTS or ext in ARRAY_EXTS or ext in VIDEO_EXTS:
            if p.exists():  # a dangling link is kept: pairing reports it as not found
                key = ident(p)
                if key in seen_files:
                    notes.append(f"{p}: the same file as {root / seen_files[key]} (a link); counted once")
                    return
                seen_files[key] = rel
            found[rel] = p
        elif ext not in METADATA_EXTS and p.name != MANIFEST_NAME:
            errors.append(PairError(key=rel, baseline=str(p), problem=f"unsupported format {ext or '(none)'}"))

    def take_folder(p: Path, rel: str) -> None:
        if not take_dir(p, rel):
            return
        if is_frame_folder(p):
            found[rel] = p
        else:
            stack.append(p)

    take_dir(root, "")
    links: list[tuple[Path, str]] = []  # links, followed after every real folder and file is taken
    stack = [root]
    while stack or links:
        if not stack:
            link, rel = links.pop(0)
            if link.is_dir():
                take_folder(link, rel)
            else:
                take_file(link, rel)
            continue
        d = stack.pop()
        try:
            entries = sorted(d.iterdir())
        except OSError as exc:
            errors.append(PairError(key=d.relative_to(root).as_posix() or ".", baseline=str(d),
                                    problem=f"cannot list folder ({exc.strerror or exc})"))
            continue
        for p in entries:
            if p.name.startswith("."):
                continue
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                links.append((p, rel))
            elif p.is_dir():
                take_folder(p, rel)
            else:
                take_file(p, rel)
    if not found:
        raise InputError(f"{root}: no images, arrays or videos found (empty directory?)")
    return found, errors


def _key(e: ManifestEntry) -> str:
    return f"{e.prompt_id}/seed{e.seed}/{e.index}"


def _index(m: Manifest, root: Path, side: str, errors: list[PairError]) -> dict[str, ManifestEntry]:
    out: dict[str, ManifestEntry] = {}
    for e in m.entries:
        k = _key(e)
        if k in out:
            errors.append(PairError(key=k, problem=f"duplicate key in {side} manifest {root / MANIFEST_NAME}"))
            continue
        out[k] = e
    return out


# Why a difference in these settings changes pixels at the same seed (printed beside the field).
SETTING_NOTES = {
    "batch": "batch composition changes pixels even at the same seed (batched kernels round differently)",
    "steps": "a different number of denoising steps",
    "shape": "the run's shape label (W x H, steps, batch) differs",
    "guidance": "a different guidance scale",
    "cfg": "a different classifier-free guidance setting",
    "precision": "a different dtype changes every kernel's rounding",
    "cache": "a different cache configuration (the option under test?)",
    "compile": "compiled kernels round differently",
    "attention_backend": "a different attention kernel",
    "torch": "a different torch version",
    "diffusers": "a different diffusers version",
    "hardware": "different hardware",
    "device": "a different device",
    "model_hash": "different model weights",
}


def settings_diff(mb: Manifest, mc: Manifest) -> tuple[list[SettingDiff], list[str]]:
    """Generation settings that differ between two manifests, and warnings where none were recorded.

    Compares every key of ``conditions`` and of ``fingerprint`` (a fingerprint field equal to a
    conditions field that already differs with the same values is not repeated), then the ``steps`` of
    entries with the same key. Returns ``(diffs, warnings)``; nothing here fails a run.
    """
    out: list[SettingDiff] = []
    warnings: list[str] = []
    seen: dict[str, tuple[object, object]] = {}
    for source in ("conditions", "fingerprint"):
        db: dict[str, object] = getattr(mb, source) or {}
        dc: dict[str, object] = getattr(mc, source) or {}
        if not db or not dc:
            missing = [side for side, d in (("baseline", db), ("candidate", dc)) if not d]
            warnings.append(f"{' and '.join(missing)} manifest records no {source}: cannot check that both runs "
                            f"used the same generation settings ({source})")
            continue
        for k in sorted(set(db) | set(dc)):
            vb, vc = db.get(k), dc.get(k)
            if vb == vc or seen.get(k) == (vb, vc):
                continue
            seen[k] = (vb, vc)
            out.append(SettingDiff(field=k, source=source, baseline=vb, candidate=vc, note=SETTING_NOTES.get(k, "")))  # type: ignore[arg-type]
    if "steps" not in seen:
        steps_b = {_key(e): e.steps for e in mb.entries}
        steps_c = {_key(e): e.steps for e in mc.entries}
        diff = sorted(k for k in set(steps_b) & set(steps_c) if steps_b[k] != steps_c[k])
        if diff:
            k = diff[0]
            out.append(SettingDiff(field="steps", source="entries", baseline=steps_b[k], candidate=steps_c[k],
                                   note=f"{len(diff)} paired output(s) made with different steps, e.g. {k}"))
    return out, warnings


def pair_by_manifest(baseline: Path, candidate: Path, mb: Manifest, mc: Manifest, verify: bool) -> Pairing:
    res = Pairing(mode="manifest")
    ib = _index(mb, baseline, "baseline", res.errors)
    ic = _index(mc, candidate, "candidate", res.errors)
    if not ib and not ic:
        raise InputError(f"{baseline} and {candidate}: manifests list no outputs")
    for k in sorted(set(ib) | set(ic)):
        eb, ec = ib.get(k), ic.get(k)
        pb = baseline / eb.file if eb else None
        pc = candidate / ec.file if ec else None
        err = PairError(key=k, baseline=str(pb) if pb else None, candidate=str(pc) if pc else None, problem="")
        if eb is None or ec is None:
            err.problem = "missing in " + ("baseline" if eb is None else "candidate")
            res.errors.append(err)
            continue
        if (eb.height, eb.width) != (ec.height, ec.width):
            err.problem = f"size mismatch: baseline {eb.width}x{eb.height}, candidate {ec.width}x{ec.height}"
            res.errors.append(err)
            continue
        if eb.frames != ec.frames:
            err.problem = f"frame count mismatch: baseline {eb.frames}, candidate {ec.frames}"
            res.errors.append(err)
            continue
        bad = _check_file(pb, eb, verify) or _check_file(pc, ec, verify)
        if bad:
            err.problem = bad
            res.errors.append(err)
            continue
        res.pairs.append(PairSpec(key=k, baseline=pb, candidate=pc, prompt=eb.prompt or None))
    return res


def _check_file(path: Path, entry: ManifestEntry, verify: bool) -> str | None:
    if not path.exists():
        return f"{path}: listed in the manifest but not found"
    if verify and sha256_of(path) != entry.sha256:
        return f"{path}: sha256 differs from the manifest (file changed or truncated after the run)"
    return None


def pair_by_path(baseline: Path, candidate: Path) -> Pairing:
    res = Pairing(mode="path")
    fb, eb = scan_outputs(baseline, res.warnings)
    fc, ec = scan_outputs(candidate, res.warnings)
    for e in ec:
        e.candidate, e.baseline = e.baseline, None
    res.errors.extend(eb + ec)
    for rel in sorted(set(fb) | set(fc)):
        pb, pc = fb.get(rel), fc.get(rel)
        if pb is None or pc is None:
            res.errors.append(PairError(
                key=rel, baseline=str(pb) if pb else None, candidate=str(pc) if pc else None,
                problem="missing in " + ("baseline" if pb is None else "candidate"),
            ))
            continue
        res.pairs.append(PairSpec(key=rel, baseline=pb, candidate=pc))
    return res


def pair_outputs(baseline: Path, candidate: Path, verify_sha256: bool = True) -> Pairing:
    """Pair two output directories (manifest keys when both have one, else relative paths).

    Raises:
        InputError: a directory is missing/empty, or a manifest is unreadable.
    """
    baseline, candidate = Path(baseline), Path(candidate)
    for d in (baseline, candidate):
        if not d.is_dir():
            raise InputError(f"{d}: not a directory")
    mb, mc = read_manifest(baseline), read_manifest(candidate)
    if mb is not None and mc is not None:
        res = pair_by_manifest(baseline, candidate, mb, mc, verify_sha256)
        res.settings_diff, warn = settings_diff(mb, mc)
        res.warnings.extend(warn)
        return res
    res = pair_by_path(baseline, candidate)
    if (mb is None) != (mc is None):
        res.warnings.append("only one side has manifest.json; paired by relative path")
    return res
