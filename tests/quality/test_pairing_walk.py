"""Path pairing walks a folder tree once: symlink loops, aliases and hard links never count a file twice."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from PIL import Image

from diffbench.cli.main import main
from diffbench.quality.pairing import pair_outputs, scan_outputs


def _tree(root: Path, seed: int = 0) -> Path:
    """``root/a.png`` with a link to its own folder (``loop -> .``) and one to its parent (``up -> ..``)."""
    root.mkdir(parents=True)
    img = np.random.default_rng(seed).integers(0, 256, (24, 24, 3), dtype=np.uint8)
    Image.fromarray(img).save(root / "a.png")
    (root / "loop").symlink_to(".", target_is_directory=True)
    (root / "up").symlink_to("..", target_is_directory=True)
    return root


def test_symlink_loops_give_one_pair_and_a_note(tmp_path: Path, capsys) -> None:
    ref, cand = _tree(tmp_path / "ref"), _tree(tmp_path / "cand")
    rc = main(["quality", str(ref), str(cand), "--no-ms-ssim", "--json", str(tmp_path / "q.json")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    import json

    rep = json.loads((tmp_path / "q.json").read_text())
    assert rep["n_pairs"] == 1 and [p["key"] for p in rep["pairs"]] == ["a.png"]
    assert rep["errors"] == []
    text = " ".join(cap.out.split())
    for side in (ref, cand):
        assert f"{side}/loop: symlink to {side.resolve()}, a folder that contains it (a loop); not followed" in text
        assert f"{side}/up: symlink to {tmp_path.resolve()}, a folder that contains it (a loop)" in text
    assert "Traceback" not in cap.err + cap.out


def test_alias_folder_and_file_links_count_once_real_path_wins(tmp_path: Path) -> None:
    root = tmp_path / "r"
    (root / "z_real").mkdir(parents=True)
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(root / "z_real" / "x.png")
    (root / "a_alias").symlink_to("z_real", target_is_directory=True)  # sorts first, but is a link
    (root / "b_link.png").symlink_to(root / "z_real" / "x.png")
    os.link(root / "z_real" / "x.png", root / "c_hard.png")
    notes: list[str] = []
    found, errors = scan_outputs(root, notes)
    assert set(found) < {"c_hard.png", "z_real/x.png"}  # a real path, never the link b_link.png
    assert len(found) == 1 and errors == []
    assert any("a_alias: the same folder as" in n for n in notes)
    assert sum("the same file as" in n for n in notes) == 2


def test_a_link_to_a_folder_outside_the_tree_is_followed(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(outside / "o.png")
    for side in ("b", "c"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "run").symlink_to(outside, target_is_directory=True)
    res = pair_outputs(tmp_path / "b", tmp_path / "c")
    assert [p.key for p in res.pairs] == ["run/o.png"] and res.errors == [] and res.warnings == []
