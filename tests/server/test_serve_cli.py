"""``diffbench serve`` as a process: Ctrl-C during a generation stops it within the drain time, cleanly."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.e2e

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(predicate, timeout_s: float, what: str) -> None:
    deadline = time.perf_counter() + timeout_s
    while not predicate():
        assert time.perf_counter() < deadline, what
        time.sleep(0.05)


def _health(url: str) -> dict | None:
    try:
        return httpx.get(f"{url}/health", timeout=1).json()
    except httpx.HTTPError:
        return None


def test_ctrl_c_during_a_generation_stops_within_the_drain_time():
    port, drain_s = _free_port(), 1.0
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    # sim: 1024x1024 at 1 s per step → a 60 s generation, far longer than the drain time
    cmd = [sys.executable, "-m", "diffbench.cli.main", "serve", "--engine", "sim", "--port", str(port)]
    cmd += ["--sim-step-s", "1", "--drain", str(drain_s), "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: (_health(url) or {}).get("status") == "ok", 60, "serve never became healthy")
        with httpx.Client(base_url=url, timeout=30) as client:
            import threading

            answers: list[httpx.Response | Exception] = []

            def send() -> None:
                try:
                    body = {"prompt": "a", "size": "1024x1024", "num_inference_steps": 60}
                    answers.append(client.post("/v1/images/generations", json=body))
                except Exception as exc:  # a reset connection would land here
                    answers.append(exc)

            sender = threading.Thread(target=send)
            sender.start()
            _wait(lambda: (_health(url) or {}).get("running") == 1, 20, "the generation never started")
            proc.send_signal(signal.SIGINT)
            sent = time.perf_counter()
            code = proc.wait(timeout=30)
            stopped_s = time.perf_counter() - sent
            sender.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out, err = proc.communicate()
    assert code == 130, (code, err)
    # drain time + uvicorn's 0.1 s shutdown poll + interpreter exit; nowhere near the 60 s generation
    assert stopped_s < drain_s + 5.0, stopped_s
    assert "Traceback" not in err and "CancelledError" not in err, err
    assert "stopped" in err
    assert len(answers) == 1 and isinstance(answers[0], httpx.Response), answers
    assert answers[0].status_code == 503 and answers[0].json()["error"]["code"] == "unavailable"


@pytest.mark.parametrize("interrupts", [1, 2])
def test_ctrl_c_during_a_torch_generation_exits_130_without_abort(interrupts):
    """tiny-flux on the CPU: the worker thread is inside torch when the process exits.

    A normal interpreter exit then aborted in torch's C++ teardown ("terminate called without an active
    exception", SIGABRT, exit 134); a second Ctrl-C printed KeyboardInterrupt/CancelledError tracebacks.
    """
    port, drain_s = _free_port(), 0.5
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "diffbench.cli.main", "serve", "--model", "tiny-flux", "--port", str(port)]
    cmd += ["--drain", str(drain_s), "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: (_health(url) or {}).get("status") == "ok", 120, "serve never became healthy")
        import threading

        # 512x512 at 200 steps: seconds on a CPU, far longer than the drain time; one step well under the
        # grace the drain gives the running step (CANCEL_GRACE_S), even on a loaded machine
        body = {"prompt": "a", "size": "512x512", "num_inference_steps": 200}
        sender = threading.Thread(
            target=lambda: httpx.post(f"{url}/v1/images/generations", json=body, timeout=60), daemon=True
        )
        sender.start()
        _wait(lambda: (_health(url) or {}).get("running") == 1, 30, "the generation never started")
        time.sleep(0.2)  # inside the pipeline, not only admitted
        for _ in range(interrupts):
            proc.send_signal(signal.SIGINT)
            time.sleep(0.1)
        sent = time.perf_counter()
        code = proc.wait(timeout=30)
        stopped_s = time.perf_counter() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _, err = proc.communicate()
    assert code == 130, (code, err)
    assert "terminate called" not in err, err
    assert "Traceback" not in err and "CancelledError" not in err, err
    if interrupts == 2:
        assert stopped_s < drain_s + 5.0, stopped_s
    else:  # the drain, then the running step ends (at most the grace), then the exit
        from diffbench.server.service import CANCEL_GRACE_S

        assert stopped_s < drain_s + CANCEL_GRACE_S + 5.0, (stopped_s, err)
    if interrupts == 2:
        assert "at once" in err, err
    else:  # the drain cancelled the generation at its next step: nothing is left running at exit
        assert "stopped" in err and "abandoned" not in err, err


@pytest.mark.parametrize("flag", ["--warmup", "--default-size"])
def test_bad_startup_size_exits_2_before_serving(flag):
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "diffbench.cli.main", "serve", "--engine", "sim", "--port", str(port)]
    done = subprocess.run([*cmd, flag, "100x64"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert (
        f"{flag}: 100x64 is not allowed" in done.stderr and "width 100 is not a multiple of 8" in done.stderr
    )
    assert "Traceback" not in done.stderr and "Uvicorn running" not in done.stderr


def test_abandoned_requests_release_the_worker_within_a_step_and_their_seconds_are_exported():
    """A real TCP client that closes its connection, and a DELETE of a running video job: the step log on
    stderr says where each stopped; the worker is free within one measured step (+ 2 steps of slack for a
    loaded machine, + the /health poll) of the disconnect, and the wasted seconds exported equal each
    request's time on the device (from running to released, as the test saw it on /health).

    Each shape is abandoned once first: the sim's first call at a shape pays its simulated compile (host
    time before the first step, which no step checkpoint can cut), as a real torch.compile would."""
    import json
    import re

    from prometheus_client.parser import text_string_to_metric_families

    port, step_s, steps, slack = _free_port(), 0.1, 150, 2
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "diffbench.cli.main", "serve", "--engine", "sim", "--port", str(port)]
    cmd += ["--sim-step-s", str(step_s), "--drain", "1", "--log-level", "info"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def running(want: int) -> float:
        _wait(lambda: (_health(url) or {}).get("running") == want, 30, f"running never became {want}")
        return time.perf_counter()

    def disconnect(after_s: float) -> tuple[float, float, float]:
        body = json.dumps({"prompt": "a", "size": "1024x1024", "num_inference_steps": steps}).encode()
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"POST /v1/images/generations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            started = running(1)
            time.sleep(after_s)
            gone = time.perf_counter()
        return started, gone, running(0)

    def delete(client: httpx.Client, after_s: float) -> tuple[float, float, float]:
        job = client.post("/v1/videos", json={"prompt": "v", "size": "1024x1024", "num_frames": 1,
                                              "num_inference_steps": steps}).json()
        started = running(1)
        time.sleep(after_s)
        gone = time.perf_counter()
        assert client.delete(f"/v1/videos/{job['id']}").json()["status"] == "cancelled"
        return started, gone, running(0)

    def scrape(client: httpx.Client) -> dict:
        return {(s.name, frozenset(s.labels.items())): s.value
                for fam in text_string_to_metric_families(client.get("/metrics").text) for s in fam.samples}

    try:
        _wait(lambda: (_health(url) or {}).get("status") == "ok", 60, "serve never became healthy")
        with httpx.Client(base_url=url, timeout=10) as client:
            disconnect(0.0), delete(client, 0.0)  # the first call at each shape: its compile
            before = scrape(client)
            seen = {"disconnect": disconnect(5 * step_s), "deleted": delete(client, 5 * step_s)}
            after = scrape(client)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _, err = proc.communicate()
    line = re.compile(r"cancelled \((\w+)\) .* at step (\d+) of 150: step ([\d.e-]+) s, released ([\d.e-]+) s after "
                      r"the cancel, ([\d.e-]+) s of device time spent")
    logged = {m[1]: m for m in line.finditer(err)}  # the last line of each reason: the measured pass
    assert set(logged) == {"disconnect", "deleted"}, err

    def delta(name: str, **labels: str) -> float:
        key = (name, frozenset({"model": "sim", **labels}.items()))
        return after[key] - before[key]

    for reason, (started, gone, freed) in seen.items():
        m = logged[reason]
        at, measured_step, spent = int(m[2]), float(m[3]), float(m[5])
        assert 1 <= at < steps - 100, err  # stopped where the step log says, long before the end
        assert freed - gone <= (1 + slack) * measured_step + 0.05, (reason, freed - gone, measured_step)
        wasted = delta("diffusion_cancelled_seconds_total", reason=reason)
        assert wasted == pytest.approx(spent, rel=1e-3, abs=1e-3)
        assert wasted == pytest.approx(freed - started, abs=slack * measured_step + 0.1), reason
    assert delta("diffusion_requests_total", outcome="cancelled", status="499", traffic="user") == 2
    assert delta("diffusion_cancel_release_seconds_count") == 2
