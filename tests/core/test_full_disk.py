"""Outputs on a disk that fills mid-run (issue 24, item 3).

Reproduction: ``load --jsonl`` on a disk that filled mid-run printed 125 "Task exception was never
retrieved" tracebacks, no summary, and did not write ``--json`` (on a healthy disk); ``simulate --jsonl``
died with a traceback; a failed atomic write left a 0-byte ``*.json.tmp``. Now a streamed output that fails
is warned once, the run goes on, the other outputs are written and the exit code is 6 (OutputError).
The full disk is a fake file object that raises ``OSError(ENOSPC)`` once its capacity is used.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from tests.core.fulldisk import FullDisk

from diffbench.core.jsonio import write_json_atomic
from diffbench.core.linesink import LineSink
from diffbench.errors import OutputError


def _full_disk(monkeypatch: pytest.MonkeyPatch, capacity: int) -> list[FullDisk]:
    opened: list[FullDisk] = []

    def _open(self: LineSink) -> FullDisk:
        opened.append(FullDisk(capacity))
        return opened[-1]

    monkeypatch.setattr(LineSink, "_open", _open)
    return opened


def test_line_sink_warns_once_and_counts_the_lines_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened = _full_disk(monkeypatch, capacity=25)
    warnings: list[str] = []
    sink = LineSink(tmp_path / "x.jsonl", "--jsonl", warnings.append)
    results = [sink.write_lines([f"line {i:04d}\n"]) for i in range(10)]  # 10 characters a line
    sink.close()
    assert results == [True, True, False] + [False] * 7  # the third line did not fit in 25 characters
    assert sink.lines == 2 and len(warnings) == 1
    assert "--jsonl" in warnings[0] and "No space left on device" in warnings[0]
    assert opened[0].closed  # closed at the failure, the later lines were never tried
    with pytest.raises(OutputError, match="after 2 line") as exc:
        sink.check()
    assert exc.value.exit_code == 6


def test_failed_atomic_write_leaves_no_tmp_and_names_the_file(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "r.json"
    target.write_text('{"old": true}')

    def full(self: Path, text: str, encoding: str | None = None, errors=None, newline=None) -> int:
        with open(self, "w", encoding=encoding) as fh:  # the file is created, then the disk is full
            fh.write(text[:0])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OutputError, match=rf"{target}: cannot write \(No space left on device\)") as exc:
        write_json_atomic(target, {"a": 1})
    assert exc.value.exit_code == 6
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]  # no r.json.tmp
    assert json.loads(target.read_text()) == {"old": True}  # the previous file is untouched
