"""Benchmark of `diffbench report` on a 100-run bench result (limits: ≤ 5 MB, ≤ 5 s on 2 cores).

1. Makes the result with a real `diffbench bench` run: `--engine sim --runs 100` (default, instant: the sim's
   clock is virtual) or `--tiny-flux`: tiny-flux at 64x64, 2 steps, 100 timed runs (a minute on 2 cores).
2. Times the report in-process, `--repeats` times after one warm-up build (matplotlib's first import and font
   cache are paid once per process, outside the numbers): load + build the document (figures) and render the
   HTML (SVG serialization), separately and together, min and median. The peer, measured in the same run, is
   reading and validating the same JSON (`load_result`), the floor any report pays.
   Also the whole command in a fresh process (`diffbench report`, imports included), 3 times.
3. Prints the HTML size and the generation time as ratios to the limits (< 1 passes).

The process is pinned to 2 CPUs where the machine has more (`os.sched_setaffinity`), so "on 2 cores" holds.

Usage: python benchmarks/bench_report.py [--tiny-flux] [--repeats N] [--markdown]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIZE_LIMIT_MB = 5.0
TIME_LIMIT_S = 5.0


def _pin_two_cores() -> str:
    if not hasattr(os, "sched_setaffinity"):
        return f"not pinned ({os.cpu_count()} CPUs; no sched_setaffinity here)"
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 2:
        os.sched_setaffinity(0, cpus[:2])
    return f"pinned to CPUs {sorted(os.sched_getaffinity(0))} of {os.cpu_count()}"


def make_result(out: Path, tiny_flux: bool) -> Path:
    from diffbench.cli.main import main

    args = (["--model", "tiny-flux", "--height", "64", "--width", "64", "--steps", "2", "--warmup", "2"]
            if tiny_flux else ["--engine", "sim"])
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # the bench's own console table is not this benchmark's
        rc = main(["bench", *args, "--runs", "100", "--json", str(out), "-q"])
    if rc != 0:
        raise SystemExit(f"bench failed (exit {rc})")
    print(f"bench result        : {out.name} ({' '.join(args)} --runs 100) in {time.perf_counter() - t0:.1f} s")
    return out


def _stats(xs: list[float]) -> str:
    return f"min {min(xs) * 1e3:8.1f} ms · median {statistics.median(xs) * 1e3:8.1f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny-flux", action="store_true", help="bench tiny-flux (64x64, 2 steps) instead of sim")
    ap.add_argument("--repeats", type=int, default=5, help="timed report generations (default 5)")
    ap.add_argument("--markdown", action="store_true", help="also time --format markdown (PNG files)")
    a = ap.parse_args()
    pinned = _pin_two_cores()

    from diffbench.report.build import build_document
    from diffbench.report.html_render import render_html
    from diffbench.report.kinds import ReportOptions
    from diffbench.report.loader import load_result
    from diffbench.report.markdown_render import render_markdown

    with tempfile.TemporaryDirectory() as tmp:
        path = make_result(Path(tmp) / "bench100.json", a.tiny_flux)
        opts = ReportOptions()
        render_html(build_document([path], opts))  # warm-up: imports, font cache
        load_s, build_s, render_s, total_s, size = [], [], [], [], 0
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            load_result(path)
            t1 = time.perf_counter()
            doc = build_document([path], opts)
            t2 = time.perf_counter()
            html = render_html(doc)
            t3 = time.perf_counter()
            (Path(tmp) / "report.html").write_text(html, encoding="utf-8")
            size = (Path(tmp) / "report.html").stat().st_size
            load_s.append(t1 - t0)
            build_s.append(t2 - t1)
            render_s.append(t3 - t2)
            total_s.append(t3 - t1)
        cli_s = []
        for _ in range(3):  # the whole command as a user runs it: a fresh process, imports included
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "diffbench.cli.main", "report", str(path), "-o",
                            str(Path(tmp) / "cli.html"), "-q"], check=True, capture_output=True)
            cli_s.append(time.perf_counter() - t0)
        md_s: list[float] = []
        for _ in range(a.repeats if a.markdown else 0):
            t0 = time.perf_counter()
            render_markdown(build_document([path], opts), Path(tmp) / "md" / "report.md")
            md_s.append(time.perf_counter() - t0)

    load = os.getloadavg()
    med = statistics.median(total_s)
    print("== diffbench report: a 100-run bench result ==")
    print(f"CPUs                : {pinned}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"repeats             : {a.repeats} (after one warm-up build)")
    print(f"peer: load JSON     : {_stats(load_s)}  (read + validate, the floor of any report)")
    print(f"build document      : {_stats(build_s)}  (figures)")
    print(f"render HTML         : {_stats(render_s)}  (SVG serialization)")
    print(f"generation          : {_stats(total_s)}  = {med / statistics.median(load_s):.0f}x the JSON load")
    print(f"diffbench report    : {_stats(cli_s)}  (fresh process, 3 runs, imports included)")
    if md_s:
        print(f"markdown + PNGs     : {_stats(md_s)}")
    print(f"HTML size           : {size / 1e6:.3f} MB")
    print(f"size / limit        : {size / 1e6 / SIZE_LIMIT_MB:.3f}  (limit {SIZE_LIMIT_MB:g} MB; < 1 passes)")
    print(f"time / limit        : {med / TIME_LIMIT_S:.3f}  (median generation / {TIME_LIMIT_S:g} s; < 1 passes)")
    print(f"command / limit     : {statistics.median(cli_s) / TIME_LIMIT_S:.3f}  (median fresh-process command)")


if __name__ == "__main__":
    main()
