"""Overhead of diffbench.monitor's instrumentation on tiny-flux (prints figures; compare within one run).

tiny-flux at 256x256, 8 steps, CPU. Three interleaved arms in one process, each warm: ``bare`` (a plain
pipeline call), ``bare2`` (the same call again: the noise floor) and ``attached`` (the pipeline with
``diffbench.monitor.attach`` hooks recording a request, FLOPs cached after the first request). The order of
the arms rotates every round. Reported: the median of the per-round ratios attached/bare and, as the noise
floor, bare2/bare. Target: attached/bare <= 1.02. ``--rss-thread-arm`` adds the instrumentation with the
previous CPU memory method (a psutil thread sampling the resident set every 5 ms) to show what it cost.

Usage: python benchmarks/bench_monitor.py [--rounds N] [--size 256] [--steps 8] [--threads 1] [--rss-thread-arm]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: least contention)")
    ap.add_argument("--rss-thread-arm", action="store_true",
                    help="add an arm with the old 5 ms psutil sampling thread (where bench's 1.031 came from)")
    args = ap.parse_args()

    import torch

    from diffbench.engines.base import GenerationRequest
    from diffbench.engines.registry import EngineConfig, create_engine
    from diffbench.monitor import attach

    engine = create_engine(EngineConfig(model="tiny-flux", threads=args.threads))
    engine.start()
    engine.instrumentation.detach()  # the bare pipeline
    pipe = engine.pipe
    req = GenerationRequest(prompt="a lighthouse at dusk", height=args.size, width=args.size, steps=args.steps)

    def bare() -> float:
        kw = engine.pipeline_kwargs(req)
        t0 = time.perf_counter_ns()
        with torch.inference_mode():
            pipe(**kw)
        return (time.perf_counter_ns() - t0) / 1e9

    def attached() -> float:
        # attach/detach outside the timed call, so the bare arms run a pipeline with no hooks at all; the
        # FLOPs per forward are cached per denoiser, so only the first attached call replays a forward
        inst = attach(pipe, device="cpu", model="tiny-flux")
        kw = engine.pipeline_kwargs(req)
        t0 = time.perf_counter_ns()
        with torch.inference_mode():
            inst.run(kw, 1)
        t = (time.perf_counter_ns() - t0) / 1e9
        inst.detach()
        return t

    import diffbench.engines.instrument.memory as monmem

    def attached_rss_thread() -> float:
        """The old CPU memory method (a psutil sampling thread every 5 ms) instead of VmHWM at boundaries."""
        saved, monmem._HWM_OK = monmem._HWM_OK, False
        try:
            return attached()
        finally:
            monmem._HWM_OK = saved

    arms = {"bare": bare, "bare2": bare, "attached": attached}
    if args.rss_thread_arm:
        arms["rss-thread"] = attached_rss_thread
    for _ in range(3):
        for fn in arms.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in arms}
    names = list(arms)
    for i in range(args.rounds):
        order = names[i % len(names):] + names[: i % len(names)]
        for name in order:
            times[name].append(arms[name]())

    fixed_us, n_marks = _fixed_cost(args.steps)

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))

    load = os.getloadavg()
    print(f"== diffbench.monitor overhead (tiny-flux {args.size}x{args.size}, {args.steps} steps, CPU) ==")
    print(f"load average (1/5/15 min): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    print(f"rounds (interleaved, rotated order): {args.rounds}; torch threads: {torch.get_num_threads()}")
    for name in names:
        print(f"{name:9s} median: {statistics.median(times[name]) * 1e3:8.2f} ms")
    print(f"noise floor bare2/bare (median paired ratio): {ratio('bare2', 'bare'):.4f}")
    print(f"overhead attached/bare (median paired ratio) : {ratio('attached', 'bare'):.4f}  (target <= 1.02)")
    if "rss-thread" in times:
        print(f"old method: 5 ms RSS sampling thread / bare  : {ratio('rss-thread', 'bare'):.4f}")
    share = fixed_us / 1e6 / statistics.median(times["bare"])
    print(f"fixed cost of the hooks per request (no-op pipeline, {n_marks} timestamps): {fixed_us:.0f} us "
          f"= {share * 100:.3f} % of a bare tiny-flux request")


def _fixed_cost(steps: int, reps: int = 300) -> tuple[float, int]:
    """Microseconds the instrumentation adds to one request of a pipeline whose stages do nothing (the
    hooks, timestamps, VmHWM reads at stage boundaries, counters), median of ``reps`` paired calls."""
    import torch

    from diffbench.monitor import attach

    class Sched:
        def step(self, noise, t, x):  # noqa: ANN001, ANN201
            return x

    class Den(torch.nn.Module):
        def forward(self, hidden_states):  # noqa: ANN001, ANN201
            return hidden_states

    class Vae:
        def decode(self, z):  # noqa: ANN001, ANN201
            return z

    class Pipe:
        def __init__(self) -> None:
            self.transformer, self.scheduler, self.vae = Den(), Sched(), Vae()

        def encode_prompt(self) -> None:
            return None

        def __call__(self) -> torch.Tensor:
            self.encode_prompt()
            x = torch.zeros(1)
            for i in range(steps):
                x = self.scheduler.step(self.transformer(hidden_states=x), i, x)
            return self.vae.decode(x)

    bare, hooked = Pipe(), Pipe()
    inst = attach(hooked, device="cpu", flops=False)
    diffs = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        bare()
        t1 = time.perf_counter_ns()
        inst.run({}, 1)
        t2 = time.perf_counter_ns()
        diffs.append(((t2 - t1) - (t1 - t0)) / 1e3)
    inst.detach()
    return statistics.median(diffs), steps + 6


if __name__ == "__main__":
    main()
