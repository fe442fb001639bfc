"""The one entry point of a load run: :func:`prepare` the files of a :class:`~diffbench.load.spec.LoadSpec`, then
:func:`run_load` it against a :class:`~diffbench.load.client.http.Target`.

:func:`run_load` owns the run's lifecycle: the report conditions, the warm-up and the profile
(:func:`~diffbench.load.client.profile.run_profile`), Ctrl-C and SIGTERM (a first signal stops dispatch and
drains, a second cancels what is in flight, a third quits; SIGTERM stops like Ctrl-C, and is Ctrl-C again
through :mod:`diffbench.core.interrupt` while the outputs are written), the partial result of an
interrupted run, the failed-run ``--json``/``--csv`` of a run that measured nothing, and the outputs.

What runs the load and where the service is are handed in, so this package imports neither the service nor
the Ray layer: the caller starts a local service, checks ``--ray`` and builds the executor (None: this
process; a multi-process pool or Ray actors otherwise), and hands in the table renderer and the CSV writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from diffbench.core import interrupt
from diffbench.core.jsonio import write_each, write_json_atomic
from diffbench.errors import OutputError, UsageError
from diffbench.load.client.control import JsonlSink, RunControl
from diffbench.load.client.dialects import sends_steps_and_frames, shape_label
from diffbench.load.client.http import HttpBackend, Target
from diffbench.load.client.profile import (
    NoSuccessError,
    ProfileConfig,
    ProfileRun,
    WarmupFailed,
    run_profile,
    warmup_failure_result,
)
from diffbench.load.client.slo import SloPolicy
from diffbench.load.client.trace import Trace
from diffbench.load.client.workload import (
    ReferenceRequest,
    RequestPlanner,
    RequestSpec,
    Workload,
    resolve_prompts,
)
from diffbench.load.goodput import describe, latency_limit
from diffbench.load.knee import LoadResult, ServiceStart
from diffbench.load.scrape import MetricsScraper
from diffbench.load.spec import LoadSpec

Render = Callable[[ProfileRun, Console], None]
WriteCsv = Callable[[str, LoadResult], None]
Alert = Callable[[str], None]


@dataclass(frozen=True)
class LoadPlan:
    """What :func:`prepare` read and checked: the profile's configuration, the workload (a trace's distinct
    shapes with ``--trace``) and the trace (None without)."""

    cfg: ProfileConfig
    workload: Workload
    trace: Trace | None
    references: tuple[ReferenceRequest, ...] = ()
    """``--reference DIR``: the fixed requests to replay and score (read by the CLI; empty without)."""


def prepare(spec: LoadSpec) -> tuple[LoadSpec, LoadPlan]:
    """Read and check the files of ``spec`` (workload, trace, outputs) before anything starts. Returns the
    spec (``json_out`` set to vllm bench serve's path with ``--save-result``) and the plan.

    Raises:
        UsageError / InputError: a bad file, output path or option of a file (exit 2).
    """
    from diffbench.core.outpath import check_output_file
    from diffbench.load.client.workload import load_workload
    from diffbench.queueing.schedules import spec_from_cli

    wl = load_workload(spec.workload) if spec.workload else spec.shape_workload()
    assert wl is not None
    spec, wl = _vllm_result(spec, wl)
    if wl.kind == "edit" and wl.masks is not None and spec.dialect == "vllm-omni-chat":
        raise UsageError("--dialect vllm-omni-chat sends the input picture as an image_url part and has no place "
                         "for a mask; drop masks from the workload or use --dialect vllm-omni")
    trace, wl = _trace(spec, wl)
    for name in ("json_out", "jsonl", "csv_out"):
        path = getattr(spec, name)
        if path:
            check_output_file(path, LoadSpec.flag(name), mkdir=spec.mkdir)
    given = [(name, os.path.realpath(path)) for name, path in (("--json", spec.json_out), ("--jsonl", spec.jsonl),
                                                              ("--csv", spec.csv_out)) if path]
    for i, (name, real) in enumerate(given):
        for other, real2 in given[i + 1:]:
            if real == real2 and real != os.devnull:
                raise UsageError(f"{name} and {other} name the same file {real}; give each output its own path")
    schedule = spec_from_cli(arrival=spec.arrival, duration_s=spec.duration, burstiness=spec.burstiness,
                             seed=spec.seed)
    cfg = ProfileConfig(mode=spec.mode, rates=spec.rate_list, users=spec.user_list, duration_s=spec.duration,  # type: ignore[arg-type]
                        schedule=schedule, slo_s=latency_limit(spec.constraints), max_inflight=spec.inflight[1],
                        think_time_s=spec.think_time, drain_s=spec.drain, warmup_per_shape=spec.warmup,
                        seed=spec.seed, max_requests=spec.max_requests, num_requests=spec.count[1],
                        goodput=spec.constraints, workers=spec.workers, gpus=spec.gpus,
                        gpu_hour_price=spec.gpu_hour_price, quality_floors=spec.quality_floors)
    return spec, LoadPlan(cfg=cfg, workload=wl, trace=trace)


def _vllm_result(spec: LoadSpec, wl: Workload) -> tuple[LoadSpec, Workload]:
    """Apply ``--model`` (the model sent) and ``--save-result`` (``json_out`` set to vLLM's path); check the
    percentile options now.

    Raises:
        UsageError: --save-result with --json, or a bad vLLM-named option.
    """
    from diffbench.load.client.vllm_compat import VllmOptions, parse_percentiles, result_path

    if spec.model is not None:
        wl = wl.model_copy(update={"model": spec.model})
    parse_percentiles(spec.percentile_metrics, spec.metric_percentiles)
    v: VllmOptions = spec  # a LoadSpec is its own VllmOptions
    saved = result_path(v, label=v.backend or spec.dialect, request_rate=spec.request_rate,  # type: ignore[arg-type]
                        max_concurrency=spec.inflight[1], model=wl.model or (None if spec.url else spec.serve_model))
    if saved is not None:
        if spec.json_out:
            raise UsageError(f"--save-result and --json {spec.json_out} both write the result; give one")
        spec = spec.model_copy(update={"json_out": saved})
    return spec, wl


def _trace(o: LoadSpec, wl: Workload) -> tuple[Trace | None, Workload]:
    """The ``--trace`` (read and checked now, before any request) and the workload the warm-up covers (the
    trace's distinct shapes); (None, ``wl``) without a trace. Also checks ``--slo-scale``.

    Raises:
        UsageError: ``--trace`` with the closed loop, ``--rates``/``--request-rate``/``--num-requests``; a bad
            ``--trace-speed`` or ``--slo-scale``; ``--slo-scale`` with the openai dialect or without warm-up.
        InputError: a bad trace file (file and line named).
    """
    from diffbench.load.client.slo import check_scale
    from diffbench.load.client.trace import check_span, check_speed, read_trace, with_mix

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
    if o.rates is not None or o.request_rate is not None:
        raise UsageError("--trace sets the arrivals; drop --rates / --request-rate (use --trace-speed to "
                         "compress time)")
    if o.count[1] is not None:
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


def scraper_for(o: LoadSpec, local_url: str | None = None) -> MetricsScraper | None:
    """The ``--scrape`` scraper, checked with one scrape now (a bad URL fails before the run), or None.
    ``--scrape local`` names the reference service the command starts (``local_url``, once it is up; None
    before that).

    Raises:
        UsageError: a bad ``--scrape-interval``, or one without ``--scrape``.
        InputError: ``--scrape`` unreachable or not a diffusion metrics text.
    """
    if o.scrape is None:
        if o.scrape_interval != 1.0:
            raise UsageError("--scrape-interval applies to --scrape URL")
        return None
    if not o.scrape.strip():
        raise UsageError("--scrape is empty; give the service's /metrics URL (e.g. http://host:8000/metrics)")
    if o.scrape_local:
        if o.url:
            raise UsageError("--scrape local names the reference service started without --url; with --url give "
                             "the service's /metrics URL")
        if local_url is None:  # validated now, created once the service is up
            MetricsScraper("http://127.0.0.1/metrics", interval_s=o.scrape_interval)
            return None
        scraper = MetricsScraper(local_url, interval_s=o.scrape_interval)
    else:
        scraper = MetricsScraper(o.scrape, interval_s=o.scrape_interval)
    scraper.check()
    return scraper


def _conditions(o: LoadSpec, plan: LoadPlan, target: Target, prompts: list[str], prompt_source: str,
                local: bool) -> dict[str, str]:
    """The report conditions known before the run (the run adds its own)."""
    cfg, wl = plan.cfg, plan.workload
    return {
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


def _conditions_extra(cfg: ProfileConfig) -> dict[str, str]:
    """Report conditions of the stop rule, the goodput definition and the worker count."""
    if cfg.rates is not None and any(math.isinf(r) for r in cfg.rates):
        stop = f"num_requests {cfg.num_requests} (a burst at t=0; the rates count over the time it took)"
    elif cfg.num_requests is not None and cfg.mode == "open":
        stop = (f"duration {cfg.duration_s:g} s or num_requests {cfg.num_requests}, whichever comes first "
                "(window ends at the next arrival's time)")
    else:
        stop = f"duration {cfg.duration_s:g} s"
    return {"stop": stop, "goodput": describe(cfg.goodput), "workers": str(cfg.workers)}


async def _close(obj: object) -> None:
    """Close an executor if it has ``close()`` (sync or async)."""
    import inspect

    close = getattr(obj, "close", None)
    if close is not None:
        res = close()
        if inspect.isawaitable(res):
            await res


def run_load(o: LoadSpec, plan: LoadPlan, target: Target, *, executor: Any | None, scraper: MetricsScraper | None,
             local: bool, console: Console, render: Render, write_csv: WriteCsv, alert: Alert,
             service_started: tuple[float, float] | None = None) -> int:
    """Run the load of ``o`` (prepared as ``plan``) against ``target``, print it and write its outputs.

    ``executor``: None (the runners run in this process) or a started-on-demand pool of load workers
    (:class:`~diffbench.load.client.executor.WorkerPool`, or Ray actors: ``conditions()`` and ``clocks``
    then go into the report). ``scraper``: the ``--scrape`` scraper, started and stopped here. ``local``: the
    target is the reference service the caller started; ``service_started`` then holds the
    ``time.perf_counter()`` values when the caller started it and when it was ready (its cold start goes into
    ``LoadResult.service_start``). ``render`` prints the tables, ``write_csv`` writes ``--csv``, ``alert``
    prints a red line on stderr.

    Returns:
        0, or the exit status of an interrupted run (130 Ctrl-C, 143 SIGTERM) once its partial result is
        written.

    Raises:
        WarmupFailed / WorkerDied: nothing was measured (the failed-run ``--json``/``--csv`` written first).
        OutputError: an output could not be written (exit 6, after every other output was tried).
        NoSuccessError: no request succeeded (exit 1).
    """
    from diffbench.core.workcost import start_run_clock

    start_run_clock()  # the run's one wall-clock/monotonic pair: every row's and record's wall-clock time
    cfg, wl, trace = plan.cfg, plan.workload, plan.trace
    prompts, prompt_source = resolve_prompts(wl, o.prompts)
    planner = RequestPlanner(wl, prompts, seed=o.seed, references=plan.references, sample=o.quality_sample)
    conditions = _conditions(o, plan, target, prompts, prompt_source, local)
    replay = None
    slo = SloPolicy(scale=o.slo_scale, shapes={
        shape_label(RequestSpec(index=0, kind=wl.kind, prompt="-", shape=s, seed=0), target.dialect): s
        for s in wl.shapes})
    if trace is not None:
        from diffbench.load.client.trace import trace_specs

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
    adapters = sorted({s.adapter for s in wl.shapes if s.adapter is not None})
    if adapters:
        if target.dialect != "vllm-omni":
            raise UsageError(f"--workload: LoRA adapters ({', '.join(adapters)}) are sent in vLLM-Omni's images API "
                             f"field lora; use --dialect vllm-omni (--dialect {target.dialect} has no such field)")
        conditions["adapters"] = (f"{', '.join(adapters)} (the images API's lora field; rows break down by adapter, "
                                  "swaps counted from the answers' adapter_swap stage)")
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
    if target.abandon_after_s is not None:
        conditions["abandon"] = (f"{target.abandon_fraction:.0%} of the requests are given up by their client "
                                 f"{target.abandon_after_s:g} s after the send when not finished (images: connection "
                                 "closed; videos: job deleted); outcome abandoned, neither ok nor failed")
    console.print(f"timeout {target.timeout_s:g} s per request (from the send); "
                  f"drain {cfg.drain_s:g} s after Ctrl-C")
    sink = JsonlSink(o.jsonl) if o.jsonl else None
    from diffbench.load.progress import LoadProgress, progress_enabled

    monitor = None
    if progress_enabled(o.quiet, sys.stderr):
        from diffbench.core.progress import ENV as _PROGRESS_ENV

        # DIFFBENCH_PROGRESS=always draws on a pipe too (as LiveLine.for_cli): a Live on a console that is
        # not a terminal draws nothing, so the forced line would silently vanish
        forced = os.environ.get(_PROGRESS_ENV, "").strip().lower() == "always"
        monitor = LoadProgress(Console(stderr=True, force_terminal=True if forced else None))
    row_monitor: Any = monitor  # the progress line; with --scrape wrapped so each run is also a scrape window
    if scraper is not None:
        from diffbench.load.scrape import ScrapeMonitor

        conditions["scrape"] = f"{scraper.url} every {o.scrape_interval:g} s"
        row_monitor = ScrapeMonitor(scraper, monitor)
    stopped_by: list[int] = []

    async def main() -> ProfileRun:
        backend = HttpBackend(target)
        conditions["payload_check"] = backend.check_mode
        if executor is not None:  # the parent's pool checks the warm-up only; each worker has its own
            per = executor.backend_options.get("check_workers")
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
                await executor.start()  # spawn before the warm-up, not in a run
                if o.ray is not None:  # the cluster, where each actor ran, the measured clock offsets
                    conditions.update(executor.conditions())
                    for w in executor.clocks:
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
    from diffbench.load.client.executor import WorkerDied

    conditions["event_loop"] = choose_loop() + (f" (in each of {o.workers} Ray actors)" if o.ray is not None
                                                else f" (in each of {o.workers} worker processes)"
                                                if o.workers > 1 else "")
    if scraper is not None:
        scraper.start()
    try:
        profile = run(main())
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
            write_csv(o.csv_out, warmup_failure_result(cfg, exc, conditions))
        raise
    finally:
        if sink is not None:
            sink.close()
        if scraper is not None:
            scraper.stop()
    if scraper is not None:
        from diffbench.load.scrape_rows import attach_profile

        per_request: dict[str, int | None] = {}
        for mix in wl.shapes:  # images per request by shape label; None where two entries disagree
            label = mix.label()
            per_request[label] = mix.n if per_request.get(label, mix.n) == mix.n else None
        profile = attach_profile(profile, scraper, per_request)
    if service_started is not None:
        profile = profile.model_copy(update={"result": profile.result.model_copy(
            update={"service_start": service_start(service_started, profile.warmup.first_ok_perf_s)})})
        console.print(service_start_line(profile.result.service_start))  # type: ignore[arg-type]
    render(profile, console)
    result = profile.result
    if o.percentile_metrics or o.metric_percentiles:
        from diffbench.load.client.vllm_compat import parse_percentiles, percentile_lines

        for line in percentile_lines(result.rates, *parse_percentiles(o.percentile_metrics, o.metric_percentiles)):
            console.print(line)
    output_failed = _write_outputs(o, result, console, write_csv, alert)
    if sink is not None:
        console.print(f"{sink.count} request records written to {sink.path}"
                      + (" (then a write failed)" if sink.failed else ""))
    if profile.interrupted:
        alert("interrupted: the summary covers the requests that finished or were cancelled"
              + (f"; the partial result was written to {o.json_out}" if o.json_out else ""))
        return stopped_by[0] if stopped_by else 130
    if output_failed is not None:
        raise output_failed  # exit 6, after every other output was tried
    if sink is not None:
        sink.check()  # a --jsonl that failed mid-run: exit 6, after the summary and the other outputs
    if result.n_ok == 0:
        raise NoSuccessError(_no_success_message(result, profile.failed_in))
    return 0


def _write_outputs(o: LoadSpec, result: LoadResult, console: Console, write_csv: WriteCsv,
                   alert: Alert) -> OutputError | None:
    """Write ``--json`` and ``--csv``, each tried even when the other fails (a full disk costs only the
    output on it). Returns the failure (:class:`OutputError`, exit 6) for the caller to raise once the run's
    other exits (interrupt) are decided; ``None`` when everything was written."""

    def _json() -> None:
        write_json_atomic(o.json_out, result.model_dump(mode="json"))  # type: ignore[arg-type]
        console.print(f"sweep result written to {o.json_out}" + (" (partial: interrupted)"
                                                                 if result.interrupted else ""))

    def _csv() -> None:
        write_csv(o.csv_out, result)  # type: ignore[arg-type]
        console.print(f"{len(result.rates)} CSV row(s) written to {o.csv_out}")

    writes = ([_json] if o.json_out else []) + ([_csv] if o.csv_out else [])
    try:
        write_each(*writes)
    except OutputError as exc:
        alert(f"error: {exc}")
        return exc
    return None


def service_start(started: tuple[float, float], first_ok_perf_s: float | None) -> ServiceStart:
    """The reference service's cold start from ``(started, ready)`` ``perf_counter`` values and the first ok
    warm-up answer's (None: no warm-up answered ok)."""
    t0, ready = started
    if first_ok_perf_s is None:
        return ServiceStart(ready_s=ready - t0, note="no ok warm-up answer (--warmup 0, or every warm-up "
                                                     "request failed): the first ok answer was not separated")
    return ServiceStart(ready_s=ready - t0, first_ok_s=first_ok_perf_s - t0)


def service_start_line(s: ServiceStart) -> str:
    """The console line of :func:`service_start`."""
    first = (f", first ok answer {s.first_ok_s:.3g} s after start (the first warm-up request)"
             if s.first_ok_s is not None else f"; {s.note}")
    return f"reference service cold start: ready {s.ready_s:.3g} s after start{first}"


def _noop(_: str) -> None:
    pass


def _no_success_message(result: LoadResult, stage: str | None) -> str:
    counts = ", ".join(f"{k} {v}" for k, v in result.outcomes.items() if v)
    first = next((r.first_error for r in result.rates if r.first_error), None)
    where = f" in the {stage}" if stage else ""
    return (f"no request succeeded{where} ({result.n} requests: {counts}); first error: {first or 'none'}. "
            "There is no throughput, capacity or knee to report")


__all__ = ["LoadPlan", "prepare", "run_load", "scraper_for", "service_start", "service_start_line"]
