"""``diffbench simulate``: queueing simulation of c devices behind a FCFS queue, open or closed loop."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from diffbench.core.linesink import LineSink
    from diffbench.core.progress import LiveLine
    from diffbench.load.simulator import SimProgress, SimRun


def _progress_text(p: SimProgress, elapsed_s: float) -> str:
    """The live line: ``simulate: rate 2/5 (1.2 req/s)  12,345 of ~40,000 requests simulated  1.3s``."""
    kind = "user count" if p.label.endswith("users") else "rate"
    head = f"simulate: done, {p.rows} {kind}(s)" if p.finished else f"simulate: {kind} {p.row}/{p.rows} ({p.label})"
    return f"{head}  {p.done:,} of ~{p.expected:,.0f} requests simulated  {elapsed_s:.1f}s"


def _progress_callback(line: LiveLine) -> Callable[[SimProgress], None]:
    def update(p: SimProgress) -> None:
        line.update(_progress_text(p, line.elapsed_s()))

    return update


def _jsonl_writer(sink: LineSink) -> Callable[[SimRun], None]:
    """A callback writing each simulated run's records as RequestRecord-shaped JSON lines (ids run on).

    A write that fails (a full disk) is warned once by ``sink``; the simulation goes on without it."""
    next_id = 0

    def write(run: SimRun) -> None:
        nonlocal next_id
        rate = "null" if run.offered_rate is None else repr(float(run.offered_rate))
        extra = "" if run.users is None else f',"users":{run.users}'
        lines = []
        for a, d in zip(run.intended.tolist(), run.done.tolist(), strict=True):
            lines.append(f'{{"id":{next_id},"rate":{rate}{extra},"intended_s":{a!r},"sent_s":{a!r},'
                         f'"done_s":{d!r},"outcome":"ok"}}\n')
            next_id += 1
        sink.write_lines(lines)

    return write


def register(app: typer.Typer) -> None:
    @app.command()
    def simulate(
        devices: int = typer.Option(1, "--devices", min=1, help="Identical devices behind one FCFS queue."),
        service: str | None = typer.Option(
            None, "--service",
            help='Service time in seconds, e.g. "3.0*N(1,0.02)+0.8*B(0.1)" (3.0 s x Normal(1, 0.02) plus 0.8 s '
                 'with probability 0.1), "const(2.5)", "exp(3.0)", "U(2,4)" or "2.5".'),
        service_from: Path | None = typer.Option(
            None, "--service-from", help="Resample latencies of a measured run (bench .json or load .jsonl)."),
        mode: str = typer.Option("open", "--mode", help="open (arrivals on a schedule) or closed (N users)."),
        rates: str | None = typer.Option(None, "--rates", help="Open loop: offered rates in req/s, e.g. 0.6,1,1.2."),
        users: str | None = typer.Option(None, "--users", help="Closed loop: user counts, e.g. 2,4,8,16."),
        duration: float | None = typer.Option(
            None, "--duration", help="Seconds of arrivals per rate / user count (default 600; a trace: its span)."),
        arrival: str = typer.Option("poisson", "--arrival", help="constant, poisson, gamma, ramp or trace."),
        burstiness: float | None = typer.Option(
            None, "--burstiness", help="Gamma shape (with --arrival gamma): 1 = Poisson, < 1 burstier."),
        ramp: str | None = typer.Option(None, "--ramp", help="Linear ramp START:END in req/s (runs once)."),
        trace: Path | None = typer.Option(None, "--trace", help="Replay arrival timestamps from a file."),
        think: str | None = typer.Option(None, "--think", help="Closed-loop think time, same syntax as --service."),
        slo: float | None = typer.Option(None, "--slo", help="SLO on p99 latency from arrival, seconds."),
        seed: int = typer.Option(0, "--seed", help="Seed for arrivals and service times."),
        json_path: Path | None = typer.Option(None, "--json", help="Write the sweep result (JSON)."),
        jsonl_path: Path | None = typer.Option(None, "--jsonl", help="Write every simulated request (JSONL)."),
        mkdir: bool = typer.Option(False, "--mkdir", help="Create missing parent directories of --json and "
                                   "--jsonl (default: a missing directory is an error)."),
        max_requests: int = typer.Option(1_000_000, "--max-requests", min=1,
                                         help="Refuse a rate / user count that would simulate more requests "
                                              "than this (checked before anything is drawn)."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No live progress line on stderr (drawn only "
                                   "when stderr is a terminal; DIFFBENCH_PROGRESS=always|never overrides)."),
    ) -> None:
        """Simulate c devices with a FCFS queue under open- or closed-loop load; print the per-rate table."""
        import math

        from diffbench.core import interrupt
        from diffbench.core.console import make_console
        from diffbench.core.jsonio import write_json_atomic
        from diffbench.core.linesink import LineSink
        from diffbench.core.outpath import check_output_file
        from diffbench.core.progress import LiveLine
        from diffbench.errors import UsageError
        from diffbench.load.simulator import SimConfig, service_of, simulate_sweep
        from diffbench.queueing.schedules import parse_int_list, parse_rate_list, spec_from_cli
        from diffbench.queueing.service_time import parse_service
        from diffbench.report.load_table import print_sweep

        if json_path is not None:
            check_output_file(json_path, "--json", mkdir=mkdir)
        if jsonl_path is not None:
            check_output_file(jsonl_path, "--jsonl", mkdir=mkdir)
        m = mode.strip().lower()
        if m not in ("open", "closed"):
            raise UsageError(f"--mode {mode!r}: use open or closed")
        if slo is not None and not (math.isfinite(slo) and slo > 0):
            raise UsageError(f"--slo must be a finite number of seconds > 0, got {slo:g}")
        if seed < 0:
            raise UsageError(f"--seed must be >= 0 (a numpy seed), got {seed}")
        if duration is None:
            duration = 600.0
            if trace is not None and m == "open":
                from diffbench.queueing.schedules import trace as read_trace

                times = read_trace(trace)
                duration = float(times[-1]) * times.size / (times.size - 1) if times.size > 1 else 1.0
        rate_list: list[float] = []
        user_list: list[int] = []
        if m == "open":
            if users is not None:
                raise UsageError("--users is for --mode closed; open loop takes --rates")
            schedule = spec_from_cli(arrival=arrival, duration_s=duration, burstiness=burstiness,
                                     ramp_text=ramp, trace_path=None if trace is None else str(trace), seed=seed)
            if rates is not None:
                rate_list = parse_rate_list(rates)
            elif schedule.kind not in ("ramp", "trace"):
                raise UsageError("open loop needs --rates R1,R2,... (requests per second)")
        else:
            if rates is not None or ramp is not None or trace is not None or burstiness is not None \
                    or arrival.strip().lower() != "poisson":
                raise UsageError("--rates/--arrival/--burstiness/--ramp/--trace are for --mode open; closed loop "
                                 "takes --users (and --think)")
            if users is None:
                raise UsageError("closed loop needs --users N1,N2,...")
            user_list = parse_int_list(users)
            schedule = spec_from_cli(arrival="poisson", duration_s=duration, seed=seed)
        if think is not None and m != "closed":
            raise UsageError("--think applies to --mode closed")
        config = SimConfig(
            devices=devices, service=service, service_from=None if service_from is None else str(service_from),
            mode=m, rates=rate_list, users=user_list, schedule=schedule, duration_s=duration, think=think,
            slo_s=slo, seed=seed, max_requests=max_requests,
        )
        service_of(config)  # a bad --service/--service-from/--think is an error before --jsonl is opened
        if config.think:
            parse_service(config.think, option="--think")
        console = make_console()
        sink = LineSink(jsonl_path, "--jsonl") if jsonl_path is not None else None
        try:
            with LiveLine.for_cli(quiet) as line:
                on_progress = _progress_callback(line) if line.enabled else None
                result = simulate_sweep(config, on_run=_jsonl_writer(sink) if sink is not None else None,
                                        on_progress=on_progress)
        except KeyboardInterrupt:
            typer.secho(f"interrupted ({interrupt.interrupt_name()}) before the first row finished: --json was "
                        "not written", fg="red", err=True)
            raise typer.Exit(interrupt.exit_code()) from None
        finally:
            if sink is not None:
                sink.close()
        print_sweep(result, console, title=f"simulate · {m} loop · {devices} device(s)")
        if json_path is not None:
            write_json_atomic(json_path, result.model_dump())
            console.print(f"wrote {json_path}" + (" (partial: interrupted)" if result.interrupted else ""))
        if sink is not None and not sink.error:
            console.print(f"wrote {jsonl_path}")
        if result.interrupted:
            typer.secho(f"interrupted ({interrupt.interrupt_name()}): {len(result.rates)} row(s) finished; the "
                        "table" + (f" and {json_path}" if json_path else "") + " cover those rows",
                        fg="red", err=True)
            raise typer.Exit(interrupt.exit_code())
        if sink is not None:
            sink.check()  # a --jsonl that failed mid-run: exit 6, after the table and --json


__all__ = ["register"]
