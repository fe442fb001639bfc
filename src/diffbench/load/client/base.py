"""What the runners see of a backend: a protocol owned by the consumer (the runners), and one attempt.

The runners decide *when* a request starts; a backend decides *how* it is sent. A backend fills one
:class:`Attempt` per request with timestamps read from the runner's clock (seconds since the run start),
so every latency derives from one record of named timestamps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from diffbench.core.records import Outcome, RequestRecord
from diffbench.load.client.workload import RequestSpec

Now = Callable[[], float]
"""Seconds since the run start on the monotonic clock (``time.perf_counter``)."""


@dataclass
class Attempt:
    """Timestamps and outcome of one request, filled in by a backend.

    ``sent_s``: handed to the transport (the body is serialized before). ``first_byte_s``: response
    headers received (for video jobs: the create call's response). ``done_s``: the last byte of the
    response (for video jobs: of the content download), or the moment the deadline fired.
    ``body_encoding``: the ``Content-Encoding`` of ``body`` (None: identity), removed by the check.
    """

    sent_s: float | None = None
    first_byte_s: float | None = None
    done_s: float | None = None
    outcome: Outcome = "ok"
    status: int | None = None
    retry_after_s: float | None = None
    error: str | None = None
    body: bytes | None = None
    body_encoding: str | None = None
    stages_s: dict[str, float] = field(default_factory=dict)
    peak_memory_bytes: int | None = None
    job_id: str | None = None
    reported_frames: int | None = None
    poll_granularity_s: float | None = None
    invalid_kind: str | None = None
    answer_hashes: list[str] | None = None
    request_key: str | None = None
    reference: str | None = None
    quality: dict[str, float | None] | None = None

    def to_record(self, *, id: int, rate: float | None, shape: str, intended_s: float,
                  client_queue_s: float, work: dict[str, int | None] | None = None) -> RequestRecord:
        """The :class:`RequestRecord` for this attempt (the body is not kept); ``work``: the record's
        ``width``, ``height``, ``frames``, ``steps`` and ``outputs`` (what the request asked for)."""
        return RequestRecord(
            id=id, rate=rate, shape=shape, intended_s=intended_s, sent_s=self.sent_s,
            first_byte_s=self.first_byte_s, done_s=self.done_s, outcome=self.outcome, status=self.status,
            retry_after_s=self.retry_after_s, error=self.error, client_queue_s=client_queue_s,
            server_stages_s=self.stages_s, server_peak_memory_bytes=self.peak_memory_bytes,
            poll_granularity_s=self.poll_granularity_s, invalid_kind=self.invalid_kind,
            answer_hashes=self.answer_hashes, request_key=self.request_key, reference=self.reference,
            psnr_db=(self.quality or {}).get("psnr_db"), ssim=(self.quality or {}).get("ssim"), **(work or {}),
        )


class Backend(Protocol):
    """Lifecycle: ``start()`` → ``execute``/``check`` (concurrently, many) → ``close()``."""

    async def start(self) -> None:
        """Open connections / pools."""

    async def execute(self, spec: RequestSpec, attempt: Attempt, now: Now) -> None:
        """Send one request and fill ``attempt`` (timestamps, outcome, raw body). Never raises except
        :class:`asyncio.CancelledError` (the runner records the attempt as cancelled)."""

    async def check(self, spec: RequestSpec, attempt: Attempt) -> None:
        """Validate the payload of an ``ok`` attempt, outside the timed region; may turn it into
        ``invalid_payload``. Drops the body."""

    async def close(self) -> None:
        """Close connections; abandon nothing the user did not ask to delete."""
