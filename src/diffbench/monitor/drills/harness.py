"""Processes and HTTP helpers a drill uses: ``diffbench serve`` and ``diffbench probe`` as subprocesses,
loopback requests with the standard library, and text-format scrapes.

Every subprocess is started with this interpreter (``python -m diffbench.cli.main``) and the caller's
environment (``PYTHONPATH`` included) plus ``OMP_NUM_THREADS`` (:data:`THREADS`, 1 unless the caller's
environment sets it), on ``127.0.0.1`` and a free port, its output in a log file the drill quotes on
failure. One intra-op thread because the drills share a small machine with their own Prometheus, probe
and client: with two OpenMP threads on two busy cores every parallel region waits for a descheduled
thread (measured on the 2-core dev machine at load 7: tiny-flux's tiled 512² VAE decode, 7744 small
convolutions, 75 s with 2 threads, 2.3 s with 1). :meth:`Proc.stop` sends SIGINT (the CLI's Ctrl-C path), then SIGTERM, then SIGKILL.
No torch import here.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diffbench.core.httpget import request
from diffbench.errors import DiffbenchError
from diffbench.monitor.promserver import free_port

THREADS = "1"


class DrillError(DiffbenchError):
    """A drill could not run (a process did not start, a request could not be sent); exit 1."""

    exit_code = 1


def cli_command(*args: str) -> list[str]:
    """``python -m diffbench.cli.main ARGS`` with this interpreter."""
    return [sys.executable, "-m", "diffbench.cli.main", *args]


@dataclass
class Proc:
    """A diffbench subprocess with its log; :meth:`stop` is idempotent."""

    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    _log: Any = field(default=None, repr=False)

    def start(self) -> None:
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.setdefault("OMP_NUM_THREADS", THREADS)
        self.popen = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, env=env)

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:].strip()
        except OSError:
            return ""

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGINT, then SIGTERM, then SIGKILL; returns the exit code."""
        p = self.popen
        if p is not None and p.poll() is None:
            for sig in (signal.SIGINT, signal.SIGTERM):
                p.send_signal(sig)
                try:
                    p.wait(timeout=timeout_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None
        return None if p is None else p.returncode


def http_json(method: str, url: str, body: Any = None, *, timeout: float = 120.0,
              headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
    """One loopback request; returns (status, parsed JSON body or text, headers). Never raises for an
    HTTP error status; raises :class:`DrillError` when the service cannot be reached."""
    data = None if body is None else json.dumps(body).encode()
    try:  # ``timeout``: the total deadline (connect + send + whole body), seconds
        r = request(url, deadline_s=timeout, method=method, body=data,
                    headers={"Content-Type": "application/json", **(headers or {})})
    except (OSError, http.client.HTTPException) as exc:
        raise DrillError(f"{method} {url}: {exc}") from exc
    raw, status, hdrs = r.body, r.status, dict(r.headers)
    try:
        return status, json.loads(raw), hdrs
    except ValueError:
        return status, raw.decode(errors="replace"), hdrs


def http_text(url: str, *, timeout: float = 10.0) -> str:
    """GET ``url`` as text (a ``/metrics`` scrape). Raises DrillError when unreachable or not 200."""
    try:  # ``timeout``: the total deadline (connect + whole body), seconds
        r = request(url, deadline_s=timeout)
    except (OSError, http.client.HTTPException) as exc:
        raise DrillError(f"GET {url}: {exc}") from exc
    if r.status != 200:
        raise DrillError(f"GET {url}: HTTP {r.status}")
    return r.body.decode()


def wait_until(pred: Any, timeout_s: float, what: str, *, poll_s: float = 0.2, proc: Proc | None = None) -> None:
    """Poll ``pred()`` until true; DrillError naming ``what`` (and the process log) on timeout or death."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive:
            raise DrillError(f"{proc.name} exited while waiting for {what}: {proc.log_tail()}")
        try:
            if pred():
                return
        except DrillError:
            pass
        time.sleep(poll_s)
    tail = f": {proc.log_tail()}" if proc is not None else ""
    raise DrillError(f"timed out after {timeout_s:g} s waiting for {what}{tail}")


@dataclass
class Service:
    """``diffbench serve`` on loopback (see :func:`start_serve`)."""

    proc: Proc
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def health(self) -> int:
        try:
            return http_json("GET", self.url + "/health", timeout=10)[0]
        except DrillError:
            return 0

    def metrics(self) -> str:
        return http_text(self.url + "/metrics")

    def generate(self, size: str, *, steps: int, seed: int = 0, prompt: str = "a lighthouse at dusk",
                 timeout: float = 300.0) -> Reply:
        """One ``POST /v1/images/generations``; latency is the client's wall time (s)."""
        body = {"prompt": prompt, "size": size, "seed": seed, "num_inference_steps": steps,
                "response_format": "b64_json"}
        t0 = time.perf_counter()
        status, data, headers = http_json("POST", self.url + "/v1/images/generations", body, timeout=timeout)
        return Reply(status=status, body=data, latency_s=time.perf_counter() - t0, size=size)

    def faults(self, **changes: Any) -> dict[str, Any]:
        status, data, _ = http_json("POST", self.url + "/admin/faults", changes, timeout=300)
        if status != 200:
            raise DrillError(f"POST /admin/faults {changes}: HTTP {status}: {data} (serve needs --enable-faults)")
        return dict(data)

    def card(self) -> dict[str, Any]:
        status, data, _ = http_json("GET", self.url + "/v1/models", timeout=30)
        if status != 200:
            raise DrillError(f"GET /v1/models: HTTP {status}: {data}")
        return dict(data["data"][0])


@dataclass
class Reply:
    status: int
    body: Any
    latency_s: float
    size: str

    @property
    def ok(self) -> bool:
        return self.status == 200

    def image(self) -> Any:
        """The first image as a uint8 (H, W, 3) array (Pillow decode of the PNG)."""
        import numpy as np
        from PIL import Image

        png = base64.b64decode(self.body["data"][0]["b64_json"])
        return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))

    @property
    def peak_memory_bytes(self) -> int | None:
        return self.body.get("peak_memory_bytes") if isinstance(self.body, dict) else None

    @property
    def error(self) -> dict[str, Any]:
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            return dict(self.body["error"])
        return {}


def start_serve(workdir: Path, args: list[str], *, name: str = "serve", timeout_s: float = 300.0) -> Service:
    """Start ``diffbench serve ARGS --port <free>`` and wait until ``/health`` answers 200.

    Raises:
        DrillError: the process exited or was not healthy within ``timeout_s`` (its log tail is quoted).
    """
    port = free_port()
    proc = Proc(name, cli_command("serve", "--port", str(port), "--log-level", "warning", *args),
                workdir / f"{name}.log")
    proc.start()
    svc = Service(proc, port)
    try:
        wait_until(lambda: svc.health() == 200, timeout_s, f"{name} /health 200", poll_s=0.25, proc=proc)
    except BaseException:
        proc.stop()
        raise
    return svc


@dataclass
class ProbeProcess:
    """A drill's handle on a running ``diffbench probe`` process: it replays its references and exports
    ``diffusion_quality_*`` on ``port``."""

    proc: Proc
    port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def metrics(self) -> str:
        return http_text(f"http://{self.address}/metrics")


def record_probe_references(workdir: Path, url: str, ref_dir: Path, *, size: str, steps: int, seed: int,
                            prompt: str, timeout_s: float = 300.0) -> None:
    """``diffbench probe --record-reference DIR --once`` against ``url``; DrillError when it fails."""
    argv = cli_command("probe", "--url", url, "--record-reference", str(ref_dir), "--once", "--size", size,
                       "--steps", str(steps), "--seed", str(seed), "--prompt", prompt)
    log = workdir / "probe-record.log"
    with open(log, "wb") as f:
        try:
            rc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                timeout=timeout_s).returncode
        except subprocess.TimeoutExpired as exc:
            raise DrillError(f"probe --record-reference did not finish in {timeout_s:g} s") from exc
    if rc != 0:
        raise DrillError(f"probe --record-reference exited {rc}: {log.read_text(errors='replace')[-1500:]}")


def start_probe(workdir: Path, url: str, ref_dir: Path, *, interval_s: float, psnr_threshold_db: float,
                timeout_s: float = 120.0) -> ProbeProcess:
    """``diffbench probe --reference DIR --interval S --metrics-port <free> --psnr-threshold DB``; waits
    until its ``/metrics`` answers."""
    port = free_port()
    proc = Proc("probe", cli_command("probe", "--url", url, "--reference", str(ref_dir), "--interval",
                                     f"{interval_s:g}", "--metrics-port", str(port), "--psnr-threshold",
                                     f"{psnr_threshold_db:g}"), workdir / "probe.log")
    proc.start()
    probe = ProbeProcess(proc, port)
    try:
        wait_until(lambda: bool(probe.metrics()), timeout_s, "probe /metrics", poll_s=0.25, proc=proc)
    except BaseException:
        proc.stop()
        raise
    return probe
