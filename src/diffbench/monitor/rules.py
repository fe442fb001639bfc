"""diffbench's Prometheus rule file: where it lives, how to load it, a drill-speed copy, and promtool.

The rule file is ``monitoring/alerts.yaml`` at the repository root (its unit tests are
``monitoring/alerts_test.yaml``). :data:`RULES_PATH` points there from this source tree, which is what a
clone, an editable install and CI use; a wheel does not carry the file (``monitoring/`` is outside the
package), so a deployment copies ``monitoring/`` along with the package.

Imports nothing heavy (PyYAML only, inside :func:`load_rules`).
"""

from __future__ import annotations

import copy
import os
import re
import shutil
from pathlib import Path
from typing import Any

from diffbench.errors import InputError, UsageError

MONITORING_DIR = Path(__file__).resolve().parents[3] / "monitoring"
"""``monitoring/`` at the root of the source tree this module was loaded from."""
RULES_PATH = MONITORING_DIR / "alerts.yaml"
RULES_TEST_PATH = MONITORING_DIR / "alerts_test.yaml"
DASHBOARD_PATH = MONITORING_DIR / "dashboard.json"

DEFAULT_DRILL_RATE_WINDOW_S = 30.0
"""Longest ``rate()`` window :func:`shorten_for` leaves in a drill copy: 30 samples at a 1 s scrape."""

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}
_DURATION = re.compile(r"^(?:\d+(?:ms|[smhdwy]))+$")
_PART = re.compile(r"(\d+)(ms|[smhdwy])")
# rate(<selector>[<window>]): the selector holds braces but no brackets (no subqueries in the rule file).
_RATE_WINDOW = re.compile(r"(\brate\s*\([^()\[\]]*\[)([0-9a-z]+)(\])")


def load_rules(path: str | os.PathLike[str] = RULES_PATH) -> dict[str, Any]:
    """Read a Prometheus rule file into a dict (``{"groups": [{"name", "rules": [...]}, ...]}``).

    Raises:
        InputError: the file is missing, is not YAML, or has no ``groups`` list.
    """
    import yaml

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"rule file {p}: cannot read it ({exc.strerror or exc})") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"rule file {p}: not valid YAML ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("groups"), list):
        raise InputError(f"rule file {p}: expected a mapping with a 'groups' list (Prometheus rule format)")
    return data


def parse_duration(text: str) -> float:
    """Seconds in a Prometheus duration such as ``10m``, ``1h30m`` or ``500ms``.

    Raises:
        UsageError: ``text`` is not a Prometheus duration.
    """
    s = str(text).strip()
    if not _DURATION.match(s):
        raise UsageError(f"{text!r} is not a Prometheus duration (e.g. 30s, 10m, 1h30m)")
    return sum(int(n) * _UNITS[u] for n, u in _PART.findall(s))


def format_duration(seconds: float) -> str:
    """A Prometheus duration for ``seconds`` (whole seconds as ``30s``, below a second as ``500ms``).

    Raises:
        UsageError: ``seconds`` is not positive.
    """
    if seconds <= 0:
        raise UsageError(f"a duration must be positive, got {seconds} s")
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def _shorten_windows(expr: str, window_s: float) -> str:
    def repl(m: re.Match[str]) -> str:
        w = m.group(2)
        if parse_duration(w) <= window_s:
            return m.group(0)
        return m.group(1) + format_duration(window_s) + m.group(3)

    return _RATE_WINDOW.sub(repl, expr)


def shorten_for(
    rules: dict[str, Any], max_for_s: float, *, rate_window_s: float = DEFAULT_DRILL_RATE_WINDOW_S
) -> dict[str, Any]:
    """A copy of ``rules`` fast enough for a drill against a local Prometheus with a 1 s scrape.

    The mapping (the input is not modified):

    - every ``for`` and ``keep_firing_for`` longer than ``max_for_s`` becomes ``max_for_s``;
    - every ``rate(...[w])`` window longer than ``rate_window_s`` becomes ``rate_window_s``. These windows
      *average* (the 5m step mean, the 15m cache hit ratio, the burn-rate ratios): with a 15m window a
      step change of the hit ratio takes minutes to move the mean past its limit, with 30 s it takes
      seconds. The recording rules keep their names (``…:mean5m``), since the alerts read them by name;
    - ``increase(...[15m]) > 0`` (recompiles, the baseline guard) and ``max_over_time(...[5m])`` (peak
      memory) keep their windows: they *detect*, firing at the first evaluation that sees the event, and
      a long window only keeps the alert firing longer, which a drill wants.

    ``rate_window_s`` must hold several scrapes and at least one request: a window with no request
    makes a mean NaN, which resets a pending ``for``. Drills keep traffic at one request per few seconds.

    Args:
        rules: a rule-file dict as :func:`load_rules` returns.
        max_for_s: longest ``for`` to keep, seconds (> 0).
        rate_window_s: longest ``rate()`` window to keep, seconds (> 0).

    Raises:
        UsageError: a non-positive limit, or a rule with an unreadable duration.
    """
    if max_for_s <= 0 or rate_window_s <= 0:
        raise UsageError(f"shorten_for: limits must be positive (max_for_s={max_for_s}, "
                         f"rate_window_s={rate_window_s})")
    out = copy.deepcopy(rules)
    for group in out.get("groups", []):
        for rule in group.get("rules", []):
            for key in ("for", "keep_firing_for"):
                if key in rule and parse_duration(rule[key]) > max_for_s:
                    rule[key] = format_duration(max_for_s)
            if "expr" in rule:
                rule["expr"] = _shorten_windows(str(rule["expr"]), rate_window_s)
    return out


def find_promtool() -> str | None:
    """Path of the ``promtool`` binary: ``$PROMTOOL`` if set and executable, else ``promtool`` on PATH.

    ``promtool`` comes with the Debian package ``prometheus`` (``apt-get install prometheus``; bookworm
    ships 2.42). Returns None when neither is found.
    """
    env = os.environ.get("PROMTOOL")
    if env and os.path.isfile(env) and os.access(env, os.X_OK):
        return env
    return shutil.which("promtool")


def alert_names(rules: dict[str, Any]) -> list[str]:
    """Alert names in file order (an alert split into several rules appears once)."""
    seen: list[str] = []
    for group in rules.get("groups", []):
        for rule in group.get("rules", []):
            if "alert" in rule and rule["alert"] not in seen:
                seen.append(rule["alert"])
    return seen


def recorded_names(rules: dict[str, Any]) -> set[str]:
    """Names of the recording rules in ``rules``."""
    return {r["record"] for g in rules.get("groups", []) for r in g.get("rules", []) if "record" in r}
