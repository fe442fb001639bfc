"""One output that cannot be written never costs the others (issue 24, item 3): ``quality`` and ``sweep``
write ``--json`` and ``--csv`` each, then exit 6 naming the one that failed; no ``*.tmp`` is left.

The full disk is ``Path.write_text`` raising ``OSError(ENOSPC)`` for the one file (after creating it, as a
real full disk does)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest

from diffbench.cli.main import main


def _full_for(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    real = Path.write_text

    def write_text(self: Path, text: str, *args: object, **kw: object) -> int:
        if self.name in (name, name + ".tmp"):
            real(self, "")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, text, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", write_text)


def test_quality_json_on_a_full_disk_still_writes_the_csv(tmp_path: Path, monkeypatch, capsys) -> None:
    from PIL import Image

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    rng = np.random.default_rng(0)
    for i in range(2):
        img = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
        Image.fromarray(img).save(a / f"{i}.png")
        Image.fromarray(img).save(b / f"{i}.png")
    out, csv = tmp_path / "q.json", tmp_path / "q.csv"
    _full_for(monkeypatch, "q.json")
    rc = main(["quality", str(a), str(b), "--json", str(out), "--csv", str(csv), "-q"])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 6, err
    assert f"{out}: cannot write (No space left on device)" in err and "Traceback" not in err
    assert csv.read_text().count("\n") == 3  # header + 2 pairs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "q.csv"]  # no q.json, no q.json.tmp


SIM = dict(realtime=False, compile_s=0.0, tail_prob=0.0)


def test_sweep_csv_on_a_full_disk_still_writes_the_json(tmp_path: Path, monkeypatch, capsys) -> None:
    import diffbench.sweep.runner as runner
    from diffbench.engines.config import SimParams
    from diffbench.engines.registry import create_engine

    orig = runner.run_sweep

    def run(opts, store, **kw):  # the simulated engine instead of a pipeline
        return orig(opts, store, engine_factory=lambda cfg: create_engine(cfg.model_copy(update={
            "engine": "sim", "sim": SimParams(**SIM)})), **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "run_sweep", run)
    out, csv = tmp_path / "c.json", tmp_path / "c.csv"
    _full_for(monkeypatch, "c.csv")
    rc = main(["sweep", "--option", "precision", "--values", "bfloat16", "--height", "64", "--width", "64",
               "--steps", "4", "--num-prompts", "2", "--runs", "4", "--warmup", "0", "--store",
               str(tmp_path / "s.sqlite"), "--json", str(out), "--csv", str(csv), "-q"])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 6, err
    assert f"{csv}: cannot write (No space left on device)" in err and "Traceback" not in err
    assert [p["value"] for p in json.loads(out.read_text())["points"]] == ["bfloat16"]
    assert not csv.exists() and not (tmp_path / "c.csv.tmp").exists()
