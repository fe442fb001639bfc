"""A throwaway local Prometheus for drills: the Debian binary on loopback, a temporary config, 1 s scrape.

:class:`PromServer` writes a config (``scrape_interval`` and ``evaluation_interval`` 1 s by default, one
static scrape job per target) and a rule file into a temporary directory, starts ``prometheus`` with
``--storage.tsdb.path`` inside that directory on ``127.0.0.1:<free port>``, waits for ``GET /-/ready``,
and answers PromQL instant queries (``/api/v1/query``) and the alert list (``/api/v1/alerts``) with the
standard library (:mod:`diffbench.core.httpget`: a total deadline per request) (Prometheus HTTP API v1: https://prometheus.io/docs/prometheus/latest/querying/api/).
:meth:`PromServer.stop` terminates the process (SIGTERM, then SIGKILL after a grace period) and removes
the temporary directory; it runs from ``__exit__`` and therefore also on Ctrl-C.

No torch import; nothing leaves loopback.
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from diffbench.core.httpget import request
from diffbench.errors import DiffbenchError, MissingDependencyError, UsageError

INSTALL_HINT = "apt-get install prometheus (Debian/Ubuntu package; provides /usr/bin/prometheus and promtool)"


class PrometheusError(DiffbenchError):
    """The local Prometheus did not start, died, or answered a query with an error (exit 2)."""


def find_prometheus() -> str | None:
    """Path of the ``prometheus`` binary on PATH (``/usr/bin/prometheus`` from Debian), or None."""
    return shutil.which("prometheus")


def require_prometheus() -> str:
    """The ``prometheus`` binary, or :class:`MissingDependencyError` (exit 3) naming the install command."""
    path = find_prometheus()
    if path is None:
        raise MissingDependencyError(f"the prometheus binary is not on PATH; install it with: {INSTALL_HINT}")
    return path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (bind to 0, read, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Target:
    """One scrape job: ``job`` name and ``host:port`` address; ``path`` of the metrics endpoint."""

    job: str
    address: str
    path: str = "/metrics"


def prometheus_config(
    targets: list[Target], rule_file: str | None, *, scrape_s: float = 1.0, eval_s: float = 1.0
) -> dict[str, Any]:
    """The ``prometheus.yml`` content as a dict (one static job per target)."""
    cfg: dict[str, Any] = {
        "global": {"scrape_interval": f"{scrape_s:g}s", "evaluation_interval": f"{eval_s:g}s",
                   "scrape_timeout": f"{min(scrape_s, 10.0):g}s"},
        "scrape_configs": [
            {"job_name": t.job, "metrics_path": t.path, "static_configs": [{"targets": [t.address]}]}
            for t in targets
        ],
    }
    if rule_file is not None:
        cfg["rule_files"] = [rule_file]
    return cfg


@dataclass
class Alert:
    """One entry of ``/api/v1/alerts``: ``name``, ``state`` (``pending`` / ``firing``), labels, activeAt."""

    name: str
    state: str
    labels: dict[str, str]
    active_at: str | None = None
    value: str | None = None


@dataclass
class PromServer:
    """A local Prometheus process; use as a context manager (see the module docstring).

    Args:
        targets: scrape jobs (loopback addresses).
        rules: the rule file content (a dict as :func:`diffbench.monitor.rules.load_rules` returns), or None.
        scrape_s / eval_s: scrape and rule-evaluation intervals, seconds.
        binary: the ``prometheus`` executable (default: found on PATH).
        ready_timeout_s: how long :meth:`start` waits for ``/-/ready``.

    Raises (from :meth:`start`):
        MissingDependencyError: no ``prometheus`` binary (exit 3).
        PrometheusError: the process exited or did not become ready in time (its log tail is quoted).
    """

    targets: list[Target]
    rules: dict[str, Any] | None = None
    scrape_s: float = 1.0
    eval_s: float = 1.0
    binary: str | None = None
    ready_timeout_s: float = 60.0
    port: int = 0
    workdir: Path | None = None
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _log: Any = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> PromServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        binary = self.binary or require_prometheus()
        self.workdir = Path(tempfile.mkdtemp(prefix="diffbench-prom-"))
        try:
            rule_path = None
            if self.rules is not None:
                rule_path = self.workdir / "rules.yaml"
                rule_path.write_text(yaml.safe_dump(self.rules, sort_keys=False))
            cfg_path = self.workdir / "prometheus.yml"
            cfg_path.write_text(yaml.safe_dump(
                prometheus_config(self.targets, str(rule_path) if rule_path else None,
                                  scrape_s=self.scrape_s, eval_s=self.eval_s), sort_keys=False))
            for _attempt in range(3):  # the free port may be taken between probe and bind
                self.port = free_port()
                self._log = open(self.workdir / "prometheus.log", "wb")  # noqa: SIM115 - closed in stop()
                self._proc = subprocess.Popen(
                    [binary, f"--config.file={cfg_path}", f"--storage.tsdb.path={self.workdir / 'data'}",
                     f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1h",
                     "--log.level=warn"],
                    stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                )
                if self._wait_ready():
                    return
                if self._proc.poll() is None:
                    break
                tail = self.log_tail()
                self._close_proc()
                if "address already in use" not in tail:
                    raise PrometheusError(f"prometheus exited at start (code {self._proc.returncode}): {tail}")
            tail = self.log_tail()
            raise PrometheusError(
                f"prometheus did not become ready within {self.ready_timeout_s:g} s on {self.url}: {tail}"
            )
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                return False
            try:
                if request(self.url + "/-/ready", deadline_s=2.0).status == 200:
                    return True
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.1)
        return False

    def log_tail(self, chars: int = 800) -> str:
        if self.workdir is None:
            return ""
        try:
            text = (self.workdir / "prometheus.log").read_text(errors="replace")
        except OSError:
            return ""
        return text[-chars:].strip() or "(empty log)"

    def _close_proc(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self) -> None:
        """Terminate (then kill) the process and delete the temporary directory. Idempotent."""
        try:
            self._close_proc()
        finally:
            if self.workdir is not None:
                shutil.rmtree(self.workdir, ignore_errors=True)
                self.workdir = None

    # -- HTTP API ---------------------------------------------------------------------------------------
    def _get(self, path: str, params: dict[str, str] | None = None) -> Any:
        if self._proc is None:
            raise UsageError("the local Prometheus is not running")
        url = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        try:  # a total deadline of 10 s (connect + whole body)
            resp = request(url, deadline_s=10.0)
        except (OSError, http.client.HTTPException) as exc:
            raise PrometheusError(f"GET {url}: {exc}; log: {self.log_tail(300)}") from exc
        try:
            body = json.loads(resp.body)
        except ValueError as exc:
            raise PrometheusError(f"GET {url}: HTTP {resp.status}, not JSON") from exc
        if body.get("status") != "success":
            raise PrometheusError(f"GET {url}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, *, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query (at Unix time ``at``, default now); returns the ``result`` list (each
        ``{"metric": {...}, "value": [ts, "v"]}``, or ``"values"`` for a range vector) of a vector, or
        ``[{"metric": {}, "value": ...}]`` for a scalar."""
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        data = self._get("/api/v1/query", params)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def query_value(self, expr: str) -> float | None:
        """The value of a one-element instant query, None when the result is empty.

        Raises:
            PrometheusError: more than one series matched (the caller's expression must aggregate).
        """
        res = self.query(expr)
        if not res:
            return None
        if len(res) > 1:
            raise PrometheusError(f"{expr}: {len(res)} series; aggregate to one")
        return float(res[0]["value"][1])

    def alerts(self) -> list[Alert]:
        """Active alerts (pending and firing) from ``/api/v1/alerts``."""
        data = self._get("/api/v1/alerts")
        return [
            Alert(name=a["labels"].get("alertname", ""), state=a.get("state", ""), labels=dict(a["labels"]),
                  active_at=a.get("activeAt"), value=a.get("value"))
            for a in data.get("alerts", [])
        ]

    def firing(self) -> set[str]:
        """Names of the alerts in state ``firing``."""
        return {a.name for a in self.alerts() if a.state == "firing"}

    def targets_up(self) -> dict[str, str]:
        """``job`` → health (``up`` / ``down`` / ``unknown``) of the active scrape targets."""
        data = self._get("/api/v1/targets")
        return {t["labels"].get("job", "?"): t.get("health", "unknown") for t in data.get("activeTargets", [])}

    def wait_scraped(self, timeout_s: float = 30.0) -> None:
        """Wait until every target has been scraped successfully once.

        Raises:
            PrometheusError: a target is still not ``up`` after ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        health: dict[str, str] = {}
        while time.monotonic() < deadline:
            health = self.targets_up()
            if len(health) == len(self.targets) and all(h == "up" for h in health.values()):
                return
            time.sleep(0.2)
        raise PrometheusError(f"scrape targets not up after {timeout_s:g} s: {health}")
