"""``diffbench quality``: compare a candidate run's outputs with a fixed-seed baseline, then gate.

A pair whose estimated peak memory (read from the headers, before decoding) is above the bound (70 % of available
memory per thread), or an image above Pillow's decompression-bomb limit, is a pair error naming the file, its size,
the estimate and ``--allow-large`` (which lifts both).

Exit codes: 0 ok; 1 a gate failed (outputs written first); 2 pair errors without ``--allow-missing``
or bad input (unknown gate metric/statistic, missing directories, unwritable ``--json``/``--csv``: all
checked before any pair is decoded); 3 missing weights (LPIPS / Inception). Heavy imports happen
inside the command. Generation settings that differ between the two manifests are printed (and in
the JSON as ``settings_diff``) without failing the run. While pairs are scored, a live line on stderr
shows pairs done / total, pairs/s and the ETA (off with ``--quiet`` or when stderr is not a terminal;
``DIFFBENCH_PROGRESS=always|never`` forces it); stdout carries only the tables.

``--ray ADDRESS`` scores the pairs on Ray actors (:mod:`diffbench.distributed.quality`): the pairing, summaries,
gates and exit codes are those of the single-process run; a missing ray extra exits 3, a bad address 2.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer


def progress_text(done: int, total: int, elapsed_s: float) -> str:
    """The live line: ``"quality: 12/40 pairs  3.1 pairs/s  ETA 9.0s"`` (rate = done / elapsed wall time)."""
    from diffbench.core.progress import eta_s, fmt_duration

    rate = f"{done / elapsed_s:.1f} pairs/s" if elapsed_s > 0 and done > 0 else "? pairs/s"
    return f"quality: {done}/{total} pairs  {rate}  ETA {fmt_duration(eta_s(done, total, elapsed_s))}"


def interrupted_text(state: Path | None) -> str:
    """What an interrupted ``quality`` keeps: the pairs recorded in ``--ray-state`` (counted there), else nothing."""
    if state is None:
        return ("interrupted: no report was written (quality keeps no partial result; with --ray, --ray-state DIR "
                "keeps each scored pair so that a rerun scores only the rest)")
    from diffbench.distributed.taskstore import TASKS_DIR

    kept = len(list((state / TASKS_DIR).glob("*.json"))) if (state / TASKS_DIR).is_dir() else 0
    return (f"interrupted: {kept} scored pair(s) are kept in {state}; rerun the same command to score only the "
            "rest (no report was written)")


def _check_ray(address: str | None, workers: int | None, actors: int | None, threads: int | None) -> str | None:
    """The checked ``--ray`` address (None without it), before any work.

    Raises:
        UsageError: a malformed address; --ray-actors/--ray-threads without --ray or below 1; --workers with --ray
            (its threads belong to the single-process run; actors and their threads replace them).
    """
    from diffbench.errors import UsageError

    if address is None:
        for flag, v in (("--ray-actors", actors), ("--ray-threads", threads)):
            if v is not None:
                raise UsageError(f"{flag} needs --ray ADDRESS (local | auto | HOST:PORT)")
        return None
    from diffbench.distributed.cluster import check_address

    checked = check_address(address)
    if workers is not None:
        raise UsageError("--workers sets the threads of the single-process run and cannot be distributed; with --ray "
                         "use --ray-actors N (and --ray-threads per actor)")
    for flag, v in (("--ray-actors", actors), ("--ray-threads", threads)):
        if v is not None and v < 1:
            raise UsageError(f"{flag} must be >= 1, got {v}")
    return checked


def register(app: typer.Typer) -> None:
    @app.command("quality")
    def quality(
        baseline: Path = typer.Argument(..., help="Baseline outputs dir (or RUN_A with --noise-floor)."),
        candidate: Path = typer.Argument(..., help="Candidate outputs dir (or RUN_B with --noise-floor)."),
        json_out: Path | None = typer.Option(None, "--json", help="Write the full report (JSON)."),
        csv_out: Path | None = typer.Option(None, "--csv", help="Write one row per pair (per frame for video)."),
        gate: list[str] = typer.Option([], "--gate", help="METRIC.STAT OP NUMBER, e.g. 'psnr.p10>=30' "
                                       "(repeatable; STAT: n mean p10 p50 p90 min max worst)."),
        preset: str | None = typer.Option(None, "--preset", help="equivalent | sglang-ci-image | "
                                          "sglang-ci-video (starting points; calibrate per model)."),
        allow_missing: bool = typer.Option(False, "--allow-missing", help="Succeed even when pairs could not "
                                           "be compared (they are still listed)."),
        alpha: str = typer.Option("reject", "--alpha", help="RGBA policy: reject | drop | composite-white."),
        lpips: bool = typer.Option(False, "--lpips/--no-lpips", help="Compute LPIPS(alex) (needs weights; "
                                   "never skipped silently when asked)."),
        lpips_backbone: Path | None = typer.Option(None, "--lpips-backbone", help="alexnet-owt-7be5be79.pth "
                                                   "(default: $TORCH_HOME/hub/checkpoints/)."),
        ms_ssim: bool = typer.Option(True, "--ms-ssim/--no-ms-ssim", help="MS-SSIM where H, W >= 176."),
        fid: bool = typer.Option(False, "--fid", help="FID/KID between the two sets (needs Inception)."),
        inception: Path | None = typer.Option(None, "--inception", help="inception-2015-12-05.pt TorchScript."),
        clip: Path | None = typer.Option(None, "--clip", help="Local CLIP model dir: CLIP score of both "
                                         "sides with the manifest prompt (reports truncated prompts)."),
        pickscore: Path | None = typer.Option(None, "--pickscore", help="Local PickScore dir (CLIPModel + "
                                              "processor): paired Δ = candidate − baseline per prompt, mean, SEM, z."),
        clip_iqa: Path | None = typer.Option(None, "--clip-iqa", help="Local CLIP dir for CLIP-IQA (torchmetrics): "
                                             "paired Δ of P('Good photo.') per pair."),
        worst: int = typer.Option(5, "--worst", help="How many worst pairs to list per metric."),
        workers: int | None = typer.Option(None, "--workers", help="Threads decoding and scoring pairs "
                                           "(default 2; one process, not with --ray)."),
        ray: str | None = typer.Option(None, "--ray", help="Score the pairs on Ray actors: local (a private "
                                       "cluster on this machine, loopback only) | auto | HOST:PORT. Paths must "
                                       "be readable on every node."),
        ray_actors: int | None = typer.Option(None, "--ray-actors", help="Actors for --ray (default: as many as "
                                              "the cluster's CPUs hold at --ray-threads each)."),
        ray_threads: int | None = typer.Option(None, "--ray-threads", help="CPUs and torch threads per actor "
                                               "for --ray (default 1)."),
        ray_state: Path | None = typer.Option(None, "--ray-state", help="[--ray] Keep each scored pair's result "
                                              "in this directory (one record per pair, its id a hash of the key, "
                                              "both files' sha256 and the metric settings) and skip those pairs "
                                              "on a rerun: an actor that dies loses no scored pair."),
        noise_floor: bool = typer.Option(False, "--noise-floor", help="The two dirs are two baseline runs "
                                         "of one configuration: report the floor gates must sit below."),
        mkdir: bool = typer.Option(False, "--mkdir", help="Create missing parent directories of --json/--csv "
                                   "(otherwise a missing directory is an error before any work)."),
        allow_large: bool = typer.Option(False, "--allow-large", help="Score pairs whose estimated peak memory "
                                         "(from the headers, before decoding) is above 70 % of available memory per "
                                         "thread, and images above Pillow's decompression-bomb limit."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress line on stderr (pairs done / total, "
                                   "pairs/s; drawn only when stderr is a terminal)."),
    ) -> None:
        """Quality against a fixed-seed baseline: PSNR/SSIM/MS-SSIM/LPIPS per pair, video, FID/KID, gates."""
        from diffbench.core.console import make_console
        from diffbench.core.outpath import check_output_file
        from diffbench.core.progress import LiveLine
        from diffbench.errors import GateFailed, InputError, UsageError
        from diffbench.quality.compare import compare_dirs
        from diffbench.quality.gates import parse_gate, preset_gates
        from diffbench.quality.io import ALPHA_POLICIES
        from diffbench.quality.models import QualityOptions
        from diffbench.report.quality_render import render_console, write_csv, write_json

        if alpha not in ALPHA_POLICIES:
            raise UsageError(f"--alpha {alpha!r}: choose one of {', '.join(ALPHA_POLICIES)}")
        if (workers is not None and workers < 1) or worst < 0:
            raise UsageError("--workers must be >= 1 and --worst >= 0")
        address = _check_ray(ray, workers, ray_actors, ray_threads)
        if ray_state is not None:
            if address is None:
                raise UsageError("--ray-state needs --ray ADDRESS (local | auto | HOST:PORT)")
            from diffbench.core.outpath import check_output_dir

            check_output_dir(ray_state, "--ray-state", mkdir=mkdir)
        gates = [parse_gate(g) for g in gate] + (preset_gates(preset) if preset else [])
        if json_out is not None:
            json_out = check_output_file(json_out, "--json", mkdir=mkdir)
        if csv_out is not None:
            csv_out = check_output_file(csv_out, "--csv", mkdir=mkdir)
        if json_out is not None and csv_out is not None and json_out.resolve() == csv_out.resolve():
            raise UsageError(f"--json and --csv both name {json_out}; give two different files")
        for side, d in (("BASELINE", baseline), ("CANDIDATE", candidate)):
            if not d.is_dir():
                what = "does not exist" if not d.exists() else "is not a directory"
                raise InputError(f"{side} {d} {what}; give a run's output directory (bench --save-outputs DIR) "
                                 "or a folder of images")
        opts = QualityOptions(alpha=alpha, allow_missing=allow_missing, ms_ssim=ms_ssim, lpips=lpips,  # type: ignore[arg-type]
                              lpips_backbone=lpips_backbone, fid=fid, inception=inception, clip=clip, pickscore=pickscore,
                              clip_iqa=clip_iqa, worst=worst, allow_large=allow_large,
                              workers=workers if workers is not None else 2)
        console = make_console()
        with contextlib.ExitStack() as stack:
            executor = None
            if address is not None:
                from diffbench.distributed.cluster import connect
                from diffbench.distributed.quality import RayPairs

                info = stack.enter_context(connect(address))
                executor = RayPairs(info, actors=ray_actors, threads=ray_threads or 1, state=ray_state)
            line = stack.enter_context(LiveLine.for_cli(quiet))
            line.update("pairing outputs")
            try:
                report = compare_dirs(baseline, candidate, opts, gates=gates, noise_floor=noise_floor,
                                      progress=lambda i, n: line.update(progress_text(i, n, line.elapsed_s())),
                                      executor=executor)
            except KeyboardInterrupt:
                report = None
        if report is None:  # Ctrl-C: the live line and the cluster are closed; say what is kept
            typer.secho(interrupted_text(ray_state), fg="red", err=True)
            raise typer.Exit(130)
        render_console(report, console)
        from diffbench.core.jsonio import write_each

        writes = [] if json_out is None else [lambda: write_json(report, json_out)]
        if csv_out is not None:
            writes.append(lambda: write_csv(report, csv_out))
        write_each(*writes)  # both tried; one that cannot be written exits 6 naming it
        if report.errors and not allow_missing:
            listed = "; ".join(f"{e.key}: {e.problem}" for e in report.errors[:10])
            more = f" (+{len(report.errors) - 10} more)" if len(report.errors) > 10 else ""
            large = " (--allow-large scores the pairs refused as too large)" if any(
                "--allow-large" in e.problem for e in report.errors) else ""
            raise InputError(f"{len(report.errors)} pair(s) could not be compared: {listed}{more}. "
                             f"Fix the outputs or pass --allow-missing{large}")
        if report.n_pairs == 0:
            raise InputError(f"no pair could be compared between {baseline} and {candidate}")
        failed = [g for g in report.gates if not g.passed]
        if failed:
            raise GateFailed("; ".join(g.message for g in failed))
