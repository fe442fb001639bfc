"""Tables and facts of the bench report: the conditions block, the summary, the per-run samples, the
reproducibility rows and the comparison of several results."""

from __future__ import annotations

import math
from datetime import datetime, timezone

from diffbench.bench.result import BenchResult, ShapeResult
from diffbench.core.stats import min_n_for
from diffbench.report.document import Block, Facts, Note, Table


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds with 2 decimals; ``—`` for None/NaN."""
    return "—" if seconds is None or math.isnan(seconds) else f"{seconds * 1e3:.2f}"


def _onoff(v: bool | None) -> str:
    return "—" if v is None else ("on" if v else "off")


def conditions_facts(block_id: str, label: str, r: BenchResult) -> Facts:
    """The field's minimal report conditions block, plus the protocol and the software."""
    c, e, p = r.conditions, r.env, r.protocol
    shapes = ", ".join(c.shapes) if c.shapes else c.shape
    threads = r.repro.threads if r.repro and r.repro.threads else e.torch_threads
    warmup = (f"auto (until warm, at most {p.max_warmup}): " + "/".join(str(len(s.warmup_s)) for s in r.shapes)
              if p.warmup_auto else str(p.warmup_per_shape))
    gpus = ", ".join(f"{g.name}" + (f" ({g.memory_bytes / 2**30:.0f} GiB)" if g.memory_bytes else "")
                     for g in e.gpus) or "none"
    pk = ", ".join(f"{k} {v}" for k, v in e.packages.items())
    status = "partial" if r.partial else "final"
    status += (", interrupted" if r.interrupted else "") + ("" if r.valid else ", INVALID (unsynchronized)")
    items = [
        ("model", f"{c.model} ({c.pipeline or '—'})" + (f" · hash {c.model_hash}" if c.model_hash else "")),
        ("shape", shapes),
        ("steps", str(c.steps)),
        ("CFG", c.cfg + ("" if c.guidance is None else f" (guidance {c.guidance:g})")),
        ("batch", str(c.batch)),
        ("engine", f"{c.engine} {c.engine_version}"),
        ("attention backend", c.attention_backend),
        ("parallelism", c.parallelism),
        ("precision", c.precision),
        ("cache", c.cache),
        ("compile", _onoff(c.compile)),
        ("device / hardware", f"{c.device}: {c.hardware}"),
        ("GPUs", gpus),
        ("driver / CUDA", f"{c.driver or '—'} / {c.cuda or '—'}"),
        ("CPU", f"{e.cpu} ({e.cpu_cores_logical} logical cores)"),
        ("threads", str(threads) if threads else "—"),
        ("deterministic algorithms", _onoff(e.deterministic_algorithms)),
        ("seeds", ", ".join(str(s) for s in c.seeds) if c.seeds else
         (f"{r.repro.seed} (first request)" if r.repro and r.repro.seed is not None else "—")),
        ("prompts", str(c.prompts) if c.prompts else "—"),
        ("warmup per shape", f"{warmup} (reported apart, never in the statistics)"),
        ("timed runs per shape", str(p.runs_per_shape)),
        ("synchronized", str(p.synchronized)),
        ("percentiles", p.percentile_method),
        ("clock", p.clock),
        ("software", f"Python {e.python}; {pk}" if pk else f"Python {e.python}"),
        ("OS", e.os),
        ("created", datetime.fromtimestamp(r.created_unix, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")),
        ("status", status),
    ]
    return Facts(id=block_id, title=f"Conditions · {label}", items=items)


def _pct(stats_value: float, n: int, q: float) -> str:
    return ms(stats_value) + ("*" if n < min_n_for(q) else "")


def latency_row(label: str, s: ShapeResult) -> list[str]:
    """result, shape, n, min, p50, p90, p99, max, mean, std (ms); * marks a percentile n does not support."""
    lat = s.latency_s
    assert lat is not None
    return [label, s.shape, str(lat.n), ms(lat.min), ms(lat.p50), _pct(lat.p90, lat.n, 90), _pct(lat.p99, lat.n, 99),
            ms(lat.max), ms(lat.mean), ms(lat.std)]


def summary_table(block_id: str, models: list[BenchResult], labels: list[str]) -> Table:
    """One row per result × shape, failed shapes included with their error."""
    rows = []
    for m, label in zip(models, labels, strict=True):
        for s in m.shapes:
            lat = s.latency_s
            if lat is None:
                rows.append([label, s.shape, "0", "—", "—", "—", "—", "—",
                             "FAILED (see Errors)" if s.error else "no timed run"])
                continue
            video = s.frames is not None
            thr = s.throughput_videos_per_s if video else s.throughput_images_per_s
            unit = "videos/s" if video else "images/s"
            peak = s.memory.peak_allocated_bytes if s.memory else None
            rows.append([label, s.shape, str(lat.n), ms(lat.p50), _pct(lat.p90, lat.n, 90), _pct(lat.p99, lat.n, 99),
                         "—" if thr is None else f"{thr:.3g} {unit}",
                         "—" if peak is None else f"{peak / 2**20:.1f}", "error (see Errors)" if s.error else "ok"])
    return Table(id=block_id, title="Summary (every shape)", rows=rows,
                 headers=["result", "shape", "n", "p50 (ms)", "p90 (ms)", "p99 (ms)", "throughput per device",
                          "peak memory (MiB)", "status"],
                 caption="* a percentile that n does not support (p90 needs n ≥ 10, p99 n ≥ 100).")


def samples_table(block_id: str, shape: str, series: list[tuple[str, ShapeResult]], per_row: int = 10) -> Table:
    """Every run of one shape in order (ms): per result a row of its warmups, then rows of ``per_row`` timed
    runs (``runs 1–10`` ...)."""
    rows = []
    for label, s in series:
        if s.warmup_s:
            for k in range(0, len(s.warmup_s), per_row):
                chunk = s.warmup_s[k:k + per_row]
                rows.append([label, f"warmup {k + 1}–{k + len(chunk)}"] + [ms(v) for v in chunk]
                            + [""] * (per_row - len(chunk)))
        for k in range(0, len(s.samples_s), per_row):
            chunk = s.samples_s[k:k + per_row]
            rows.append([label, f"timed {k + 1}–{k + len(chunk)}"] + [ms(v) for v in chunk]
                        + [""] * (per_row - len(chunk)))
    return Table(id=block_id, title=f"Every run · {shape} (ms, in the order run)",
                 headers=["result", "runs"] + [f"+{j}" for j in range(per_row)], rows=rows,
                 caption="The numbers behind the CDF, the histogram and the runs plot; column +j is run "
                         "(first of the row) + j. Warmup rows are never in the statistics.")


def repro_rows(models: list[BenchResult], labels: list[str]) -> list[list[str]]:
    rows = []
    for m, label in zip(models, labels, strict=True):
        for s in m.shapes:
            rp = s.repro
            if rp is None:
                continue
            psnr = "—" if rp.psnr_db is None else ("inf (bitwise identical)" if math.isinf(rp.psnr_db)
                                                   else f"{rp.psnr_db:.2f} dB")
            verdict = {True: "reproducible", False: "NOT reproducible", None: "—"}[rp.reproducible]
            rows.append([label, s.shape, psnr, f"{rp.threshold_db:g} dB", verdict, str(rp.seed),
                         rp.generator_device, str(rp.threads or "—"), _onoff(rp.deterministic_algorithms),
                         rp.attention_backend or "—"])
    return rows


def compare_blocks(models: list[BenchResult], labels: list[str]) -> list[Block]:
    """Each later result's p50 against the first result's at the same shape: ratio, bootstrap 95 % interval
    of the speed-up (ratio of medians, :func:`diffbench.sweep.bootstrap.speedup_ci`), and the first result's
    noise floor (its even vs odd timed runs, :func:`diffbench.sweep.interleave.noise_floor_ci`)."""
    from diffbench.sweep.bootstrap import speedup_ci
    from diffbench.sweep.interleave import noise_floor_ci
    from diffbench.sweep.working_point import noise_floor_note

    rows: list[list[str]] = []
    wide: list[str] = []
    for shape in dict.fromkeys(s.shape for m in models for s in m.shapes):
        have = [(label, s) for m, label in zip(models, labels, strict=True) for s in m.shapes
                if s.shape == shape and s.latency_s is not None and s.samples_s]
        if len(have) < 2:
            continue
        base_label, base = have[0]
        floor = noise_floor_ci(base.samples_s)
        floor_txt = "— (needs ≥ 2 runs)" if floor is None else f"{floor.low:.3f} – {floor.high:.3f}"
        if (note := noise_floor_note(floor)) is not None:
            wide.append(f"{shape}: {note}")
        assert base.latency_s is not None
        for label, s in have[1:]:
            assert s.latency_s is not None
            ci = speedup_ci(base.samples_s, s.samples_s)
            outside = floor is None or ci.low > floor.high or ci.high < floor.low
            verdict = ("faster" if ci.low > 1 and outside else "slower" if ci.high < 1 and outside
                       else "within noise")
            rows.append([shape, label, base_label, ms(s.latency_s.p50), ms(base.latency_s.p50),
                         f"{s.latency_s.p50 / base.latency_s.p50:.3f}", f"{ci.speedup:.3f}",
                         f"{ci.low:.3f} – {ci.high:.3f}", floor_txt, verdict])
    diff = _conditions_diff(models, labels)
    diff_table = Table(id="bench-conditions-diff", title="Conditions that differ", headers=["field", *labels],
                       rows=diff, caption="the generation conditions, the protocol and the environment "
                       "(threads, GPUs, driver, package versions) of each file")
    if not rows:
        none = Note(id="bench-compare-none", text="The results share no timed shape: no latency to compare.")
        return [none, diff_table] if diff else [none]
    blocks: list[Block] = [
        Table(id="bench-compare", title=f"Comparison with {labels[0]} (the first result)", rows=rows,
              headers=["shape", "result", "against", "p50 (ms)", "its p50 (ms)", "p50 ratio", "speed-up",
                       "speed-up 95 % CI", "noise floor 95 % CI", "verdict"],
              caption="p50 ratio = this p50 / the first result's; speed-up = the first's median / this median "
                      "with a percentile-bootstrap interval (2000 resamples). Noise floor: the first result "
                      "against itself (even vs odd timed runs); a difference counts only when the interval "
                      "clears both 1 and the noise floor."),
        Note(id="bench-compare-note", level="warn",
             text="These results are separate bench runs, not interleaved: drift of the machine between them is "
                  "not controlled. For a decision, compare the configurations interleaved in one process "
                  "(diffbench sweep)."),
    ]
    blocks += [Note(id=f"bench-compare-floor-{k}", level="warn", text=t) for k, t in enumerate(wide)]
    if diff:
        blocks.append(diff_table)
    return blocks


def _flat(prefix: str, obj: object) -> dict[str, str]:
    if isinstance(obj, dict):
        out: dict[str, str] = {}
        for k, v in obj.items():
            out.update(_flat(f"{prefix}.{k}" if prefix else str(k), v))
        return out
    return {prefix: str(obj)}


def _conditions_diff(models: list[BenchResult], labels: list[str]) -> list[list[str]]:
    """Fields whose values differ between the results: conditions, protocol and environment (``env.*``:
    threads, CPU, GPUs, driver, packages), flattened to dotted names; a field missing in one file shows None."""
    dumps = [{**_flat("", m.conditions.model_dump(mode="json")), **_flat("protocol", m.protocol.model_dump(mode="json")),
              **_flat("env", m.env.model_dump(mode="json"))} for m in models]
    keys = list(dict.fromkeys(k for d in dumps for k in d))
    return [[k] + [d.get(k, "None") for d in dumps] for k in keys if len({d.get(k, "None") for d in dumps}) > 1]
