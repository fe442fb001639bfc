"""The package ladder: who may import whom, read from the source with ``ast``.

Every import counts: at module level, inside a function (a lazy import), under ``if TYPE_CHECKING:``, and
``__import__("diffbench.x")`` / ``import_module("diffbench.x")`` with a literal name. The rules:

* a package imports only packages on LOWER rungs of :data:`LADDER` (same-rung packages do not import each
  other); ``diffbench`` itself (``from diffbench import __version__``) may be imported from anywhere and
  imports nothing but ``errors``;
* no cycle between packages;
* no package imports another package's private name: ``from diffbench.x.m import _name`` or a private
  module ``diffbench.x._m`` (dunder names such as ``__version__`` are public). Only imports are read: a
  private attribute reached through an imported module (``m._name``) is not seen here;
* no import cycle between the modules of one package (an import of ``diffbench.x.m`` is an edge to the
  module ``m``, not to the package ``__init__`` Python runs first). The CLI's lazy imports of its own
  command modules are edges like any other: they are fine as long as a command module never imports back.

A failure names the file and line, the import and the rule. :data:`PENDING` lists the violations known
while the mechanisms are being moved to their rung; each entry is removed when its move lands (a test fails
on an entry that no longer occurs, so the list cannot go stale).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "diffbench"

# The ladder, top to bottom. A package may import the packages on the rungs below its own, never one on
# its own rung or above:
#
#     cli
#      |
#     distributed . server
#      |
#     report
#      |
#     derive
#      |
#     monitor
#      |
#     sweep
#      |
#     bench
#      |
#     engines            engine protocol, sim/diffusers/http engines, pipeline instrumentation,
#      |                 cache/option knobs, fingerprint
#     load . plan
#      |
#     quality . store . queueing
#      |
#     ledger . workload . metrics
#     core
#      |
#     errors             (the module errors.py)
#
LADDER: tuple[tuple[str, ...], ...] = (
    ("cli",),
    ("distributed", "server"),
    ("report",),
    ("derive",),
    ("monitor",),
    ("sweep",),
    ("bench",),
    ("engines",),
    ("load", "plan"),
    ("quality", "store", "queueing"),
    ("ledger", "workload", "metrics"),
    ("core",),
    ("errors",),
)
RUNG = {pkg: len(LADDER) - i for i, rung in enumerate(LADDER) for pkg in rung}  # higher number: higher rung

# Known violations while other moves are under way; remove an entry when its move lands.
#   ("upward", importer package, imported package)
#   ("private", importing file relative to src/diffbench, "module:name")
#   (a package cycle is looked for without the pending upward imports, so it needs no entry of its own)
#   ("module-cycle", *sorted modules)
PENDING: set[tuple[str, ...]] = set()


@dataclass(frozen=True)
class Import:
    """One import in a source file: ``module`` (absolute dotted name) and, for ``from m import a, b``, the
    names; ``where`` is ``path:line`` relative to src/diffbench."""

    file: str
    line: int
    module: str
    names: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def text(self) -> str:
        return f"from {self.module} import {', '.join(self.names)}" if self.names else f"import {self.module}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_of(rel: str) -> str:
    """The diffbench package a file (relative to src/diffbench) belongs to; ``""`` for the top-level
    ``__init__.py``."""
    first = rel.split("/")[0]
    return "" if first == "__init__.py" else first.removesuffix(".py")


def _imports(path: Path) -> Iterator[Import]:
    return _imports_of(path.read_text(encoding="utf-8"), path.relative_to(SRC).as_posix())


def _imports_of(code: str, rel: str) -> Iterator[Import]:
    """Every import in ``code``, the text of the file ``rel`` (relative to src/diffbench)."""
    path = SRC / rel
    this = _module_name(path)
    for node in ast.walk(ast.parse(code, filename=rel)):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield Import(rel, node.lineno, a.name, ())
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative: resolved against this module's package
                base = this.split(".")[: len(this.split(".")) - node.level + (path.name == "__init__.py")]
                module = ".".join([*base, module] if module else base)
            yield Import(rel, node.lineno, module, tuple(a.name for a in node.names))
        elif (isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))
              and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr)
              in ("__import__", "import_module")
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            yield Import(rel, node.lineno, node.args[0].value, ())


def _all_imports() -> list[Import]:
    return [imp for f in sorted(SRC.rglob("*.py")) for imp in _imports(f)
            if imp.module == "diffbench" or imp.module.startswith("diffbench.")]


IMPORTS = _all_imports()
MODULES = {_module_name(f) for f in SRC.rglob("*.py")}


def _target_package(imp: Import) -> str:
    parts = imp.module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_every_package_is_on_the_ladder() -> None:
    packages = {p.name.removesuffix(".py") for p in SRC.iterdir()
                if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.name != "__init__.py")}
    missing = sorted(packages - set(RUNG))
    assert not missing, f"packages not on the ladder in tests/test_layering.py (add each to its rung): {missing}"
    assert len(RUNG) == sum(len(r) for r in LADDER), "a package is on two rungs of LADDER"


def _upward() -> dict[tuple[str, ...], list[str]]:
    found: dict[tuple[str, ...], list[str]] = {}
    for imp in IMPORTS:
        src, dst = _package_of(imp.file), _target_package(imp)
        if src == dst:
            continue
        if src == "":  # the top-level __init__: only errors
            if dst != "errors":
                found.setdefault(("upward", "diffbench", dst), []).append(
                    f"{imp.where}: {imp.text}: diffbench/__init__.py may import only diffbench.errors")
            continue
        if dst == "":  # `import diffbench` / `from diffbench import __version__`: the root, below everything
            continue
        if RUNG[dst] >= RUNG[src]:
            rule = "the same rung" if RUNG[dst] == RUNG[src] else "a higher rung"
            found.setdefault(("upward", src, dst), []).append(
                f"{imp.where}: {imp.text}: {src}/ may not import {dst}/ ({dst} is on {rule}; "
                f"a package imports only lower rungs of LADDER)")
    return found


def _private() -> dict[tuple[str, ...], list[str]]:
    found: dict[tuple[str, ...], list[str]] = {}
    for imp in IMPORTS:
        src, dst = _package_of(imp.file), _target_package(imp)
        if src == dst or dst == "":
            continue
        private_module = next((p for p in imp.module.split(".")[2:] if _is_private(p)), None)
        names = [n for n in imp.names if _is_private(n)]
        if private_module is not None:
            found.setdefault(("private", imp.file, imp.module), []).append(
                f"{imp.where}: {imp.text}: {private_module} is a private module of {dst}/; import a public one")
        for n in names:
            found.setdefault(("private", imp.file, f"{imp.module}:{n}"), []).append(
                f"{imp.where}: {imp.text}: {n} is private to {dst}/; give it a public name there")
    return found


def _cycles(edges: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """Strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[tuple[str, ...]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(tuple(sorted(comp)))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _package_cycles() -> dict[tuple[str, ...], list[str]]:
    edges: dict[str, set[str]] = {}
    where: dict[tuple[str, str], str] = {}
    for imp in IMPORTS:
        src, dst = _package_of(imp.file), _target_package(imp)
        if src and dst and src != dst and ("upward", src, dst) not in PENDING:
            edges.setdefault(src, set()).add(dst)
            where.setdefault((src, dst), f"{imp.where}: {imp.text}")
    found = {}
    for comp in _cycles(edges):
        links = [where[(a, b)] for a in comp for b in comp if (a, b) in where]
        found[("package-cycle", *comp)] = [f"packages {' <-> '.join(comp)} import each other: " + "; ".join(links)]
    return found


def _module_cycles() -> dict[tuple[str, ...], list[str]]:
    edges: dict[str, set[str]] = {}
    where: dict[tuple[str, str], str] = {}
    for imp in IMPORTS:
        src = _module_name(SRC / imp.file)
        targets = [f"{imp.module}.{n}" if f"{imp.module}.{n}" in MODULES else imp.module for n in imp.names] \
            or [imp.module]
        for dst in targets:
            if dst in MODULES and dst != src and _target_package(imp) == _package_of(imp.file):
                edges.setdefault(src, set()).add(dst)
                where.setdefault((src, dst), f"{imp.where}: {imp.text}")
    found = {}
    for comp in _cycles(edges):
        links = [where[(a, b)] for a in comp for b in comp if (a, b) in where]
        found[("module-cycle", *comp)] = [
            f"modules {', '.join(comp)} import each other (a cycle; move the shared piece to a module both "
            "can import): " + "; ".join(links)]
    return found


RULES = {"upward": _upward, "private": _private, "package-cycle": _package_cycles, "module-cycle": _module_cycles}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_imports_keep_the_ladder(rule: str) -> None:
    found = RULES[rule]()
    bad = [line for key, lines in sorted(found.items()) if key not in PENDING for line in lines]
    assert not bad, f"{rule}: {len(bad)} import(s) break the ladder:\n" + "\n".join(bad)


def test_pending_entries_still_occur() -> None:
    """An entry whose move has landed is deleted from PENDING, so the list only names what is left."""
    found = {key for rule in RULES.values() for key in rule()}
    stale = sorted(PENDING - found)
    assert not stale, f"these PENDING entries no longer occur; delete them from tests/test_layering.py: {stale}"


def test_the_scan_sees_lazy_type_checking_dynamic_and_relative_imports() -> None:
    """The parser reads the imports these rules are about (a scan that missed them would pass anything)."""
    assert any(i.file == "bench/session.py" for i in IMPORTS)
    code = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from diffbench.cli.main import app\n"
            "def f():\n    from diffbench.report.loader import _x\n    __import__('diffbench.server')\n"
            "from .result import BenchResult\n")
    found = sorted((i.line, i.module, i.names) for i in _imports_of(code, "bench/probe.py"))
    assert found == [(1, "typing", ("TYPE_CHECKING",)), (3, "diffbench.cli.main", ("app",)),
                     (5, "diffbench.report.loader", ("_x",)), (6, "diffbench.server", ()),
                     (7, "diffbench.bench.result", ("BenchResult",))]


def test_nothing_imports_cli() -> None:
    users = [f"{i.where}: {i.text}" for i in IMPORTS if _target_package(i) == "cli" and _package_of(i.file) != "cli"]
    assert not users, "only the CLI imports the CLI:\n" + "\n".join(users)


# Stricter than the ladder for the planning packages (their start-up stays light): what each may import.
ALLOWED = {
    "queueing": {"core", "errors"},
    "ledger": {"core", "errors"},
    "plan": {"core", "errors", "ledger", "queueing"},
}


@pytest.mark.parametrize("pkg", sorted(ALLOWED))
def test_planning_packages_import_only_what_they_allow(pkg: str) -> None:
    bad = [f"{i.where}: {i.text}" for i in IMPORTS if _package_of(i.file) == pkg
           and _target_package(i) not in {pkg, "", *ALLOWED[pkg]}]
    assert not bad, f"{pkg}/ may import only {sorted(ALLOWED[pkg])}:\n" + "\n".join(bad)
