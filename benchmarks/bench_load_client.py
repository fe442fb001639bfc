"""Load-client benchmarks: dispatch precision, many requests in flight, large payloads.

Run: ``.venv/bin/python benchmarks/bench_load_client.py [--quick] [--seconds N]``

The server is a minimal asyncio HTTP/1.1 responder in a *separate process* (so it does not share the GIL
with the client), answering ``POST /v1/images/generations`` with a fixed body:

- ``noop``: an 8x8 PNG (the client requests 8x8, so the payload check passes);
- ``slow``: the same after ``--slow-delay`` seconds (default 12 s);
- ``large``: a random-noise PNG whose base64 is ~8 MB (1416x1416 RGB), decoded and size-checked by the client.

Each measured run is preceded by 0.5 s at 100 req/s on the same client (not counted) that opens a
connection in every pool shard.

Figures printed:

1. Client precision: open loop (constant schedule) at 100, 500 and 1000 req/s for N s (30 s; 5 s with
   ``--quick``): sent / target rate and client lag p50 / p99 (target at 500 req/s on one core:
   >= 99 % and p99 lag <= 5 ms).
2. Many in flight: 500 req/s for 10 s against the slow server (answers after 12 s), so 5,000 requests are
   outstanding at the end of dispatch (one connection each): errors, and lag p50/p99 in the first vs the
   last second (lag must not grow).
3. Large payloads: 20 req/s of ~8 MB base64 images, decoded; lag p99 vs a no-op run at the same rate in
   the same process (ratio).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import resource
import subprocess
import sys
import time

import numpy as np

# ----------------------------------------------------------------------------------------- server side


def _body(mode: str) -> bytes:
    from PIL import Image

    if mode == "large":
        rng = np.random.default_rng(0)
        img = Image.fromarray(rng.integers(0, 256, (1416, 1416, 3), dtype=np.uint8), "RGB")
    else:
        img = Image.new("RGB", (8, 8), (10, 20, 30))
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=1)
    return json.dumps({"created": 0, "data": [{"b64_json": base64.b64encode(buf.getvalue()).decode()}]}).encode()


class _Responder(asyncio.Protocol):
    response: bytes = b""
    delay_s: float = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1").lower()
            length = 0
            for line in head.split("\r\n"):
                if line.startswith("content-length:"):
                    length = int(line.split(":", 1)[1])
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length:]
            if self.delay_s:
                asyncio.get_running_loop().call_later(self.delay_s, self._reply)
            else:
                self._reply()

    def _reply(self) -> None:
        if not self.transport.is_closing():
            self.transport.write(self.response)


def serve(mode: str, delay_s: float) -> None:
    body = _body(mode)
    _Responder.response = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                           + str(len(body)).encode() + b"\r\n\r\n" + body)
    _Responder.delay_s = delay_s if mode == "slow" else 0.0
    _raise_nofile()

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_Responder, "127.0.0.1", 0, backlog=4096)
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


# ----------------------------------------------------------------------------------------- client side


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Server:
    def __init__(self, mode: str, delay_s: float = 10.0) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", mode, "--slow-delay", str(delay_s)],
                                     stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def run_open(url: str, rate: float, seconds: float, size: tuple[int, int] = (8, 8), timeout: float = 60.0):
    from diffbench.load.client import HttpBackend, RequestPlanner, Target, default_workload, run_open_loop
    from diffbench.load.schedules import constant

    async def go():
        backend = HttpBackend(Target(base_url=url, timeout_s=timeout))
        await backend.start()
        try:
            planner = RequestPlanner(default_workload(size[0], size[1], 1), ["p"], seed=0)
            # Prime: open a connection in every pool shard and import lazily loaded modules.
            prime = constant(100.0, 0.5)
            await run_open_loop(prime, planner.take(len(prime)), backend, offered_rate=100.0, duration_s=0.5)
            times = constant(rate, seconds)
            return await run_open_loop(times, planner.take(len(times)), backend, offered_rate=rate,
                                       duration_s=seconds)
        finally:
            await backend.close()

    return asyncio.run(go())


def _lag_ms(records, lo: float = -1.0, hi: float = 1e18) -> tuple[float, float]:
    lag = np.array([r.lag_s for r in records if r.sent_s is not None and lo <= r.intended_s < hi])
    if lag.size == 0:
        return float("nan"), float("nan")
    return float(np.percentile(lag, 50) * 1e3), float(np.percentile(lag, 99) * 1e3)


def _outcomes(records) -> str:
    counts: dict[str, int] = {}
    for r in records:
        counts[r.outcome] = counts.get(r.outcome, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def precision(seconds: float) -> None:
    from diffbench.load.summary import summarize_rate

    print(f"\n1. client precision: open loop, constant schedule, {seconds:g} s per rate, no-op server process")
    print(f"{'target':>8} {'sent/s':>9} {'ratio':>7} {'lag p50':>9} {'lag p99':>9}  outcomes")
    srv = Server("noop")
    try:
        for rate in (100.0, 500.0, 1000.0):
            run = run_open(srv.url, rate, seconds)
            s = summarize_rate(run.records, offered_rate=rate, duration_s=seconds)
            p50, p99 = _lag_ms(run.records)
            mark = ""
            if rate == 500.0:
                mark = "  target >= 99 %, p99 <= 5 ms: " + (
                    "met" if s.sent_rate / rate >= 0.99 and p99 <= 5.0 else "NOT met")
            print(f"{rate:8.0f} {s.sent_rate:9.1f} {s.sent_rate / rate:7.2%} {p50:7.2f}ms {p99:7.2f}ms"
                  f"  {_outcomes(run.records)}{mark}")
    finally:
        srv.close()


def many_in_flight(delay_s: float) -> None:
    rate, seconds = 500.0, 10.0
    print(f"\n2. many in flight: {rate:g} req/s for {seconds:g} s, server answers after {delay_s:g} s "
          f"(peak outstanding = {int(rate * min(seconds, delay_s))})")
    _raise_nofile()
    srv = Server("slow", delay_s)
    try:
        t = time.perf_counter()
        run = run_open(srv.url, rate, seconds, timeout=delay_s + 30)
        wall = time.perf_counter() - t
    finally:
        srv.close()
    first = _lag_ms(run.records, 0.0, 1.0)
    last = _lag_ms(run.records, seconds - 1.0, seconds)
    outstanding = sum(1 for r in run.records if r.sent_s is not None and r.sent_s <= seconds
                      and r.done_s is not None and r.done_s > seconds)
    print(f"requests {len(run.records)}  outcomes: {_outcomes(run.records)}  outstanding at the end of "
          f"dispatch: {outstanding}  wall {wall:.1f} s")
    print(f"lag p50/p99 first second {first[0]:.2f}/{first[1]:.2f} ms, last second {last[0]:.2f}/{last[1]:.2f} ms"
          f"  (p99 ratio last/first {last[1] / first[1]:.2f})")


def large_payloads(seconds: float) -> None:
    rate = 20.0
    print(f"\n3. large payloads: {rate:g} req/s for {seconds:g} s, ~8 MB base64 PNG per response, decoded")
    base_srv = Server("noop")
    try:
        base = run_open(base_srv.url, rate, seconds)
    finally:
        base_srv.close()
    srv = Server("large")
    try:
        run = run_open(srv.url, rate, seconds, size=(1416, 1416))
    finally:
        srv.close()
    b50, b99 = _lag_ms(base.records)
    l50, l99 = _lag_ms(run.records)
    lat = np.array([r.latency_from_send_s for r in run.records if r.outcome == "ok"])
    print(f"no-op baseline: lag p50/p99 {b50:.2f}/{b99:.2f} ms  ({_outcomes(base.records)})")
    print(f"8 MB payloads : lag p50/p99 {l50:.2f}/{l99:.2f} ms  ({_outcomes(run.records)}); "
          f"latency from send p50 {np.percentile(lat, 50) * 1e3:.1f} ms" if lat.size else "no ok request")
    print(f"lag p99 ratio large / no-op: {l99 / b99:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="5 s per rate instead of 30 s")
    ap.add_argument("--seconds", type=float, default=None, help="seconds per precision rate")
    ap.add_argument("--slow-delay", type=float, default=12.0, help="slow server delay (s)")
    ap.add_argument("--only", choices=("precision", "inflight", "large"), default=None)
    ap.add_argument("--serve", choices=("noop", "slow", "large"), default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.slow_delay)
        return
    seconds = args.seconds or (5.0 if args.quick else 30.0)
    if args.only in (None, "precision"):
        precision(seconds)
    if args.only in (None, "inflight"):
        many_in_flight(args.slow_delay)
    if args.only in (None, "large"):
        large_payloads(min(seconds, 10.0))


if __name__ == "__main__":
    main()
