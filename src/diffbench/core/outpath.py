"""Check output paths before a run starts, so a long run never dies at the end on an unwritable path.

The rule every command follows: an output option names a *file* (or, for ``--save-outputs``-like options,
a *directory*) whose parent directory must already exist. A missing parent is an error naming the option
and the fix (create it, or pass ``--mkdir``); nothing is created silently, so a mistyped directory never
turns into a fresh, empty result somewhere unexpected.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from diffbench.errors import InputError, UsageError


def _ensure_parent(p: Path, option: str, mkdir: bool) -> None:
    parent = p.parent if str(p.parent) else Path(".")
    if parent.exists():
        if not parent.is_dir():
            raise UsageError(f"{option} {p}: {parent} is not a directory; choose another path")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise InputError(f"{option} {p}: directory {parent} is not writable; choose a writable path")
        return
    if not mkdir:
        raise UsageError(
            f"{option} {p}: directory {parent} does not exist; create it first or pass --mkdir"
        )
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{option} {p}: cannot create {parent} ({exc.strerror or exc})") from exc


def check_output_file(path: str | os.PathLike[str], option: str, *, mkdir: bool = False) -> Path:
    """Validate that ``path`` can be written as a file by option ``option`` (e.g. ``"--json"``).

    Called before any work starts. Creates nothing unless ``mkdir`` is true, and then only the parent
    directories. Returns the path as a :class:`~pathlib.Path`.

    Raises:
        UsageError: ``path`` is an existing directory, or its parent is missing (without ``mkdir``) or
            is not a directory. Exit code 2.
        InputError: the parent directory or an existing file is not writable. Exit code 2.
    """
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{option} {p} is a directory; give a file path such as {p / 'out'}")
    _ensure_parent(p, option, mkdir)
    if p.exists() and not os.access(p, os.W_OK):
        raise InputError(f"{option} {p}: file is not writable; choose a writable path")
    real = Path(os.path.realpath(p))
    if not real.exists() or real.is_file():
        _probe(real.with_name(real.name + ".tmp"), p, option)
    return p


def _probe(tmp: Path, p: Path, option: str) -> None:
    """Create and remove the temporary file the atomic writers will use (``os.access`` says yes to root
    everywhere, and some file systems, such as /proc, refuse new files whatever the permissions).

    Raises:
        InputError: the file cannot be created.
    """
    try:
        with open(tmp, "x", encoding="utf-8"):
            pass
    except FileExistsError:  # a leftover of an interrupted run: it will be replaced
        return
    except OSError as exc:
        raise InputError(f"{option} {p}: cannot create a file in {tmp.parent} ({exc.strerror or exc}); "
                         "choose a writable path") from exc
    tmp.unlink(missing_ok=True)


def check_output_dir(path: str | os.PathLike[str], option: str, *, mkdir: bool = False) -> Path:
    """Validate that ``path`` can serve as an output directory for option ``option``.

    The directory itself may not exist yet (the run creates it); its parent must exist unless ``mkdir``.

    Raises:
        UsageError: ``path`` exists and is not a directory, or its parent is missing (without ``mkdir``).
        InputError: ``path`` (or its parent, when ``path`` does not exist yet) is not writable.
    """
    p = Path(path)
    if p.exists():
        if not p.is_dir():
            raise UsageError(f"{option} {p} exists and is not a directory; give a directory path")
        if not os.access(p, os.W_OK | os.X_OK):
            raise InputError(f"{option} {p}: directory is not writable; choose a writable path")
        return p
    _ensure_parent(p, option, mkdir)
    return p


def check_not_an_input(path: str | os.PathLike[str], option: str, *, files: Sequence[str | os.PathLike[str]] = (),
                       dirs: Sequence[str | os.PathLike[str]] = ()) -> None:
    """Refuse an output that would overwrite an input: ``path`` is one of ``files`` (same file after
    resolving links) or lies inside one of ``dirs`` (an outputs directory being read).

    Raises:
        UsageError: naming the option, the input it would replace and the fix. Exit code 2.
    """
    out = Path(os.path.realpath(path))
    for f in files:
        if out == Path(os.path.realpath(f)):
            raise UsageError(f"{option} {path} is also an input ({f}); writing it would destroy that input: "
                             "choose another output name")
    for d in dirs:
        real = Path(os.path.realpath(d))
        if out == real or real in out.parents:
            raise UsageError(f"{option} {path} is inside the input directory {d}; writing there would change "
                             "what is being compared: write it elsewhere")
