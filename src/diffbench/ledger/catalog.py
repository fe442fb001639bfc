"""Load the ledger catalog: the built-in YAML plus an optional user file that extends or overrides it.

Merging is deep: mappings merge key by key at every depth (a new model or GPU id is added; for an
existing id only the fields given change, so ``denoiser: {blocks: [...]}`` keeps the rest of the built-in
denoiser); a list or a scalar in the user file replaces the built-in value whole, except ``anchors``: a
user anchor is added to the built-in ones (one with a built-in id replaces that anchor in place) unless
``replace_anchors`` (``--replace-anchors``) asks for the user's anchors alone. A key given twice in one mapping
is an error (YAML would keep the last silently). The merged data is
validated with the pydantic schema in :mod:`diffbench.ledger.schema`; an error names the field and the
file and line that gave the wrong value (the user file for anything it wrote).
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from diffbench.errors import InputError, ModelError, UsageError
from diffbench.ledger.schema import Catalog, GpuSpec, ModelSpec

BUILTIN_NAME = "catalog.yaml"


def _builtin_text() -> str:
    return resources.files("diffbench.ledger.data").joinpath(BUILTIN_NAME).read_text(encoding="utf-8")


_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """The safe loader (C where available) refusing a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {seen[key]}); keep one of them",
                    key_node.start_mark)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]


def _parse(text: str, label: str) -> dict[str, Any]:
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader (C or pure Python)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{label}:{mark.line + 1}" if mark is not None else label
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if isinstance(exc, yaml.constructor.ConstructorError) and problem.startswith("duplicate key"):
            raise InputError(f"catalog {where}: {problem}") from None
        raise InputError(f"catalog {where}: invalid YAML ({problem}); fix the syntax at that line") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(f"catalog {label}:1: the top level must be a mapping with models/gpus/... sections")
    return data


def _compose(text: str) -> yaml.Node | None:
    """The YAML node tree (with line marks), built only when an error needs a line number."""
    return yaml.compose(text, Loader=_Loader)


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> tuple[int | None, bool]:
    """Line (1-based) of the deepest key on ``loc`` in a composed YAML tree; flag whether loc was complete."""
    if node is None:
        return None, False
    line = node.start_mark.line + 1
    cur = node
    for key in loc:
        nxt = None
        if isinstance(cur, yaml.MappingNode):
            for k, v in cur.value:
                if k.value == str(key):
                    nxt, line = v, k.start_mark.line + 1
                    break
        elif isinstance(cur, yaml.SequenceNode) and isinstance(key, int) and key < len(cur.value):
            nxt = cur.value[key]
            line = nxt.start_mark.line + 1
        if nxt is None:
            return line, False
        cur = nxt
    return line, True


def _merge_anchors(base: list[Any], over: list[Any]) -> tuple[list[Any], list[tuple[int, int]]]:
    """The built-in anchors with the user's added (same id: replaced in place); and for each merged anchor its
    origin, (0, index in the built-in list) or (1, index in the user's list)."""
    merged, origin = list(base), [(0, i) for i in range(len(base))]
    where = {a.get("id"): i for i, a in enumerate(base) if isinstance(a, dict)}
    for j, a in enumerate(over):
        i = where.get(a.get("id")) if isinstance(a, dict) else None
        if i is None:
            merged.append(a)
            origin.append((1, j))
        else:
            merged[i], origin[i] = a, (1, j)
    return merged, origin


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Deep merge: mappings merge key by key at every depth; anything else (a list, a number) given in
    ``over`` replaces the base value whole. So ``models.flux.1-dev.denoiser.blocks`` alone replaces the
    block list and keeps every other field of the built-in denoiser."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _from_user(err: dict[str, Any], loc: tuple[Any, ...], user: Any) -> bool:
    """True when the invalid value at ``loc`` of the merged data came from the user file.

    It did when the user file holds the whole path, or a list or scalar on the way (those replace the
    built-in value whole), or the mapping that lacks a required field (a new id or list entry). Otherwise
    the path leaves the user file early and the value is the built-in one.
    """
    cur = user
    for i, key in enumerate(loc):
        if not isinstance(cur, dict):
            return True  # a list or scalar the user gave contains loc
        if key not in cur:
            return err.get("type") == "missing" and i == len(loc) - 1
        cur = cur[key]
    return True


def _validation_message(exc: ValidationError, texts: list[tuple[str, str]], user: Any = None,
                        anchors: list[tuple[int, int]] | None = None) -> str:
    sources = [(label, _compose(text)) for label, text in texts]
    err = exc.errors()[0]
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-after")))
    if anchors is not None and len(loc) > 1 and loc[0] == "anchors" and isinstance(loc[1], int) \
            and loc[1] < len(anchors):  # merged anchors: the file and the index the anchor came from
        src, index = anchors[loc[1]]
        sources, loc = [sources[src]], ("anchors", index, *loc[2:])
    elif len(sources) > 1 and user is not None and _from_user(err, loc, user):
        sources = sources[-1:]  # the user file gave this value: never blame the built-in file for it
    elif len(sources) > 1:
        sources = sources[:1]
    field = ".".join(str(p) for p in loc) or "(top level)"
    label, node = sources[0]
    line, complete = _line_of(node, loc)
    where = f"{label}:{line}" if line is not None else label
    return f"catalog {where}: field {field}: {err['msg']}; fix that field (see the built-in catalog for the layout)"


def load_catalog(path: str | Path | None = None, replace_anchors: bool = False) -> Catalog:
    """Return the built-in catalog, extended/overridden by the YAML file at ``path`` if given.

    ``replace_anchors``: the file's ``anchors`` replace the built-in ones (else they are added to them).

    Raises:
        InputError: the file is missing, not YAML (a duplicate key included), or fails validation (message
            names field and line).
        UsageError: ``replace_anchors`` without a file, or with a file that has no anchors.
    """
    if path is None:
        if replace_anchors:
            raise UsageError("--replace-anchors without --catalog: pass --catalog FILE with an anchors: list to use "
                             "instead of the built-in anchors, or drop --replace-anchors")
        return _builtin()
    p = Path(path)
    if p.is_dir():
        raise InputError(f"--catalog {p} is a directory; pass a YAML file such as {p / 'overrides.yaml'}")
    if not p.is_file():
        raise InputError(f"--catalog {p}: file not found; pass an existing YAML file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"--catalog {p}: cannot read ({exc}); pass a readable UTF-8 YAML file") from exc
    base_text = _builtin_text()
    user = _parse(text, str(p))
    base = _parse(base_text, BUILTIN_NAME)
    merged = _merge(base, user)
    origin = None
    if replace_anchors and not user.get("anchors"):
        raise UsageError(f"--replace-anchors: {p} has no anchors: list to replace the built-in anchors with; add "
                         "one or drop --replace-anchors")
    if isinstance(user.get("anchors"), list) and isinstance(base.get("anchors"), list) and not replace_anchors:
        merged["anchors"], origin = _merge_anchors(base["anchors"], user["anchors"])
    try:
        return Catalog.model_validate(merged)
    except ValidationError as exc:
        raise InputError(_validation_message(exc, [(BUILTIN_NAME, base_text), (str(p), text)], user,
                                             origin)) from None


@lru_cache(maxsize=1)
def _builtin() -> Catalog:
    text = _builtin_text()
    try:
        return Catalog.model_validate(_parse(text, BUILTIN_NAME))
    except ValidationError as exc:  # pragma: no cover - the shipped file is tested
        raise InputError(_validation_message(exc, [(BUILTIN_NAME, text)])) from exc


def _unknown(kind: str, name: str, valid: list[str], flag: str) -> str:
    key = name.strip().lower()
    prefixed = sorted(v for v in valid if key and v.startswith(key))
    close = prefixed or difflib.get_close_matches(key, valid, n=1, cutoff=0.4)
    hint = f"did you mean {' or '.join(repr(c) for c in close[:3])}? " if close else ""
    return f"unknown {kind} {name!r}: {hint}valid {flag} values: {', '.join(sorted(valid))}"


def get_model(catalog: Catalog, name: str) -> ModelSpec:
    """Look up a model id (case-insensitive). Raises :class:`ModelError` naming the closest id."""
    key = name.strip().lower()
    if key in catalog.models:
        return catalog.models[key]
    raise ModelError(_unknown("model", name, list(catalog.models), "--model"))


def get_gpu(catalog: Catalog, name: str) -> GpuSpec:
    """Look up a GPU id (case-insensitive). Raises :class:`UsageError` naming the closest id."""
    key = name.strip().lower()
    if key in catalog.gpus:
        return catalog.gpus[key]
    raise UsageError(_unknown("GPU", name, list(catalog.gpus), "--gpu"))
