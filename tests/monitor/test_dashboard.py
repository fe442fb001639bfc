"""monitoring/dashboard.json: generated, not stale, and valid offline (diffbench.monitor.lint), plus the
``diffbench monitor dashboard`` command."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys

import pytest

from diffbench.cli.main import main
from diffbench.metrics import names
from diffbench.monitor import dashboard, lint, rules

PROMTOOL = rules.find_promtool()
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not found (Debian package `prometheus`: apt-get install prometheus; .ci/run installs it)",
)
ROWS = ["Service health", "Latency & queue", "Per-step and stages", "Cache", "Memory", "Quality probe",
        "Compile", "Start-up", "Ranks", "Abandoned work", "LoRA adapters"]


@pytest.fixture(scope="module")
def committed() -> dict:
    return json.loads(rules.DASHBOARD_PATH.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def recorded() -> set[str]:
    return rules.recorded_names(rules.load_rules())


def _panels(d: dict) -> list[dict]:
    return [p for p in lint.iter_panels(d) if p["type"] != "row"]


def test_committed_dashboard_is_not_stale() -> None:
    assert rules.DASHBOARD_PATH.read_text(encoding="utf-8") == dashboard.render_dashboard(), (
        "monitoring/dashboard.json is stale: run `diffbench monitor dashboard -o monitoring/dashboard.json`")


def test_model_essentials(committed: dict) -> None:
    assert type(committed["schemaVersion"]) is int
    assert committed["uid"] == dashboard.UID
    ids = [p["id"] for p in lint.iter_panels(committed)]
    assert len(ids) == len(set(ids))
    assert [p["title"] for p in committed["panels"] if p["type"] == "row"] == ROWS
    variables = {v["name"]: v for v in committed["templating"]["list"]}
    assert set(variables) == {"datasource", "job", "instance", "model", "shape"}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for p in _panels(committed):
        refs = [t["refId"] for t in p["targets"]]
        assert refs and all(refs) and len(refs) == len(set(refs)), p["title"]
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"]), p["title"]
        assert p["fieldConfig"]["defaults"]["unit"], p["title"]
        assert p["description"], p["title"]
        x, w = p["gridPos"]["x"], p["gridPos"]["w"]
        assert x >= 0 and x + w <= 24, p["title"]


def test_every_rate_window_is_rate_interval(committed: dict) -> None:
    exprs = lint.panel_exprs(committed)
    calls = [m for e in exprs for m in re.findall(r"\b(?:rate|increase)\(", e)]
    windows = [w for e in exprs for w in lint.range_windows(e)]
    assert calls and len(windows) == len(calls)
    assert set(windows) == {"$__rate_interval"}


def test_every_metric_is_registered_or_recorded(committed: dict, recorded: set[str]) -> None:
    samples = names.sample_names()
    seen: set[str] = set()
    for e in lint.panel_exprs(committed):
        for ident in lint.metric_identifiers(e):
            assert ident in (recorded if ":" in ident else samples), ident
            seen.add(ident)
    # generated from the table: every family shows up on some panel
    missing = [m.name for m in names.METRICS if not set(m.samples) & seen]
    assert missing == []


def test_request_panels_select_user_traffic(committed: dict) -> None:
    n = 0
    for e in lint.panel_exprs(committed):
        for name, sel in re.findall(r"(diffusion_\w+)\{([^}]*)\}", e):
            if "traffic" in names.spec(re.sub(r"_(bucket|sum|count)$", "", name)).labels:
                assert 'traffic="user"' in sel, (name, sel)
                n += 1
    assert n > 0


def test_dashboard_is_lint_clean(committed: dict, recorded: set[str]) -> None:
    assert lint.dashboard_problems(committed, recorded) == []


def _first(d: dict, kind: str = "timeseries") -> dict:
    return next(p for p in _panels(d) if p["type"] == kind)


def _mut_unit(d):
    _first(d)["fieldConfig"]["defaults"].pop("unit")


def _mut_uid(d):
    _first(d, "stat")["datasource"] = {"type": "prometheus", "uid": "ddyfngn31dg5cf"}


def _mut_target_uid(d):
    _first(d)["targets"][0]["datasource"]["uid"] = "abc"


def _mut_window(d):
    t = _first(d)["targets"][0]
    t["expr"] = t["expr"].replace("[$__rate_interval]", "[5m]")


def _mut_dup_id(d):
    ps = _panels(d)
    ps[1]["id"] = ps[0]["id"]


def _mut_refid(d):
    _first(d)["targets"][0]["refId"] = ""


def _mut_schema(d):
    d["schemaVersion"] = "39"


def _mut_metric(d):
    t = _first(d)["targets"][0]
    t["expr"] = t["expr"].replace("diffusion_requests_total", "diffusion_request_total")


def _mut_le(d):
    _first(d)["targets"][0]["expr"] = ('sum(rate(diffusion_request_duration_seconds_bucket{traffic="user", '
                                        'le="30"}[$__rate_interval]))')


def _mut_var(d):
    d["templating"]["list"] = [v for v in d["templating"]["list"] if v["name"] != "shape"]


def _mut_traffic(d):
    t = _first(d)["targets"][0]
    t["expr"] = t["expr"].replace('traffic="user", ', "")


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [(_mut_unit, "no fieldConfig.defaults.unit"), (_mut_uid, "datasource is not ${datasource}"),
     (_mut_target_uid, "datasource is not ${datasource}"), (_mut_window, "window [5m]"),
     (_mut_dup_id, "duplicate panel id"), (_mut_refid, "refIds must be unique"),
     (_mut_schema, "schemaVersion '39'"), (_mut_metric, "unknown metric diffusion_request_total"),
     (_mut_le, "integer le"), (_mut_var, "no template variable shape"), (_mut_traffic, 'traffic="user"')],
    ids=lambda v: v.__name__ if callable(v) else None,
)
def test_lint_catches(committed: dict, recorded: set[str], mutate, fragment: str) -> None:
    d = copy.deepcopy(committed)
    mutate(d)
    problems = lint.dashboard_problems(d, recorded)
    assert any(fragment in p for p in problems), problems


def test_json_with_conflict_markers_fails_to_load() -> None:
    text = dashboard.render_dashboard()
    broken = text.replace('"refId": "A"', '<<<<<<< HEAD\n"refId": "A"\n=======\n"refId": "B"\n>>>>>>> x', 1)
    with pytest.raises(json.JSONDecodeError):
        json.loads(broken)


def test_substitute_grafana() -> None:
    e = 'rate(x{job=~"$job", model=~"${model}", shape=~"${shape:regex}"}[$__rate_interval])'
    assert lint.substitute_grafana(e) == 'rate(x{job=~"placeholder", model=~"placeholder", shape=~"placeholder"}[1m])'


@needs_promtool
@pytest.mark.promtool
def test_promtool_parses_every_panel_expression(committed: dict) -> None:
    exprs = lint.panel_exprs(committed)
    ok, out = lint.promtool_check_exprs(exprs, PROMTOOL)
    assert ok, out
    assert f"SUCCESS: {len(exprs)} rules found" in out


@needs_promtool
@pytest.mark.promtool
def test_promtool_rejects_a_broken_expression() -> None:
    ok, out = lint.promtool_check_exprs(["sum(rate(diffusion_queue_depth[$__rate_interval])"], PROMTOOL)
    assert not ok and "unclosed left parenthesis" in out


def test_generator_refuses_unknown_metric() -> None:
    with pytest.raises(KeyError, match="not a sample"):
        dashboard._m("diffusion_denoise_step_duration_seconds")  # the family name, not a sample


@pytest.mark.e2e  # runs a subprocess
def test_dashboard_modules_import_nothing_heavy() -> None:
    code = ("import sys, diffbench.monitor.dashboard, diffbench.monitor.lint, diffbench.monitor.rules\n"
            "print(sorted(m for m in ('torch', 'prometheus_client', 'httpx', 'aiohttp') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- diffbench monitor dashboard ------------------------------------------------------------------------------


def test_cli_writes_and_checks(tmp_path, capsys) -> None:
    out = tmp_path / "sub" / "dash.json"
    assert main(["monitor", "dashboard", "-o", str(out), "--mkdir"]) == 0
    assert out.read_text(encoding="utf-8") == dashboard.render_dashboard()
    assert main(["monitor", "dashboard", "--check", str(out)]) == 0
    assert "up to date" in capsys.readouterr().out
    assert main(["monitor", "dashboard", "--check", str(rules.DASHBOARD_PATH)]) == 0


def _stale(tmp_path):
    p = tmp_path / "stale.json"
    p.write_text(dashboard.render_dashboard().replace('"refresh": "30s"', '"refresh": "1m"'), encoding="utf-8")
    return ["--check", str(p)]


def _dir(tmp_path):
    return ["-o", str(tmp_path)]


def _no_parent(tmp_path):
    return ["-o", str(tmp_path / "missing" / "d.json")]


def _no_check_file(tmp_path):
    return ["--check", str(tmp_path / "absent.json")]


@pytest.mark.parametrize(
    ("args", "code", "fragments"),
    [
        (lambda _: [], 2, ["give -o FILE", "--check FILE"]),
        (_no_parent, 2, ["-o", "does not exist", "--mkdir"]),
        (_dir, 2, ["-o", "is a directory"]),
        (_no_check_file, 2, ["--check", "absent.json", "cannot read"]),
        (_stale, 1, ["stale", "diffbench monitor dashboard -o"]),
    ],
    ids=["nothing", "no-parent", "directory", "check-missing", "check-stale"],
)
def test_cli_bad_inputs(tmp_path, capsys, one_line_error, args, code: int, fragments: list[str]) -> None:
    rc = main(["monitor", "dashboard", *args(tmp_path)])
    err = capsys.readouterr().err
    if code == 1:  # a stale file also prints the first lines of the diff before the error line
        assert rc == 1 and err.strip().splitlines()[-1].startswith("error: "), err
        assert all(f in err for f in fragments), err
        assert '-  "refresh": "1m"' in err and '+  "refresh": "30s"' in err
    else:
        one_line_error(rc, err, code, fragments)


def test_every_dashboard_rule_and_plan_metric_is_written_by_a_live_exporter(committed: dict,
                                                                             recorded: set[str]) -> None:
    """Not only in the table: each sample the dashboard, the rule file or ``plan`` queries appears in a real
    scrape of serve's exporter or of the probe's registry (after zero-initialisation), or is Prometheus's
    own ``up``."""
    from prometheus_client.parser import text_string_to_metric_families

    from diffbench.engines.base import EngineInfo, MemoryStats, StageTimes
    from diffbench.engines.instrument.signals import RequestSignals
    from diffbench.monitor.calibration import Calibration, ShapeBaseline, StageBaselines, fingerprint_id
    from diffbench.monitor.exporter import Exporter
    from diffbench.monitor.probe import ProbeMetrics
    from diffbench.monitor.rules import RULES_PATH, load_rules

    exp = Exporter("m", ["64x64"], gpus=["0"], caches=["fbcache"], ranks=[0, 1])
    fp = {"model": "m"}
    exp.load_calibration(Calibration(  # baselines, thresholds and the SLO exist once a calibration is loaded
        model="m", fingerprint=fp, fingerprint_id=fingerprint_id(fp), slo_s=2.5,
        shapes={"64x64": ShapeBaseline(step_s=0.125, steps=4, cache_hit_ratio=0.25,
                                       stages=StageBaselines(text_encode=0.5, denoise=0.5, vae_decode=0.25))}))
    exp.set_deployment(EngineInfo(engine="sim", engine_version="1", model="m"), "abcd")
    exp.set_startup({"load": 1.0, "warmup": 0.5, "ready": 2.0})  # as serve's start does
    exp.enable_energy("0")  # the energy counter exists where the device's counter is readable
    exp.enable_adapters(["a"])  # as serve --lora does
    exp.observe_generation(shape="64x64", stages=StageTimes(total_s=1.0), memory=MemoryStats(kind="cuda"),
                           signals=RequestSignals(device="0", device_total_bytes=1, flops=1.0))
    probe = ProbeMetrics("m", "p", interval_s=60.0, threshold_db=30.0)
    written: set[str] = set()
    for text in (exp.render()[0].decode(), probe.render().decode()):
        for fam in text_string_to_metric_families(text):
            written.update(s.name for s in fam.samples)
    exprs = list(lint.panel_exprs(committed))
    for group in load_rules(RULES_PATH)["groups"]:
        exprs.extend(r["expr"] for r in group["rules"])
    missing = sorted({i for e in exprs for i in lint.metric_identifiers(e)
                      if ":" not in i and i not in written and i != "up"})
    assert missing == []
    from pathlib import Path

    from diffbench.plan import signals as plan_signals

    plan_names = set(re.findall(r'"(diffusion_[a-z_]+)"', Path(plan_signals.__file__).read_text()))
    families = written | {w.rsplit("_", 1)[0] for w in written if w.endswith(("_bucket", "_count", "_sum"))}
    assert plan_names and {n for n in plan_names if n not in families} == set()
