"""The generated reference pages (``docs/reference/``) match the code: regenerated in memory, every committed
page is identical, and each command page's help block is what ``diffbench <command> --help`` prints."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIX = "run `python docs/gen_reference.py` and commit the pages it writes"


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_reference", mod)  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


gen = _load_generator()


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return gen.pages()


def test_committed_pages_match_the_code(generated: dict[str, str]) -> None:
    differ = [rel for rel, text in generated.items()
              if not (gen.DOCS / rel).exists() or (gen.DOCS / rel).read_text(encoding="utf-8") != text]
    assert not differ, f"generated reference pages differ from the committed ones: {differ}; {FIX}"
    extra = gen.stale(generated)
    assert not extra, f"committed command pages no command has any more: {extra}; {FIX}"


def test_every_command_has_a_page(generated: dict[str, str]) -> None:
    """The walk reaches nested sub-apps: the top-level commands and the groups' subcommands."""
    paths = {c.path for c in gen.commands()}
    for expected in [("bench",), ("ledger",), ("serve",), ("load",), ("sweep",), ("doctor",), ("review",),
                     ("runs",), ("runs", "show"), ("runs", "compare"), ("monitor",), ("monitor", "calibrate"),
                     ("monitor", "dashboard")]:
        assert expected in paths
    for c in gen.commands():
        if c.path:
            assert c.page in generated and c.one_line, c
            assert f"# `{c.name}`" in generated[c.page]
    index = generated[f"{gen.COMMANDS_DIR}/index.md"]
    assert all(f"({Path(c.page).name})" in index for c in gen.commands() if c.path)


def _subprocess_help(path: tuple[str, ...]) -> str:
    proc = subprocess.run([sys.executable, "-c", gen.HELP_SUBPROCESS, *path, "--help"], capture_output=True,
                          text=True, env=gen.help_env(), cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return gen.normalize_help(proc.stdout)


@pytest.mark.parametrize("path", [c.path for c in gen.commands()], ids=lambda p: " ".join(p) or "diffbench")
def test_help_block_is_the_cli_help(path: tuple[str, ...], generated: dict[str, str]) -> None:
    page = f"{gen.COMMANDS_DIR}/{'-'.join(path) or 'index'}.md"
    blocks = gen.help_blocks(generated[page])
    assert len(blocks) == 1, page
    expected = _subprocess_help(path)
    assert expected.lstrip().startswith(f"Usage: {' '.join(('diffbench', *path))} "), expected[:200]
    assert max(len(ln) for ln in expected.splitlines()) <= gen.WIDTH
    assert "\x1b[" not in expected  # no colour codes
    assert blocks[0] == expected, f"{page}: help block differs from `diffbench {' '.join(path)} --help`; {FIX}"


def test_help_ignores_forced_terminals_and_widths() -> None:
    """A CI runner's FORCE_COLOR / GITHUB_ACTIONS and another COLUMNS do not reach the rendered help."""
    env = gen.help_env({"FORCE_COLOR": "1", "GITHUB_ACTIONS": "true", "COLUMNS": "40", "TTY_COMPATIBLE": "1"})
    assert env["COLUMNS"] == str(gen.WIDTH) and "FORCE_COLOR" not in env and "GITHUB_ACTIONS" not in env


def test_help_rendering_does_not_leak_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "57")
    monkeypatch.setenv("FORCE_COLOR", "1")
    text = gen.render_help(("runs",))
    assert "\x1b[" not in text and max(len(ln) for ln in text.splitlines()) > 57
    import os

    assert os.environ["COLUMNS"] == "57" and os.environ["FORCE_COLOR"] == "1"


def test_normalize_help_drops_padding_only() -> None:
    assert gen.normalize_help("   \n Usage: x   \n\n a  b \n  \n") == " Usage: x\n\n a  b\n"
