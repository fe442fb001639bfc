"""The ``diffbench`` command. Subcommands live in their own modules and are registered here.

Importing this module (and ``diffbench --help``) must not import torch, diffusers or an HTTP client:
subcommand modules import heavy dependencies inside their command functions.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

import typer

from diffbench import __version__
from diffbench.core import interrupt
from diffbench.errors import DiffbenchError, install_hint

app = typer.Typer(
    name="diffbench",
    help="Measure, plan and prove inference optimizations for diffusion models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"diffbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """Measure, plan and prove inference optimizations for diffusion models."""


def _register() -> None:
    # One line per command module; each exposes register(app).
    from diffbench.cli import bench as _bench

    _bench.register(app)
    __import__("diffbench.cli.ledger", fromlist=["register"]).register(app)
    __import__("diffbench.cli.plan", fromlist=["register"]).register(app)
    __import__("diffbench.cli.serve", fromlist=["register"]).register(app)
    __import__("diffbench.cli.load", fromlist=["register"]).register(app)
    __import__("diffbench.cli.simulate", fromlist=["register"]).register(app)
    __import__("diffbench.cli.quality", fromlist=["register"]).register(app)
    __import__("diffbench.cli.sweep", fromlist=["register"]).register(app)
    __import__("diffbench.cli.runs", fromlist=["register"]).register(app)
    __import__("diffbench.cli.monitor", fromlist=["register"]).register(app)
    __import__("diffbench.cli.probe", fromlist=["register"]).register(app)
    __import__("diffbench.cli.drill", fromlist=["register"]).register(app)
    __import__("diffbench.cli.doctor", fromlist=["register"]).register(app)
    __import__("diffbench.cli.report", fromlist=["register"]).register(app)
    __import__("diffbench.cli.review", fromlist=["register"]).register(app)
    __import__("diffbench.cli.derive", fromlist=["register"]).register(app)


_register()


def _offline_env() -> None:
    """Offline by design: hub clients fail fast instead of retrying for ~23 s (``HF_HUB_OFFLINE``:
    https://huggingface.co/docs/huggingface_hub/package_reference/environment_variables; docs/getting-started.md)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")


# top-level module -> the extra that installs it (pyproject.toml)
_EXTRA_OF = {
    "torch": "diffusers",
    "diffusers": "diffusers",
    "transformers": "diffusers",
    "accelerate": "diffusers",
    "safetensors": "diffusers",
    "PIL": "diffusers",
    "torchmetrics": "quality",
    "skimage": "quality",
    "scipy": "quality",
    "av": "quality",
    "fastapi": "serve",
    "uvicorn": "serve",
    "prometheus_client": "serve",
    "multipart": "serve",
    "python_multipart": "serve",
    "matplotlib": "report",
    "selenium": "test",
}


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the app and maps :class:`DiffbenchError` to its exit code with a one-line error."""
    _offline_env()
    interrupt.reset()
    previous = interrupt.install()  # SIGTERM takes every command's Ctrl-C path (exit 143, partial results kept)
    try:
        return _interrupt_code(_run(argv))
    finally:
        interrupt.restore(previous)


def _interrupt_code(code: int) -> int:
    """A command stopped by SIGTERM returns 143, not the 130 of its Ctrl-C path."""
    return interrupt.exit_code() if code == interrupt.EXIT_SIGINT else code


@functools.cache
def _command() -> Any:
    """The click command tree of :data:`app`, built once per process. ``app(...)`` rebuilds it on every call
    (typer inspects each command's signature and type hints again, ~0.1 s), which callers that run several
    commands in one process, such as the tests, would pay each time; the parse itself is unchanged."""
    return typer.main.get_command(app)


def _run(argv: list[str] | None) -> int:
    try:
        rv = _command()(args=argv, standalone_mode=False)
    except DiffbenchError as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        typer.secho("aborted", fg="red", err=True)
        return 130
    except ModuleNotFoundError as exc:
        # Optional dependencies are imported lazily; translate a missing one at this single boundary.
        top = (exc.name or "").split(".")[0]
        extra = _EXTRA_OF.get(top)
        if extra is None:
            raise
        typer.secho(
            f"error: {top} is not installed; this command needs the '{extra}' extra: {install_hint(extra)}",
            fg="red",
            err=True,
        )
        return 3
    except KeyboardInterrupt:
        typer.secho(f"interrupted ({interrupt.interrupt_name()})", fg="red", err=True)
        return interrupt.exit_code()
    except Exception as exc:
        # Usage errors of the (possibly vendored) click: duck-typed so any typer version works.
        if hasattr(exc, "show") and isinstance(getattr(exc, "exit_code", None), int):
            exc.show()
            return int(exc.exit_code)
        raise
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
