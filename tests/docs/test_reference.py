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


@pytest.mark.e2e  # runs a subprocess
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


def test_metrics_page_lists_every_family(generated: dict[str, str]) -> None:
    from diffbench.metrics.names import METRICS

    page = generated["reference/metrics.md"]
    for m in METRICS:
        assert f"`{m.samples[0]}`" in page and m.help in page, m.name
    assert "### REQUEST_BUCKETS" in page and "1800" in page


def test_results_page_has_each_kind_and_its_schema(generated: dict[str, str]) -> None:
    import json

    page = generated["reference/results.md"]
    kinds = {r.kind: r for r in gen.result_kinds()}
    assert {"diffbench.bench", "diffbench-quality", "diffbench.sweep", "diffbench.load", "diffbench.plan",
            "diffbench.ledger"} <= set(kinds)
    for kind, r in kinds.items():
        section = page.split(f"\n## {kind}\n", 1)[1].split("\n## ", 1)[0]
        assert f"`schema_version` {r.schema_version}," in section
        body = section.split("    ```json\n", 1)[1].split("    ```", 1)[0]
        assert json.loads("\n".join(ln[4:] for ln in body.splitlines())) == r.model.model_json_schema(), kind


def test_http_routes_page_has_every_route(generated: dict[str, str]) -> None:
    pytest.importorskip("fastapi")
    page = generated["reference/http-routes.md"]
    plain = gen.routes()
    assert ("POST", "/v1/images/generations", "Generate Images") in plain
    assert all(p != "/admin/faults" for _m, p, _s in plain)  # only with --enable-faults
    for method, path, _s in gen.routes(enable_faults=True):
        assert f"| {method} | `{path}` |" in page


def test_errors_page_has_every_class_and_exit_code(generated: dict[str, str]) -> None:
    from diffbench import errors

    page = generated["reference/errors.md"]
    classes = gen.error_classes()
    assert classes[0] is errors.DiffbenchError and errors.GateFailed in classes
    for c in classes:
        assert f"| {c.exit_code} | `{c.__name__}` |" in page


def test_every_environment_variable_read_has_a_meaning() -> None:
    reads = gen.environment_reads()
    assert {"DIFFBENCH_STORE", "DIFFBENCH_PROGRESS", "DIFFBENCH_API_KEY", "HF_HUB_OFFLINE"} <= set(reads)
    missing = sorted(set(reads) - set(gen.ENV_MEANINGS))
    assert not missing, f"add the meaning of {missing} to ENV_MEANINGS in docs/gen_reference.py; {FIX}"
    unused = sorted(set(gen.ENV_MEANINGS) - set(reads))
    assert not unused, f"ENV_MEANINGS explains variables the code no longer reads: {unused}"


def test_environment_scan_finds_every_form(tmp_path: Path) -> None:
    pkg = tmp_path / "diffbench"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "consts.py").write_text('NAME_ENV = "FROM_CONSTANT"\n')
    (pkg / "sub" / "a.py").write_text(
        "import os\nfrom os import getenv\nfrom diffbench.consts import NAME_ENV as N\nLOCAL = 'LOCAL_CONST'\n"
        "os.environ.get('A')\nos.getenv('B')\ngetenv('B2')\nx = os.environ['C']\ny = 'D' in os.environ\n"
        "os.environ.setdefault('E', '1')\nos.environ.get(LOCAL)\nos.environ.get(N)\n"
        "os.environ['WRITTEN'] = '1'\nenv = dict(os.environ)\nenv.get('NOT_ENV')\n")
    reads = gen.environment_reads(tmp_path)
    assert set(reads) == {"A", "B", "B2", "C", "D", "E", "LOCAL_CONST", "FROM_CONSTANT"}
    assert reads["A"] == [f"{tmp_path.name}/diffbench/sub/a.py:5"]  # relative to the folder above src
    (pkg / "sub" / "b.py").write_text("import os\nos.environ.get('X' + 'Y')\n")
    with pytest.raises(ValueError, match="b.py:2"):
        gen.environment_reads(tmp_path)
