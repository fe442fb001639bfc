"""``sweep --engine http``: one service per value (the option lives in the service's launch flags).

Two ``diffbench serve`` subprocesses on 127.0.0.1 (tiny-flux on the CPU, float32 and bfloat16) are the
baseline (``--url``) and the value (``--url-per-value``). The sweep warms and interleaves them like any
sweep; each point's quality is checked against scikit-image's PSNR over the stored outputs, and a URL
mapped to the wrong service (it reports another precision) is refused with one line.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from diffbench.cli.main import main

pytestmark = pytest.mark.e2e

slow = pytest.mark.slow


@pytest.fixture(scope="module")
def services() -> Iterator[tuple[str, str]]:
    from diffbench.engines.config import EngineConfig
    from diffbench.server.background import run_in_background
    from diffbench.server.config import ServerConfig

    with contextlib.ExitStack() as stack:
        fp32 = stack.enter_context(run_in_background(ServerConfig(), mode="subprocess"))
        bf16 = stack.enter_context(run_in_background(ServerConfig(engine=EngineConfig(dtype="bfloat16")),
                                                     mode="subprocess"))
        yield fp32, bf16


ARGS = ["--option", "precision", "--values", "bfloat16", "--width", "32", "--height", "32", "--steps", "3",
        "--num-prompts", "2", "--runs", "4", "--max-warmup", "8", "-q"]


def _images(directory: str) -> dict[str, np.ndarray]:
    from PIL import Image

    return {p.name: np.asarray(Image.open(p).convert("RGB")) for p in sorted(Path(directory).glob("*.png"))}


@slow
def test_sweep_over_two_services(services: tuple[str, str], tmp_path: Path) -> None:
    from skimage.metrics import peak_signal_noise_ratio

    from diffbench.store.runs import RunStore

    fp32, bf16 = services
    out, store = tmp_path / "c.json", tmp_path / "s.sqlite"
    rc = main(["sweep", "--engine", "http", "--url", fp32, "--url-per-value", bf16, *ARGS, "--store", str(store),
               "--json", str(out)])
    assert rc == 0
    result = json.loads(out.read_text())
    (point,) = result["points"]
    assert result["baseline"]["conditions"]["engine"] == "http"
    assert result["baseline"]["conditions"]["precision"] == "float32" and point["conditions"]["precision"] == "bfloat16"
    assert point["latency_s"]["n"] == 4 and result["schedule"] is not None
    assert set(result["warmup_s"]) == {"baseline", "bfloat16"} and all(result["warmup_s"].values())
    assert result["noise_floor"]["psnr"]["n_inf"] == 2  # the same service twice: identical pixels
    with RunStore.open(store) as st:
        base = _images(st.get_run(result["baseline"]["run_id"]).outputs_dir or "")
        cand = _images(st.get_run(point["run_id"]).outputs_dir or "")
    assert sorted(base) == sorted(cand) and len(base) == 2
    ref = sorted(peak_signal_noise_ratio(base[k], cand[k], data_range=255) for k in base)
    assert point["quality"]["psnr"]["min"] == pytest.approx(ref[0], rel=1e-6)
    assert point["quality"]["psnr"]["max"] == pytest.approx(ref[-1], rel=1e-6)
    assert np.isfinite(ref).all()  # bfloat16 changes pixels: a finite PSNR, not the identity


@slow
def test_a_url_mapped_to_the_wrong_service_is_refused(services: tuple[str, str], tmp_path: Path, capsys,
                                                       one_line_error) -> None:
    fp32, _ = services
    other_name = fp32.replace("127.0.0.1", "localhost")  # the float32 service again, under another name
    rc = main(["sweep", "--engine", "http", "--url", fp32, "--url-per-value", other_name, *ARGS, "--store",
               str(tmp_path / "s.sqlite")])
    one_line_error(rc, capsys.readouterr().err, 2,
                   [f"--url-per-value {other_name}", "reports precision='float32'", "--values bfloat16"])


def test_a_free_form_server_option_is_declared_not_verified(tmp_path: Path) -> None:
    """``--option`` may name any launch flag of the services; one they do not report is taken as declared,
    and the result says so. Two simulated services in threads (identical outputs: PSNR inf)."""
    from diffbench.engines.config import EngineConfig, SimParams
    from diffbench.server.background import run_in_background
    from diffbench.server.config import ServerConfig

    sim = SimParams(realtime=True, compile_s=0.0, jitter=0.0, tail_prob=0.0, step_s=0.001, text_encode_s=0.001,
                    vae_decode_s=0.001, other_s=0.001, launch_s=0.0)
    config = ServerConfig(engine=EngineConfig(engine="sim", sim=sim))
    out = tmp_path / "c.json"
    with run_in_background(config, mode="thread") as base, run_in_background(config, mode="thread") as other:
        rc = main(["sweep", "--engine", "http", "--url", base, "--option", "replicas", "--values", "2",
                   "--url-per-value", other, "--width", "64", "--height", "64", "--steps", "2", "--num-prompts", "2",
                   "--runs", "4", "--max-warmup", "6", "-q", "--store", str(tmp_path / "s.sqlite"), "--json", str(out)])
    assert rc == 0
    result = json.loads(out.read_text())
    (point,) = result["points"]
    assert result["field"] == "replicas" and point["value"] == "2"
    assert point["quality"]["psnr"]["n_inf"] == 2  # the simulated services give identical pixels
    assert any("replicas=2" in w and "does not report replicas" in w and "not verified" in w
               for w in result["warnings"])
