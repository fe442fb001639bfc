"""Prometheus metrics of the reference service (``GET /metrics``), one registry per app.

Names follow the proposed diffusion metric set (monitoring.md §3): ``diffusion_requests_total{outcome,
status}`` with outcome ∈ {ok, invalid, not_found, rejected, unavailable, oom, error} and the HTTP status
(a video job counts when it finishes, with the status an image request would have got), ``diffusion_request_duration_seconds`` (arrival →
response ready), ``diffusion_stage_duration_seconds{stage}``, ``diffusion_queue_wait_seconds``,
``diffusion_queue_depth``, ``diffusion_requests_running``, ``diffusion_queue_estimated_wait_seconds`` and
``diffusion_gpu_memory_peak_bytes`` (peak of the last request; CPU RSS growth or simulated bytes on
non-CUDA engines, see ``memory_kind`` in responses).
"""

from __future__ import annotations

from collections.abc import Callable

REQUEST_BUCKETS = (
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2,
    3,
    5,
    7.5,
    10,
    15,
    20,
    30,
    45,
    60,
    90,
    120,
    180,
    300,
    600,
    1200,
)
# (outcome, status) series exported at 0 from the start, so rates exist before the first event.
PRESET = (
    ("ok", 200),
    ("invalid", 400),
    ("not_found", 404),
    ("rejected", 429),
    ("error", 500),
    ("unavailable", 503),
    ("oom", 507),
)
STAGE_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 60, 120, 300, 600)


class Metrics:
    """Counters and histograms for one service; gauges read the worker at scrape time."""

    def __init__(self, model: str, snapshot: Callable[[], tuple[int, int, float | None]]) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.model = model
        self.requests = Counter(
            "diffusion_requests",
            "Finished requests by outcome and HTTP status",
            ["model", "outcome", "status"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "diffusion_request_duration_seconds",
            "Arrival to response ready",
            ["model"],
            buckets=REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.stage = Histogram(
            "diffusion_stage_duration_seconds",
            "Engine stage durations",
            ["model", "stage"],
            buckets=STAGE_BUCKETS,
            registry=self.registry,
        )
        self.queue_wait = Histogram(
            "diffusion_queue_wait_seconds",
            "Admission to start on the device",
            ["model"],
            buckets=REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.peak_memory = Gauge(
            "diffusion_gpu_memory_peak_bytes",
            "Peak memory of the last request",
            ["model"],
            registry=self.registry,
        )
        depth = Gauge("diffusion_queue_depth", "Requests waiting", ["model"], registry=self.registry)
        running = Gauge("diffusion_requests_running", "Requests running", ["model"], registry=self.registry)
        est = Gauge(
            "diffusion_queue_estimated_wait_seconds",
            "Work-weighted wait estimate",
            ["model"],
            registry=self.registry,
        )
        depth.labels(model).set_function(lambda: snapshot()[0])
        running.labels(model).set_function(lambda: snapshot()[1])
        est.labels(model).set_function(lambda: snapshot()[2] or 0.0)
        for outcome, status in PRESET:
            self.requests.labels(model, outcome, str(status))

    def outcome(self, outcome: str, status: int) -> None:
        """Count one finished request (``outcome`` from :func:`~diffbench.server.http_errors.outcome_of`)."""
        self.requests.labels(self.model, outcome, str(status)).inc()

    def render(self) -> tuple[bytes, str]:
        """(body, content type) in the Prometheus text format."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST
