"""One blocking HTTP request under a *total* deadline (connect + send + whole body), standard library only.

``urllib.request.urlopen(timeout=...)`` bounds each socket operation, not the request: a server that sends
its headers and then one byte every second keeps such a read alive for ever. :func:`request` gives every
socket operation only the time left before the deadline and reads the body one ``recv`` at a time
(``read1``), so a dripping body fails at the deadline. For the synchronous helpers (metrics scrapes,
Prometheus queries, health checks, drills); the asynchronous clients use aiohttp under one asyncio deadline
(:func:`diffbench.load.client.http.with_deadline`).

Redirects are not followed (the answer is returned with its ``Location`` header); no proxies from the
environment. Errors: :class:`DeadlineExceeded` (a :class:`TimeoutError`) past the deadline; ``OSError``
(refused, reset, DNS) and :class:`http.client.HTTPException` (a malformed or truncated answer) from the transport;
``ValueError`` for a URL that is not http(s)://host.
"""

from __future__ import annotations

import http.client
import ssl
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass


class DeadlineExceeded(TimeoutError):
    """No complete answer within the request's total deadline."""


@dataclass(frozen=True)
class Response:
    """``status``; ``headers`` (names lower-cased); ``body``, the whole body (bytes)."""

    status: int
    headers: Mapping[str, str]
    body: bytes


def request(url: str, *, deadline_s: float, method: str = "GET", body: bytes | None = None,
            headers: Mapping[str, str] | None = None, context: ssl.SSLContext | None = None) -> Response:
    """``method url`` with at most ``deadline_s`` seconds for connect, send and the whole answer.

    Raises:
        DeadlineExceeded: the deadline passed (also when each byte arrived in time but the body did not).
        OSError, http.client.HTTPException: the transport failed or the answer is malformed.
        ValueError: ``url`` is not http(s)://host[:port][/path][?query].
    """
    end = time.monotonic() + deadline_s
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")

    def left() -> float:
        remaining = end - time.monotonic()
        if remaining <= 0:
            raise DeadlineExceeded(f"no complete answer within {deadline_s:g} s")
        return remaining

    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=left(),
                                           context=context or ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=left())
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn.connect()
        sock = conn.sock
        assert sock is not None
        sock.settimeout(left())
        conn.request(method, path, body=body, headers=dict(headers or {}))
        sock.settimeout(left())
        resp = conn.getresponse()
        chunks = []
        while True:
            sock.settimeout(left())
            chunk = resp.read1(65536)
            if not chunk:
                break
            chunks.append(chunk)
        if resp.length:  # closed before the announced Content-Length
            raise http.client.IncompleteRead(b"".join(chunks), resp.length)
        left()
        return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, b"".join(chunks))
    except TimeoutError as exc:
        if isinstance(exc, DeadlineExceeded):
            raise
        raise DeadlineExceeded(f"no complete answer within {deadline_s:g} s") from None
    finally:
        conn.close()
