"""``diffbench probe``: the quality spot-check probe against a live service (see :mod:`diffbench.monitor.probe`).

Exit codes: 0 done (``--count`` passes, or stopped by SIGINT/SIGTERM in a continuous run; a continuous run
never exits for a failed pass: failures are data); with ``--once``: 1 when an entry's PSNR is under
threshold − 3 dB (the ``DiffusionQualityPSNRDrop`` condition; results written first), 5 when the pass
failed (a request or a reference could not be compared); 2 bad input, all checked before the first probe
request: missing ``--url`` or an unreachable service, no/both reference options, a missing or invalid
reference directory, references from another deployment (fingerprint differs) or without a fingerprint
(unless ``--allow-unfingerprinted``), a bad threshold or calibration file, a port in use, an unwritable
``--json``/``--jsonl``; 130 when a ``--once`` run is interrupted before its pass ends (143 when by SIGTERM). Every probe request carries ``X-Diffbench-Traffic: probe`` and never counts as traffic.
"""

from __future__ import annotations

import math
from pathlib import Path

import typer

_DEFAULT_PROBE = "default"


def _positive(value: float | None, option: str, unit: str) -> None:
    from diffbench.errors import UsageError

    if value is not None and (not math.isfinite(value) or value <= 0):
        raise UsageError(f"{option} {value:g}: must be a positive number of {unit}")


def _size_option(size: str) -> tuple[int, int]:
    from diffbench.core.shapes import SizeSyntaxError, parse_size
    from diffbench.errors import UsageError

    try:
        return parse_size(size, minimum=1)
    except SizeSyntaxError:
        raise UsageError(f"--size {size!r}: write it as WIDTHxHEIGHT in pixels, e.g. 256x256") from None


def register(app: typer.Typer) -> None:
    @app.command("probe")
    def probe(
        url: str | None = typer.Option(None, "--url", help="Base URL of the service, e.g. http://127.0.0.1:8000."),
        reference: Path | None = typer.Option(None, "--reference", help="Reference outputs (a manifest from "
                                              "bench --save-outputs DIR or probe --record-reference DIR)."),
        record_reference: Path | None = typer.Option(None, "--record-reference", help="Record references "
                                                     "here on the first pass (the directory must not hold "
                                                     "a manifest), then probe against them."),
        interval: float = typer.Option(60.0, "--interval", help="Seconds from one pass's start to the next."),
        once: bool = typer.Option(False, "--once", help="One pass: print the table, write --json, exit "
                                  "(1 when an entry is under threshold - 3 dB, 5 when the pass failed)."),
        count: int | None = typer.Option(None, "--count", help="Stop after this many passes (default: run "
                                         "until SIGINT/SIGTERM)."),
        metrics_port: int | None = typer.Option(None, "--metrics-port", help="Serve the diffusion_quality_* "
                                                "gauges on this port at /metrics (0: a free port)."),
        metrics_host: str = typer.Option("127.0.0.1", "--metrics-host", help="Address of /metrics."),
        json_out: Path | None = typer.Option(None, "--json", help="--once: the pass as one JSON document; "
                                             "otherwise one JSON line per pass, written as it ends."),
        jsonl_out: Path | None = typer.Option(None, "--jsonl", help="One JSON line per pass (with --once too)."),
        psnr_threshold: float | None = typer.Option(None, "--psnr-threshold", help="PSNR threshold T, dB "
                                                    "(the alert fires below T - 3 dB)."),
        calibration: Path | None = typer.Option(None, "--calibration", help="Calibration file (diffbench "
                                                "monitor calibrate): T = probes.<name>.psnr_threshold_db."),
        probe_name: str = typer.Option(_DEFAULT_PROBE, "--probe-name", help="The probe label (and the "
                                       "calibration entry)."),
        timeout: float = typer.Option(300.0, "--timeout", help="Seconds one probe request may take (a video: "
                                      "create + polls + download)."),
        allow_unfingerprinted: bool = typer.Option(False, "--allow-unfingerprinted", help="Accept references "
                                                   "or a service without a deployment fingerprint (risky: "
                                                   "references from another deployment then go unnoticed)."),
        prompt: list[str] = typer.Option([], "--prompt", help="Recording: a prompt to record (repeatable)."),
        seed: int = typer.Option(0, "--seed", help="Recording: the seed of every recorded request."),
        size: str = typer.Option("256x256", "--size", help="Recording: WIDTHxHEIGHT."),
        steps: int | None = typer.Option(None, "--steps", help="Recording: denoise steps (default: the "
                                         "service's; the manifest records the count used)."),
        n: int = typer.Option(1, "--n", help="Recording: images per request (the batch the probe replays)."),
        frames: int | None = typer.Option(None, "--frames", help="Recording: frame count (a video model)."),
        guidance: float | None = typer.Option(None, "--guidance", help="Recording: guidance_scale to send."),
        mkdir: bool = typer.Option(False, "--mkdir", help="Create missing parent directories of --json, "
                                   "--jsonl and --record-reference."),
    ) -> None:
        """Replay fixed requests against a live service and compare each answer with its reference."""
        from diffbench.core.manifest import MANIFEST_NAME
        from diffbench.core.outpath import check_output_dir, check_output_file
        from diffbench.errors import UsageError
        from diffbench.monitor.probe_refs import RECORD_PROMPT, load_references, record_cases

        if not url:
            raise UsageError("--url URL is required: the base URL of the service to probe, "
                             "e.g. --url http://127.0.0.1:8000")
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"--url {url!r}: give an http:// or https:// URL, e.g. http://127.0.0.1:8000")
        url = url.rstrip("/")
        if (reference is None) == (record_reference is None):
            raise UsageError("give exactly one of --reference DIR (probe against references) or "
                             "--record-reference DIR (record them on the first pass)")
        _positive(interval, "--interval", "seconds")
        _positive(timeout, "--timeout", "seconds")
        if count is not None and count < 1:
            raise UsageError(f"--count {count}: must be at least 1")
        if once and count not in (None, 1):
            raise UsageError(f"--once runs one pass; drop --count {count} or --once")
        passes = 1 if once else count
        if metrics_port is not None and not 0 <= metrics_port <= 65535:
            raise UsageError(f"--metrics-port {metrics_port}: must be in 0..65535 (0 picks a free port)")
        if not probe_name.strip() or len(probe_name) > 64:
            raise UsageError(f"--probe-name {probe_name!r}: give a short non-empty name (a label value)")
        if psnr_threshold is not None and calibration is not None:
            raise UsageError("give --psnr-threshold or --calibration, not both")
        if psnr_threshold is not None and (not math.isfinite(psnr_threshold) or psnr_threshold <= 0):
            raise UsageError(f"--psnr-threshold {psnr_threshold:g}: must be a positive, finite number of dB "
                             "(e.g. 30; calibrate it from a noise-floor run)")
        recording_only = record_reference is not None and passes == 1
        record_flags = {"--prompt": bool(prompt), "--seed": seed != 0, "--size": size != "256x256",
                        "--steps": steps is not None, "--n": n != 1, "--frames": frames is not None,
                        "--guidance": guidance is not None}
        if reference is not None and any(record_flags.values()):
            given = ", ".join(k for k, v in record_flags.items() if v)
            raise UsageError(f"{given}: only for --record-reference; with --reference the manifest fixes the "
                             "requests")
        width, height = _size_option(size)
        if steps is not None and steps < 1:
            raise UsageError(f"--steps {steps}: must be at least 1")
        if n < 1:
            raise UsageError(f"--n {n}: must be at least 1")
        if frames is not None and frames < 1:
            raise UsageError(f"--frames {frames}: must be at least 1")
        if guidance is not None and not math.isfinite(guidance):
            raise UsageError("--guidance: must be a finite number")
        if json_out is not None:
            json_out = check_output_file(json_out, "--json", mkdir=mkdir)
        if jsonl_out is not None:
            jsonl_out = check_output_file(jsonl_out, "--jsonl", mkdir=mkdir)
        if json_out is not None and jsonl_out is not None and not once:
            raise UsageError("--json and --jsonl: a continuous run writes JSON lines to --json already; give one")
        if json_out is not None and jsonl_out is not None and json_out.resolve() == jsonl_out.resolve():
            raise UsageError(f"--json and --jsonl both name {json_out}; give two different files")
        threshold: float | None = psnr_threshold
        if calibration is not None:
            from diffbench.monitor.probe import read_threshold

            threshold = read_threshold(calibration, probe_name)
        if threshold is None and not recording_only:
            raise UsageError("--psnr-threshold DB or --calibration FILE is required to judge the answers "
                             "(only a one-pass --record-reference run needs neither)")
        refs = None
        cases = []
        if reference is not None:
            refs = load_references(reference)
            label = str(reference)
        else:
            assert record_reference is not None
            record_reference = check_output_dir(record_reference, "--record-reference", mkdir=mkdir)
            if (record_reference / MANIFEST_NAME).exists():
                raise UsageError(f"--record-reference {record_reference} already holds {MANIFEST_NAME}; probe "
                                 f"against it with --reference {record_reference}, or choose an empty directory")
            cases = record_cases(prompt or [RECORD_PROMPT], seed=seed, width=width, height=height, frames=frames,
                                 steps=steps, n=n, guidance=guidance)
            label = str(record_reference)

        from diffbench.errors import require

        require("aiohttp", "serve")
        require("prometheus_client", "serve")
        require("PIL", "serve")
        from diffbench.monitor.probe_run import RunSpec, run

        spec = RunSpec(url=url, probe=probe_name, interval_s=interval, threshold_db=threshold, timeout_s=timeout,
                       allow_unfingerprinted=allow_unfingerprinted, reference_label=label, references=refs,
                       record_dir=record_reference, record_cases=cases, passes=passes, once=once,
                       metrics_port=metrics_port, metrics_host=metrics_host, json_out=json_out,
                       jsonl_out=jsonl_out)
        raise typer.Exit(run(spec))
