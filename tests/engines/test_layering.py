"""The registry alone knows every engine: no engine module imports it (issue 14 item 3).

Engines depend on :mod:`diffbench.engines.config` for their configuration; the registry imports the
engines (lazily). Parsed with ``ast``, so an import inside a function counts as well as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import diffbench.engines as engines_pkg
from diffbench.engines import config, registry

ENGINE_DIR = Path(engines_pkg.__file__).parent


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_no_engine_module_imports_the_registry() -> None:
    modules = sorted(p for p in ENGINE_DIR.glob("*.py") if p.name not in ("registry.py", "__init__.py"))
    assert {p.stem for p in modules} >= {"config", "base", "sim", "diffusers_engine", "http_engine"}
    offenders = {p.name: sorted(m for m in _imports(p) if m.startswith("diffbench.engines.registry"))
                 for p in modules}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_config_imports_no_engine_and_the_registry_creates_each() -> None:
    assert not {m for m in _imports(Path(config.__file__)) if m.startswith("diffbench.engines.")}
    imported = _imports(Path(registry.__file__))
    for module in ("sim", "diffusers_engine", "http_engine"):
        assert f"diffbench.engines.{module}" in imported
    assert set(config.ENGINES) == {"sim", "diffusers", "http"}


def test_old_import_path_still_names_the_same_classes() -> None:
    assert registry.EngineConfig is config.EngineConfig and registry.SimParams is config.SimParams
    assert registry.check_device is config.check_device
