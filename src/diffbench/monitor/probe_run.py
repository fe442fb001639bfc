"""The probe's run loop: startup checks, passes on an interval, output, and a clean stop on a signal.

Startup (before the first probe request): read the service's model card (unreachable → exit 2 naming
``--url``), check its deployment fingerprint against the references (:func:`..probe.check_fingerprint`),
then start ``/metrics`` (port in use → exit 2 naming ``--metrics-port``). Passes start every
``interval_s`` seconds (start to start; a pass that takes longer is followed at once by the next).

Stopping: SIGINT/SIGTERM cancel the pass in flight (its partial results are dropped, never written half)
and the run exits 0; every finished pass is already one complete line of the ``--json`` file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from diffbench.core import interrupt
from diffbench.core.jsonio import strict_json_value, write_json_atomic
from diffbench.errors import GateFailed, GenerationError, InputError, UsageError
from diffbench.monitor.probe import (
    ALERT_MARGIN_DB,
    PassRecord,
    ProbeMetrics,
    Prober,
    ProbeRequestError,
    ProbeSettings,
    ServiceInfo,
    check_fingerprint,
    fetch_service_info,
)
from diffbench.monitor.probe_refs import ProbeCase, References, write_references


@dataclass
class RunSpec:
    """Everything the command line decided (validated already). Seconds and dB."""

    url: str
    probe: str
    interval_s: float
    threshold_db: float | None
    timeout_s: float
    allow_unfingerprinted: bool
    reference_label: str
    references: References | None
    record_dir: Path | None
    record_cases: list[ProbeCase] = field(default_factory=list)
    passes: int | None = None
    once: bool = False
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    json_out: Path | None = None
    jsonl_out: Path | None = None

    @property
    def lines_path(self) -> Path | None:
        """Where JSON lines go: ``--jsonl``, else ``--json`` of a continuous run."""
        return self.jsonl_out if self.jsonl_out is not None else (None if self.once else self.json_out)


def _fmt(v: float | None, digits: int) -> str:
    if v is None:
        return "-"
    return "inf" if v == float("inf") else f"{v:.{digits}f}"


def print_table(rec: PassRecord) -> None:
    """The ``--once`` table: probe, entry, PSNR, SSIM, threshold, verdict (one row per reference output)."""
    from rich.table import Table

    from diffbench.core.console import make_console

    t = Table(title=f"probe {rec.probe} · {rec.model} · {rec.url}")
    for col in ("probe", "entry", "PSNR (dB)", "SSIM", "threshold (dB)", "verdict"):
        t.add_column(col, justify="right" if col[0] in "PSt" and col != "probe" else "left")
    for e in rec.entries:
        entry = f"{e.case} i{e.index}" + (f" (worst frame {e.worst_frame})" if e.worst_frame is not None else "")
        t.add_row(rec.probe, entry, _fmt(e.psnr_db, 2), _fmt(e.ssim, 4), _fmt(rec.threshold_db, 1), e.verdict)
    make_console(min_width=140).print(t)
    for err in rec.errors:
        print(f"error: {err}", file=sys.stderr)
    if rec.threshold_db is not None:
        print(f"verdicts: ok >= {rec.threshold_db:g} dB; low >= {rec.threshold_db - ALERT_MARGIN_DB:g} dB; "
              "alert below (DiffusionQualityPSNRDrop)")


def _summary(rec: PassRecord) -> str:
    worst = f"worst PSNR {_fmt(rec.psnr_db, 2)} dB, SSIM {_fmt(rec.ssim, 4)}" if rec.outcome == "ok" else ""
    if rec.outcome == "recorded":
        worst = f"{len(rec.entries)} references written to {rec.reference}"
    err = f": {rec.errors[0]}" + (f" (+{len(rec.errors) - 1} more)" if len(rec.errors) > 1 else "") \
        if rec.errors else ""
    return f"pass {rec.pass_index} {rec.outcome} [{rec.verdict}] {worst}{err}"


class _Lines:
    """One JSON line per pass, each written whole and flushed (an interrupted run leaves whole lines)."""

    def __init__(self, path: Path, option: str) -> None:
        try:
            self.fh: IO[str] = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise InputError(f"{option} {path}: cannot write ({exc.strerror or exc})") from exc

    def write(self, rec: PassRecord) -> None:
        self.fh.write(json.dumps(strict_json_value(rec.model_dump())) + "\n")
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()


def _recorder(spec: RunSpec) -> Any:
    def record(answers: list[tuple[ProbeCase, int, Any]], service: ServiceInfo) -> References:
        assert spec.record_dir is not None
        steps = sorted({s for _, s, _ in answers})
        cond: dict[str, object] = {
            "source": "diffbench probe --record-reference", "url": spec.url, "probe": spec.probe,
            "model": service.model, "fingerprint_id": service.fingerprint_id,
            "steps": steps[0] if len(steps) == 1 else None,
            "batch": spec.record_cases[0].n if spec.record_cases else None,
            "guidance": spec.record_cases[0].guidance if spec.record_cases else None,
        }
        return write_references(spec.record_dir, answers, conditions=cond, fingerprint=service.fingerprint)

    return record


async def _start(spec: RunSpec, session: Any) -> ServiceInfo:
    try:
        service = await asyncio.wait_for(fetch_service_info(session, spec.url), min(spec.timeout_s, 30.0))
    except (ProbeRequestError, asyncio.TimeoutError, OSError) as exc:
        raise UsageError(f"--url {spec.url}: cannot read the service's model card ({exc or 'timed out'}); check "
                         "the URL and that the service is up (GET /v1/models must answer 200)") from exc
    if spec.references is not None:
        warn = check_fingerprint(spec.references.manifest.fingerprint, service,
                                 allow_unfingerprinted=spec.allow_unfingerprinted, where=spec.reference_label)
    else:
        if service.is_video and any(c.frames is None for c in spec.record_cases):
            raise UsageError(f"--frames: {service.model} is a video model; give the frame count to record")
        warn = None
        if service.fingerprint is None:
            what = (f"the service ({service.model}) reports no deployment fingerprint in GET /v1/models "
                    "(data[0].fingerprint), so the references would carry none and could later be compared "
                    "with another deployment unnoticed")
            if not spec.allow_unfingerprinted:
                raise InputError(f"{what}; run a diffbench serve that reports it, or pass "
                                 "--allow-unfingerprinted to accept the risk")
            warn = f"warning: {what} (--allow-unfingerprinted)"
    if warn:
        print(warn, file=sys.stderr)
    return service


async def _main(spec: RunSpec) -> int:
    import aiohttp

    stop = asyncio.Event()
    current: list[asyncio.Future[Any]] = []
    loop = asyncio.get_running_loop()

    def on_signal(name: str) -> None:
        if not stop.is_set():
            interrupt.note(name)  # the exit code and messages name the signal (diffbench.core.interrupt)
        stop.set()
        for t in current:
            t.cancel()

    handled: list[int] = []
    if threading.current_thread() is threading.main_thread():
        for sig, name in ((signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, on_signal, name)
                handled.append(sig)
    timeout = aiohttp.ClientTimeout(total=None, connect=min(spec.timeout_s, 30.0))
    metrics: ProbeMetrics | None = None
    lines: _Lines | None = None
    worst_rc = 0
    done = 0
    try:
        async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as session:
            service = await _start(spec, session)
            metrics = ProbeMetrics(service.model, spec.probe, interval_s=spec.interval_s,
                                   threshold_db=spec.threshold_db)
            if spec.metrics_port is not None:
                port = metrics.serve(spec.metrics_host, spec.metrics_port)
                print(f"probe {spec.probe}: metrics on http://{spec.metrics_host}:{port}/metrics", file=sys.stderr,
                      flush=True)
            if spec.lines_path is not None:
                lines = _Lines(spec.lines_path, "--jsonl" if spec.jsonl_out is not None else "--json")
            settings = ProbeSettings(url=spec.url, probe=spec.probe, interval_s=spec.interval_s,
                                     threshold_db=spec.threshold_db, timeout_s=spec.timeout_s,
                                     allow_unfingerprinted=spec.allow_unfingerprinted,
                                     reference_label=spec.reference_label)
            prober = Prober(settings=settings, session=session, service=service, references=spec.references,
                            record=_recorder(spec), record_cases=spec.record_cases)
            while not stop.is_set():
                started = loop.time()
                task = asyncio.ensure_future(prober.run_pass())
                current[:] = [task]
                try:
                    rec = await task
                except asyncio.CancelledError:
                    if stop.is_set():
                        break
                    raise
                finally:
                    current.clear()
                metrics.record(rec)
                if lines is not None:
                    lines.write(rec)
                done += 1
                if spec.once:
                    print_table(rec)
                    if spec.json_out is not None:
                        write_json_atomic(spec.json_out, rec.model_dump())
                    if rec.outcome == "error":
                        worst_rc = GenerationError.exit_code
                    elif rec.verdict == "alert":
                        worst_rc = GateFailed.exit_code
                else:
                    print(_summary(rec), flush=True)
                if spec.passes is not None and done >= spec.passes:
                    break
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), max(0.0, started + spec.interval_s - loop.time()))
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
        if handled:
            interrupt.install()  # asyncio restored SIG_DFL for SIGTERM
        if metrics is not None:
            metrics.close()
        if lines is not None:
            lines.close()
    if stop.is_set():
        print(f"probe {spec.probe}: stopped by {interrupt.interrupt_name()}", file=sys.stderr)
        if spec.once and done == 0:
            return interrupt.exit_code()  # interrupted before its one pass finished (130, or 143 for SIGTERM)
    if worst_rc == GenerationError.exit_code:
        print("error: probe pass failed (no comparison); see the errors above", file=sys.stderr)
    elif worst_rc == GateFailed.exit_code:
        print(f"probe {spec.probe}: an entry is under threshold - {ALERT_MARGIN_DB:g} dB (alert condition)",
              file=sys.stderr)
    return worst_rc


def run(spec: RunSpec) -> int:
    """Run the probe (blocking); return the exit code (see :mod:`diffbench.cli.probe`).

    Raises:
        UsageError, InputError: startup checks failed (exit 2).
    """
    return asyncio.run(_main(spec))
