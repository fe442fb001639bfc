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
    invalid_kind: str | None = None
    """For an ``invalid_payload`` that failed an answer-sanity check, its named kind (``black_image``,
    ``constant_image``, ``black_frame``, ``duplicate_across_seeds``); None otherwise (a format failure:
    JSON, base64, decoding, size, count)."""
    answer_hashes: list[str] | None = None
    """Pixel hash of each answer image (hex BLAKE2b-128 of the decoded pixels), for an ok answer checked with
    sanity on; None otherwise."""
    request_key: str | None = None
    """Hex digest of what decides the picture besides the shape: the prompt, the seed when the dialect sends
    one, the edit inputs. Two answers with equal pixels and different keys are ``duplicate_across_seeds``
    (set with ``answer_hashes``)."""

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
