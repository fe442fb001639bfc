"""The same report as Markdown (for a PR comment): GitHub tables plus PNG files in a folder beside it.

``render_markdown(doc, out)`` writes ``out`` (e.g. ``report.md``) and ``<stem>_files/<block>.png`` for every
plot and image, referenced by relative paths, so the folder can be attached or committed as is.
"""

from __future__ import annotations

from pathlib import Path

from diffbench.report.document import Document, Facts, ImageGrid, Note, Plot, Table
from diffbench.report.figures import close, to_png


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(_cell(h) for h in headers) + " |",
           "|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers))) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return out


def files_dir(out: Path) -> Path:
    """Where the PNG files of ``out`` go: ``<stem>_files`` beside it."""
    return out.with_name(out.stem + "_files")


def render_markdown(doc: Document, out: Path) -> list[Path]:
    """Write ``out`` and its PNG files; return every path written (the .md first). Closes the figures.

    Raises:
        InputError: a file cannot be written.
    """
    from diffbench.core.jsonio import write_text_atomic
    from diffbench.errors import InputError

    doc.check_ids()
    folder = files_dir(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{folder}: cannot create the folder for the report's PNG files ({exc})") from exc
    written: list[Path] = []

    def save(name: str, png: bytes) -> str:
        path = folder / f"{name}.png"
        try:
            path.write_bytes(png)
        except OSError as exc:
            raise InputError(f"{path}: cannot write ({exc})") from exc
        written.append(path)
        return f"{folder.name}/{path.name}"

    lines = [f"# {doc.title}", ""]
    if doc.sources:
        lines += ["Built from: " + ", ".join(f"`{s}`" for s in doc.sources), ""]
    for sec in doc.sections:
        lines += [f"## {sec.title}", ""]
        for b in sec.blocks:
            if isinstance(b, Plot):
                try:
                    rel = save(b.id, to_png(b.figure))
                finally:
                    close(b.figure)
                lines += [f"**{b.title}**", "", f"![{b.title}]({rel})", ""]
                if b.caption:
                    lines += [f"_{b.caption}_", ""]
            elif isinstance(b, Table):
                lines += [f"**{b.title}**", ""] + _md_table(b.headers, b.rows) + [""]
                if b.caption:
                    lines += [f"_{b.caption}_", ""]
            elif isinstance(b, Facts):
                lines += [f"**{b.title}**", ""] + _md_table(["", ""], [[k, v] for k, v in b.items]) + [""]
            elif isinstance(b, Note):
                lines += [("> **warning:** " if b.level == "warn" else "> ") + b.text, ""]
            elif isinstance(b, ImageGrid):
                lines += [f"**{b.title}**", ""]
                for i, r in enumerate(b.rows):
                    imgs = " ".join(f"![{c.alt or c.label}]({save(f'{b.id}-{i}-{j}', c.png)})"
                                    for j, c in enumerate(r.cells))
                    nums = ", ".join(f"{k} {v}" for k, v in r.numbers)
                    lines += [f"{r.title}: {nums}", "", imgs, ""]
                if b.caption:
                    lines += [f"_{b.caption}_", ""]
            else:
                raise TypeError(f"unknown report block {type(b).__name__}")
    write_text_atomic(out, "\n".join(lines).rstrip() + "\n")
    return [out, *written]
