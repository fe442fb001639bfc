"""Payload checks in worker processes (checker.py): batching keeps the verdicts, a crashed or failing
worker is data, and no decoding happens on the measuring event loop."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import signal

import pytest

from diffbench.load.client import HttpBackend, RequestPlanner, Target, default_workload, run_open_loop
from diffbench.load.client.checker import FAILED, PayloadChecker, default_workers
from diffbench.load.client.payload import check_images
from diffbench.queueing.schedules import constant

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _png_b64(w: int, h: int) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (w, h), (10, 20, 30)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _bodies() -> list[tuple[bytes, int, int, int]]:
    """40 small bodies: good, wrong size, wrong count, bad base64, malformed JSON (requested 16x8, n=1)."""
    good = json.dumps({"data": [{"b64_json": _png_b64(16, 8)}], "peak_memory_mb": 1.0}).encode()
    wrong = json.dumps({"data": [{"b64_json": _png_b64(24, 8)}]}).encode()
    two = json.dumps({"data": [{"b64_json": _png_b64(16, 8)}] * 2}).encode()
    bad = b'{"data":[{"b64_json":"@@@"}]}'
    return [(b, 16, 8, 1) for b in (good, wrong, two, bad, b"{")] * 8


def _run(coro_fn):
    return asyncio.run(coro_fn())


def test_batched_checks_give_the_one_by_one_verdicts_in_other_processes():
    bodies = _bodies()
    expected = [check_images(*b) for b in bodies]  # one by one, in this process

    async def go():
        checker = PayloadChecker(2)
        await checker.start()
        try:
            pids = checker.pids
            got = await asyncio.gather(*(checker.run(check_images, *b, size=len(b[0])) for b in bodies))
            return got, checker.batches, pids
        finally:
            await checker.close()

    got, batches, pids = _run(go)
    assert [(v.ok, v.error, v.peak_memory_bytes) for v in got] == \
        [(v.ok, v.error, v.peak_memory_bytes) for v in expected]
    assert {v.ok for v in got} == {True, False}
    assert batches < len(bodies)  # queued in one window: sent as a few tasks, not 40
    assert len(pids) == 2 and os.getpid() not in pids
    assert {v.checked_pid for v in got} <= set(pids)  # every check ran in a worker process


def test_a_byte_budget_sends_large_bodies_without_waiting():
    bodies = _bodies()[:5]

    async def go():
        checker = PayloadChecker(1, batch_bytes=1)  # every body exceeds the budget
        await checker.start()
        try:
            got = await asyncio.gather(*(checker.run(check_images, *b, size=len(b[0])) for b in bodies))
            return got, checker.batches
        finally:
            await checker.close()

    got, batches = _run(go)
    assert batches == len(bodies)
    assert [v.error for v in got] == [check_images(*b).error for b in bodies]


def test_a_crashed_worker_is_data_and_the_pool_restarts():
    good = _bodies()[0]

    async def go():
        checker = PayloadChecker(1, max_restarts=1)
        await checker.start()
        try:
            old = checker.pids
            # the worker dies while holding a batch: every check of that batch is a failed verdict
            crashed = await asyncio.wait_for(asyncio.gather(checker.run(os._exit, 3),
                                                            checker.run(check_images, *good)), 60)
            after = await asyncio.wait_for(checker.run(check_images, *good), 60)
            new = checker.pids
            # a second crash exceeds max_restarts=1: still a verdict, never a hang or an exception
            again = await asyncio.wait_for(checker.run(os._exit, 3), 60)
            last = await asyncio.wait_for(checker.run(check_images, *good), 60)
            return crashed, after, old, new, again, last, checker.restarts
        finally:
            await checker.close()

    crashed, after, old, new, again, last, restarts = _run(go)
    for v in crashed:
        assert not v.ok and v.error.startswith(f"{FAILED}: a checker process died")
        assert "the pool was restarted" in v.error
    assert after.ok and after.checked_pid in new and not set(old) & set(new)
    assert not again.ok and "not restarted" in again.error
    assert not last.ok and last.error.startswith(FAILED)
    assert restarts == 1


def test_a_worker_killed_while_idle_is_replaced_before_the_next_check():
    good = _bodies()[0]

    async def go():
        checker = PayloadChecker(1)
        await checker.start()
        try:
            (pid,) = checker.pids
            os.kill(pid, signal.SIGKILL)
            for _ in range(200):  # until the executor has noticed the death and marked the pool broken
                if getattr(checker._pool, "_broken", False):
                    break
                await asyncio.sleep(0.05)
            v = await asyncio.wait_for(checker.run(check_images, *good), 60)
            return pid, v, checker.restarts
        finally:
            await checker.close()

    pid, v, restarts = _run(go)
    assert v.ok and v.checked_pid != pid and restarts == 1


def test_an_exception_in_a_check_is_a_failed_verdict():
    async def go():
        checker = PayloadChecker(1)
        await checker.start()
        try:
            return await checker.run(check_images, None, 8, 8, 1)  # json.loads(None): TypeError
        finally:
            await checker.close()

    v = _run(go)
    assert not v.ok and v.error.startswith(f"{FAILED}: TypeError")


@pytest.mark.parametrize("mode, size, outcome", [("ok", (64, 48), "ok"), ("wrongsize", (64, 48), "invalid_payload"),
                                                  ("noise", (200, 200), "ok")])
def test_no_decoding_on_the_event_loop(fake, monkeypatch, mode, size, outcome):
    """base64 and Pillow are broken in this process: a check on the event loop would fail (or raise)."""
    import PIL.Image

    def boom(*a, **k):
        raise AssertionError("decoded on the measuring event loop")

    monkeypatch.setattr(base64, "b64decode", boom)
    monkeypatch.setattr(PIL.Image, "open", boom)

    async def go():
        backend = HttpBackend(Target(base_url=fake.url(mode), timeout_s=10.0))
        await backend.start()
        seen = []
        real = backend.checker.run

        async def spy(fn, *args, **kw):
            v = await real(fn, *args, **kw)
            seen.append(v.checked_pid)
            return v

        backend.checker.run = spy
        try:
            times = constant(20.0, 0.2)
            planner = RequestPlanner(default_workload(*size, 2), ["a cat"], seed=1)
            run = await run_open_loop(times, planner.take(len(times)), backend, offered_rate=20.0,
                                      duration_s=0.2)
            return run, seen, backend.checker.pids, backend.check_mode
        finally:
            await backend.close()

    run, seen, pids, mode_line = _run(go)
    assert [r.outcome for r in run.records] == [outcome] * 4, [r.error for r in run.records]
    assert len(seen) == 4 and set(seen) <= set(pids) and os.getpid() not in seen
    n = default_workers()
    assert mode_line.startswith(f"decoded in {n} worker process{'es' if n > 1 else ''}")


@pytest.mark.parametrize("mode, size, in_pool", [("wrongsize", (64, 48), False), ("badimg", (64, 48), False),
                                                  ("noisewrong", (200, 200), True)])
def test_no_decode_reads_shape_and_count_small_on_the_loop_large_in_the_pool(fake, mode, size, in_pool):
    from diffbench.load.client.http import NO_DECODE_INLINE_BYTES

    async def go():
        backend = HttpBackend(Target(base_url=fake.url(mode), timeout_s=5.0, decode_payload=False),
                              check_workers=1)
        await backend.start()
        calls = []
        real = backend.checker.run

        async def spy(fn, *args, **kw):
            calls.append(kw["size"])
            return await real(fn, *args, **kw)

        backend.checker.run = spy
        try:
            planner = RequestPlanner(default_workload(*size, 2), ["x"], seed=0)
            times = constant(10.0, 0.2)
            run = await run_open_loop(times, planner.take(len(times)), backend, offered_rate=10.0, duration_s=0.2)
        finally:
            await backend.close()
        return run, calls, backend.check_mode

    run, calls, mode_line = _run(go)
    # not decoded: a wrong size and an undecodable image pass; the JSON shape and server timings are read
    assert [r.outcome for r in run.records] == ["ok", "ok"]
    assert run.records[0].server_stages_s["denoise"] == 0.25
    assert len(calls) == (2 if in_pool else 0)
    assert all(c > NO_DECODE_INLINE_BYTES for c in calls)  # 200x200 noise: ~160 kB of base64
    assert mode_line == ("not decoded (--no-decode): JSON shape and image count read on the event loop up to "
                         "16 KiB, in 1 worker process above")


def test_a_script_without_a_main_guard_gets_a_clear_error(tmp_path):
    """spawn re-imports the main module in each worker: the workers die; start() says why, never hangs."""
    import subprocess
    import sys

    script = tmp_path / "noguard.py"
    script.write_text("import asyncio\nfrom diffbench.load.client.checker import PayloadChecker\n"
                      "c = PayloadChecker(1)\nasyncio.run(c.start())\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "payload-check worker processes could not start" in proc.stderr
    assert 'if __name__ == "__main__":' in proc.stderr


def test_ctrl_c_reaching_the_workers_does_not_break_the_checks():
    """The terminal sends SIGINT to the whole process group; the run drains, its checks must still run."""
    good = _bodies()[0]

    async def go():
        checker = PayloadChecker(2)
        await checker.start()
        try:
            for pid in checker.pids:
                os.kill(pid, signal.SIGINT)
            await asyncio.sleep(0.3)
            v = await asyncio.wait_for(checker.run(check_images, *good), 60)
            return v, checker.restarts
        finally:
            await checker.close()

    v, restarts = _run(go)
    assert v.ok and restarts == 0


def test_large_bodies_go_through_a_file_that_is_removed_afterwards(tmp_path):
    """Bodies >= file_bytes are handed over as files (no pickled copy); each is removed when its batch
    returns, also when the worker died holding it."""
    bodies = _bodies()[:5]

    async def go():
        checker = PayloadChecker(1, file_bytes=1)  # every body through a file
        checker._dir = str(tmp_path)
        await checker.start()
        try:
            got = await asyncio.gather(*(checker.run(check_images, *b, size=len(b[0])) for b in bodies))
            left_ok = sorted(p.name for p in tmp_path.iterdir())
            crashed = await asyncio.wait_for(asyncio.gather(checker.run(check_images, *bodies[0]),
                                                            checker.run(os._exit, 3)), 60)
            left_crash = sorted(p.name for p in tmp_path.iterdir())
            return got, checker.files_written, left_ok, crashed, left_crash
        finally:
            await checker.close()

    got, written, left_ok, crashed, left_crash = _run(go)
    assert [(v.ok, v.error) for v in got] == [(check_images(*b).ok, check_images(*b).error) for b in bodies]
    assert written == 6 and left_ok == [] and left_crash == []
    assert all(not v.ok and "a checker process died" in v.error for v in crashed)


def test_check_workers_exit_when_their_parent_is_killed(tmp_path):
    """A load process killed with SIGKILL (the OOM killer, a killed --workers process) never shuts its
    pool down; its check workers must not live on as orphans (they ignore Ctrl-C)."""
    import subprocess
    import sys
    import time

    script = tmp_path / "killed.py"
    script.write_text(
        "import asyncio, os, signal\n"
        "from diffbench.load.client.checker import PayloadChecker\n"
        "async def main():\n"
        "    c = PayloadChecker(2)\n"
        "    await c.start()\n"
        "    print(' '.join(map(str, c.pids)), flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "if __name__ == '__main__':\n"
        "    asyncio.run(main())\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) == 2

    def alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as fh:  # a zombie is gone for our purpose
                return fh.read().split(")")[-1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + 10 * 0.5 + 5  # PARENT_POLL_S polls, generously
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in pids if alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    assert not left, f"check workers {left} outlived their killed parent"
