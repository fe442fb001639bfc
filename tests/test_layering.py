"""Package layering from the design (ARCHITECTURE.md "Packages"): who may import whom, read from the source with
``ast`` (so a lazy import inside a function counts too). Only the rules the code keeps today are listed; a new
dependency that breaks one is a design change, not an accident."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "diffbench"

# package -> the diffbench packages it may import (besides itself); `errors` is the shared exception module
ALLOWED = {
    "queueing": {"core", "errors"},
    "ledger": {"core", "errors"},
    "plan": {"core", "errors", "ledger", "queueing"},
}


def _imports(pkg: str) -> dict[str, set[str]]:
    """diffbench top-level package -> files of ``pkg`` importing it."""
    out: dict[str, set[str]] = {}
    for f in sorted((SRC / pkg).rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "diffbench" and len(parts) > 1 and parts[1] != pkg:
                    out.setdefault(parts[1], set()).add(str(f.relative_to(SRC)))
    return out


@pytest.mark.parametrize("pkg", sorted(ALLOWED))
def test_package_imports_only_what_the_design_allows(pkg: str) -> None:
    bad = {dep: files for dep, files in _imports(pkg).items() if dep not in ALLOWED[pkg]}
    assert not bad, f"{pkg}/ imports {bad}; allowed: {sorted(ALLOWED[pkg])}"


def test_nothing_imports_cli() -> None:
    users = {pkg.name: files for pkg in SRC.iterdir() if pkg.is_dir() and pkg.name not in ("cli", "__pycache__")
             for dep, files in _imports(pkg.name).items() if dep == "cli"}
    assert not users, users
