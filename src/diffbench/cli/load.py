"""``diffbench load``: open- or closed-loop load test of a diffusion service, with a rate sweep and the knee.

The typer surface of :mod:`diffbench.load`: the options build a :class:`~diffbench.load.spec.LoadSpec` (every
default, bound and cross-option rule is declared there; a bad value is one ``error:`` line naming the option,
:func:`diffbench.cli.validation.usage_error`), and :func:`diffbench.load.run.run_load` runs it. What the load
package does not import is chosen and handed in here: without ``--url`` the reference service (``diffbench
serve``) is started on loopback and targeted; ``--workers N`` runs N load processes, ``--ray`` Ray actors.
Without ``--gpus`` the service's GPU count is read (:mod:`diffbench.load.service_gpus`). Heavy imports inside.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from diffbench.load.spec import LoadSpec

if TYPE_CHECKING:
    from diffbench.load.client.http import Target

API_KEY_ENV = "DIFFBENCH_API_KEY"
_d = LoadSpec.default


def register(app: typer.Typer) -> None:
    @app.command("load")
    def load(
        url: str | None = typer.Option(_d("url"), "--url", help="Service base URL (e.g. http://host:8000). "
                                       "Without it the reference service is started on 127.0.0.1."),
        dialect: str | None = typer.Option(_d("dialect"), "--dialect", help="openai | vllm-omni | vllm-omni-chat | sglang "
                                           "(routes and fields: the load-test guide, Dialects). Default: vllm-omni."),
        mode: str = typer.Option(_d("mode"), "--mode", help="open (arrival schedule) | closed (N users)."),
        rates: str | None = typer.Option(_d("rates"), "--rates", help="Open loop: req/s list '0.5,1,2', or 'auto' "
                                         "(default: closed-loop capacity probe, then up to 1.2x capacity)."),
        request_rate: str | None = typer.Option(_d("request_rate"), "--request-rate", help="One rate (req/s), as vllm bench "
                                                "serve; 'inf' sends --num-requests requests at once."),
        users: str = typer.Option(_d("users"), "--users", help="Closed loop: user counts '1,2,4'."),
        duration: float = typer.Option(_d("duration"), "--duration", help="Seconds per rate / user count."),
        num_requests: int | None = typer.Option(_d("num_requests"), "--num-requests", help="Open loop: stop each rate after "
                                                "N requests or at --duration, whichever comes first."),
        num_prompts: int | None = typer.Option(_d("num_prompts"), "--num-prompts", help="Alias of --num-requests "
                                               "(vllm bench serve)."),
        arrival: str = typer.Option(_d("arrival"), "--arrival", help="poisson | constant | gamma."),
        burstiness: float | None = typer.Option(_d("burstiness"), "--burstiness", help="Gamma shape (1 = Poisson)."),
        seed: int = typer.Option(_d("seed"), "--seed", help="Seed of schedules and the workload mix."),
        slo: float | None = typer.Option(_d("slo"), "--slo", help="Latency objective (s, from intended arrival) "
                                         "for goodput and the knee (= --goodput latency:S)."),
        goodput: list[str] = typer.Option(_d("goodput"), "--goodput", help="Good-request constraints in seconds, "
                                          "'latency:10 queue_wait:2' (also ttfb, lag, latency_from_send, "
                                          "stage.NAME); all must hold. With --reference also quality floors "
                                          "psnr:DB, ssim:S (a second goodput over the scored requests)."),
        max_inflight: int | None = typer.Option(_d("max_inflight"), "--max-inflight", help="Client in-flight cap; waiting "
                                                "is reported as client queue time."),
        max_concurrency: int | None = typer.Option(_d("max_concurrency"), "--max-concurrency", help="Alias of --max-inflight "
                                                   "(vllm bench serve)."),
        workers: int = typer.Option(_d("workers"), "--workers", help="Load processes (each one event loop; the schedule "
                                    "is split between them)."),
        ray: str | None = typer.Option(_d("ray"), "--ray", help="Run the --workers N load workers as Ray actors "
                                       "(SPREAD across nodes): 'local' (a private cluster on this machine), "
                                       "'auto' or HOST:PORT of a head node; needs the ray extra."),
        think_time: float = typer.Option(_d("think_time"), "--think-time", help="Closed loop: seconds between requests."),
        timeout: float = typer.Option(_d("timeout"), "--timeout", help="Per-request deadline in seconds from the "
                                      "send (video: create+polls+download). Printed in the report."),
        drain: float = typer.Option(_d("drain"), "--drain", help="Seconds in-flight requests get after Ctrl-C."),
        warmup: int = typer.Option(_d("warmup"), "--warmup", help="Unrecorded warm-up requests per distinct shape."),
        workload: Path | None = typer.Option(_d("workload"), "--workload", help="Workload file (YAML/JSON)."),
        prompts: Path | None = typer.Option(_d("prompts"), "--prompts", help="Prompt file: one prompt per line, or "
                                       "AIPerf's JSONL rows {\"text\": ...}."),
        size: str = typer.Option(_d("size"), "--size", help="WIDTHxHEIGHT when no --workload."),
        steps: int = typer.Option(_d("steps"), "--steps", help="Steps when no --workload."),
        frames: int | None = typer.Option(_d("frames"), "--frames", help="Frames (video jobs) when no --workload."),
        poll_interval: float = typer.Option(_d("poll_interval"), "--poll-interval", help="Video jobs: the longest poll "
                                            "interval (s); polls start 10 ms apart and grow 1.25x up to it."),
        delete_abandoned: bool = typer.Option(_d("delete_abandoned"), "--delete-abandoned", help="DELETE video jobs the "
                                              "client gave up on (default: leave them running)."),
        abandon_after: float | None = typer.Option(_d("abandon_after"), "--abandon-after", help="Clients give up "
                                                   "on a request S seconds after the send: close the connection "
                                                   "(images) or DELETE the job (videos); outcome abandoned."),
        abandon_fraction: float = typer.Option(_d("abandon_fraction"), "--abandon-fraction", help="With "
                                               "--abandon-after: the share of requests whose client gives up "
                                               "(0 < F <= 1)."),
        header: list[str] = typer.Option(_d("header"), "--header", help="Extra header 'Name: value' (repeatable)."),
        api_key: str | None = typer.Option(_d("api_key"), "--api-key", help=f"Bearer token (or ${API_KEY_ENV})."),
        insecure: bool = typer.Option(_d("insecure"), "--insecure", help="Do not verify TLS certificates."),
        no_decode: bool = typer.Option(_d("no_decode"), "--no-decode", help="Skip decoding images (sizes unchecked)."),
        defer_checks: bool = typer.Option(_d("defer_checks"), "--defer-checks", help="Hold the payload checks and "
                                          "scoring until each row's last answer (for a client without spare cores)."),
        jsonl: Path | None = typer.Option(_d("jsonl"), "--jsonl", help="Write one record per request as it ends."),
        json_out: Path | None = typer.Option(_d("json_out"), "--json", help="Write the sweep result (JSON)."),
        csv_out: Path | None = typer.Option(_d("csv_out"), "--csv", help="Write one CSV row per rate / user count."),
        mkdir: bool = typer.Option(_d("mkdir"), "--mkdir", help="Create missing parent directories of --json, "
                                   "--jsonl and --csv (default: a missing directory is an error)."),
        quiet: bool = typer.Option(_d("quiet"), "--quiet", "-q", help="No live progress line (shown only when "
                                   "stderr is a terminal) and no per-run lines; tables and errors stay."),
        max_requests: int = typer.Option(_d("max_requests"), "--max-requests", help="Refuse a rate whose schedule "
                                         "holds more requests than this (each kept request costs ~1.6 kB)."),
        serve_engine: str = typer.Option(_d("serve_engine"), "--serve-engine", help="Engine of the local service "
                                         "(no --url): diffusers | sim."),
        serve_model: str = typer.Option(_d("serve_model"), "--serve-model", help="Model of the local service."),
        scrape: str | None = typer.Option(_d("scrape"), "--scrape", help="The service's /metrics URL (a base URL gets "
                                          "/metrics; 'local' = the reference service started without --url): "
                                          "scraped during the run, the server-side view is put beside each row."),
        scrape_interval: float = typer.Option(_d("scrape_interval"), "--scrape-interval", help="Seconds between scrapes of "
                                              "--scrape (on their own thread)."),
        trace: Path | None = typer.Option(_d("trace"), "--trace", help="Replay a trace: CSV/JSONL rows with timestamp "
                                          "(s), width/height or size, steps, frames, prompt, seed, slo_s; or one "
                                          "timestamp per line. Each row is sent at its timestamp with its shape."),
        trace_speed: float = typer.Option(_d("trace_speed"), "--trace-speed", help="Replay the trace this many times faster."),
        slo_scale: float | None = typer.Option(_d("slo_scale"), "--slo-scale", help="Per-request SLOs for requests without "
                                               "an slo_s: warm-up latency scaled by area x frames x steps, times "
                                               "this factor (vLLM-Omni's rule; its default is 3)."),
        gpus: int | None = typer.Option(_d("gpus"), "--gpus", help="GPUs serving the load: adds megapixel·steps/s "
                                        "per GPU and GPU·s per output to each row."),
        gpu_hour_price: float | None = typer.Option(_d("gpu_hour_price"), "--gpu-hour-price", help="Price per GPU-hour "
                                                    "(any currency; needs --gpus): adds the cost per 1,000 ok outputs, "
                                                    "the GPUs paid for the whole window."),
        reference: str | None = typer.Option(_d("reference"), "--reference", help="Directory of a bench --save-outputs "
                                             "or probe --record-reference manifest: replay its requests and score "
                                             "their answers (PSNR, SSIM; a video by its worst frame) against it."),
        quality_sample: float | None = typer.Option(_d("quality_sample"), "--quality-sample", help="Fraction in (0, 1] "
                                                    "of the schedule that replays --reference (default 1: every "
                                                    "request, the references in turn)."),
        # vllm bench serve's names (README, "vllm bench serve names"; diffbench.load.client.vllm_compat)
        base_url: str | None = typer.Option(_d("base_url"), "--base-url", help="Alias of --url (vllm bench serve)."),
        model: str | None = typer.Option(_d("model"), "--model", help="Model name sent in every request (all dialects; "
                                         "overrides the workload's model:)."),
        backend: str | None = typer.Option(_d("backend"), "--backend", help="vllm bench serve's request format, mapped "
                                           "onto --dialect (openai, vllm, openai-chat, sglang, ...)."),
        endpoint: str | None = typer.Option(_d("endpoint"), "--endpoint", help="Route (vllm bench serve); must be the "
                                            "dialect's (/v1/chat/completions alone selects vllm-omni-chat)."),
        save_result: bool = typer.Option(_d("save_result"), "--save-result", help="Write the result JSON where vllm bench "
                                         "serve would (--result-dir, --result-filename)."),
        result_dir: str | None = typer.Option(_d("result_dir"), "--result-dir", help="Directory of --save-result (created)."),
        result_filename: str | None = typer.Option(_d("result_filename"), "--result-filename", help="File name of --save-result."),
        percentile_metrics: str | None = typer.Option(_d("percentile_metrics"), "--percentile-metrics", help="e2el (send to last "
                                                      "byte) and/or latency (from arrival): printed in ms."),
        metric_percentiles: str | None = typer.Option(_d("metric_percentiles"), "--metric-percentiles", help="Percentiles of "
                                                      "--percentile-metrics among 50,90,99,99.9 (default 99)."),
    ) -> None:
        """Load-test a diffusion service: latency from intended arrival, goodput, knee."""
        given = {k: v for k, v in dict(locals()).items() if k in LoadSpec.model_fields}
        run_command(given | {"api_key": api_key or os.environ.get(API_KEY_ENV)})


def run_command(given: dict[str, Any]) -> None:
    """Validate the options, start the local service when no URL is given, run the load, render it.

    Raises:
        UsageError / InputError: bad options or files (the CLI prints ``error: ...`` and exits 2).
    """
    from pydantic import ValidationError

    from diffbench.cli.validation import usage_error
    from diffbench.core.console import make_console
    from diffbench.load.run import prepare, scraper_for
    from diffbench.load.spec import SHAPE_FLAGS

    flags = LoadSpec.flags() | SHAPE_FLAGS
    try:
        spec = LoadSpec(**given)
        spec.shape_workload()  # --size/--steps/--frames, checked before any file is read
        if spec.url:
            spec.target(spec.url)
    except ValidationError as exc:
        raise usage_error(exc, flags, shown={"--size": str(given.get("size"))}) from None
    ray = None
    if spec.ray is not None:
        from diffbench.distributed.cluster import check_address

        ray = check_address(spec.ray)
    spec, plan = prepare(spec)
    fingerprint: dict[str, object] | None = None
    if spec.reference is not None:
        from diffbench.cli.load_reference import read_references

        references, fingerprint = read_references(spec.reference)
        plan = dataclasses.replace(plan, references=tuple(references))  # type: ignore[type-var]
    if ray is None:
        _check_workers(spec.workers)
    scraper = scraper_for(spec)
    console = make_console()
    if spec.url:
        _run(spec, plan, spec.target(spec.url), console, ray=ray, local=False, scraper=scraper, fingerprint=fingerprint)
        return
    from diffbench.engines.registry import EngineConfig
    from diffbench.server.background import run_in_background
    from diffbench.server.config import ServerConfig

    server_cfg = ServerConfig(engine=EngineConfig(engine=spec.serve_engine, model=spec.serve_model))  # type: ignore[arg-type]
    console.print(f"starting the reference service ({spec.serve_engine}, {spec.serve_model}) on 127.0.0.1 ...")
    started = time.perf_counter()
    with run_in_background(server_cfg) as base_url:
        ready = time.perf_counter()
        console.print(f"reference service at {base_url}")
        if spec.scrape_local:
            scraper = scraper_for(spec, base_url)
        _run(spec, plan, spec.target(base_url), console, ray=ray, local=True, scraper=scraper,
             service_started=(started, ready), fingerprint=fingerprint)


def _run(spec: LoadSpec, plan: object, target: Target, console: Any, *, ray: str | None, local: bool,
         scraper: object | None, service_started: tuple[float, float] | None = None,
         fingerprint: dict[str, object] | None = None) -> None:
    """:func:`~diffbench.load.run.run_load` with this command's executor, renderer, CSV and alerts (module doc)."""
    if spec.reference is not None:
        from diffbench.cli.load_reference import check_service_fingerprint

        if warning := check_service_fingerprint(target.base_url, fingerprint, spec.reference):
            typer.secho(warning, fg="yellow", err=True)
    from diffbench.load.run import run_load
    from diffbench.load.service_gpus import with_service_gpus
    from diffbench.report.load_csv import write_sweep_csv
    from diffbench.report.load_table import print_profile

    spec, plan = with_service_gpus(spec, plan, target, console.print)  # type: ignore[arg-type]
    code = run_load(spec, plan, target, executor=_executor(spec, target, ray), scraper=scraper,  # type: ignore[arg-type]
                    local=local, console=console, render=print_profile,
                    write_csv=write_sweep_csv,
                    alert=lambda text: typer.secho(text, fg="red", err=True), service_started=service_started)
    if code:
        raise typer.Exit(code)


def _check_workers(n: int) -> None:
    """Warn (stderr) when more load processes than CPUs are asked for: they would share cores, and the
    client, not the service, could become the bottleneck."""
    cpus = os.cpu_count() or 1
    if n > cpus:
        typer.secho(f"warning: --workers {n} is more than the {cpus} CPUs of this machine; load processes "
                    "will share cores", fg="yellow", err=True)


def _executor(spec: LoadSpec, target: Target, ray: str | None) -> object | None:
    """The multi-process executor for ``--workers N`` (N > 1), or the Ray actors of ``--ray`` (any N), None
    for one process (the runners then run in this process on ``backend``)."""
    if ray is not None:
        from diffbench.distributed.load import RayWorkerPool

        # one CPU per actor (its event loop); its payload checks in one process beside it
        return RayWorkerPool(target, workers=spec.workers, address=ray, backend_options={"check_workers": 1})
    if spec.workers <= 1:
        return None
    from diffbench.load.client.executor import WorkerPool

    # Each worker checks payloads in its own pool; together they get about one process per core.
    per_worker = max(1, (os.cpu_count() or 1) // spec.workers)
    return WorkerPool(target, workers=spec.workers, backend_options={"check_workers": per_worker})
