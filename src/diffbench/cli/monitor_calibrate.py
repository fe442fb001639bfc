"""``diffbench monitor calibrate``: the calibration file from ``bench --json`` and ``sweep`` results."""

from __future__ import annotations

import math

import typer


def parse_threshold(text: str) -> tuple[str, float]:
    """``NAME=DB`` → (probe name, threshold in dB). Raises UsageError naming ``--psnr-threshold``."""
    from diffbench.errors import UsageError

    name, sep, raw = text.partition("=")
    name = name.strip()
    try:
        db = float(raw)
    except ValueError:
        db = math.nan
    if not sep or not name or not (math.isfinite(db) and db > 0):
        raise UsageError(f"--psnr-threshold {text!r}: give NAME=DB with a finite threshold > 0 dB, e.g. 256x256=32")
    return name, db


def register(app: typer.Typer) -> None:
    """Register ``calibrate`` on the ``monitor`` sub-app."""

    @app.command()
    def calibrate(
        results: list[str] = typer.Argument(..., metavar="RESULT.json...", help="bench --json and sweep result files."),
        output: str = typer.Option(..., "-o", "--output", help="The calibration JSON to write."),
        slo: float | None = typer.Option(None, "--slo", help="Latency SLO, seconds (exported as a gauge)."),
        psnr_threshold: list[str] = typer.Option(
            [], "--psnr-threshold", help="NAME=DB: PSNR threshold of probe NAME (repeatable; wins over a sweep's)."
        ),
        sweep_point: str | None = typer.Option(
            None, "--sweep-point", help="Sweep value to take the cache hit ratio from (default: the working point)."
        ),
        mkdir: bool = typer.Option(False, "--mkdir", help="Create a missing parent directory of -o."),
    ) -> None:
        """Write baselines (step, stage, cache hit ratio per shape), probe thresholds and the SLO for serve
        --calibration. All results must come from one deployment (same fingerprint)."""
        import json
        from pathlib import Path

        from diffbench.core.jsonio import write_json_atomic
        from diffbench.core.outpath import check_output_file
        from diffbench.errors import InputError, UsageError
        from diffbench.monitor.calibration import calibrate as build

        if slo is not None and not (math.isfinite(slo) and slo > 0):
            raise UsageError(f"--slo {slo}: must be a finite number of seconds > 0")
        thresholds = dict(parse_threshold(t) for t in psnr_threshold)
        out = check_output_file(output, "-o", mkdir=mkdir)
        loaded = []
        for name in results:
            p = Path(name)
            try:
                loaded.append((name, json.loads(p.read_text(encoding="utf-8"))))
            except FileNotFoundError:
                raise InputError(f"{name}: result file not found") from None
            except IsADirectoryError:
                raise InputError(f"{name} is a directory; give a bench --json or sweep result file") from None
            except (OSError, UnicodeDecodeError) as exc:
                raise InputError(f"{name}: cannot read ({exc})") from None
            except ValueError as exc:
                raise InputError(f"{name}: not JSON ({exc}); give a bench --json or sweep result file") from None
        cal = build(loaded, slo_s=slo, psnr_thresholds=thresholds, sweep_point=sweep_point)
        write_json_atomic(out, cal.model_dump(mode="json"))
        typer.echo(f"calibration: {len(cal.shapes)} shape(s) ({', '.join(cal.shapes)}), "
                   f"{len(cal.probes)} probe threshold(s), fingerprint {cal.fingerprint_id} -> {out}")
        for note in cal.notes:
            typer.echo(f"  note: {note}")
