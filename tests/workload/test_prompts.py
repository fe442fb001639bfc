"""The one prompt-file format: bench, sweep and load read the same file into the same prompts."""

from __future__ import annotations

from pathlib import Path

import pytest

from diffbench.engines.config import EngineConfig
from diffbench.errors import InputError
from diffbench.workload.prompts import read_prompts

PLAIN = "# a comment line\n  first prompt  \n\n   # an indented comment\nsecond # not a comment\n\nthird\n"
WANT = ["first prompt", "second # not a comment", "third"]


def _bench(path: Path) -> list[str]:
    from diffbench.bench.session import BenchOptions, build_workload
    from diffbench.engines.sim import SimEngine

    cfg = EngineConfig(engine="sim", model="sim-flux")
    reqs = build_workload(BenchOptions(engine=cfg, prompts_file=path, seeds=[0]), SimEngine(cfg).start())
    return list(dict.fromkeys(r.prompt for r in reqs))


def _sweep(path: Path) -> list[str]:
    from diffbench.engines.sim import SimEngine
    from diffbench.sweep.models import SweepOptions
    from diffbench.sweep.runner import requests_for

    cfg = EngineConfig(engine="sim", model="sim-flux")
    opts = SweepOptions(engine=cfg, axis="precision", values=["float16"], height=64, width=64, steps=2,
                        seeds=[0], prompts_file=path)
    return list(dict.fromkeys(r.prompt for r in requests_for(opts, SimEngine(cfg).start())))


def _load(path: Path) -> list[str]:
    from diffbench.load.client.workload import load_prompts

    return load_prompts(path)


@pytest.mark.parametrize("name, text, want", [
    ("p.txt", PLAIN, WANT),
    ("p.jsonl", '{"text": "#hashtag prompt"}\n\n{"text": "two", "id": 3}\n', ["#hashtag prompt", "two"]),
    ("p.txt", '{"text": "sniffed as JSONL"}\n', ["sniffed as JSONL"]),
])
def test_bench_sweep_and_load_read_the_same_file_identically(tmp_path: Path, name: str, text: str,
                                                             want: list[str]) -> None:
    f = tmp_path / name
    f.write_text(text, encoding="utf-8")
    assert read_prompts(f) == want
    assert _bench(f) == want
    assert _sweep(f) == want
    assert _load(f) == want


def test_only_comments_is_no_prompt(tmp_path: Path) -> None:
    f = tmp_path / "c.txt"
    f.write_text("# only\n# comments\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"--prompts .*c\.txt holds no prompt \(one prompt per line \('#' for"):
        read_prompts(f)


def test_missing_file_names_the_option(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"--prompts .*nope\.txt: file not found"):
        read_prompts(tmp_path / "nope.txt")
