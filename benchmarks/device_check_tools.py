"""The Python parts of ``benchmarks/device_check.sh`` (one subcommand each; every figure also as JSON).

- ``gpu-id``: the ledger catalog's GPU id of this machine's first GPU (nvidia-smi's name, matched with
  :func:`diffbench.ledger.calibrate.gpu_matches`, e.g. "NVIDIA H100 80GB HBM3" -> ``h100-sxm``); prints an
  empty line when there is no GPU or no catalog entry matches.
- ``overhead``: the cost of bench's instrumentation. diffbench has no switch that turns it off, so the same
  pipeline is called here bare (``pipe(**kwargs)``, then one device synchronize) and through the very
  instrumentation a ``diffbench bench`` run attaches (:func:`diffbench.engines.instrument.pipeline.attach`
  with the engine's arguments: CUDA events at stage and step boundaries, CUDA memory counters, FLOP
  counting), interleaved with a second bare arm (the noise floor), the order rotated every round. Reported:
  the medians and the median paired ratio hooked/bare beside bare2/bare. Attaching and detaching stay
  outside the timed calls.
- ``oom``: out of memory on the serving path, without Prometheus (``diffbench drill vae`` needs it and runs
  tiny-flux on the CPU). ``diffbench serve`` of ``--model`` with VAE tiling measures the peak of a BIG
  request; a second ``serve --no-vae-tiling`` is given a memory limit between that peak and the untiled one
  — on CUDA a real one (``torch.cuda.set_per_process_memory_fraction`` in the serve process, so the
  allocator raises ``torch.OutOfMemoryError``), on a CPU the injected ``--memory-budget`` — and the BIG
  request is sent while ``/health`` is polled. Passes when the BIG request answers 507, ``/health`` stays 200
  and the next small request succeeds.
- ``load``: the load client's scaling row: ``diffbench load --workers W`` for W in 1, 2, 4, 8 against the
  no-op server (:mod:`diffbench.load.client.noop_server`, an 8x8 PNG answer), constant arrivals at a few
  rates; what it shows is the client's own ceiling per worker count, not a service's.
- ``summary OUT``: the key figures of the JSON files in OUT as Markdown lines (stdout).

Usage::

    python benchmarks/device_check_tools.py gpu-id
    python benchmarks/device_check_tools.py overhead --model DIR --device cuda --dtype bfloat16 --size 1024 \\
        --steps 4 --runs 8 --json OUT/overhead.json
    python benchmarks/device_check_tools.py oom --model DIR --device cuda --dtype bfloat16 --small 512x512 \\
        --big 3072x3072 --workdir OUT/oom --json OUT/oom.json
    python benchmarks/device_check_tools.py load --out OUT --workers 1,2,4,8 --rates 2000,4000,8000,16000
    python benchmarks/device_check_tools.py summary OUT
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

GIB = 2**30


# -- gpu-id --------------------------------------------------------------------------------------------------
def match_gpu(name: str) -> str:
    """Catalog GPU id of an nvidia-smi device name ("NVIDIA H100 80GB HBM3" -> ``h100-sxm``); "" if none."""
    from diffbench.ledger import load_catalog
    from diffbench.ledger.calibrate import gpu_matches

    found = [g for g in load_catalog().gpus if gpu_matches(g, name)]
    if len(found) > 1:  # "H100 NVL" is also an h100 (token test): the more specific id wins
        found = [g for g in found if g != "h100-sxm"] or found
    return found[0] if found else ""


def gpu_id() -> str:
    """Catalog GPU id of nvidia-smi's first GPU; "" when none matches (or no nvidia-smi)."""
    from diffbench.core.env import capture_env

    gpus = capture_env().gpus
    if not gpus:
        print("gpu-id: no GPU (nvidia-smi missing or silent)", file=sys.stderr)
        return ""
    gid = match_gpu(gpus[0].name)
    print(f"gpu-id: {gpus[0].name!r} -> {gid or 'not in the ledger catalog (diffbench ledger --help)'}",
          file=sys.stderr)
    return gid


# -- overhead ------------------------------------------------------------------------------------------------
def overhead(model: str, device: str, dtype: str, size: int, steps: int, runs: int) -> dict[str, Any]:
    """Bare vs instrumented pipeline calls (seconds); see the module docstring."""
    import torch

    from diffbench.engines.base import GenerationRequest
    from diffbench.engines.instrument.pipeline import attach
    from diffbench.engines.registry import EngineConfig, create_engine

    engine = create_engine(EngineConfig(engine="diffusers", model=model, device=device, dtype=dtype))
    engine.start()
    engine.instrumentation.detach()  # the bare arms run the pipeline with no hook at all
    pipe = engine.pipe
    req = GenerationRequest(prompt="a lighthouse at dusk", height=size, width=size, steps=steps)
    cuda = device.startswith("cuda")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def bare() -> float:
        kw = engine.pipeline_kwargs(req)
        sync()
        t0 = time.perf_counter_ns()
        with torch.inference_mode():
            pipe(**kw)
        sync()
        return (time.perf_counter_ns() - t0) / 1e9

    def hooked() -> float:
        inst = attach(pipe, device=device, model=model)  # what DiffusersEngine.start attaches for bench
        kw = engine.pipeline_kwargs(req)
        sync()
        t0 = time.perf_counter_ns()
        with torch.inference_mode():
            inst.run(kw, 1)
        sync()
        t = (time.perf_counter_ns() - t0) / 1e9
        inst.detach()
        return t

    arms = {"bare": bare, "bare2": bare, "hooked": hooked}
    for fn in arms.values():  # warm up every arm (allocator, kernels' autotuning, FLOP counting's first pass)
        fn()
    times: dict[str, list[float]] = {k: [] for k in arms}
    names = list(arms)
    for i in range(runs):
        for name in names[i % 3:] + names[: i % 3]:
            times[name].append(arms[name]())

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))

    return {"model": model, "device": device, "dtype": dtype, "size": size, "steps": steps, "runs": runs,
            "median_s": {k: statistics.median(v) for k, v in times.items()},
            "ratio_hooked_bare": ratio("hooked", "bare"), "noise_floor_bare2_bare": ratio("bare2", "bare"),
            "samples_s": times}


# -- oom -----------------------------------------------------------------------------------------------------
_SERVE_CAPPED = (  # `diffbench serve` in a process whose CUDA allocator may use only DC_CUDA_MEMORY_FRACTION
    "import os, sys, torch\n"
    "torch.cuda.set_per_process_memory_fraction(float(os.environ['DC_CUDA_MEMORY_FRACTION']))\n"
    "from diffbench.cli.main import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def _start(work: Path, name: str, args: list[str], env: dict[str, str] | None = None,
           timeout_s: float = 600.0) -> Any:
    """``diffbench serve ARGS`` on a free loopback port (capped when ``env`` sets the CUDA fraction)."""
    import os

    from diffbench.monitor.drills.harness import Proc, Service, cli_command, wait_until
    from diffbench.monitor.promserver import free_port

    port = free_port()
    serve = ["serve", "--port", str(port), "--log-level", "warning", *args]
    argv = [sys.executable, "-c", _SERVE_CAPPED, *serve] if env else cli_command(*serve)
    proc = Proc(name, argv, work / f"{name}.log")
    old = dict(os.environ)
    os.environ.update(env or {})
    try:
        proc.start()
    finally:
        os.environ.clear()
        os.environ.update(old)
    svc = Service(proc, port)
    try:
        wait_until(lambda: svc.health() == 200, timeout_s, f"{name} /health 200", poll_s=0.5, proc=proc)
    except BaseException:
        proc.stop()
        raise
    return svc


def oom(model: str, device: str, dtype: str, small: str, big: str, steps: int, work: Path) -> dict[str, Any]:
    """The out-of-memory check (see the module docstring); returns its figures and ``passed``."""
    work.mkdir(parents=True, exist_ok=True)
    cuda = device.startswith("cuda")
    common = ["--engine", "diffusers", "--model", model, "--device", device, "--dtype", dtype,
              "--default-size", small, "--default-steps", str(steps)]
    res: dict[str, Any] = {"model": model, "device": device, "small": small, "big": big, "checks": {}}
    svc = _start(work, "serve-measure", [*common, "--vae-tiling"])
    try:
        s = svc.generate(small, steps=steps, seed=1, timeout=600)
        t = svc.generate(big, steps=1, seed=1, timeout=900)
    finally:
        svc.proc.stop()
    if not (s.ok and t.ok and s.peak_memory_bytes and t.peak_memory_bytes):
        raise RuntimeError(f"measuring failed: {small} HTTP {s.status}, {big} tiled HTTP {t.status}: "
                           f"{str(t.body)[:400]}")
    p_small, p_tiled = int(s.peak_memory_bytes), int(t.peak_memory_bytes)
    res.update(peak_small_bytes=p_small, peak_tiled_bytes=p_tiled, latency_tiled_s=t.latency_s)
    env: dict[str, str] | None = None
    if cuda:  # absolute allocator peaks: allow the tiled peak plus its growth over the small one (>= 1 GiB)
        import torch

        total = torch.cuda.get_device_properties(torch.device(device)).total_memory
        limit = p_tiled + max(GIB, p_tiled - p_small)
        env = {"DC_CUDA_MEMORY_FRACTION": f"{min(1.0, limit / total):.6f}"}
        res.update(limit_bytes=limit, limit_kind="cuda memory fraction", device_total_bytes=total)
        args = [*common, "--no-vae-tiling"]
    else:  # growth over the request's start (RSS): the drill's rule, twice the tiled growth
        limit = 2 * p_tiled
        res.update(limit_bytes=limit, limit_kind="injected --memory-budget")
        args = [*common, "--no-vae-tiling", "--memory-budget", str(limit)]
    svc = _start(work, "serve-limited", args, env)
    try:
        first = svc.generate(small, steps=steps, seed=1, timeout=600)
        res["checks"]["small request ok before"] = first.ok
        health: list[int] = []
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                health.append(svc.health())
                stop.wait(0.5)

        th = threading.Thread(target=poll, daemon=True)
        th.start()
        try:
            b = svc.generate(big, steps=1, seed=1, timeout=900)
        finally:
            stop.set()
            th.join(5)
        msg = str(b.error.get("message", b.body if not b.ok else ""))
        res.update(big_status=b.status, big_message=msg[:400], big_latency_s=b.latency_s,
                   health_polls=len(health))
        res["checks"][f"{big} untiled answered 507"] = b.status == 507
        res["checks"]["/health stayed 200"] = bool(health) and all(h == 200 for h in health)
        nxt = svc.generate(small, steps=steps, seed=2, timeout=600)
        res["checks"]["next small request ok"] = nxt.ok and svc.health() == 200
        res["checks"]["process alive"] = svc.proc.alive
    finally:
        svc.proc.stop()
    res["passed"] = all(res["checks"].values())
    return res


# -- load ----------------------------------------------------------------------------------------------------
def load_scaling(out: Path, workers: list[int], rates: str, duration_s: float) -> None:
    """The no-op server (:mod:`diffbench.load.client.noop_server`) in its own process, then one
    ``diffbench load --arrival constant --rates RATES --workers W`` sweep per W, each into
    ``out/load-workersW.json``. Raises CalledProcessError when a sweep fails."""
    import subprocess

    from diffbench.load.client.noop_server import ServerProcess
    from diffbench.monitor.drills.harness import cli_command

    with ServerProcess(0) as srv:
        for w in workers:
            argv = cli_command("load", "--url", srv.url, "--dialect", "openai", "--size",
                               f"{srv.size[0]}x{srv.size[1]}", "--arrival", "constant", "--rates", rates,
                               "--duration", f"{duration_s:g}", "--workers", str(w), "--quiet",
                               "--json", str(out / f"load-workers{w}.json"))
            print("$", " ".join(argv), flush=True)
            subprocess.run(argv, check=True)


# -- summary -------------------------------------------------------------------------------------------------
def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _bench_lines(bench: dict[str, Any], ledger: dict[str, Any] | None) -> list[str]:
    s = bench["shapes"][0]
    lat, step = s["latency_s"], s.get("step_s") or {}
    st = (s.get("stages_s") or {}).get("median") or {}
    stages = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in st.items() if k != "end_to_end" and v)
    gpu = ((bench.get("env") or {}).get("gpus") or [{}])[0].get("name") or bench["conditions"].get("device")
    lines = [f"- bench {s['shape']} on {gpu}: p50 {lat['p50']:.3f} s (n={lat['n']}), per-step median "
             f"{step.get('median', 0) * 1e3:.1f} ms; stage medians (ms) {stages}"]
    if not ledger:
        return lines
    mfu = ledger.get("measured_mfu")
    lines.append(f"- ledger {ledger['model_name']} on {ledger['gpu_name']}: predicted "
                 f"{ledger['total_time_s']:.3f} s per request (assumed MFU {ledger['assumed_mfu']:.2f}); measured p50 -> MFU "
                 f"{mfu if mfu is None else round(mfu, 3)}")
    pred_den = next((x["time_s"] for x in ledger["stages"] if x["name"] == "denoise"), None)
    if mfu and pred_den and step.get("median"):
        # MFU = FLOPs / (seconds x peak): the GPU's peak from the ledger's own request figures
        peak = ledger["total_flops"] / (ledger["config"]["measured_s"] * mfu)
        step_flops = (ledger["forward"]["linear"] + ledger["forward"]["attention"]) * ledger["forwards_per_step"]
        pred_step, meas = pred_den / ledger["steps"], step["median"]
        lines.append(f"- per step: measured {meas * 1e3:.1f} ms vs predicted {pred_step * 1e3:.1f} ms (ratio "
                     f"{meas / pred_step:.2f}); denoiser MFU {step_flops / meas / peak:.3f} "
                     f"({step_flops / 1e12:.1f} TFLOP per step)")
    return lines


def _derive_lines(dv: dict[str, Any]) -> list[str]:
    lines = [f"- derive: {len(dv.get('steps', []))} steps recorded{' (partial)' if dv.get('partial') else ''}"]
    for s in dv.get("steps", []):
        m = s.get("measured") or {}
        sp = (f" measured {m['speedup']:.3f}x (CI {m['ci'][0]:.3f}-{m['ci'][1]:.3f})"
              if m.get("speedup") and m.get("ci") else "")
        pr = f", predicted {s['predicted_speedup']:.2f}x" if s.get("predicted_speedup") else ""
        lines.append(f"  - {s.get('stage')} {s.get('stage_name')} · {s.get('candidate')}: "
                     f"{s.get('decision')}{sp}{pr}")
    if isinstance(dv.get("final"), dict):
        lines.append(f"  - final: {dv['final'].get('message')}")
    return lines


def _load_lines(rows: list[tuple[int, dict[str, Any]]]) -> list[str]:
    lines = ["- load client against the no-op server, constant arrivals; per offered rate: ok rate (lag p99); "
             "sustained = the highest offered rate with ok >= 99.5 % of it and lag p99 <= 2 ms:"]
    for w, ld in rows:
        rates = ld.get("rates") or []
        good = [r["offered_rate"] for r in rates if _sustained(r)]
        cells = ", ".join(f"{r['offered_rate']:,.0f} -> {r['ok_rate']:,.0f} "
                          f"({(r.get('lag_s') or {}).get('p99', 0) * 1e3:.1f} ms)" for r in rates)
        lines.append(f"  - --workers {w}: sustained {max(good) if good else 0:,.0f} req/s; {cells}")
    return lines


def summary(out: Path) -> list[str]:
    """Markdown lines with the key figures of the JSON files a device check wrote in ``out``."""
    lines: list[str] = []
    bench = _load(out / "bench.json")
    if bench and bench.get("shapes"):
        lines += _bench_lines(bench, _load(out / "ledger.json"))
    oo = _load(out / "oom.json")
    if oo:
        checks = "; ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in oo["checks"].items())
        verdict = "PASSED" if oo.get("passed") else "FAILED"
        lines.append(f"- out of memory on serve ({oo['device']}, {oo['limit_kind']} "
                     f"{oo['limit_bytes'] / GIB:.2f} GiB; {oo['big']} tiled peak {oo['peak_tiled_bytes'] / GIB:.2f} "
                     f"GiB): {oo['big']} untiled -> HTTP {oo.get('big_status')}; {checks} -> {verdict}")
    ov = _load(out / "overhead.json")
    if ov:
        m = ov["median_s"]
        lines.append(f"- instrumentation overhead ({ov['size']}², {ov['steps']} steps, {ov['runs']} rounds): "
                     f"hooked/bare median paired ratio {ov['ratio_hooked_bare']:.4f}, noise floor (bare2/bare) "
                     f"{ov['noise_floor_bare2_bare']:.4f}; medians bare {m['bare'] * 1e3:.1f} ms, hooked "
                     f"{m['hooked'] * 1e3:.1f} ms")
    rows = [(w, ld) for w in (1, 2, 4, 8) if (ld := _load(out / f"load-workers{w}.json"))]
    if rows:
        lines += _load_lines(rows)
    dv = _load(out / "derive" / "derive.json")
    if dv:
        lines += _derive_lines(dv)
    for d in (_load(out / "drill-vae.json") or {}).get("drills", []):
        failed = [str(c.get("name")) for c in d.get("checks", []) if not c.get("passed")]
        lines.append(f"- drill {d['drill']} (tiny-flux on the CPU, a local Prometheus): "
                     f"{'PASSED' if d['passed'] else 'FAILED'} in {d['wall_s']} s"
                     f"{'; failed checks: ' + ', '.join(failed) if failed else ''}")
    return lines


def _sustained(row: dict[str, Any]) -> bool:
    """An open-loop row of ``diffbench load --json`` kept up: ok >= 99.5 % of offered and lag p99 <= 2 ms."""
    lag = (row.get("lag_s") or {}).get("p99")
    return row["ok_rate"] >= 0.995 * row["offered_rate"] and lag is not None and lag <= 0.002


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("gpu-id")
    for name in ("overhead", "oom"):
        p = sub.add_parser(name)
        p.add_argument("--model", required=True)
        p.add_argument("--device", default="cuda")
        p.add_argument("--dtype", default="bfloat16")
        p.add_argument("--json", type=Path, required=True)
    ov = sub.choices["overhead"]
    ov.add_argument("--size", type=int, default=1024)
    ov.add_argument("--steps", type=int, default=4)
    ov.add_argument("--runs", type=int, default=8)
    om = sub.choices["oom"]
    om.add_argument("--small", default="512x512")
    om.add_argument("--big", default="3072x3072")
    om.add_argument("--steps", type=int, default=2)
    om.add_argument("--workdir", type=Path, required=True)
    ld = sub.add_parser("load")
    ld.add_argument("--out", type=Path, required=True)
    ld.add_argument("--workers", default="1,2,4,8")
    ld.add_argument("--rates", default="2000,4000,8000,16000")
    ld.add_argument("--duration", type=float, default=2.0)
    sm = sub.add_parser("summary")
    sm.add_argument("out", type=Path)
    a = ap.parse_args(argv)
    # `timeout` sends SIGTERM to this process only: exit through the finally blocks, which stop the serve
    # processes and the no-op server (else they would hold the GPU during the next part)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if a.cmd == "gpu-id":
        print(gpu_id())
    elif a.cmd == "load":
        load_scaling(a.out, [int(w) for w in a.workers.split(",")], a.rates, a.duration)
    elif a.cmd == "summary":
        print("\n".join(summary(a.out)))
    else:
        if a.cmd == "overhead":
            res = overhead(a.model, a.device, a.dtype, a.size, a.steps, a.runs)
        else:
            res = oom(a.model, a.device, a.dtype, a.small, a.big, a.steps, a.workdir)
        a.json.write_text(json.dumps(res, indent=1), encoding="utf-8")
        print(json.dumps({k: v for k, v in res.items() if k != "samples_s"}, indent=1))
        if a.cmd == "oom" and not res["passed"]:
            sys.exit(1)


if __name__ == "__main__":
    main()
