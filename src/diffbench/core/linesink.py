"""A streamed text output (``--jsonl``) that survives a failing disk.

A run streams its records as it goes; when the disk fills (or the file otherwise stops accepting writes)
the run must not die or lose its other outputs. :class:`LineSink` warns once, cuts the file back to its
last whole line (so what it holds stays valid JSONL), drops later lines and keeps the error; the command finishes, writes its other outputs and then raises :meth:`LineSink.check`'s
:class:`~diffbench.errors.OutputError` (exit 6).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

from diffbench.errors import InputError, OutputError


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class LineSink:
    """Lines written to ``path`` (truncated first) and flushed at once.

    Args:
        path: the file.
        option: the option that named it (``"--jsonl"``), for messages.
        warn: called once with a one-line warning when a write fails (default: stderr).

    Raises:
        InputError: the file cannot be opened (before the run starts).
    """

    def __init__(self, path: str | Path, option: str, warn: Callable[[str], None] | None = None) -> None:
        self.path, self.option = Path(path), option
        self.warn = warn or _stderr
        self.lines = 0  # lines written (flushed) before any error
        self._bytes = 0  # their size: a failed write is cut back to it (no half line at the end)
        self.error: OSError | None = None
        try:  # the parent directory is checked (and created with --mkdir) by the command, not here
            self._fh: IO[str] | None = self._open()
        except OSError as exc:
            raise InputError(f"cannot write {option} {self.path}: {exc.strerror or exc}") from exc

    def _open(self) -> IO[str]:
        return self.path.open("w", encoding="utf-8")

    def write_lines(self, lines: Iterable[str]) -> bool:
        """Write and flush ``lines`` (each ending in a newline). False once the output has failed."""
        if self._fh is None:
            return False
        batch = list(lines)
        try:
            self._fh.writelines(batch)
            self._fh.flush()
        except OSError as exc:
            self._fail(exc)
            return False
        self.lines += len(batch)
        self._bytes += sum(len(line.encode("utf-8")) for line in batch)
        return True

    def _fail(self, exc: OSError) -> None:
        self.error = exc
        fh, self._fh = self._fh, None
        if fh is not None:
            with contextlib.suppress(OSError):  # closing flushes the buffer again: the same error
                fh.close()
        with contextlib.suppress(OSError):  # whole lines only: what was written stays readable JSONL
            os.truncate(self.path, self._bytes)
        self.warn(f"warning: {self.describe()}; the run goes on without it (the other outputs are still "
                  "written; the exit code will be 6)")

    def describe(self) -> str:
        """``"--jsonl PATH: cannot write (No space left on device) after 1,234 line(s)"``."""
        assert self.error is not None
        return (f"{self.option} {self.path}: cannot write ({self.error.strerror or self.error}) after "
                f"{self.lines:,} line(s)")

    def close(self) -> None:
        """Close the file (a failing final flush is recorded like a failing write)."""
        fh, self._fh = self._fh, None
        if fh is None:
            return
        try:
            fh.close()
        except OSError as exc:
            self._fh = None
            self.error = exc
            self.warn(f"warning: {self.describe()}")

    def check(self) -> None:
        """Raise the recorded failure, if any.

        Raises:
            OutputError: a write failed (exit 6); the message names the option, the path, the OS error and
                how many lines were written before it.
        """
        if self.error is None:
            return
        hint = "free some space and rerun" if self.error.errno == errno.ENOSPC else "choose a writable path"
        raise OutputError(f"{self.describe()}; the run completed and its other outputs were written; {hint}")
