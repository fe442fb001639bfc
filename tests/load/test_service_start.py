"""The cold start of the reference service ``load`` starts itself (``--serve-engine``): ready and first ok
answer, measured from the call that started it (load/run.py: service_start)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diffbench.cli.main import main
from diffbench.engines.config import SimParams
from diffbench.load.knee import LoadResult
from diffbench.load.run import service_start, service_start_line


def test_service_start_from_the_clock_reads() -> None:
    s = service_start((10.0, 12.5), 18.25)
    assert (s.ready_s, s.first_ok_s, s.note) == (2.5, 8.25, None)
    assert service_start_line(s) == ("reference service cold start: ready 2.5 s after start, first ok answer "
                                     "8.25 s after start (the first warm-up request)")
    none = service_start((10.0, 12.5), None)
    assert none.first_ok_s is None and none.note is not None and "--warmup 0" in none.note
    assert none.note in service_start_line(none)


@pytest.mark.e2e  # the sim service in a child process; its first request pays the sim's compile (real sleep)
def test_load_against_its_own_sim_service_reports_the_cold_start(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "load.json"
    rc = main(["load", "--serve-engine", "sim", "--rates", "2", "--duration", "2", "--size", "64x64", "--steps", "2",
               "--warmup", "1", "--json", str(out), "-q"])
    assert rc == 0
    r = LoadResult.model_validate(json.loads(out.read_text()))
    s = r.service_start
    assert s is not None and s.first_ok_s is not None and s.ready_s > 0
    # the service has no --warmup of its own: the load's first warm-up request pays the sim's first-call compile
    assert s.first_ok_s - s.ready_s >= SimParams().compile_s
    assert service_start_line(s) in capsys.readouterr().out

