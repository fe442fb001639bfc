"""Output paths are checked before a run; nothing is created unless asked (--mkdir)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from diffbench.core.jsonio import write_json_atomic
from diffbench.core.outpath import check_output_dir, check_output_file
from diffbench.errors import InputError, OutputError, UsageError


def test_missing_parent_is_an_error_and_creates_nothing(tmp_path):
    target = tmp_path / "typo" / "r.json"
    with pytest.raises(UsageError, match=r"--json .*does not exist.*--mkdir"):
        check_output_file(target, "--json")
    assert not (tmp_path / "typo").exists()


def test_mkdir_creates_only_the_parent(tmp_path):
    target = tmp_path / "a" / "b" / "r.json"
    assert check_output_file(target, "--json", mkdir=True) == target
    assert target.parent.is_dir() and not target.exists()


def test_directory_given_for_a_file(tmp_path):
    with pytest.raises(UsageError, match="is a directory"):
        check_output_file(tmp_path, "--csv")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_parent(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(InputError, match="not writable"):
            check_output_file(ro / "x.md", "--markdown")
    finally:
        ro.chmod(0o700)


def test_parent_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(UsageError, match="not a directory"):
        check_output_file(f / "r.json", "--json")
    with pytest.raises(UsageError, match="not a directory"):
        check_output_dir(f, "--save-outputs")


def test_output_dir_may_be_new_but_parent_must_exist(tmp_path):
    assert check_output_dir(tmp_path / "new", "--save-outputs") == tmp_path / "new"
    with pytest.raises(UsageError, match="--save-outputs"):
        check_output_dir(tmp_path / "no" / "new", "--save-outputs")


def test_write_json_atomic_does_not_create_directories(tmp_path):
    with pytest.raises(OutputError, match="cannot write"):
        write_json_atomic(tmp_path / "missing" / "r.json", {"a": 1})
    assert not (tmp_path / "missing").exists()


def test_atomic_writes_never_replace_a_device_fifo_or_symlink(tmp_path):
    """``--json /dev/null`` (or a FIFO, or a symlink) must stay what it is: the temp-file-and-rename writer
    used to replace it with a regular file."""
    import stat

    from diffbench.core.jsonio import write_json_atomic, write_text_atomic

    write_json_atomic("/dev/null", {"a": 1})
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)

    target = tmp_path / "real.json"
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_json_atomic(link, {"a": 2})
    assert link.is_symlink() and json.loads(target.read_text()) == {"a": 2}

    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_text_atomic(fifo, "x,y\n")
    reader.join(10)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and got == ["x,y\n"]


def test_a_file_system_that_refuses_new_files_is_caught_before_the_run():
    """As root, os.access says yes everywhere; /proc refuses new files whatever the permissions."""
    with pytest.raises(InputError, match="--csv /proc/out.csv: cannot create a file in /proc"):
        check_output_file("/proc/out.csv", "--csv")
    assert check_output_file("/dev/null", "--json") == Path("/dev/null")  # a device is written in place
