"""Offline checks of the rule file and the dashboard, no Grafana or network (the rules of grafana/dashboard-linter,
https://github.com/grafana/dashboard-linter, that matter here, written in Python).

Each ``*_problems`` function returns a list of human-readable problems (empty = clean), so a test can
assert both that the shipped files are clean and that a broken input is caught. :func:`promtool_check_exprs`
parses expressions with ``promtool`` by writing them as a throwaway recording-rule file.

Metric identifiers are found this way: every whole identifier
``[A-Za-z_:][A-Za-z0-9_:]*`` of an expression (quoted strings removed first) that mentions ``diffusion_``;
one with a colon must be a recording rule of the rule file, any other a sample name of
:func:`diffbench.metrics.names.sample_names`. Matching a bare ``diffusion_\\w+`` would wrongly pull
``diffusion_requests_failed`` out of ``model:diffusion_requests_failed:ratio_rate5m``.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from diffbench.metrics import names

SEVERITIES = ("page", "warning", "info")
RECORD_NAME = re.compile(r"^[a-z][a-z0-9_]*:[a-z][a-z0-9_]*:[a-z][a-z0-9_]*$")
"""``level:metric:operations`` (Prometheus recording-rule naming)."""
REQUEST_SAMPLES = frozenset(s for m in names.METRICS if "traffic" in m.labels for s in m.samples)
"""Samples of the families with a ``traffic`` label: every selector of them must say ``traffic="user"``
(probe and warmup requests never count)."""

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LE = re.compile(r'\ble\s*(=~|!~|!=|=)\s*"([^"]*)"')
_INT = re.compile(r"^[+-]?\d+$")
_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*(\{[^}]*\})?")
_RANGE_FN = re.compile(r"\b(rate|irate|increase)\s*\(")
BUILTIN_RANGE = re.compile(r"\$__(?:rate_interval|interval|range)\b")
TEMPLATE_VAR = re.compile(r"\$\{\w+(?::\w+)?\}|\$\w+")
UNIT_PANELS = ("timeseries", "stat", "gauge", "bargauge", "heatmap")
DATASOURCE_UID = "${datasource}"


def _strip_strings(expr: str) -> str:
    return _STRING.sub('""', expr)


def metric_identifiers(expr: str) -> set[str]:
    """Identifiers of ``expr`` that mention ``diffusion_`` (recording rules and sample names)."""
    return {t for t in _IDENT.findall(_strip_strings(expr)) if "diffusion_" in t}


def unknown_metrics(expr: str, recorded: Iterable[str]) -> list[str]:
    """Identifiers of ``expr`` that are neither a sample of the metric table nor a recording rule."""
    samples, rec = names.sample_names(), set(recorded)
    bad = []
    for ident in sorted(metric_identifiers(expr)):
        known = ident in rec if ":" in ident else ident in samples
        if not known:
            bad.append(ident)
    return bad


def integer_le_values(expr: str) -> list[str]:
    """``le`` matchers written as integers (``le="30"``): they match nothing that prometheus_client
    writes (``le="30.0"``) and nothing at all on Prometheus 3, which stores ``le`` in that float form
    (https://prometheus.io/docs/prometheus/latest/migration/, "le and quantile label values")."""
    return [m.group(0) for m in _LE.finditer(expr) if _INT.match(m.group(2))]


def request_selectors_without_user_traffic(expr: str) -> list[str]:
    """Selectors of request series that do not select ``traffic="user"``."""
    bad = []
    for m in _SELECTOR.finditer(expr):
        if m.group(1) in REQUEST_SAMPLES and 'traffic="user"' not in (m.group(2) or "").replace(" ", ""):
            bad.append(m.group(0))
    return bad


def iter_rules(rules: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for group in rules.get("groups", []):
        yield from group.get("rules", [])


def rule_problems(rules: dict[str, Any]) -> list[str]:
    """Problems of a rule-file dict: unknown metrics, integer ``le``, request selectors without
    ``traffic="user"``, recording names outside ``level:metric:operations``, alerts without a
    ``severity`` in :data:`SEVERITIES`, a ``summary`` or a ``runbook_url``."""
    from diffbench.monitor.rules import recorded_names

    recorded = recorded_names(rules)
    out: list[str] = []
    for rule in iter_rules(rules):
        name = rule.get("alert") or rule.get("record") or "?"
        expr = str(rule.get("expr", ""))
        out += [f"{name}: unknown metric {m}" for m in unknown_metrics(expr, recorded)]
        out += [f"{name}: integer le matcher {m} (write le=\"30.0\")" for m in integer_le_values(expr)]
        out += [f"{name}: request series without traffic=\"user\": {s}"
                for s in request_selectors_without_user_traffic(expr)]
        if "record" in rule and not RECORD_NAME.match(rule["record"]):
            out.append(f"{name}: recording rule name is not level:metric:operations")
        if "alert" in rule:
            sev = (rule.get("labels") or {}).get("severity")
            if sev not in SEVERITIES:
                out.append(f"{name}: severity {sev!r} not in {SEVERITIES}")
            ann = rule.get("annotations") or {}
            for key in ("summary", "runbook_url"):
                if not ann.get(key):
                    out.append(f"{name}: no {key} annotation")
    return out


# -- dashboard ---------------------------------------------------------------------------------------------


def iter_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    for p in dashboard.get("panels", []):
        yield p
        yield from p.get("panels", [])


def panel_exprs(dashboard: dict[str, Any]) -> list[str]:
    """Every target expression of every panel."""
    return [t["expr"] for p in iter_panels(dashboard) for t in p.get("targets", []) if t.get("expr")]


def range_windows(expr: str) -> list[str]:
    """The range window of each ``rate(`` / ``irate(`` / ``increase(`` call of ``expr``."""
    out = []
    for m in _RANGE_FN.finditer(expr):
        depth, i = 1, m.end()
        while i < len(expr) and depth:  # find the call's closing parenthesis
            depth += {"(": 1, ")": -1}.get(expr[i], 0)
            i += 1
        inner = expr[m.end(): i - 1]
        w = re.search(r"\[([^\[\]]*)\]\s*$", inner)
        out.append(w.group(1) if w else "")
    return out


def substitute_grafana(expr: str) -> str:
    """``expr`` with Grafana's built-in ranges replaced by ``1m`` and template variables by a placeholder,
    so promtool can parse it (a ``$`` is not PromQL)."""
    return TEMPLATE_VAR.sub("placeholder", BUILTIN_RANGE.sub("1m", expr))


def dashboard_problems(dashboard: dict[str, Any], recorded: Iterable[str]) -> list[str]:
    """Problems of a dashboard model (Grafana's JSON model,
    https://grafana.com/docs/grafana/latest/dashboards/build-dashboards/view-dashboard-json-model/):
    ``schemaVersion`` not an int, duplicate panel
    ids, missing or duplicate ``refId``, a datasource that is not the ``${datasource}`` variable, a unit
    missing, a ``rate``/``increase`` window other than ``$__rate_interval``, integer ``le``, unknown
    metrics, and template variables other than datasource/job/instance/model/shape missing."""
    out: list[str] = []
    rec = set(recorded)
    if not isinstance(dashboard.get("schemaVersion"), int) or isinstance(dashboard.get("schemaVersion"), bool):
        out.append(f"schemaVersion {dashboard.get('schemaVersion')!r} is not an int")
    variables = {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        out.append("no datasource template variable of type datasource / query prometheus")
    for v in ("job", "instance", "model", "shape"):
        if v not in variables:
            out.append(f"no template variable {v}")
    for v in variables.values():
        if v.get("type") == "query":
            if (v.get("datasource") or {}).get("uid") != DATASOURCE_UID:
                out.append(f"variable {v.get('name')}: datasource is not {DATASOURCE_UID}")
            q = v.get("query")
            q = q.get("query", "") if isinstance(q, dict) else str(q or "")
            out += [f"variable {v.get('name')}: unknown metric {m}" for m in unknown_metrics(q, rec)]
    ids: set[int] = set()
    for p in iter_panels(dashboard):
        title = f"panel {p.get('id')} {p.get('title', '')!r}"
        if p.get("id") in ids:
            out.append(f"{title}: duplicate panel id")
        ids.add(p.get("id"))
        if p.get("type") == "row":
            continue
        if (p.get("datasource") or {}).get("uid") != DATASOURCE_UID:
            out.append(f"{title}: datasource is not {DATASOURCE_UID}")
        if p.get("type") in UNIT_PANELS and not (p.get("fieldConfig", {}).get("defaults", {}).get("unit")):
            out.append(f"{title}: no fieldConfig.defaults.unit")
        if not p.get("description"):
            out.append(f"{title}: no description")
        targets = p.get("targets", [])
        if not targets:
            out.append(f"{title}: no targets")
        refs = [t.get("refId") for t in targets]
        if any(not r for r in refs) or len(set(refs)) != len(refs):
            out.append(f"{title}: refIds must be unique and non-empty, got {refs}")
        for t in targets:
            expr = t.get("expr", "")
            if (t.get("datasource") or {}).get("uid") != DATASOURCE_UID:
                out.append(f"{title} {t.get('refId')}: datasource is not {DATASOURCE_UID}")
            if not expr:
                out.append(f"{title} {t.get('refId')}: empty expr")
            out += [f"{title}: window [{w}] is not $__rate_interval" for w in range_windows(expr)
                    if w != "$__rate_interval"]
            out += [f"{title}: integer le matcher {m}" for m in integer_le_values(expr)]
            out += [f"{title}: unknown metric {m}" for m in unknown_metrics(expr, rec)]
            out += [f"{title}: request series without traffic=\"user\": {s}"
                    for s in request_selectors_without_user_traffic(expr)]
    return out


def promtool_check_exprs(exprs: Iterable[str], promtool: str) -> tuple[bool, str]:
    """Parse each expression with ``promtool check rules`` as a throwaway recording rule.

    Grafana variables are substituted first (:func:`substitute_grafana`). Returns ``(ok, output)``.
    """
    rules = [{"record": f"dashboard:check:expr{i}", "expr": substitute_grafana(e)} for i, e in enumerate(exprs)]
    doc = {"groups": [{"name": "dashboard-exprs", "rules": rules}]}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "exprs.yaml"
        path.write_text(json.dumps(doc, indent=1), encoding="utf-8")  # JSON is YAML
        proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True,
                              timeout=60, check=False)
    return proc.returncode == 0, proc.stdout + proc.stderr
