"""Ledger and planner speed: evaluations per second, plan wall time, and the cold CLI against `python -c pass`.

Run: .venv/bin/python benchmarks/bench_ledger.py [--reps 5]
Prints ratios measured in the same run; asserts that neither command imports torch (nor diffusers).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

LEDGER = ["ledger", "--model", "flux.1-dev", "--size", "1024x1024", "--steps", "28", "--gpu", "h100-sxm"]
PLAN = ["plan", "--model", "flux.1-dev", "--size", "1024x1024", "--steps", "28", "--gpu", "h100-sxm",
        "--gpus-per-node", "8", "--slo-p99", "3", "--qps", "100", "--quality-budget", "30"]


def _cold(argv: list[str], reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        times.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {proc.stderr}")
    return statistics.median(times)


def _heavy_modules(cli_args: list[str]) -> list[str]:
    code = ("import sys, contextlib, io\n"
            "from diffbench.cli.main import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()): rc = main({cli_args!r})\n"
            "assert rc == 0, rc\n"
            "print(','.join(m for m in ('torch', 'diffusers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=5, help="repetitions of each cold CLI run (median reported)")
    ap.add_argument("--seconds", type=float, default=2.0, help="time budget for the evaluations/s loop")
    args = ap.parse_args()

    from diffbench.ledger import LedgerConfig, evaluate, load_catalog
    from diffbench.plan import PlanConfig, plan

    cat = load_catalog()
    cfg = LedgerConfig(model="flux.1-dev", width=1024, height=1024, steps=28, gpu="h100-sxm")
    evaluate(cat, cfg)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < args.seconds:
        evaluate(cat, cfg)
        n += 1
    rate = n / (time.perf_counter() - t0)
    pc = PlanConfig(model="flux.1-dev", width=1024, height=1024, steps=28, gpu="h100-sxm", slo_p99_s=3, qps=100,
                    quality_budget_db=30)
    plan_times = []
    for _ in range(max(args.reps, 5)):
        t1 = time.perf_counter()
        plan(cat, pc)
        plan_times.append(time.perf_counter() - t1)
    from diffbench.ledger.fit import catalog_cases, fit_cases, validate

    cases = [c for c in catalog_cases(cat) if c.anchor.outlier is None]
    fit_times, loo_times = [], []
    for _ in range(max(args.reps, 5)):
        t1 = time.perf_counter()
        fit_cases(cat, cases)
        fit_times.append(time.perf_counter() - t1)
        t1 = time.perf_counter()
        validate(cat)
        loo_times.append(time.perf_counter() - t1)
    print(f"ledger evaluations per second: {rate:,.0f} (n={n})")
    print(f"time-model fit over {len(cases)} anchors (median of {len(fit_times)}): "
          f"{statistics.median(fit_times) * 1e3:.2f} ms; --validate (all leave-one-out fits): "
          f"{statistics.median(loo_times) * 1e3:.1f} ms = {statistics.median(loo_times) / statistics.median(fit_times):.1f}× one fit")
    print(f"plan wall time (median of {len(plan_times)}): {statistics.median(plan_times) * 1e3:.1f} ms")

    cli = [sys.executable, "-m", "diffbench.cli.main"]
    base = _cold([sys.executable, "-c", "pass"], args.reps)
    led = _cold([*cli, *LEDGER], args.reps)
    pln = _cold([*cli, *PLAN], args.reps)
    print(f"cold `python -c pass`:     {base:.3f} s (median of {args.reps})")
    print(f"cold `diffbench ledger`:   {led:.3f} s = {led / base:.1f}× python -c pass")
    start = _cold([sys.executable, "-c", "import diffbench.cli.main, diffbench.cli.plan, diffbench.plan.derive, "
                   "diffbench.plan.render\nfrom diffbench.ledger.catalog import load_catalog\nload_catalog()"],
                  args.reps)
    print(f"cold `diffbench plan`:     {pln:.3f} s = {pln / base:.1f}× python -c pass (+{pln - base:.3f} s): start-up, "
          f"then the plan (ledger evaluations, the queueing simulation: {statistics.median(plan_times):.3f} s warm "
          "in-process) and the tables")
    print(f"`diffbench plan` start-up (CLI, planner and catalog loaded, cold): {start:.3f} s = "
          f"+{start - base:.3f} s over python -c pass (target ≤ +0.3 s)")
    for name, argv in (("ledger", LEDGER), ("plan", PLAN)):
        heavy = _heavy_modules(argv)
        print(f"heavy modules imported by `diffbench {name}`: {heavy or 'none'}")
        assert not heavy, f"diffbench {name} imported {heavy}"


if __name__ == "__main__":
    main()
