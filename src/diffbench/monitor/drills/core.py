"""What every drill shares: the drill's report (timeline, checks, alert timings), the alert watcher that
polls the local Prometheus, scrape parsing and recording, and the drill-speed rule file.

Timing (printed and in the JSON): every time is seconds since the injection. For each expected alert the
report holds ``condition_s`` (first poll at which the alert's own expression, run as an instant query,
returned a series: the metric has moved far enough), ``fired_s`` (first poll at which ``/api/v1/alerts``
listed it as firing) and the bound ``for + 2 × scrape interval`` that ``fired_s - condition_s`` must meet
(the drills' bound: each alert fires within its ``for`` + 2 scrape intervals). Polls run every 0.25 s, so each
time is late by at most that much.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from diffbench.monitor.promserver import PromServer

POLL_S = 0.25


@dataclass
class Check:
    name: str
    passed: bool
    detail: str


@dataclass
class AlertTiming:
    """One expected alert: its ``for`` (s, shortened), the bound, and when the condition held / it fired."""

    name: str
    for_s: float
    bound_s: float
    condition_s: float | None = None
    fired_s: float | None = None

    @property
    def latency_s(self) -> float | None:
        if self.fired_s is None or self.condition_s is None:
            return None
        return self.fired_s - self.condition_s

    @property
    def within_bound(self) -> bool:
        lat = self.latency_s
        return lat is not None and lat <= self.bound_s + POLL_S


@dataclass
class DrillReport:
    """The result of one drill (JSON via :meth:`as_dict`)."""

    drill: str
    inject: str = ""
    expected_alerts: list[str] = field(default_factory=list)
    silent_alerts: list[str] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    alerts: dict[str, AlertTiming] = field(default_factory=dict)
    seen_alerts: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0
    error: str | None = None
    _t0: float = field(default_factory=time.monotonic, repr=False)
    _inject_t: float | None = field(default=None, repr=False)

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.checks) and all(c.passed for c in self.checks)

    def since_inject(self, t: float | None = None) -> float:
        t = time.monotonic() if t is None else t
        return t - (self._inject_t if self._inject_t is not None else self._t0)

    def event(self, kind: str, text: str, *, echo: bool = True) -> None:
        rel = self.since_inject() if self._inject_t is not None else None
        self.timeline.append({"kind": kind, "t_s": None if rel is None else round(rel, 3), "text": text})
        if echo:
            stamp = "      " if rel is None else f"{rel:+6.1f}s"
            print(f"[{self.drill}] {stamp} {kind:<8} {text}", flush=True)

    def mark_inject(self, text: str) -> None:
        self._inject_t = time.monotonic()
        self.inject = text
        self.event("inject", text)

    def check(self, name: str, passed: bool, detail: str) -> bool:
        self.checks.append(Check(name, bool(passed), detail))
        self.event("check", f"{'PASS' if passed else 'FAIL'} {name}: {detail}")
        return bool(passed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "drill": self.drill,
            "passed": self.passed,
            "inject": self.inject,
            "expected_alerts": self.expected_alerts,
            "silent_alerts": self.silent_alerts,
            "alerts": {k: {**asdict(v), "latency_s": v.latency_s, "within_bound": v.within_bound}
                       for k, v in self.alerts.items()},
            "seen_alerts": self.seen_alerts,
            "checks": [asdict(c) for c in self.checks],
            "values": self.values,
            "timeline": self.timeline,
            "wall_s": round(self.wall_s, 2),
            "error": self.error,
        }


def rule_for_s(rules: dict[str, Any], alert: str) -> float:
    """The (shortened) ``for`` of ``alert`` in seconds (0 when the rule has none)."""
    fors = [duration_s(r["for"]) if "for" in r else 0.0
            for g in rules.get("groups", []) for r in g.get("rules", []) if r.get("alert") == alert]
    if not fors:
        raise KeyError(f"alert {alert} is not in the rule file")
    return max(fors)


def duration_s(text: str) -> float:
    """Seconds in a Prometheus duration (``5s``, ``1m30s``, ``500ms``).

    Raises:
        ValueError: not a Prometheus duration.
    """
    import re

    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}
    s = str(text).strip()
    if not re.fullmatch(r"(?:\d+(?:ms|[smhdwy]))+", s):
        raise ValueError(f"{text!r} is not a Prometheus duration")
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)(ms|[smhdwy])", s))


def rule_exprs(rules: dict[str, Any], alert: str) -> list[str]:
    """The expressions of every rule named ``alert`` (an alert may be split into several rules)."""
    return [str(r["expr"]) for g in rules.get("groups", []) for r in g.get("rules", []) if r.get("alert") == alert]


def drill_rules(max_for_s: float) -> dict[str, Any]:
    """The real rule file (``monitoring/alerts.yaml``) with ``for`` and averaging windows shortened."""
    from diffbench.monitor.rules import RULES_PATH, load_rules, shorten_for

    return shorten_for(load_rules(RULES_PATH), max_for_s)


class AlertWatcher:
    """Polls ``/api/v1/alerts`` and the expected alerts' expressions every :data:`POLL_S` in a thread.

    Records, per alert name, the first time (``time.monotonic``) it was seen pending and firing, and, for the
    ``watch`` list, the first time its expression returned a series.
    """

    def __init__(self, prom: PromServer, rules: dict[str, Any], watch: list[str]) -> None:
        self.prom = prom
        self.exprs = {a: rule_exprs(rules, a) for a in watch}
        self.first_state: dict[tuple[str, str], float] = {}
        self.first_condition: dict[str, float] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drill-alert-watch", daemon=True)

    def __enter__(self) -> AlertWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            try:
                for a in self.prom.alerts():
                    self.first_state.setdefault((a.name, a.state), now)
                for name, exprs in self.exprs.items():
                    if name not in self.first_condition and any(self.prom.query(e) for e in exprs):
                        self.first_condition[name] = now
            except Exception as exc:  # a poll failure is data; the drill checks go on
                if len(self.errors) < 20:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(POLL_S)

    def seen(self, name: str, since: float | None = None) -> str | None:
        """``firing`` / ``pending`` when ``name`` was seen in that state (after ``since``), else None."""
        for state in ("firing", "pending"):
            t = self.first_state.get((name, state))
            if t is not None and (since is None or t >= since):
                return state
        return None

    def fired_at(self, name: str) -> float | None:
        return self.first_state.get((name, "firing"))

    def wait_fired(self, names: list[str], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(self.fired_at(n) is not None for n in names):
                return True
            time.sleep(POLL_S)
        return all(self.fired_at(n) is not None for n in names)


def parse_scrape(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A text-format scrape as ``{(sample name, sorted labels): value}`` (prometheus_client's parser)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def sample_sum(scrape: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
               **labels: str) -> float:
    """Sum of the samples named ``name`` whose labels include ``labels``."""
    return sum(v for (n, ls), v in scrape.items()
               if n == name and all(dict(ls).get(k) == want for k, want in labels.items()))


def series_keys(scrape: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> set[tuple[str, tuple]]:
    """The exported series (name + labels), without ``_created`` samples."""
    return {k for k in scrape if not k[0].endswith("_created")}


class Recorder:
    """Saves scrapes and query results under ``DIR/<drill>/`` when ``--record-scrapes DIR`` is given.

    Names: ``before*.prom`` and ``after*.prom`` (one file per endpoint, e.g. ``after.prom`` for the service,
    ``after_probe.prom`` for the probe), which ``doctor --scrape DIR`` merges into one before and one after
    view; ``queries.json`` holds the Prometheus query results by phase."""

    def __init__(self, root: Path | None, drill: str) -> None:
        self.dir = None if root is None else root / drill
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
        self.queries: dict[str, Any] = {}

    def scrape(self, name: str, text: str) -> None:
        if self.dir is not None:
            (self.dir / f"{name}.prom").write_text(text)

    def prom_scrape(self, name: str, prom: PromServer, job: str, *, at: float | None = None) -> str:
        """Save what Prometheus scraped from ``job`` (at Unix time ``at``, default its latest scrape) as a
        text-format scrape (see :func:`prom_exposition`).

        For the memory peaks, which reset on read: a direct scrape after Prometheus's would show 0."""
        when = "its latest scrape" if at is None else f"the scrape at Unix time {at:.3f}"
        text = prom_exposition(prom.query(f'{{job="{job}"}}', at=at),
                               note=f"the series the local Prometheus stored from job {job}, {when}")
        self.scrape(name, text)
        return text

    def query(self, phase: str, prom: PromServer, exprs: dict[str, str]) -> dict[str, Any]:
        res: dict[str, Any] = {}
        for key, expr in exprs.items():
            try:
                res[key] = {"expr": expr, "result": prom.query(expr)}
            except Exception as exc:
                res[key] = {"expr": expr, "error": str(exc)}
        try:
            res["alerts"] = [asdict(a) for a in prom.alerts()]
        except Exception as exc:
            res["alerts"] = {"error": str(exc)}
        self.queries[phase] = res
        if self.dir is not None:
            (self.dir / "queries.json").write_text(json.dumps(self.queries, indent=1, sort_keys=True))
        return res


@dataclass
class DrillOptions:
    """Knobs shared by the drills (CLI flags of ``diffbench drill``).

    ``max_for_s``: the drill copy of the rule file caps every ``for`` at this (s); ``scrape_s``: scrape and
    evaluation interval of the local Prometheus (s); ``record_dir``: where ``--record-scrapes`` saves
    scrapes (None: not saved); ``workdir``: logs, references and the calibration file.
    """

    workdir: Path
    max_for_s: float = 5.0
    scrape_s: float = 1.0
    record_dir: Path | None = None
    fire_timeout_s: float = 90.0
    budget_db: float = 55.0
    size: str = "64x64"
    steps: int = 8


def prom_exposition(result: list[dict[str, Any]], *, note: str = "") -> str:
    """An instant-vector query result (every series of one job) as Prometheus text format 0.0.4.

    ``job`` and ``instance`` (added by Prometheus) are dropped, other labels kept as they were scraped
    (``le="30.0"``); ``# HELP``/``# TYPE`` lines come from :data:`diffbench.metrics.names.METRICS`, so
    histograms and counters parse as their families again. Series of unknown families are left out.
    """
    from diffbench.metrics.names import METRICS

    fams = {spec.name: spec for spec in METRICS}
    by_family: dict[str, list[str]] = {}
    for series in result:
        labels = dict(series["metric"])
        sample = labels.pop("__name__", "")
        labels.pop("job", None)
        labels.pop("instance", None)
        family = None
        for suffix in ("_total", "_bucket", "_count", "_sum", "_created", ""):
            base = sample[: len(sample) - len(suffix)] if suffix and sample.endswith(suffix) else sample
            if (suffix == "" or sample.endswith(suffix)) and base in fams:
                family = base
                break
        if family is None:
            continue
        value = series["value"][1]
        body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items(), key=lambda kv: (kv[0] == "le", kv[0])))
        by_family.setdefault(family, []).append(f"{sample}{{{body}}} {value}" if body else f"{sample} {value}")
    lines = [f"# {note}"] if note else []
    for family in sorted(by_family):
        spec = fams[family]
        lines.append(f"# HELP {family} {spec.help}")
        lines.append(f"# TYPE {family} {spec.kind}")
        lines.extend(sorted(by_family[family], key=_bucket_order))
    return "\n".join(lines) + "\n"


def _bucket_order(line: str) -> tuple[str, float]:
    """Sort samples by name and labels, ``le`` buckets numerically (``+Inf`` last)."""
    import re

    m = re.search(r'[{,]le="([^"]+)"', line)
    head = re.sub(r'([{,])le="[^"]+"', r"\1", line.split(" ")[0])
    le = float("inf") if m and m.group(1) == "+Inf" else (float(m.group(1)) if m else 0.0)
    return head, le


def start_drill(opts: DrillOptions, report: DrillReport, name: str, expected: list[str],
                silent: list[str] | None = None) -> tuple[Path, Recorder, dict[str, Any]]:
    """What every drill does first: record the alerts it expects (and those that must stay silent), make its
    work directory ``opts.workdir / name``, and return (work directory, scrape recorder, shortened rules)."""
    report.expected_alerts, report.silent_alerts = list(expected), list(silent or [])
    work = opts.workdir / name
    work.mkdir(parents=True, exist_ok=True)
    return work, Recorder(opts.record_dir, name), drill_rules(opts.max_for_s)
