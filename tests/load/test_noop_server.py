"""The fixed-body responder (diffbench.load.client.noop_server) in its own process, as the benchmark uses it."""

from __future__ import annotations

import base64
import http.client
import io
import json
import subprocess
import sys
import time

import pytest

from diffbench.load.client.noop_server import NOOP_SIZE, ServerProcess, build_body, image_size_for

pytestmark = pytest.mark.timeout(60)


def _decode(body: bytes) -> tuple[int, int]:
    from PIL import Image

    obj = json.loads(body)
    assert obj["created"] == 0 and len(obj["data"]) == 1
    with Image.open(io.BytesIO(base64.b64decode(obj["data"][0]["b64_json"], validate=True))) as img:
        img.load()
        assert img.format == "PNG" and img.mode == "RGB"
        return img.size


@pytest.mark.parametrize("body_bytes", [0, 100_000, 1_000_000])
def test_body_is_a_valid_images_response_of_the_announced_size(body_bytes):
    body = build_body(body_bytes)
    assert _decode(body) == image_size_for(body_bytes)
    if body_bytes == 0:
        assert image_size_for(0) == NOOP_SIZE
    else:
        # the side is rounded down: one pixel more per side would exceed the request
        w, _ = image_size_for(body_bytes)
        step = 4 / 3 * (6 * w + 4)  # base64 bytes added by one more row and column of RGB + filter byte
        assert body_bytes - 2 * step <= len(body) <= body_bytes


def test_noise_is_incompressible():
    import zlib

    body = build_body(200_000)
    png = base64.b64decode(json.loads(body)["data"][0]["b64_json"])
    assert len(zlib.compress(png, 6)) > 0.99 * len(png)


@pytest.mark.e2e  # the server runs in its own process
def test_answers_keep_alive_requests_back_to_back():
    expected = build_body(100_000)
    with ServerProcess(100_000) as srv:
        assert srv.size == image_size_for(100_000)
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        sockets = set()
        for i in range(5):
            payload = json.dumps({"prompt": "x" * i}).encode()  # a different Content-Length each time
            conn.request("POST", "/v1/images/generations", body=payload,
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            assert resp.status == 200 and resp.getheader("Content-Type") == "application/json"
            assert resp.read() == expected
            sockets.add(id(conn.sock))
        conn.close()
    assert len(sockets) == 1  # one connection served all five


@pytest.mark.e2e  # the server runs in its own process
def test_pipelined_requests_in_one_write_get_one_answer_each():
    import socket

    with ServerProcess(0) as srv, socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        req = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
        sock.sendall(req * 3 + b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        one = len(b"HTTP/1.1 200 OK\r\n") + len(b"Content-Type: application/json\r\nConnection: keep-alive\r\n")
        body = build_body(0)
        want = 4 * (one + len(f"Content-Length: {len(body)}\r\n\r\n") + len(body))
        got = b""
        while len(got) < want:
            chunk = sock.recv(65536)
            assert chunk, "server closed the connection"
            got += chunk
    assert got.count(b"HTTP/1.1 200 OK") == 4 and got.count(body) == 4


@pytest.mark.e2e  # the server runs in its own process
def test_delay_mode_holds_each_answer():
    delay = 0.3
    with ServerProcess(0, delay_s=delay) as srv:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        for _ in range(2):
            t = time.perf_counter()
            conn.request("GET", "/")
            resp = conn.getresponse()
            assert resp.read() == build_body(0)
            assert time.perf_counter() - t >= delay  # a lower bound only: the answer is never early
        conn.close()


@pytest.mark.e2e  # runs a subprocess
@pytest.mark.parametrize(("args", "fragment"), [
    (["--body-bytes", "-1"], "--body-bytes"),
    (["--body-bytes", "100"], "too small"),
    (["--delay", "-1"], "--delay"),
    (["--delay", "nan"], "--delay"),
])
def test_bad_arguments_exit_2_with_the_option_named(args, fragment):
    p = subprocess.run([sys.executable, "-m", "diffbench.load.client.noop_server", *args],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and fragment in p.stderr
