"""Per-request records: one record of named timestamps per request; every latency derives from it.

Timestamps are seconds on the run's monotonic clock, relative to the run start (``t=0`` is the first
intended arrival's reference point); ``row_started_unix_s`` and ``intended_unix_s`` put them on the wall
clock (Unix epoch seconds, UTC). Used by the open/closed-loop load runners and by the simulator.
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
    "abandoned",  # given up by the client on purpose (load --abandon-after): connection closed or job deleted
]
OUTCOMES: tuple[str, ...] = (
    "ok",
    "http_error",
    "rejected",
    "timeout",
    "connection_error",
    "invalid_payload",
    "cancelled",
    "abandoned",
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
    width: int | None = None
    """Pixels across of what the request asked for (None: not recorded, e.g. the simulator)."""
    height: int | None = None
    """Pixels down of what the request asked for."""
    frames: int | None = None
    """Video frames asked for (None: an image, or a dialect that does not send frames)."""
    steps: int | None = None
    """Denoising steps asked for (None: the dialect does not send steps, so the server's default applies
    and the work of the request is unknown)."""
    outputs: int | None = None
    """Outputs (images, or one video) the request asked for."""
    row_started_unix_s: float | None = None
    """Wall clock (Unix epoch seconds, UTC) of the row's ``t=0``, the origin of ``intended_s`` and the other
    offsets (written in ``--jsonl`` lines; derived from the run's one wall-clock/monotonic pair)."""
    intended_unix_s: float | None = None
    """Wall clock (Unix epoch seconds, UTC) of the intended arrival: ``row_started_unix_s + intended_s``."""

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

    reference: str | None = None
    """``load --reference``: the label of the reference this request replayed (None: a workload request)."""
    psnr_db: float | None = None
    """Reference requests: PSNR (dB) of the answer against the reference, its worst image or frame;
    identical answers are recorded as 200 dB (no finite uint8 PSNR of a real image reaches it). None:
    not scored (not a reference request, or not ok)."""
    ssim: float | None = None
    """Reference requests: SSIM of the answer against the reference, its worst image or frame."""

    @property
    def work_mpx_steps(self) -> float | None:
        """Megapixel·steps asked for: ``width * height * (frames or 1) * steps * outputs / 1e6``; None when
        the size or the steps are not known."""
        if self.width is None or self.height is None or self.steps is None:
            return None
        return self.width * self.height * (self.frames or 1) * self.steps * (self.outputs or 1) / 1e6

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
