"""Every document a shipped file cites is one the repository ships.

A reader of a docstring, a comment, a printed message or a shipped data file (``src/`` and ``monitoring/``)
must be able to open what it cites. A citation is either a URL (an upstream page, a paper), a file of another
repository named with its repository (``owner/repo@commit:path``, ``owner/repo:path`` or ``owner/repo path``:
the primary source), or a path to a file of this repository, resolved from the repository root
(``docs/concepts/time-model.md``, ``README.md``). This test finds every ``*.md`` name outside a URL, every
mention of the maintainers' private notes (``ARCHITECTURE``, ``CONVENTIONS``, ``DERIVATION``, ``shared/``),
and fails on each one that does not resolve, naming ``file:line``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("src", "monitoring")
"""Folders whose files ship: the package (code, templates, data) and the rule file / dashboard."""

_URL = re.compile(r"""\b(?:https?|file)://[^\s"'`<>)\]]+""")
_MD = re.compile(r"(?<![\w.-])((?:[\w.-]+/)*[\w-][\w.-]*\.md)(?!\w)")
_REPO = re.compile(r"(?<![\w./-])([\w.-]+)/[\w.-]+(?:@[0-9a-fA-F]{6,40})?(?::|\s+)`{0,2}$")
"""A repository (``owner/repo``, optionally ``@commit``) right before a path: that path is in another repository."""
_LOCAL_TOPS = {"docs", "src", "tests", "monitoring", "benchmarks", ".ci", ".", ".."}
_NOTES = re.compile(r"\b(ARCHITECTURE|CONVENTIONS|DERIVATION)\b|(?<![\w.-])(?:\.\./)*shared/(?:reference|design)\b")

OUTPUT_NAMES = {
    "report.md": {"src/diffbench/cli/report.py", "src/diffbench/report/markdown_render.py"},
}
"""File names diffbench *writes* (an example ``-o`` value), not documents it cites: name -> files using it."""


def unresolved(text: str, root: Path = ROOT, rel: str = "") -> list[tuple[int, str]]:
    """``(line number, reference)`` of every document reference in ``text`` that ``root`` does not ship.

    URLs and paths qualified by a repository are skipped (external sources). Any other ``*.md`` path
    must name a file under ``root`` (no ``..`` escape); a mention of the private notes never resolves. ``rel`` (the file's path from ``root``)
    selects the :data:`OUTPUT_NAMES` allowed in it."""
    out: list[tuple[int, str]] = []
    for no, line in enumerate(text.splitlines(), 1):
        line = _URL.sub(" ", line)
        for m in _MD.finditer(line):
            ref = m.group(1)
            if rel in OUTPUT_NAMES.get(ref, ()):
                continue
            repo = _REPO.search(line, 0, m.start())
            if repo and repo.group(1) not in _LOCAL_TOPS:
                continue
            path = (root / ref.removeprefix("./")).resolve()
            if not (path.is_relative_to(root.resolve()) and path.is_file()):
                out.append((no, ref))
        out.extend((no, m.group(0)) for m in _NOTES.finditer(line))
    return out


def _shipped_files() -> list[Path]:
    files = []
    for top in SHIPPED:
        for f in sorted((ROOT / top).rglob("*")):
            # build artefacts (``pip install -e`` writes src/diffbench.egg-info, whose PKG-INFO copies the
            # README) are not sources; they are neither tracked nor shipped as written
            built = "__pycache__" in f.parts or any(p.endswith(".egg-info") for p in f.parts)
            if f.is_file() and not built and b"\0" not in f.read_bytes()[:8192]:
                files.append(f)
    return files


def test_every_cited_document_is_shipped() -> None:
    files = _shipped_files()
    assert any(f.suffix == ".py" for f in files) and any(f.suffix == ".yaml" for f in files)
    bad = []
    for f in files:
        rel = f.relative_to(ROOT).as_posix()
        bad += [f"{rel}:{no}: {ref}" for no, ref in unresolved(f.read_text(encoding="utf-8", errors="replace"),
                                                               rel=rel)]
    assert not bad, "references to documents the repository does not ship:\n" + "\n".join(bad)


def test_output_names_are_still_used_where_allowed() -> None:
    """The allowance for written file names stays as narrow as the code: each (name, file) still occurs."""
    for name, rels in OUTPUT_NAMES.items():
        for rel in rels:
            assert name in (ROOT / rel).read_text(encoding="utf-8"), f"{rel} no longer mentions {name}"


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("Histograms (monitoring.md §2.2).", ["monitoring.md"]),
        ("see ../shared/reference/gpus.md §1", ["../shared/reference/gpus.md", "../shared/reference"]),
        ("Work code never prints (CONVENTIONS rule 2).", ["CONVENTIONS"]),
        ("(ARCHITECTURE.md \"Packages\")", ["ARCHITECTURE.md", "ARCHITECTURE"]),
        ("see docs/concepts/no-such-page.md", ["docs/concepts/no-such-page.md"]),
        ("source: model-catalog.md §3", ["model-catalog.md"]),
        ("see docs/concepts/time-model.md and README.md", []),
        ("https://github.com/vllm-project/vllm/blob/main/docs/design/metrics.md", []),
        ("vLLM-Omni https://github.com/vllm-project/vllm-omni/blob/main/docs/serving/image_generation_api.md);", []),
        ("sgl-project/sglang docs_new/api/openai_api.mdx", []),
        ("xdit-project/xDiT@175e0bf:docs/performance/flux.md, 1 GPU row", []),
        ("huggingface/diffusers docs/source/en/optimization/para_attn.md, baseline", []),
        ("vllm-project/vllm ``docs/design/metrics.md``", []),
        ("xDiT docs/performance/flux.md", ["docs/performance/flux.md"]),
        ("see docs/reference metrics.md", ["metrics.md"]),
        ("writes out (e.g. ``report.md``)", ["report.md"]),
    ],
)
def test_the_scan_finds_unshipped_references(text: str, found: list[str]) -> None:
    assert [ref for _, ref in unresolved(text)] == found


def test_an_allowed_output_name_passes_only_in_its_file() -> None:
    line = '"report.md with --format markdown"'
    assert unresolved(line, rel="src/diffbench/cli/report.py") == []
    assert unresolved(line, rel="src/diffbench/server/app.py") == [(1, "report.md")]
