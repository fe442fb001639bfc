"""monitoring/dashboard.json loaded into Grafana's own typed model (``grafana-foundation-sdk``, the Python
SDK Grafana generates from its dashboard schema): beyond "the JSON parses".

- Every key of the file is one the schema knows: a load + dump round trip keeps every value (a misspelt
  key such as ``fieldconfig`` is dropped by the typed model, so it shows up here). The one exception is
  the ``definition`` of query variables, which Grafana's UI writes and reads but the schema leaves out.
- Every panel type is a registered panel plugin, and every target decodes as a Prometheus query (the
  panel's datasource type resolves to the Prometheus query model, not to an unknown one).
- Every datasource reference is the ``${datasource}`` variable, which is a Prometheus datasource variable;
  every ``$var`` in a target or variable query names a variable defined earlier in the list (Grafana
  resolves variables in order), or one of Grafana's built-ins.
- Every metric a panel or a variable query reads is exported (:mod:`diffbench.metrics.names`) or recorded
  by monitoring/alerts.yaml.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from diffbench.metrics import names
from diffbench.monitor import lint, rules

sdk = pytest.importorskip("grafana_foundation_sdk", reason="test extra: pip install grafana-foundation-sdk")
from grafana_foundation_sdk.cog import plugins, runtime  # noqa: E402
from grafana_foundation_sdk.models import dashboard as gdash  # noqa: E402
from grafana_foundation_sdk.models import prometheus as gprom  # noqa: E402

BUILTINS = {"__rate_interval", "__interval", "__range", "__range_s", "__interval_ms", "__all"}
_VAR = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")
ALLOWED_DROPS = re.compile(r"^\.templating\.list\[\d+\]\.definition$")


@pytest.fixture(scope="module", autouse=True)
def _plugins() -> None:
    plugins.register_default_plugins()


@pytest.fixture(scope="module")
def committed() -> dict[str, Any]:
    return json.loads(rules.DASHBOARD_PATH.read_text(encoding="utf-8"))


def _plain(obj: object) -> object:
    """The SDK's to_json leaves nested model objects in place: turn the whole tree into plain JSON."""
    return json.loads(json.dumps(obj, default=lambda o: o.to_json()))


def _leaves(x: object, path: str = "") -> dict[str, object]:
    if isinstance(x, dict):
        return {k: v for key, val in x.items() for k, v in _leaves(val, f"{path}.{key}").items()}
    if isinstance(x, list):
        return {k: v for i, val in enumerate(x) for k, v in _leaves(val, f"{path}[{i}]").items()}
    return {path: x}


def round_trip_losses(d: dict[str, Any]) -> list[str]:
    """Leaf paths of ``d`` whose value the typed model did not keep (dropped or changed), beyond the allowed."""
    before = _leaves(d)
    after = _leaves(_plain(gdash.Dashboard.from_json(copy.deepcopy(d)).to_json()))
    return [p for p, v in before.items() if after.get(p, object()) != v and not ALLOWED_DROPS.match(p)]


def _panels(model: gdash.Dashboard) -> list[gdash.Panel]:
    out: list[gdash.Panel] = []
    for p in model.panels or []:
        if isinstance(p, gdash.RowPanel):
            out.extend(q for q in (p.panels or []) if isinstance(q, gdash.Panel))
        else:
            out.append(p)
    return out


def model_problems(d: dict[str, Any], recorded: set[str]) -> list[str]:
    """What the typed model says is wrong with dashboard ``d`` (empty: valid)."""
    problems = [f"round trip loses {p}" for p in round_trip_losses(d)]
    model = gdash.Dashboard.from_json(copy.deepcopy(d))
    variables = list((model.templating.list_val if model.templating else None) or [])
    defined: list[str] = []
    ds_vars = {v.name for v in variables if str(v.type_val) == "datasource" and v.query == "prometheus"}
    samples = names.sample_names()

    def check_expr(where: str, expr: str, known: list[str]) -> None:
        for m in _VAR.finditer(expr):
            var = m.group(1) or m.group(2)
            if var not in BUILTINS and var not in known:
                problems.append(f"{where}: ${var} is not a variable defined before it")
        for ident in lint.metric_identifiers(expr):
            if ident not in (recorded if ":" in ident else samples):
                problems.append(f"{where}: {ident} is neither exported nor recorded")

    def check_ds(where: str, ref: gdash.DataSourceRef | None) -> None:
        uid = ref.uid if ref is not None else None
        m = _VAR.fullmatch(uid or "")
        if m is None or (m.group(1) or m.group(2)) not in ds_vars:
            problems.append(f"{where}: datasource {uid!r} is not a Prometheus datasource variable")

    for v in variables:
        if str(v.type_val) == "query":
            check_ds(f"variable {v.name}", v.datasource)
            query = v.query if isinstance(v.query, str) else (v.query or {}).get("query", "")
            check_expr(f"variable {v.name}", query, defined)
        defined.append(v.name)
    for p in _panels(model):
        where = f"panel {p.title!r}"
        if runtime.panelcfg_config(p.type_val) is None:
            problems.append(f"{where}: panel type {p.type_val!r} is not a Grafana panel plugin")
        check_ds(where, p.datasource)
        for t in p.targets or []:
            if not isinstance(t, gprom.Dataquery):
                problems.append(f"{where}: a target is not a Prometheus query ({type(t).__name__})")
                continue
            if not t.expr.strip():
                problems.append(f"{where}: target {t.ref_id} has no expr")
            check_ds(f"{where} target {t.ref_id}", t.datasource)
            check_expr(f"{where} target {t.ref_id}", t.expr, defined)
    return problems


@pytest.fixture(scope="module")
def recorded() -> set[str]:
    return rules.recorded_names(rules.load_rules())


def test_committed_dashboard_is_valid_in_grafanas_model(committed, recorded) -> None:
    assert model_problems(committed, recorded) == []
    model = gdash.Dashboard.from_json(copy.deepcopy(committed))
    targets = [t for p in _panels(model) for t in p.targets or []]
    assert targets and len(targets) == sum(len(p.get("targets", [])) for p in lint.iter_panels(committed))


def _first_panel(d: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in lint.iter_panels(d) if p["type"] != "row")


def _mut_key(d):
    p = _first_panel(d)
    p["fieldconfig"] = p.pop("fieldConfig")


def _mut_panel_type(d):
    _first_panel(d)["type"] = "timeseriez"


def _mut_ds_type(d):
    p = _first_panel(d)
    p["datasource"] = {"type": "loki", "uid": "${datasource}"}


def _mut_ds_uid(d):
    _first_panel(d)["targets"][0]["datasource"] = {"type": "prometheus", "uid": "prom-1"}


def _mut_undefined_var(d):
    t = _first_panel(d)["targets"][0]
    t["expr"] = t["expr"].replace("$model", "$modell", 1) if "$model" in t["expr"] else t["expr"] + " * on() $nope"


def _mut_var_order(d):
    d["templating"]["list"].reverse()  # instance's query reads $job, now defined after it


def _mut_metric(d):
    t = _first_panel(d)["targets"][0]
    t["expr"] = re.sub(r"diffusion_\w+", "diffusion_no_such_metric", t["expr"], count=1)


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [(_mut_key, "round trip loses"), (_mut_panel_type, "not a Grafana panel plugin"),
     (_mut_ds_type, "not a Prometheus query"), (_mut_ds_uid, "not a Prometheus datasource variable"),
     (_mut_undefined_var, "is not a variable defined before it"), (_mut_var_order, "$job is not a variable"),
     (_mut_metric, "diffusion_no_such_metric is neither exported nor recorded")],
    ids=["misspelt-key", "panel-type", "datasource-type", "datasource-uid", "undefined-var", "var-order",
         "metric"],
)
def test_model_check_catches(committed, recorded, mutate, fragment: str) -> None:
    d = copy.deepcopy(committed)
    mutate(d)
    problems = model_problems(d, recorded)
    assert any(fragment in p for p in problems), problems
