"""Output paths are checked before a run; nothing is created unless asked (--mkdir)."""

from __future__ import annotations

import os

import pytest

from diffbench.core.jsonio import write_json_atomic
from diffbench.core.outpath import check_output_dir, check_output_file
from diffbench.errors import InputError, UsageError


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
    with pytest.raises(InputError, match="cannot write"):
        write_json_atomic(tmp_path / "missing" / "r.json", {"a": 1})
    assert not (tmp_path / "missing").exists()
