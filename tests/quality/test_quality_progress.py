"""``diffbench quality`` draws pairs done / total and pairs/s on stderr, never on stdout (issue 12, item 1)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from diffbench.cli.quality import progress_text

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _dirs(tmp_path: Path, n: int = 6) -> tuple[Path, Path]:
    from PIL import Image

    rng = np.random.default_rng(0)
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    b.mkdir()
    for i in range(n):
        img = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
        noisy = np.clip(img.astype(np.int16) + rng.integers(-6, 7, img.shape), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(a / f"{i:02d}.png")
        Image.fromarray(noisy).save(b / f"{i:02d}.png")
    return a, b


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DIFFBENCH_PROGRESS"}
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")  # this checkout's code, not another install
    env["COLUMNS"] = "120"
    env.update(extra)
    return env


def _quality(a: Path, b: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "diffbench.cli.main", "quality", str(a), str(b), "--no-ms-ssim", "--workers", "1",
           *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(**env), timeout=120)


def test_progress_text_counts_pairs_and_rate() -> None:
    assert progress_text(3, 12, 1.5) == "quality: 3/12 pairs  2.0 pairs/s  ETA 4.5s"
    assert progress_text(0, 12, 0.0).startswith("quality: 0/12 pairs  ? pairs/s  ETA ?")


@pytest.mark.e2e
@pytest.mark.parametrize("extra", [[], ["--json", "{tmp}/q.json"]])
def test_progress_goes_to_stderr_and_stdout_stays_clean(tmp_path: Path, extra: list[str]) -> None:
    a, b = _dirs(tmp_path)
    args = [x.replace("{tmp}", str(tmp_path)) for x in extra]
    plain = _quality(a, b, *args, DIFFBENCH_PROGRESS="never")
    plain_json = (tmp_path / "q.json").read_text() if args else None
    shown = _quality(a, b, *args, DIFFBENCH_PROGRESS="always")
    assert plain.returncode == shown.returncode == 0, shown.stderr
    assert shown.stdout == plain.stdout  # the table is byte for byte what it is without progress
    assert "pairs" not in plain.stderr
    assert "quality: 6/6 pairs" in shown.stderr and "pairs/s" in shown.stderr
    assert "pairs/s" not in shown.stdout
    if args:
        # the JSON differs from the first run only by nothing: same pairs, same numbers
        assert (tmp_path / "q.json").read_text() == plain_json


def _run_on_tty(a: Path, b: Path, *args: str) -> tuple[int, str, str]:
    """Run quality with stderr on a pseudo-terminal (so the TTY rule applies), stdout piped."""
    master, slave = pty.openpty()
    cmd = [sys.executable, "-m", "diffbench.cli.main", "quality", str(a), str(b), "--no-ms-ssim", "--workers", "1",
           *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, text=True, env=_env())
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    out = proc.stdout.read() if proc.stdout else ""
    rc = proc.wait(timeout=120)
    os.close(master)
    return rc, out, b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.e2e
def test_terminal_gets_the_line_unless_quiet(tmp_path: Path) -> None:
    a, b = _dirs(tmp_path)
    rc, out, err = _run_on_tty(a, b)
    assert rc == 0 and "quality: 6/6 pairs" in err and "pairs/s" not in out
    rc, out_q, err_q = _run_on_tty(a, b, "--quiet")
    assert rc == 0 and "pairs/s" not in err_q and "pairs/s" not in out_q
    # non-TTY stderr (a pipe) and no DIFFBENCH_PROGRESS: no line either
    piped = _quality(a, b)
    assert piped.returncode == 0 and "pairs/s" not in piped.stderr
