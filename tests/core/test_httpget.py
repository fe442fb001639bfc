"""Every synchronous HTTP call has a total deadline (issue 24 item 1): a server that sends its headers and
then drips its body a byte at a time fails at the deadline, although no single read ever waits long.

Covers :func:`diffbench.core.httpget.request` and its users: ``fetch_metrics`` (doctor, load --scrape),
the background server's health check and the drills' ``http_json``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from diffbench.core.httpget import DeadlineExceeded, request
from diffbench.errors import InputError

BODY = b"# TYPE diffusion_requests_total counter\ndiffusion_requests_total 1\n"
DRIP_EVERY_S = 0.3


@pytest.fixture
def drip() -> Iterator[str]:
    """``/drip``: headers at once, then the body a byte every 0.3 s (about 20 s in all); ``/ok``: at once;
    ``/moved``: a 307 to /ok."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return None

        def do_GET(self) -> None:  # noqa: N802
            self.send_response(307 if self.path == "/moved" else 200)
            if self.path == "/moved":
                self.send_header("Location", "/ok")
            self.send_header("Content-Length", "0" if self.path == "/moved" else str(len(BODY)))
            self.end_headers()
            if self.path == "/ok":
                self.wfile.write(BODY)
            elif self.path == "/drip":
                try:
                    for i in range(len(BODY)):
                        self.wfile.write(BODY[i:i + 1])
                        self.wfile.flush()
                        time.sleep(DRIP_EVERY_S)
                except OSError:
                    pass

        do_POST = do_GET  # noqa: N815

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_whole_answer_is_read(drip: str) -> None:
    r = request(drip + "/ok", deadline_s=10)
    assert (r.status, r.body) == (200, BODY)
    moved = request(drip + "/moved", deadline_s=10)  # not followed: the answer names its target
    assert moved.status == 307 and moved.headers["location"] == "/ok"


def test_a_dripping_body_fails_at_the_deadline(drip: str) -> None:
    drip_s = len(BODY) * DRIP_EVERY_S
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        request(drip + "/drip", deadline_s=1.0)
    assert time.monotonic() - t0 < drip_s  # it gave up, it did not read the drip to its end


@pytest.mark.slow
def test_users_have_the_total_deadline(drip: str) -> None:
    from diffbench.metrics.scrape import fetch_metrics
    from diffbench.monitor.drills.harness import DrillError, http_text
    from diffbench.server.background import _health_ok

    drip_s = len(BODY) * DRIP_EVERY_S
    t0 = time.monotonic()
    with pytest.raises(InputError, match="no complete answer within 1 s"):
        fetch_metrics(drip + "/drip", timeout_s=1.0)
    with pytest.raises(DrillError):
        http_text(drip + "/drip", timeout=1.0)
    assert time.monotonic() - t0 < drip_s
    with pytest.raises(InputError, match="HTTP 307 to /ok"):
        fetch_metrics(drip + "/moved", timeout_s=5.0)
    assert not _health_ok(drip)  # /health here announces a body it never sends: a truncated answer is not health
