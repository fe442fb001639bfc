"""Classify what happened to one request into an outcome (see :data:`diffbench.core.records.OUTCOMES`).

Third-party (aiohttp) exceptions are translated here, at one boundary; nothing else in the client looks at
exception classes. Rules (every failure stays in the denominator; see docs/concepts/goodput-slo-knee.md):

- 2xx → ``ok`` (the payload is checked later, outside the timed region, and may become ``invalid_payload``);
- 429 and 503 → ``rejected``; ``Retry-After`` (delta-seconds or an HTTP-date, RFC 9110 §10.2.3) is kept
  as ``retry_after_s``;
- a redirect (3xx; never followed) → ``http_error`` with the status and its target (``Location``);
- any other status → ``http_error`` with the status;
- the per-request deadline → ``timeout``; refused / reset / dropped / TLS / DNS failures →
  ``connection_error``; cancellation at the end of a run → ``cancelled``.
"""

from __future__ import annotations

import asyncio
import email.utils
import ssl
import time
from dataclasses import dataclass

from diffbench.core.records import Outcome

REJECT_STATUSES = frozenset({429, 503})


@dataclass(frozen=True)
class Classified:
    """An outcome with its detail: HTTP status, Retry-After (seconds) and a short error text."""

    outcome: Outcome
    status: int | None = None
    retry_after_s: float | None = None
    error: str | None = None


def parse_retry_after(value: str | None, now_epoch_s: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header value, or None when absent or unparsable.

    Args:
        value: ``"120"`` (delta-seconds) or an HTTP-date (``"Wed, 21 Oct 2026 07:28:00 GMT"``).
        now_epoch_s: wall-clock now (seconds since the epoch) for HTTP-dates; ``time.time()`` by default
            (a wall clock is the only clock an HTTP-date can be compared with).

    Returns:
        Seconds >= 0 (a date in the past gives 0.0), or None.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        secs = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        now = time.time() if now_epoch_s is None else now_epoch_s
        return max(0.0, when.timestamp() - now)
    if secs != secs or secs < 0:  # NaN or negative
        return None
    return secs


def redirect_target(request_url: str, location: str | None) -> str | None:
    """The absolute target of a ``Location`` header (RFC 9110 §10.2.2: relative to the request's URL)."""
    from urllib.parse import urljoin

    return urljoin(request_url, location.strip()) if location and location.strip() else None


def classify_status(status: int, retry_after: str | None = None, location: str | None = None) -> Classified:
    """Outcome of an HTTP status (before the payload check); ``location`` is the ``Location`` header, named in
    the error of a redirect (3xx) so that the user sees where the service points."""
    if 200 <= status < 300:
        return Classified("ok", status=status)
    if status in REJECT_STATUSES:
        return Classified("rejected", status=status, retry_after_s=parse_retry_after(retry_after),
                          error=f"HTTP {status}")
    if 300 <= status < 400:
        where = f"to {location.strip()}" if location and location.strip() else "without a Location header"
        return Classified("http_error", status=status,
                          error=f"HTTP {status} redirect {where} (not followed: give that URL as --url)")
    return Classified("http_error", status=status, error=f"HTTP {status}")


def _is_tls(exc: BaseException, tls_errors: tuple[type[BaseException], ...]) -> bool:
    """A TLS error anywhere in the exception's chain (aiohttp wraps them in its connector errors)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, tls_errors):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def classify_exception(exc: BaseException) -> Classified:
    """Outcome of an exception raised while sending a request or reading its response.

    - :class:`asyncio.CancelledError` → ``cancelled``;
    - :class:`TimeoutError` (the per-request deadline; aiohttp's ``ServerTimeoutError`` derives from it)
      → ``timeout``;
    - a TLS failure (an :class:`ssl.SSLError` in the chain: ``ClientConnectorCertificateError``,
      ``ClientConnectorSSLError``, a TLS handshake against a plain-HTTP server) → ``connection_error``
      with ``TLS:`` in the error;
    - aiohttp connection errors (refused/unreachable ``ClientConnectorError``, ``ServerDisconnectedError``,
      ``ClientOSError`` such as a reset, ``ClientPayloadError`` for a body cut short, a malformed response
      ``ClientResponseError``, ``InvalidURL``) and OS errors → ``connection_error``;
    - anything else is also ``connection_error`` with ``unexpected`` and its class name, so an unexpected
      client failure is counted, never dropped.
    """
    import aiohttp

    name = type(exc).__name__
    detail = str(exc).strip() or name
    if isinstance(exc, asyncio.CancelledError):
        return Classified("cancelled", error="cancelled at the end of the run")
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):  # distinct classes before Python 3.11
        return Classified("timeout", error=f"{name}: {detail}"[:300])
    if _is_tls(exc, (ssl.SSLError, aiohttp.ClientSSLError)):
        return Classified("connection_error", error=f"TLS: {name}: {detail}"[:300])
    if isinstance(exc, aiohttp.InvalidURL):
        return Classified("connection_error", error=f"invalid URL: {name}: {detail}"[:300])
    if isinstance(exc, (aiohttp.ClientError, OSError)):
        return Classified("connection_error", error=f"{name}: {detail}"[:300])
    return Classified("connection_error", error=f"unexpected {name}: {detail}"[:300])
