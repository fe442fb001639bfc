"""``diffbench load``: open- or closed-loop load test of a diffusion service, with a rate sweep and the knee.

Without ``--url`` it starts the reference service (``diffbench serve``) on loopback and targets it.
Heavy imports (aiohttp, the service) happen inside the command.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from diffbench.errors import OutputError
    from diffbench.load.client.profile import ProfileRun
    from diffbench.load.client.vllm_compat import VllmOptions
    from diffbench.load.knee import LoadResult

API_KEY_ENV = "DIFFBENCH_API_KEY"
MAX_REQUESTS = 200_000
"""Default ``--max-requests`` per rate: every request is kept as a record (~1.6 kB) for the summary, so
200,000 requests hold ~0.3 GB; a larger schedule is refused unless asked for."""


def register(app: typer.Typer) -> None:
    @app.command("load")
    def load(
        url: str | None = typer.Option(None, "--url", help="Service base URL (e.g. http://host:8000). "
                                       "Without it the reference service is started on 127.0.0.1."),
        dialect: str | None = typer.Option(None, "--dialect", help="openai | vllm-omni | vllm-omni-chat | sglang "
                                           "(routes and fields: README, dialect table). Default: vllm-omni."),
        mode: str = typer.Option("open", "--mode", help="open (arrival schedule) | closed (N users)."),
        rates: str | None = typer.Option(None, "--rates", help="Open loop: req/s list '0.5,1,2', or 'auto' "
                                         "(default: closed-loop capacity probe, then up to 1.2x capacity)."),
        request_rate: str | None = typer.Option(None, "--request-rate", help="One rate (req/s), as vllm bench "
                                                "serve; 'inf' sends --num-requests requests at once."),
        users: str = typer.Option("1,2,4", "--users", help="Closed loop: user counts '1,2,4'."),
        duration: float = typer.Option(30.0, "--duration", help="Seconds per rate / user count."),
        num_requests: int | None = typer.Option(None, "--num-requests", help="Open loop: stop each rate after "
                                                "N requests or at --duration, whichever comes first."),
        num_prompts: int | None = typer.Option(None, "--num-prompts", help="Alias of --num-requests "
                                               "(vllm bench serve)."),
        arrival: str = typer.Option("poisson", "--arrival", help="poisson | constant | gamma."),
        burstiness: float | None = typer.Option(None, "--burstiness", help="Gamma shape (1 = Poisson)."),
        seed: int = typer.Option(0, "--seed", help="Seed of schedules and the workload mix."),
        slo: float | None = typer.Option(None, "--slo", help="Latency objective (s, from intended arrival) "
                                         "for goodput and the knee (= --goodput latency:S)."),
        goodput: list[str] = typer.Option([], "--goodput", help="Good-request constraints in seconds, "
                                          "'latency:10 queue_wait:2' (also ttfb, lag, latency_from_send, "
                                          "stage.NAME); all must hold."),
        max_inflight: int | None = typer.Option(None, "--max-inflight", help="Client in-flight cap; waiting "
                                                "is reported as client queue time."),
        max_concurrency: int | None = typer.Option(None, "--max-concurrency", help="Alias of --max-inflight "
                                                   "(vllm bench serve)."),
        workers: int = typer.Option(1, "--workers", help="Load processes (each one event loop; the schedule "
                                    "is split between them)."),
        ray: str | None = typer.Option(None, "--ray", help="Run the --workers N load workers as Ray actors "
                                       "(SPREAD across nodes): 'local' (a private cluster on this machine), "
                                       "'auto' or HOST:PORT of a head node; needs the ray extra."),
        think_time: float = typer.Option(0.0, "--think-time", help="Closed loop: seconds between requests."),
        timeout: float = typer.Option(600.0, "--timeout", help="Per-request deadline in seconds from the "
                                      "send (video: create+polls+download). Printed in the report."),
        drain: float = typer.Option(10.0, "--drain", help="Seconds in-flight requests get after Ctrl-C."),
        warmup: int = typer.Option(1, "--warmup", help="Unrecorded warm-up requests per distinct shape."),
        workload: Path | None = typer.Option(None, "--workload", help="Workload file (YAML/JSON)."),
        prompts: Path | None = typer.Option(None, "--prompts", help="Prompt file: one prompt per line, or "
                                       "AIPerf's JSONL rows {\"text\": ...}."),
        size: str = typer.Option("256x256", "--size", help="WIDTHxHEIGHT when no --workload."),
        steps: int = typer.Option(4, "--steps", help="Steps when no --workload."),
        frames: int | None = typer.Option(None, "--frames", help="Frames (video jobs) when no --workload."),
        poll_interval: float = typer.Option(0.25, "--poll-interval", help="Video jobs: the longest poll "
                                            "interval (s); polls start 10 ms apart and grow 1.25x up to it."),
        delete_abandoned: bool = typer.Option(False, "--delete-abandoned", help="DELETE video jobs the "
                                              "client gave up on (default: leave them running)."),
        header: list[str] = typer.Option([], "--header", help="Extra header 'Name: value' (repeatable)."),
        api_key: str | None = typer.Option(None, "--api-key", help=f"Bearer token (or ${API_KEY_ENV})."),
        insecure: bool = typer.Option(False, "--insecure", help="Do not verify TLS certificates."),
        no_decode: bool = typer.Option(False, "--no-decode", help="Skip decoding images (sizes unchecked)."),
        jsonl: Path | None = typer.Option(None, "--jsonl", help="Write one record per request as it ends."),
        json_out: Path | None = typer.Option(None, "--json", help="Write the sweep result (JSON)."),
        csv_out: Path | None = typer.Option(None, "--csv", help="Write one CSV row per rate / user count."),
        mkdir: bool = typer.Option(False, "--mkdir", help="Create missing parent directories of --json, "
                                   "--jsonl and --csv (default: a missing directory is an error)."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No live progress line (shown only when "
                                   "stderr is a terminal) and no per-run lines; tables and errors stay."),
        max_requests: int = typer.Option(MAX_REQUESTS, "--max-requests", help="Refuse a rate whose schedule "
                                         "holds more requests than this (each kept request costs ~1.6 kB)."),
        serve_engine: str = typer.Option("diffusers", "--serve-engine", help="Engine of the local service "
                                         "(no --url): diffusers | sim."),
        serve_model: str = typer.Option("tiny-flux", "--serve-model", help="Model of the local service."),
        scrape: str | None = typer.Option(None, "--scrape", help="The service's /metrics URL (a base URL gets "
                                          "/metrics; 'local' = the reference service started without --url): "
                                          "scraped during the run, the server-side view is put beside each row."),
        scrape_interval: float = typer.Option(1.0, "--scrape-interval", help="Seconds between scrapes of "
                                              "--scrape (on their own thread)."),
        trace: Path | None = typer.Option(None, "--trace", help="Replay a trace: CSV/JSONL rows with timestamp "
                                          "(s), width/height or size, steps, frames, prompt, seed, slo_s; or one "
                                          "timestamp per line. Each row is sent at its timestamp with its shape."),
        trace_speed: float = typer.Option(1.0, "--trace-speed", help="Replay the trace this many times faster."),
        slo_scale: float | None = typer.Option(None, "--slo-scale", help="Per-request SLOs for requests without "
                                               "an slo_s: warm-up latency scaled by area x frames x steps, times "
                                               "this factor (vLLM-Omni's rule; its default is 3)."),
        # vllm bench serve's names (README, "vllm bench serve names"; diffbench.load.client.vllm_compat)
        base_url: str | None = typer.Option(None, "--base-url", help="Alias of --url (vllm bench serve)."),
        model: str | None = typer.Option(None, "--model", help="Model name sent in every request (all dialects; "
                                         "overrides the workload's model:)."),
        backend: str | None = typer.Option(None, "--backend", help="vllm bench serve's request format, mapped "
                                           "onto --dialect (openai, vllm, openai-chat, sglang, ...)."),
        endpoint: str | None = typer.Option(None, "--endpoint", help="Route (vllm bench serve); must be the "
                                            "dialect's (/v1/chat/completions alone selects vllm-omni-chat)."),
        save_result: bool = typer.Option(False, "--save-result", help="Write the result JSON where vllm bench "
                                         "serve would (--result-dir, --result-filename)."),
        result_dir: str | None = typer.Option(None, "--result-dir", help="Directory of --save-result (created)."),
        result_filename: str | None = typer.Option(None, "--result-filename", help="File name of --save-result."),
        percentile_metrics: str | None = typer.Option(None, "--percentile-metrics", help="e2el (send to last "
                                                      "byte) and/or latency (from arrival): printed in ms."),
        metric_percentiles: str | None = typer.Option(None, "--metric-percentiles", help="Percentiles of "
                                                      "--percentile-metrics among 50,90,99,99.9 (default 99)."),
    ) -> None:
        """Load-test a diffusion service: latency from intended arrival, goodput, knee."""
        from diffbench.load.client.vllm_compat import VllmOptions, resolve_dialect, resolve_url

        vllm = VllmOptions(base_url=base_url, model=model, backend=backend, endpoint=endpoint,
                           save_result=save_result, result_dir=result_dir, result_filename=result_filename,
                           percentile_metrics=percentile_metrics, metric_percentiles=metric_percentiles)
        url = resolve_url(url, base_url)
        dialect = resolve_dialect(dialect or "vllm-omni", dialect is not None, backend, endpoint)
        opts = LoadOptions(
            vllm=vllm, url=url, dialect=dialect, mode=mode, rates=rates, users=users, duration=duration,
            request_rate=request_rate, num_requests=num_requests, num_prompts=num_prompts,
            goodput=list(goodput), max_concurrency=max_concurrency, workers=workers, ray=ray,
            csv_out=str(csv_out) if csv_out else None, quiet=quiet,
            arrival=arrival, burstiness=burstiness, seed=seed, slo=slo, max_inflight=max_inflight,
            think_time=think_time, timeout=timeout, drain=drain, warmup=warmup,
            workload=str(workload) if workload else None, prompts=str(prompts) if prompts else None,
            size=size, steps=steps, frames=frames, poll_interval=poll_interval,
            delete_abandoned=delete_abandoned, headers=list(header),
            api_key=api_key or os.environ.get(API_KEY_ENV), insecure=insecure, no_decode=no_decode,
            jsonl=str(jsonl) if jsonl else None, json_out=str(json_out) if json_out else None,
            serve_engine=serve_engine, serve_model=serve_model, mkdir=mkdir, max_requests=max_requests,
            scrape=scrape, scrape_interval=scrape_interval,
            trace=str(trace) if trace else None, trace_speed=trace_speed, slo_scale=slo_scale,
        )
        run_load_command(opts)


@dataclass
class LoadOptions:
    """The command's options, as given (validated by :func:`run_load_command`)."""

    url: str | None = None
    dialect: str = "vllm-omni"
    mode: str = "open"
    rates: str | None = None
    users: str = "1,2,4"
    duration: float = 30.0
    arrival: str = "poisson"
    burstiness: float | None = None
    seed: int = 0
    slo: float | None = None
    max_inflight: int | None = None
    think_time: float = 0.0
    timeout: float = 600.0
    drain: float = 10.0
    warmup: int = 1
    workload: str | None = None
    prompts: str | None = None
    size: str = "256x256"
    steps: int = 4
    frames: int | None = None
    poll_interval: float = 0.25
    delete_abandoned: bool = False
    headers: list[str] = field(default_factory=list)
    api_key: str | None = None
    insecure: bool = False
    no_decode: bool = False
    jsonl: str | None = None
    json_out: str | None = None
    serve_engine: str = "diffusers"
    serve_model: str = "tiny-flux"
    mkdir: bool = False
    max_requests: int = MAX_REQUESTS
    request_rate: str | None = None
    num_requests: int | None = None
    num_prompts: int | None = None
    goodput: list[str] = field(default_factory=list)
    max_concurrency: int | None = None
    workers: int = 1
    ray: str | None = None
    csv_out: str | None = None
    quiet: bool = False
    scrape: str | None = None
    scrape_interval: float = 1.0
    trace: str | None = None
    trace_speed: float = 1.0
    slo_scale: float | None = None
    vllm: VllmOptions | None = None


def _seconds(name: str, value: float | None, *, zero_ok: bool = False) -> None:
    """Refuse a time option that is not finite (nan, inf) or not > 0 (>= 0 with ``zero_ok``).

    Raises:
        UsageError: naming the option and the value.
    """
    import math

    from diffbench.errors import UsageError

    if value is None:
        return
    if not math.isfinite(value):
        raise UsageError(f"{name} must be a finite number of seconds, got {value:g}")
    if value < 0 or (value == 0 and not zero_ok):
        raise UsageError(f"{name} must be {'>= 0' if zero_ok else '> 0'} seconds, got {value:g}")


_OPTION_OF_FIELD = {"width": "--size", "height": "--size", "steps": "--steps", "frames": "--frames"}


def _cli_workload(size: str, steps: int, frames: int | None) -> object:
    """The one-shape workload of ``--size/--steps/--frames``; a bad value is a one-line error naming the
    option and the bound (never pydantic's multi-line dump)."""
    from pydantic import ValidationError

    from diffbench.errors import UsageError
    from diffbench.load.client.workload import default_workload, parse_size

    try:
        w, h = parse_size(size)
    except ValueError as exc:
        raise UsageError(f"--size: {exc}") from None
    try:
        return default_workload(width=w, height=h, steps=steps, frames=frames)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][-1]) if err["loc"] else "?"
        option = _OPTION_OF_FIELD.get(name, f"--{name}")
        shown = size if option == "--size" else err.get("input")
        raise UsageError(f"{option} {shown}: {name} {err['msg'].lower()}") from None


def check_request_count(expected: float, what: str, limit: int) -> None:
    """Refuse a schedule of more than ``limit`` requests before anything is allocated.

    Raises:
        UsageError: ``expected`` (the schedule's mean request count) is above ``limit``.
    """
    from diffbench.errors import UsageError

    if expected > limit:
        raise UsageError(f"{what} schedules ~{expected:.3g} requests, above --max-requests {limit:,}; "
                         "lower the rate or the duration, or raise --max-requests if you mean it")


def _one_of(a_name: str, a: object, b_name: str, b: object) -> tuple[str, object]:
    """(the option name used, its value) of an option and its alias; both with different values is an
    error naming both.

    Raises:
        UsageError: both given with different values.
    """
    from diffbench.errors import UsageError

    if a is not None and b is not None and a != b:
        raise UsageError(f"{a_name} {a} and {b_name} {b} disagree ({b_name} is an alias of {a_name}); give one")
    return (a_name, a) if a is not None or b is None else (b_name, b)


def _rates(o: LoadOptions, num_requests: int | None) -> list[float] | None:
    """The open-loop rates of ``--rates`` or ``--request-rate`` (None: auto; ``[inf]``: a burst).

    Raises:
        UsageError: both options, a bad value, or ``inf`` without ``--num-requests``.
    """
    import math

    from diffbench.errors import UsageError
    from diffbench.queueing.schedules import parse_rate_list

    if o.rates is not None and o.request_rate is not None:
        raise UsageError(f"--rates {o.rates} and --request-rate {o.request_rate} both set the rate; give one "
                         "(--request-rate R is --rates R)")
    if o.request_rate is not None:
        text = o.request_rate.strip().lower()
        if o.mode == "closed":
            raise UsageError("--request-rate applies to the open loop; a closed loop is set by --users")
        if text in ("inf", "infinity"):
            if num_requests is None:
                raise UsageError("--request-rate inf sends every request at once and needs --num-requests N "
                                 "(or --num-prompts N)")
            return [math.inf]
        try:
            float(text)
        except ValueError:
            if "," not in text:
                raise UsageError(f"--request-rate: {o.request_rate!r} is not a number; use e.g. --request-rate 2 "
                                 "(req/s) or --request-rate inf") from None
        rates = parse_rate_list(o.request_rate, "--request-rate")
        if len(rates) != 1:
            raise UsageError(f"--request-rate takes one rate, got {o.request_rate!r}; use --rates for a list")
        return rates
    text = o.rates if o.rates is not None else "auto"
    return None if text.strip().lower() == "auto" else parse_rate_list(text, "--rates")


def _check_workers(n: int) -> None:
    """Warn (stderr) when more load processes than CPUs are asked for: they would share cores, and the
    client, not the service, could become the bottleneck."""
    cpus = os.cpu_count() or 1
    if n > cpus:
        typer.secho(f"warning: --workers {n} is more than the {cpus} CPUs of this machine; load processes "
                    "will share cores", fg="yellow", err=True)


def _conditions_extra(cfg: object) -> dict[str, str]:
    """Report conditions of the stop rule, the goodput definition and the worker count."""
    import math

    from diffbench.load.client.profile import ProfileConfig
    from diffbench.load.goodput import describe

    assert isinstance(cfg, ProfileConfig)
    if cfg.rates is not None and any(math.isinf(r) for r in cfg.rates):
        stop = f"num_requests {cfg.num_requests} (a burst at t=0; the rates count over the time it took)"
    elif cfg.num_requests is not None and cfg.mode == "open":
        stop = (f"duration {cfg.duration_s:g} s or num_requests {cfg.num_requests}, whichever comes first "
                "(window ends at the next arrival's time)")
    else:
        stop = f"duration {cfg.duration_s:g} s"
    return {"stop": stop, "goodput": describe(cfg.goodput), "workers": str(cfg.workers)}


def run_load_command(o: LoadOptions) -> None:
    """Validate the options, start the local service when no URL is given, run the sweep, render it.

    Raises:
        UsageError / InputError: bad options or files (the CLI prints ``error: ...`` and exits 2).
    """
    from pydantic import ValidationError

    from diffbench.errors import UsageError
    from diffbench.load.client.http import Target, parse_headers
    from diffbench.load.client.profile import ProfileConfig
    from diffbench.load.client.workload import load_workload
    from diffbench.load.goodput import latency_limit, parse_goodput, with_slo
    from diffbench.queueing.schedules import parse_int_list, spec_from_cli

    if o.mode not in ("open", "closed"):
        raise UsageError(f"--mode must be open or closed, got {o.mode!r}")
    from diffbench.load.client.dialects import DIALECTS

    if o.dialect not in DIALECTS:
        raise UsageError(f"--dialect must be one of {', '.join(DIALECTS)}, got {o.dialect!r}")
    for name, value in (("--duration", o.duration), ("--timeout", o.timeout), ("--slo", o.slo),
                        ("--poll-interval", o.poll_interval)):
        _seconds(name, value)
    _seconds("--drain", o.drain, zero_ok=True)
    _seconds("--think-time", o.think_time, zero_ok=True)
    inflight_opt, max_inflight = _one_of("--max-inflight", o.max_inflight, "--max-concurrency", o.max_concurrency)
    if isinstance(max_inflight, int) and max_inflight < 1:
        raise UsageError(f"{inflight_opt} must be >= 1, got {max_inflight}")
    count_opt, num_requests = _one_of("--num-requests", o.num_requests, "--num-prompts", o.num_prompts)
    if isinstance(num_requests, int) and num_requests < 1:
        raise UsageError(f"{count_opt} must be >= 1 requests, got {num_requests}")
    if num_requests is not None and o.mode == "closed":
        raise UsageError(f"{count_opt} applies to the open loop; a closed loop runs for --duration")
    if o.workers < 1:
        raise UsageError(f"--workers must be >= 1 load processes, got {o.workers}")
    if o.ray is not None:
        from diffbench.distributed.cluster import check_address

        o.ray = check_address(o.ray)
    if o.warmup < 0:
        raise UsageError(f"--warmup must be >= 0 requests per shape, got {o.warmup}")
    if o.seed < 0:
        raise UsageError(f"--seed must be >= 0 (a numpy seed), got {o.seed}")
    rates = _rates(o, num_requests)  # type: ignore[arg-type]
    users = parse_int_list(o.users, "--users")
    if o.mode == "closed" and max_inflight is not None:
        raise UsageError(f"{inflight_opt} applies to the open loop; a closed loop is capped by --users")
    constraints = with_slo(parse_goodput(o.goodput) if o.goodput else [], o.slo)
    if o.max_requests < 1:
        raise UsageError(f"--max-requests must be >= 1, got {o.max_requests}")
    if o.mode == "closed" and max(users) > o.max_requests:
        raise UsageError(f"--users {max(users):,} is above --max-requests {o.max_requests:,} (each user sends "
                         "at least one request); use fewer users or raise --max-requests")
    for rate in rates or []:
        if num_requests is None:
            check_request_count(rate * o.duration, f"--rates {rate:g} x --duration {o.duration:g} s",
                                o.max_requests)
        else:
            check_request_count(min(rate * o.duration, num_requests),  # type: ignore[type-var]
                                f"{count_opt} {num_requests}", o.max_requests)
    wl = load_workload(o.workload) if o.workload else _cli_workload(o.size, o.steps, o.frames)
    if o.vllm is not None:  # --model and --save-result (vllm bench serve's names)
        wl = _vllm_result(o, wl, max_inflight)
    if wl.kind == "edit" and wl.masks is not None and o.dialect == "vllm-omni-chat":
        raise UsageError("--dialect vllm-omni-chat sends the input picture as an image_url part and has no place "
                         "for a mask; drop masks from the workload or use --dialect vllm-omni")
    trace, wl = _trace(o, wl, rates_given=o.rates is not None or o.request_rate is not None,
                       num_requests=num_requests)
    from diffbench.core.outpath import check_output_file

    if o.json_out:
        check_output_file(o.json_out, "--json", mkdir=o.mkdir)
    if o.jsonl:
        check_output_file(o.jsonl, "--jsonl", mkdir=o.mkdir)
    if o.csv_out:
        check_output_file(o.csv_out, "--csv", mkdir=o.mkdir)
    given = [(name, os.path.realpath(path)) for name, path in (("--json", o.json_out), ("--jsonl", o.jsonl),
                                                              ("--csv", o.csv_out)) if path]
    for i, (name, real) in enumerate(given):
        for other, real2 in given[i + 1:]:
            if real == real2 and real != os.devnull:
                raise UsageError(f"{name} and {other} name the same file {real}; give each output its own path")
    if o.ray is None:
        _check_workers(o.workers)
    scraper = _scraper(o)
    schedule = spec_from_cli(arrival=o.arrival, duration_s=o.duration, burstiness=o.burstiness, seed=o.seed)
    cfg = ProfileConfig(mode=o.mode, rates=rates, users=users, duration_s=o.duration, schedule=schedule,  # type: ignore[arg-type]
                      slo_s=latency_limit(constraints), max_inflight=max_inflight, think_time_s=o.think_time,
                      drain_s=o.drain, warmup_per_shape=o.warmup, seed=o.seed, max_requests=o.max_requests,
                      num_requests=num_requests, goodput=constraints, workers=o.workers)
    headers = parse_headers(o.headers)

    def target_for(base_url: str) -> Target:
        try:
            return Target(base_url=base_url, dialect=o.dialect, timeout_s=o.timeout, headers=headers,  # type: ignore[arg-type]
                          api_key=o.api_key, poll_interval_s=o.poll_interval,
                          delete_abandoned=o.delete_abandoned, verify_tls=not o.insecure,
                          decode_payload=not o.no_decode)
        except ValidationError as exc:
            raise UsageError(f"--url: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None

    from diffbench.core.console import make_console

    console = make_console()
    if o.url is not None and not o.url.strip():
        raise UsageError("--url is empty; give the service's base URL (e.g. http://host:8000) or leave --url out "
                         "to start the reference service")
    if o.url:
        _execute(o, cfg, wl, target_for(o.url), console, local=False, scraper=scraper, trace=trace)
        return
    from diffbench.engines.registry import EngineConfig
    from diffbench.server.background import run_in_background
    from diffbench.server.config import ServerConfig

    server_cfg = ServerConfig(engine=EngineConfig(engine=o.serve_engine, model=o.serve_model))  # type: ignore[arg-type]
    console.print(f"starting the reference service ({o.serve_engine}, {o.serve_model}) on 127.0.0.1 ...")
    with run_in_background(server_cfg) as base_url:
        console.print(f"reference service at {base_url}")
        if o.scrape is not None and o.scrape.strip().lower() == LOCAL_SCRAPE:
            scraper = _scraper(o, base_url)
        _execute(o, cfg, wl, target_for(base_url), console, local=True, scraper=scraper, trace=trace)


LOCAL_SCRAPE = "local"


def _vllm_result(o: LoadOptions, wl: object, max_inflight: object) -> object:
    """Apply ``--model`` (the model sent) and ``--save-result`` (``o.json_out`` set to vLLM's path); check the
    percentile options now. Returns the workload.

    Raises:
        UsageError: --save-result with --json, or a bad vLLM-named option.
    """
    from diffbench.errors import UsageError
    from diffbench.load.client.vllm_compat import parse_percentiles, result_path
    from diffbench.load.client.workload import Workload

    assert isinstance(wl, Workload) and o.vllm is not None
    v = o.vllm
    if v.model is not None:
        wl = wl.model_copy(update={"model": v.model})
    parse_percentiles(v.percentile_metrics, v.metric_percentiles)
    saved = result_path(v, label=v.backend or o.dialect, request_rate=o.request_rate,
                        max_concurrency=max_inflight if isinstance(max_inflight, int) else None,
                        model=wl.model or (None if o.url else o.serve_model))
    if saved is not None:
        if o.json_out:
            raise UsageError(f"--save-result and --json {o.json_out} both write the result; give one")
        o.json_out = saved
    return wl


def _trace(o: LoadOptions, wl: object, *, rates_given: bool, num_requests: object) -> tuple[object | None, object]:
    """The ``--trace`` (read and checked now, before any request) and the workload the warm-up covers (the
    trace's distinct shapes); (None, ``wl``) without a trace. Also checks ``--slo-scale``.

    Raises:
        UsageError: ``--trace`` with the closed loop, ``--rates``/``--request-rate``/``--num-requests``; a bad
            ``--trace-speed`` or ``--slo-scale``; ``--slo-scale`` with the openai dialect or without warm-up.
        InputError: a bad trace file (file and line named).
    """
    from diffbench.errors import UsageError
    from diffbench.load.client.slo import check_scale
    from diffbench.load.client.trace import check_span, check_speed, read_trace, with_mix
    from diffbench.load.client.workload import Workload

    assert isinstance(wl, Workload)
    check_scale(o.slo_scale)
    if o.slo_scale is not None and o.dialect == "openai":
        raise UsageError("--slo-scale scales by area x frames x steps, and --dialect openai sends neither steps "
                         "nor frames (the server's defaults apply); use another dialect or SLOs from the trace")
    if o.slo_scale is not None and o.warmup == 0:
        raise UsageError("--slo-scale estimates each SLO from the warm-up latency; it needs --warmup >= 1")
    if o.trace is None:
        if o.trace_speed != 1.0:
            raise UsageError("--trace-speed applies to --trace FILE")
        return None, wl
    if o.mode == "closed":
        raise UsageError("--trace replays arrival times (open loop); it cannot be combined with --mode closed")
    if wl.kind == "edit":
        raise UsageError("--trace replays generations and video jobs; an edit workload (kind: edit) is not "
                         "replayed from a trace yet: drop --trace, or use a kind image workload")
    if rates_given:
        raise UsageError("--trace sets the arrivals; drop --rates / --request-rate (use --trace-speed to "
                         "compress time)")
    if num_requests is not None:
        raise UsageError("--trace replays every row; drop --num-requests / --num-prompts (cut the file instead)")
    if o.arrival != "poisson" or o.burstiness is not None:
        raise UsageError("--trace sets the arrivals; drop --arrival / --burstiness")
    check_speed(o.trace_speed)
    tr = with_mix(read_trace(o.trace, wl.shapes[0]), wl, o.seed)
    check_span(tr, o.trace_speed)
    if len(tr.rows) > o.max_requests:
        raise UsageError(f"--trace {o.trace} holds {len(tr.rows):,} rows, above --max-requests {o.max_requests:,}")
    if o.slo_scale is not None and o.warmup == 0 and tr.slo_count() < len(tr.rows):
        raise UsageError("--slo-scale needs --warmup >= 1")
    replay = Workload(kind=tr.kind, model=wl.model, shapes=tr.shapes(), prompts=wl.prompts,  # type: ignore[arg-type]
                      prompt_file=wl.prompt_file, extra=wl.extra)
    return tr, replay


def _scraper(o: LoadOptions, local_url: str | None = None) -> object | None:
    """The ``--scrape`` scraper, checked with one scrape now (a bad URL fails before the run), or None.
    ``--scrape local`` names the reference service this command starts (``local_url``, once it is up; None
    before that).

    Raises:
        UsageError: a bad ``--scrape-interval``, or one without ``--scrape``.
        InputError: ``--scrape`` unreachable or not a diffusion metrics text.
    """
    from diffbench.errors import UsageError

    if o.scrape is None:
        if o.scrape_interval != 1.0:
            raise UsageError("--scrape-interval applies to --scrape URL")
        return None
    if not o.scrape.strip():
        raise UsageError("--scrape is empty; give the service's /metrics URL (e.g. http://host:8000/metrics)")
    from diffbench.load.scrape import MetricsScraper

    if o.scrape.strip().lower() == LOCAL_SCRAPE:
        if o.url:
            raise UsageError("--scrape local names the reference service started without --url; with --url give "
                             "the service's /metrics URL")
        if local_url is None:  # validated now, created once the service is up
            MetricsScraper("http://127.0.0.1/metrics", interval_s=o.scrape_interval)
            return None
        return _checked(MetricsScraper(local_url, interval_s=o.scrape_interval))
    return _checked(MetricsScraper(o.scrape, interval_s=o.scrape_interval))


def _checked(scraper: object) -> object:
    from diffbench.load.scrape import MetricsScraper

    assert isinstance(scraper, MetricsScraper)
    scraper.check()
    return scraper


def _executor(o: LoadOptions, target: object) -> object | None:
    """The multi-process executor for ``--workers N`` (N > 1), or the Ray actors of ``--ray`` (any N), None
    for one process (the runners then run in this process on ``backend``)."""
    if o.ray is not None:
        from diffbench.distributed.load import RayWorkerPool

        # one CPU per actor (its event loop); its payload checks in one process beside it
        return RayWorkerPool(target, workers=o.workers, address=o.ray, backend_options={"check_workers": 1})
    if o.workers <= 1:
        return None
    import os

    from diffbench.load.client.executor import WorkerPool

    # Each worker checks payloads in its own pool; together they get about one process per core.
    per_worker = max(1, (os.cpu_count() or 1) // o.workers)
    return WorkerPool(target, workers=o.workers, backend_options={"check_workers": per_worker})


async def _close(obj: object) -> None:
    """Close an executor if it has ``close()`` (sync or async)."""
    import inspect

    close = getattr(obj, "close", None)
    if close is not None:
        res = close()
        if inspect.isawaitable(res):
            await res


def _execute(o: LoadOptions, cfg: object, wl: object, target: object, console: Console, *, local: bool,
             scraper: object | None = None, trace: object | None = None) -> None:
    import asyncio
    import contextlib
    import math
    import signal
    import sys

    from diffbench.core import interrupt
    from diffbench.core.jsonio import write_json_atomic
    from diffbench.load.client.control import JsonlSink, RunControl
    from diffbench.load.client.dialects import sends_steps_and_frames, shape_label
    from diffbench.load.client.http import HttpBackend, Target
    from diffbench.load.client.profile import (
        NoSuccessError,
        ProfileConfig,
        WarmupFailed,
        run_profile,
        warmup_failure_result,
    )
    from diffbench.load.client.workload import RequestPlanner, RequestSpec, Workload, resolve_prompts

    assert isinstance(cfg, ProfileConfig) and isinstance(wl, Workload) and isinstance(target, Target)
    prompts, prompt_source = resolve_prompts(wl, o.prompts)
    planner = RequestPlanner(wl, prompts, seed=o.seed)
    conditions = {
        "url": target.base_url + (" (reference service started by diffbench load)" if local else ""),
        "dialect": target.dialect, "kind": wl.kind,
        "timeout_s": f"{target.timeout_s:g} (per request, from the send)",
        "arrival": "burst (every request at t=0)" if cfg.rates and math.isinf(cfg.rates[0]) else
                   cfg.schedule.kind + (f" (burstiness {cfg.schedule.burstiness:g})"
                                        if cfg.schedule.kind == "gamma" else ""),
        "duration_s": f"{cfg.duration_s:g}", "seed": str(cfg.seed),
        "max_inflight": str(cfg.max_inflight) if cfg.max_inflight else "none",
        "shapes": "; ".join(f"{shape_label(RequestSpec(index=0, kind=wl.kind, prompt='-', shape=s, seed=0), target.dialect)} "
                            f"w={s.weight:g}" for s in wl.shapes),
        "prompts": f"{len(prompts)} from {prompt_source}", "warmup_per_shape": str(cfg.warmup_per_shape),
    }
    from diffbench.load.client.slo import SloPolicy

    replay = None
    slo = SloPolicy(scale=o.slo_scale, shapes={
        shape_label(RequestSpec(index=0, kind=wl.kind, prompt="-", shape=s, seed=0), target.dialect): s
        for s in wl.shapes})
    if trace is not None:
        from diffbench.load.client.trace import Trace, trace_specs

        assert isinstance(trace, Trace)
        specs = trace_specs(trace, wl, prompts, o.seed)
        replay = (trace.times(o.trace_speed), specs)
        slo.explicit = {i: r.slo_s for i, r in enumerate(trace.rows) if r.slo_s is not None}
        conditions["arrival"] = (f"trace {trace.path} ({trace.format}, {len(specs)} rows, columns "
                                 f"{', '.join(trace.columns)}; replayed at its timestamps x 1/{o.trace_speed:g})")
        conditions.pop("duration_s", None)
        conditions["stop"] = "the trace's last row (every row is sent; --duration does not apply)"
        if any(r.prompt for r in trace.rows):
            conditions["prompts"] = f"from the trace rows, else {conditions['prompts']}"
    if o.slo_scale is not None and o.warmup == 1:
        console.print("[yellow]--slo-scale fits its base time on the warm-up; with --warmup 1 the one warm-up "
                      "request of a shape may include compilation (SLOs too loose): --warmup 2 avoids it[/yellow]")
    if not sends_steps_and_frames(target.dialect):
        conditions["not_sent"] = ("steps, frames, seed, guidance" + (", strength" if wl.kind == "edit" else "")
                                  + " (openai dialect: the server's defaults apply)")
        console.print("[yellow]--dialect openai sends neither steps nor frames: the server's defaults apply, "
                      "and rows are labelled by size only[/yellow]")
    conditions.update({k: v for k, v in _conditions_extra(cfg).items()
                       if not (trace is not None and k == "stop")})
    if wl.kind == "edit":
        from diffbench.load.client.dialects import image_path
        from diffbench.load.client.workload import edit_inputs

        images, masks = edit_inputs(wl.images, wl.masks)
        if not sends_steps_and_frames(target.dialect):
            strength = "strength: not sent (openai dialect), the server's default"
            if wl.strength is not None:
                console.print(f"[yellow]--dialect openai has no strength field: the workload's strength "
                              f"{wl.strength:g} is not sent and the server's default applies[/yellow]")
        else:
            strength = f"strength {wl.strength:g}" if wl.strength is not None else "strength: the server's default"
        mask_text = f"{len(masks)} mask(s) from {wl.masks}" if masks else "no mask"
        conditions["edit_inputs"] = (f"{len(images)} picture(s) from {wl.images} (round-robin in file-name "
                                     f"order), {mask_text}, {strength}")
        conditions["route"] = image_path(target.dialect, edit=True)
    if wl.kind == "video":
        conditions["poll_interval_s"] = (f"adaptive: {min(target.poll_first_s, target.poll_interval_s):g} s first, "
                                         f"x{target.poll_backoff:g} per poll, at most {target.poll_interval_s:g} s "
                                         "(each row states its poll granularity)")
        conditions["delete_abandoned"] = str(target.delete_abandoned).lower()
    console.print(f"timeout {target.timeout_s:g} s per request (from the send); "
                  f"drain {cfg.drain_s:g} s after Ctrl-C")
    sink = JsonlSink(o.jsonl) if o.jsonl else None
    from diffbench.load.progress import LoadProgress, progress_enabled

    monitor = None
    if progress_enabled(o.quiet, sys.stderr):
        from rich.console import Console as _Console

        from diffbench.core.progress import ENV as _PROGRESS_ENV

        # DIFFBENCH_PROGRESS=always draws on a pipe too (as LiveLine.for_cli): a Live on a console that is
        # not a terminal draws nothing, so the forced line would silently vanish
        forced = os.environ.get(_PROGRESS_ENV, "").strip().lower() == "always"
        monitor = LoadProgress(_Console(stderr=True, force_terminal=True if forced else None))
    row_monitor = monitor  # the progress line; with --scrape wrapped so each run is also a scrape window
    if scraper is not None:
        from diffbench.load.scrape import ScrapeMonitor

        conditions["scrape"] = f"{scraper.url} every {o.scrape_interval:g} s"  # type: ignore[attr-defined]
        row_monitor = ScrapeMonitor(scraper, monitor)  # type: ignore[assignment]
    executor = _executor(o, target)

    async def main() -> ProfileRun:
        backend = HttpBackend(target)
        conditions["payload_check"] = backend.check_mode
        if executor is not None:  # the parent's pool checks the warm-up only; each worker has its own
            per = executor.backend_options.get("check_workers")  # type: ignore[attr-defined]
            conditions["payload_check"] = (f"{conditions['payload_check']} for the warm-up; during the runs "
                                           f"each of the {o.workers} load workers checks its own answers"
                                           + (f" in {per} process(es)" if per else ""))
        control = RunControl()
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()

        def on_signal(name: str, code: int) -> None:
            if control.stopped and (control.hurried or executor is not None) and me is not None:
                me.cancel()  # a third signal (or a second with --workers): stop at once, no summary
            elif control.stopped:  # a second signal: cancel what is in flight, keep the partial result
                console.print("[yellow]stopping now: cancelling the requests in flight (the partial result "
                              "is still written; again to quit at once)[/yellow]")
                control.request_hurry()
            else:
                stopped_by.append(code)
                if monitor is not None:
                    monitor.end()  # the notice on its own line, not at the end of the progress line
                console.print(f"[yellow]{name}: stopping dispatch, draining in-flight requests "
                              f"(up to {cfg.drain_s:g} s; Ctrl-C again to stop now)[/yellow]")
                control.request_stop(name)

        # SIGTERM (timeout, docker stop, a CI cancel) stops like Ctrl-C: the partial result is written
        for sig, name, code in ((signal.SIGINT, "Ctrl-C", 130), (signal.SIGTERM, "SIGTERM", 143)):
            with contextlib.suppress(NotImplementedError, RuntimeError):  # non-main thread / Windows
                loop.add_signal_handler(sig, on_signal, name, code)
        await backend.start()
        extra: dict[str, object] = {"executor": executor} if executor is not None else {}
        try:
            if executor is not None:
                await executor.start()  # type: ignore[attr-defined]  # spawn before the warm-up, not in a run
                if o.ray is not None:  # the cluster, where each actor ran, the measured clock offsets
                    conditions.update(executor.conditions())  # type: ignore[attr-defined]
                    for w in executor.clocks:  # type: ignore[attr-defined]
                        for text in w.warnings():
                            console.print(f"[yellow]warning: {text}[/yellow]")
            return await run_profile(cfg, backend, planner, control=control, sink=sink, conditions=conditions,
                                   progress=_noop if o.quiet else lambda msg: console.print(f"[dim]{msg}[/dim]"),
                                   monitor=row_monitor, replay=replay, slo=slo if slo.active else None,
                                   **extra)  # type: ignore[arg-type]
        finally:
            if monitor is not None:
                monitor.end()
            if executor is not None:
                await _close(executor)
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signal.SIGINT)
                loop.remove_signal_handler(signal.SIGTERM)
                interrupt.install()  # asyncio restored SIG_DFL: SIGTERM is Ctrl-C again while outputs are written
            await backend.close()
            if backend.abandoned_jobs:
                console.print(f"{len(backend.abandoned_jobs)} video job(s) left on the server after the "
                              "client gave up (use --delete-abandoned to delete them)")

    from diffbench.load.client.eventloop import choose_loop, run

    conditions["event_loop"] = choose_loop() + (f" (in each of {o.workers} Ray actors)" if o.ray is not None
                                                else f" (in each of {o.workers} worker processes)"
                                                if o.workers > 1 else "")
    from diffbench.load.client.executor import WorkerDied

    stopped_by: list[int] = []
    if scraper is not None:
        scraper.start()  # type: ignore[attr-defined]
    try:
        sweep = run(main())
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None
    except (WarmupFailed, WorkerDied) as exc:
        # the README promises --json for a failed run too (no rows, the error; warm-up counts), so an
        # earlier run's result at the same path is never left looking current
        what = "the warm-up failed" if isinstance(exc, WarmupFailed) else "a load worker died"
        if o.json_out:
            write_json_atomic(o.json_out, warmup_failure_result(cfg, exc, conditions).model_dump(mode="json"))
            console.print(f"failed-run result written to {o.json_out} (no rows: {what})")
        if o.csv_out:  # the header alone: no row was measured
            from diffbench.report.load_csv import write_sweep_csv

            write_sweep_csv(o.csv_out, warmup_failure_result(cfg, exc, conditions))
        raise
    finally:
        if sink is not None:
            sink.close()
        if scraper is not None:
            scraper.stop()  # type: ignore[attr-defined]
    if scraper is not None:
        from diffbench.load.scrape_rows import attach_profile

        sweep = attach_profile(sweep, scraper)  # type: ignore[assignment, arg-type]
    _render(sweep, console)
    result = sweep.result
    if o.vllm is not None and (o.vllm.percentile_metrics or o.vllm.metric_percentiles):
        from diffbench.load.client.vllm_compat import parse_percentiles, percentile_lines

        for line in percentile_lines(result.rates, *parse_percentiles(o.vllm.percentile_metrics,
                                                                     o.vllm.metric_percentiles)):
            console.print(line)
    output_failed = _write_outputs(o, result, console)
    if sink is not None:
        console.print(f"{sink.count} request records written to {sink.path}"
                      + (" (then a write failed)" if sink.failed else ""))
    if sweep.interrupted:
        import typer

        typer.secho("interrupted: the summary covers the requests that finished or were cancelled"
                    + (f"; the partial result was written to {o.json_out}" if o.json_out else ""),
                    fg="red", err=True)
        raise typer.Exit(stopped_by[0] if stopped_by else 130)
    if output_failed is not None:
        raise output_failed  # exit 6, after every other output was tried
    if sink is not None:
        sink.check()  # a --jsonl that failed mid-run: exit 6, after the summary and the other outputs
    if result.n_ok == 0:
        raise NoSuccessError(_no_success_message(result, sweep.failed_in))


def _write_outputs(o: LoadOptions, result: LoadResult, console: Console) -> OutputError | None:
    """Write ``--json`` and ``--csv``, each tried even when the other fails (a full disk costs only the
    output on it). Returns the failure (:class:`OutputError`, exit 6) for the caller to raise once the run's
    other exits (interrupt) are decided; ``None`` when everything was written."""
    from diffbench.core.jsonio import write_each, write_json_atomic
    from diffbench.errors import OutputError

    def _json() -> None:
        write_json_atomic(o.json_out, result.model_dump(mode="json"))  # type: ignore[arg-type]
        console.print(f"sweep result written to {o.json_out}" + (" (partial: interrupted)"
                                                                 if result.interrupted else ""))

    def _csv() -> None:
        from diffbench.report.load_csv import write_sweep_csv

        write_sweep_csv(o.csv_out, result)  # type: ignore[arg-type]
        console.print(f"{len(result.rates)} CSV row(s) written to {o.csv_out}")

    writes = ([_json] if o.json_out else []) + ([_csv] if o.csv_out else [])
    try:
        write_each(*writes)
    except OutputError as exc:
        import typer

        typer.secho(f"error: {exc}", fg="red", err=True)
        return exc
    return None


def _noop(_: str) -> None:
    pass


def _no_success_message(result: object, stage: str | None) -> str:
    from diffbench.load.knee import LoadResult

    assert isinstance(result, LoadResult)
    counts = ", ".join(f"{k} {v}" for k, v in result.outcomes.items() if v)
    first = next((r.first_error for r in result.rates if r.first_error), None)
    where = f" in the {stage}" if stage else ""
    return (f"no request succeeded{where} ({result.n} requests: {counts}); first error: {first or 'none'}. "
            "There is no throughput, capacity or knee to report")


def _render(sweep: ProfileRun, console: Console) -> None:
    from diffbench.report.load_table import print_sweep

    if sweep.warmup.n:
        w = ", ".join(f"{k} {v}" for k, v in sweep.warmup.outcomes.items())
        console.print(f"warm-up: {sweep.warmup.n} request(s): {w}")
        for err in sweep.warmup.errors:
            console.print(f"  warm-up error: {err}")
    if sweep.probe is not None:
        print_sweep(sweep.probe, console, title="capacity probe (closed loop)")
    if sweep.failed_in is None:
        print_sweep(sweep.result, console, title=f"diffbench load ({sweep.result.mode} loop)")
        from diffbench.report.load_table import offered_text

        for row in sweep.result.rates:
            if row.hdr is not None and "latency_from_arrival" in row.hdr.quantities:
                h = row.hdr.quantities["latency_from_arrival"]
                label = f"{row.users} users" if row.mode == "closed" else f"{offered_text(row)} req/s"
                console.print(f"{label}: HdrHistogram merge of the workers: {h.n} ok, latency from "
                              f"arrival p50 {h.p50 * 1e3:.3f} ms, p99 {h.p99 * 1e3:.3f} ms ({row.hdr.error})")
            if row.slo_requests is not None:
                att = "n/a" if row.slo_attainment is None else f"{row.slo_attainment:.1%}"
                console.print(f"{offered_text(row)}: SLO attainment {att} ({row.slo_met} of {row.slo_requests} "
                              "requests with an SLO met it)")
