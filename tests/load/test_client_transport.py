"""The aiohttp transport of HttpBackend against real loopback failures: each failure classified at the one
boundary (outcomes.classify_exception), TLS errors named, timeouts from the explicit deadline only."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import ssl
import subprocess

import pytest

from diffbench.load.client import HttpBackend, Target, classify_exception
from diffbench.load.client.base import Attempt
from diffbench.load.client.workload import RequestSpec, ShapeMix

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

SPEC = RequestSpec(index=0, kind="image", prompt="p", seed=0, shape=ShapeMix(width=64, height=48, steps=2))


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _one(target: Target, spec: RequestSpec = SPEC) -> Attempt:
    """One request through HttpBackend.execute + check, timed on this loop's clock."""
    async def go() -> Attempt:
        backend = HttpBackend(target, check_workers=1)
        await backend.start()
        try:
            loop = asyncio.get_running_loop()
            a = Attempt()
            await backend.execute(spec, a, loop.time)
            await backend.check(spec, a)
            return a
        finally:
            await backend.close()

    return asyncio.run(go())


def _raw_exception(url: str, **session_kw) -> BaseException:
    """The exception a bare aiohttp GET of ``url`` raises (what HttpBackend's boundary receives)."""
    import aiohttp

    async def go() -> BaseException:
        async with aiohttp.ClientSession(**session_kw) as s:
            try:
                async with s.get(url) as r:
                    await r.read()
            except Exception as exc:
                return exc
        raise AssertionError(f"GET {url} did not fail")

    return asyncio.run(go())


def test_refused_port_is_a_connection_error():
    url = f"http://127.0.0.1:{_closed_port()}"
    exc = _raw_exception(url + "/x")
    import aiohttp

    assert isinstance(exc, aiohttp.ClientConnectorError)
    c = classify_exception(exc)
    assert c.outcome == "connection_error" and c.error.startswith("ClientConnectorError")
    a = _one(Target(base_url=url, timeout_s=5.0, decode_payload=False))
    assert a.outcome == "connection_error" and "ClientConnectorError" in a.error and a.done_s is not None


@pytest.mark.parametrize("mode, exc_names", [
    ("reset", ("ServerDisconnectedError", "ClientOSError")),  # closed before any answer
    ("short", ("ClientPayloadError",)),  # Content-Length 1000, 10 bytes sent
])
def test_reset_and_truncated_bodies_are_connection_errors(fake, mode, exc_names):
    exc = _raw_exception(fake.url(mode) + "/v1/images/generations")
    assert type(exc).__name__ in exc_names
    assert classify_exception(exc).outcome == "connection_error"
    a = _one(Target(base_url=fake.url(mode), timeout_s=5.0))
    assert a.outcome == "connection_error" and a.error.split(":")[0] in exc_names
    assert a.body is None


def test_tls_against_a_plain_http_server_says_tls(fake):
    https = fake.url("ok").replace("http://", "https://")
    exc = _raw_exception(https + "/v1/images/generations")
    c = classify_exception(exc)
    assert c.outcome == "connection_error" and c.error.startswith("TLS: "), c.error
    a = _one(Target(base_url=https, timeout_s=5.0))
    assert a.outcome == "connection_error" and a.error.startswith("TLS: ")


def test_stall_is_a_timeout_from_the_explicit_deadline(fake):
    a = _one(Target(base_url=fake.url("stall"), timeout_s=0.4))
    assert a.outcome == "timeout" and a.error == "no complete response within --timeout 0.4 s"
    assert 0.4 <= a.done_s - a.sent_s < 0.4 + 0.5  # the deadline fired, not an aiohttp default
    exc = _raw_exception_with_socket_timeout(fake.url("stall"))
    assert classify_exception(exc).outcome == "timeout"  # aiohttp's ServerTimeoutError, if one fires


def _raw_exception_with_socket_timeout(url: str) -> BaseException:
    import aiohttp

    return _raw_exception(url + "/v1/images/generations", timeout=aiohttp.ClientTimeout(sock_read=0.2))


def test_unit_classification_of_the_remaining_classes():
    import aiohttp

    assert classify_exception(aiohttp.InvalidURL("http://host:99999")).error.startswith("invalid URL")
    assert classify_exception(asyncio.CancelledError()).outcome == "cancelled"
    assert classify_exception(ssl.SSLError(1, "bad record")).error.startswith("TLS: ")
    assert classify_exception(RuntimeError("x")).error == "unexpected RuntimeError: x"


def _self_signed(tmp_path) -> tuple[str, str]:
    key, crt = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(crt), "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
    return str(crt), str(key)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_untrusted_certificate_is_tls_error_and_insecure_connects(tmp_path):
    crt, key = _self_signed(tmp_path)
    body = json.dumps({"data": [{"b64_json": ""}]}).encode()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def go() -> tuple[Attempt, Attempt]:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
        url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        out = []
        try:
            for verify in (True, False):
                backend = HttpBackend(Target(base_url=url, timeout_s=5.0, verify_tls=verify,
                                             decode_payload=False), check_workers=1)
                await backend.start()
                try:
                    a = Attempt()
                    await backend.execute(SPEC, a, asyncio.get_running_loop().time)
                    await backend.check(SPEC, a)
                    out.append(a)
                finally:
                    await backend.close()
        finally:
            server.close()
        return out[0], out[1]

    strict, insecure = asyncio.run(go())
    assert strict.outcome == "connection_error" and strict.error.startswith("TLS: ClientConnectorCertificateError")
    assert insecure.outcome == "ok" and insecure.status == 200  # --insecure: no verification, same session


def test_session_sends_identity_and_headers_and_reads_a_compressed_answer_in_the_pool(fake):
    a = _one(Target(base_url=fake.url("gzip"), timeout_s=5.0, headers={"X-Trace": "7"}, api_key="sk-1"))
    assert a.outcome == "ok", a.error  # gzip despite identity: inflated by the checker, then decoded
    assert a.stages_s["denoise"] == 0.25  # the server timings came out of the compressed JSON
    h = fake.last_headers
    assert h["accept-encoding"] == "identity" and h["x-trace"] == "7" and h["authorization"] == "Bearer sk-1"
    assert h["content-type"] == "application/json"


def test_user_headers_win_case_insensitively(fake):
    a = _one(Target(base_url=fake.url("ok"), timeout_s=5.0, api_key="sk-1",
                    headers={"accept-encoding": "gzip", "AUTHORIZATION": "Basic x"}))
    assert a.outcome == "ok"
    h = fake.last_headers  # one value each (a duplicate header would be joined or the last one kept)
    assert h["accept-encoding"] == "gzip" and h["authorization"] == "Basic x"


def test_redirects_are_not_followed(fake):
    """A 3xx is the server's answer (http_error), never silently followed to another URL."""
    a = _one(Target(base_url=fake.url("r301"), timeout_s=5.0))
    assert a.outcome == "http_error" and a.status == 301
    # reported with its target (issue 24 item 9): the fake's relative Location resolved against the request URL
    assert f"redirect to http://127.0.0.1:{fake.port}/ok/v1/images/generations" in (a.error or ""), a.error
