"""Build realistic exposition text for the doctor/scrape tests with ``prometheus_client`` itself.

Every family, label set and bucket series comes from :data:`diffbench.metrics.names.METRICS`, so the
text is what an exporter written to the table writes (not hand-typed numbers): a :class:`Exposition` is a
registry of those families; tests drive it with :meth:`Exposition.serve` (one request's observations)
and the ``set_*`` helpers, and take :meth:`Exposition.text` before and after.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from diffbench.metrics import names
from diffbench.metrics.scrape import format_scrape

MODEL = "tiny-flux"


class Exposition:
    """A registry with every family of the table (no ``_created`` samples are relied on)."""

    def __init__(self, model: str = MODEL, shapes: tuple[str, ...] = ("256x256",)) -> None:
        self.model = model
        self.registry = CollectorRegistry()
        self.m: dict[str, Counter | Gauge | Histogram] = {}
        for spec in names.METRICS:
            cls = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}[spec.kind]
            kw = {"buckets": spec.buckets} if spec.kind == "histogram" else {}
            self.m[spec.name] = cls(spec.name, spec.help, list(spec.labels), registry=self.registry, **kw)
        # zero-initialised label sets, as the exporter does
        for o in names.OUTCOMES:
            self.m["diffusion_requests"].labels(model, o, "200", "user")
        for s in (*shapes, names.OTHER_SHAPE):
            self.m["diffusion_request_duration_seconds"].labels(model, s, "user")
            self.m["diffusion_denoise_step_duration_seconds"].labels(model, s)
            for o in names.OUTCOMES:
                self.m["diffusion_shape_requests"].labels(model, s, o)
        self.m["diffusion_compile_recompiles"].labels(model)
        self.m["diffusion_queue_wait_seconds"].labels(model)
        self.m["diffusion_queue_depth"].labels(model).set(0)
        self.m["diffusion_requests_running"].labels(model).set(0)

    def serve(self, *, shape: str = "256x256", queue_s: float = 0.0, step_s: float = 0.01, steps: int = 4,
              text_encode_s: float = 0.005, vae_decode_s: float = 0.02, outcome: str = "ok",
              status: int = 200, traffic: str = "user", cache: tuple[str, int, int] | None = None) -> float:
        """Observe one finished request; returns its duration (queue + stages)."""
        m = self.m
        denoise = step_s * steps
        total = queue_s + text_encode_s + denoise + vae_decode_s
        m["diffusion_requests"].labels(self.model, outcome, str(status), traffic).inc()
        m["diffusion_request_duration_seconds"].labels(self.model, shape, traffic).observe(total)
        if traffic == "user":
            m["diffusion_shape_requests"].labels(self.model, shape, outcome).inc()
        m["diffusion_queue_wait_seconds"].labels(self.model).observe(queue_s)
        for stage, v in (("text_encode", text_encode_s), ("denoise", denoise), ("vae_decode", vae_decode_s)):
            m["diffusion_stage_duration_seconds"].labels(self.model, shape, stage).observe(v)
        for _ in range(steps):
            m["diffusion_denoise_step_duration_seconds"].labels(self.model, shape).observe(step_s)
        if cache is not None:
            name, lookups, hits = cache
            m["diffusion_cache_lookups"].labels(self.model, shape, name).inc(lookups)
            m["diffusion_cache_hits"].labels(self.model, shape, name).inc(hits)
        return total

    def set(self, family: str, value: float, **labels: str) -> None:
        """Set a gauge (labels by name)."""
        self.m[family].labels(**labels).set(value)  # type: ignore[union-attr]

    def inc(self, family: str, value: float = 1.0, **labels: str) -> None:
        """Increment a counter (labels by name)."""
        self.m[family].labels(**labels).inc(value)  # type: ignore[union-attr]

    def rank(self, rank: int, step_s: float, n: int = 10) -> None:
        for _ in range(n):
            self.m["diffusion_rank_step_compute_seconds"].labels(self.model, str(rank)).observe(step_s)  # type: ignore[union-attr]

    def deploy(self, *, fingerprint: str = "abc123", baseline: str | None = "abc123", dtype: str = "float32",
               cache: str = "none", vae_tiling: str = "true") -> None:
        self.set("diffusion_deployment_info", 1, model=self.model, fingerprint=fingerprint, dtype=dtype,
                 cache=cache, compile="false", vae_tiling=vae_tiling, attention="sdpa")
        if baseline is not None:
            self.set("diffusion_baseline_info", 1, model=self.model, fingerprint=baseline)

    def text(self) -> str:
        return generate_latest(self.registry).decode()

    def save(self, path: Path, time_s: float) -> Path:
        path.write_text(format_scrape(self.text(), time_s=time_s, source=f"fixture {path.name}"))
        return path


def healthy(exp: Exposition, *, requests: int = 20, step_s: float = 0.01, baseline_step_s: float = 0.01,
            hit_ratio: float = 0.5, baseline_hit_ratio: float = 0.5, queue_s: float = 0.001) -> None:
    """Baselines and a calibration loaded, a single-GPU deployment, ``requests`` requests served."""
    model, shape = exp.model, "256x256"
    exp.deploy()
    exp.set("diffusion_denoise_step_baseline_seconds", baseline_step_s, model=model, shape=shape)
    exp.set("diffusion_cache_hit_ratio_baseline", baseline_hit_ratio, model=model, shape=shape)
    exp.set("diffusion_latency_slo_seconds", 10.0, model=model)
    exp.set("diffusion_queue_estimated_wait_seconds", 0.0, model=model)
    exp.set("diffusion_gpu_memory_total_bytes", 8 * 2**30, gpu="0")
    exp.set("diffusion_gpu_memory_peak_bytes", 2 * 2**30, gpu="0")
    for stage, v in (("text_encode", 0.5), ("denoise", 1.5), ("vae_decode", 1.0)):
        exp.set("diffusion_stage_memory_peak_bytes", v * 2**30, model=model, stage=stage)
    exp.set("diffusion_quality_psnr_decibels", 40.0, model=model, probe="p0")
    exp.set("diffusion_quality_psnr_threshold_decibels", 35.0, model=model, probe="p0")
    exp.set("diffusion_requests_running", 1, model=model)
    lookups = 20
    for _ in range(requests):
        exp.serve(shape=shape, step_s=step_s, queue_s=queue_s,
                  cache=("fbcache", lookups, round(lookups * hit_ratio)))
