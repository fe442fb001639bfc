"""Per-request records: one record of named timestamps per request; every latency derives from it.

Timestamps are seconds on the run's monotonic clock, relative to the run start (``t=0`` is the first
intended arrival's reference point). Used by the open/closed-loop load runners and by the simulator.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

Outcome = Literal[
    "ok",  # success with a valid payload
    "http_error",  # a non-2xx status other than 429/503 (status holds it)
    "rejected",  # 429 or 503 (admission control); retry_after_s when the server sent Retry-After
    "timeout",  # the explicit per-request deadline passed
    "connection_error",  # refused, reset, TLS failure, DNS failure
    "invalid_payload",  # 2xx but the body/image does not decode or has the wrong size
    "cancelled",  # still in flight when the run was stopped (Ctrl-C or drain deadline)
]
OUTCOMES: tuple[str, ...] = (
    "ok",
    "http_error",
    "rejected",
    "timeout",
    "connection_error",
    "invalid_payload",
    "cancelled",
)


class RequestRecord(BaseModel):
    """One request's timestamps (seconds since run start) and outcome.

    - ``intended_s``: when the schedule said it should start (open loop) or when the user was ready
      (closed loop). Latency from intended arrival = ``done_s - intended_s`` (free of coordinated omission).
    - ``queued_s``: when it entered the client's in-flight cap queue (equals intended for open loop).
    - ``sent_s``: when the request was actually handed to the transport. Client lag = sent − intended
      (includes client queue time under ``--max-inflight``).
    - ``first_byte_s``: first response byte (None if none arrived).
    - ``done_s``: completion (success or failure).
    """

    id: int
    rate: float | None = None
    shape: str = ""
    intended_s: float
    sent_s: float | None = None
    first_byte_s: float | None = None
    done_s: float | None = None
    outcome: Outcome = "ok"
    status: int | None = None
    retry_after_s: float | None = None
    error: str | None = None
    client_queue_s: float = 0.0
    server_stages_s: dict[str, float] = {}
    server_peak_memory_bytes: int | None = None
    poll_granularity_s: float | None = None
    """Video jobs: seconds from the send of the last status request that saw the job unfinished (or of the
    create request) to ``done_s``. The job finished inside that window, so ``done_s`` overstates its end by
    at most this much: the resolution bound of the latency. None: not a polled job."""
    reference: str | None = None
    """``load --reference``: the label of the reference this request replayed (None: a workload request)."""
    psnr_db: float | None = None
    """Reference requests: PSNR (dB) of the answer against the reference, its worst image or frame;
    identical answers are recorded as 200 dB (no finite uint8 PSNR of a real image reaches it). None:
    not scored (not a reference request, or not ok)."""
    ssim: float | None = None
    """Reference requests: SSIM of the answer against the reference, its worst image or frame."""

    @property
    def latency_from_arrival_s(self) -> float | None:
        """done − intended (seconds), None when not finished."""
        return None if self.done_s is None else self.done_s - self.intended_s

    @property
    def latency_from_send_s(self) -> float | None:
        """done − sent (seconds), None when not sent or not finished."""
        if self.done_s is None or self.sent_s is None:
            return None
        return self.done_s - self.sent_s

    @property
    def lag_s(self) -> float | None:
        """sent − intended (seconds): how late the client sent it."""
        return None if self.sent_s is None else self.sent_s - self.intended_s
