"""The one exception tree of diffbench, and the exit codes the CLI maps it to.

```
DiffbenchError (exit 2)            base; message names the input and the fix
├── UsageError (exit 2)            a bad option value or combination
├── InputError (exit 2)            a file or directory that is missing, unreadable or malformed
├── ModelError (exit 2)            a model path, id or pipeline class that cannot be used
├── ShapeError (exit 2)            a size / frame count / step count the model cannot take
├── MissingDependencyError (exit 3) an optional extra is not installed (names the extra)
├── MissingWeightsError (exit 3)   metric or model weights are not on disk (names file and location)
├── StoreError (exit 4)            the run store is locked, read-only or from a newer schema, or the
│                                  sweep id is running in another live process
├── GenerationError (exit 5)       one generation failed (recorded as data where a run continues)
│   └── DeviceOutOfMemory (exit 5) the device ran out of memory for one request / shape
├── OutputError (exit 6)           an output file could not be written (a full disk): the run completed,
│                                  the other outputs were written, the failed one is named
└── GateFailed (exit 1)            a quality or SLO gate failed (the run itself completed)
```

Third-party exceptions are translated into these at the boundary that calls the library. Besides these, a
run stopped by Ctrl-C exits 130 and one stopped by SIGTERM 143 (see :mod:`diffbench.core.interrupt`).
"""

from __future__ import annotations


class DiffbenchError(Exception):
    """Base class. ``exit_code`` is what the CLI returns for it."""

    exit_code: int = 2


class UsageError(DiffbenchError):
    """A bad option value or combination (e.g. ``--steps 0``)."""


class InputError(DiffbenchError):
    """A file or directory that is missing, unreadable, corrupt or malformed."""


class ModelError(DiffbenchError):
    """A model path, hub id or pipeline class that cannot be used offline."""


class ShapeError(DiffbenchError):
    """A height, width, frame count or step count that the model cannot take."""


class MissingDependencyError(DiffbenchError):
    """An optional dependency is missing; the message names the extra to install."""

    exit_code = 3


class MissingWeightsError(DiffbenchError):
    """Weights are not on disk; the message names the file and where to put it."""

    exit_code = 3


class StoreError(DiffbenchError):
    """The run store cannot be used (locked, read-only, newer schema, a sweep another process runs)."""

    exit_code = 4


class GenerationError(DiffbenchError):
    """One generation failed; runs record it with the shape and go on."""

    exit_code = 5


class DeviceOutOfMemory(GenerationError):
    """The device ran out of memory (CUDA OOM, or the simulated limit) for one request.

    ``memory`` (a ``MemoryStats``) and ``signals`` (a ``RequestSignals``) hold what the engine measured for
    the failed request when it knows (None otherwise), so a server can export the peak that caused it.
    """

    memory: object | None = None
    signals: object | None = None


class OutputError(DiffbenchError):
    """An output (``--json``, ``--jsonl``, ``--csv`` ...) could not be written, e.g. the disk filled.

    A run whose streamed output fails mid-run warns once, goes on, writes its other outputs and then raises
    this; the message names the output, the OS error and what was written.
    """

    exit_code = 6


class GateFailed(DiffbenchError):
    """A gate failed: the measurement completed but did not meet the stated limits."""

    exit_code = 1


def install_hint(extra: str) -> str:
    """The one install command for a missing diffbench extra, as README.md documents it (from a checkout).

    Example: ``install_hint("quality")`` -> ``pip install -c constraints.txt -e '.[quality]' (or '.[all]')``.
    """
    return f"pip install -c constraints.txt -e '.[{extra}]' (or '.[all]')"


def require(module: str, extra: str) -> object:
    """Import an optional module or raise :class:`MissingDependencyError` naming the extra.

    Args:
        module: dotted module name, e.g. ``"diffusers"``.
        extra: the diffbench extra that provides it, e.g. ``"diffusers"``.

    Returns:
        The imported module.

    Raises:
        MissingDependencyError: when the import fails.
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise MissingDependencyError(
            f"{module} is not installed ({exc}); install it with: {install_hint(extra)}"
        ) from exc
