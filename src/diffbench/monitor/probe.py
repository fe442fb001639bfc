"""The quality spot-check probe: replay fixed requests against a live service, compare with references.

What one *pass* does (see docs/guides/after-launch.md):

1. ``GET /v1/models``: the served model id and its deployment fingerprint (``data[0].fingerprint``,
   ``data[0].fingerprint_id``). A fingerprint that differs from the references' fails the pass (a baseline
   is valid only for its deployment); at startup the command refuses to run at all.
2. For every reference case (:mod:`diffbench.monitor.probe_refs`): the same prompt, seed, size, steps and
   batch size ``n`` (the reference's exact batch composition), through ``POST /v1/images/generations``
   (``response_format=b64_json``) or a video job (``POST /v1/videos``, polled, ``/content`` downloaded and
   decoded, then deleted).
3. Each answer against its reference: PSNR (dB, ``+inf`` for identical outputs) and SSIM, with the kernels
   of :mod:`diffbench.quality.kernels` (scikit-image's definitions, σ = 1.5 Gaussian SSIM); for a video the
   worst frame (lowest PSNR, lowest SSIM; :func:`diffbench.quality.video.per_frame`).

**A probe request never counts as traffic.** Every request the probe sends (models, generations, video
polls, downloads, deletes) carries the HTTP header ``X-Diffbench-Traffic: probe``
(:data:`TRAFFIC_HEADER`); ``diffbench serve`` labels such requests ``traffic="probe"``, which SLO series and
alerts exclude (they select ``traffic="user"``).

Verdicts against the PSNR threshold T (docs/concepts/quality-metrics.md for bands; calibrate T per model from a
noise-floor run): ``ok`` when PSNR ≥ T, ``low`` when T − 3 dB ≤ PSNR < T, ``alert`` when PSNR < T − 3 dB
(the ``DiffusionQualityPSNRDrop`` condition), ``error`` when the request failed.

Exported (own registry, :class:`ProbeMetrics`), labels ``model`` and ``probe``:
``diffusion_quality_psnr_decibels`` and ``diffusion_quality_ssim_ratio`` (worst entry of the last good
pass), ``diffusion_quality_psnr_threshold_decibels``, ``diffusion_quality_probe_timestamp_seconds`` (Unix
time of the last good pass), ``diffusion_quality_probe_interval_seconds`` and
``diffusion_quality_probe_runs_total{outcome}`` (``ok`` / ``error``). A failed pass is data: it counts as
``outcome="error"``, the PSNR/SSIM gauges keep their last value and the timestamp does *not* advance, so
``DiffusionProbeStale`` shows the gap.
"""

from __future__ import annotations

import asyncio
import base64
import io
import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel

from diffbench.engines.fingerprint import fingerprint_diff
from diffbench.errors import InputError, UsageError
from diffbench.monitor.probe_refs import ProbeCase, References

if TYPE_CHECKING:
    import aiohttp

TRAFFIC_HEADER = {"X-Diffbench-Traffic": "probe"}
"""Sent with every probe request: the service must not count it as user traffic."""
ALERT_MARGIN_DB = 3.0
"""The alert fires below threshold − 3 dB (DiffusionQualityPSNRDrop in ``monitoring/alerts.yaml``)."""
POLL_S = 0.2
"""Seconds between status polls of a video job."""
Verdict = Literal["ok", "low", "alert", "error", "recorded"]
_VERDICT_ORDER = {"recorded": 0, "ok": 1, "low": 2, "alert": 3, "error": 4}


class ProbeRequestError(Exception):
    """A probe request failed (connection, HTTP status, bad body, timeout): recorded as data."""


# -- the service ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServiceInfo:
    """What ``GET /v1/models`` says about the served deployment."""

    model: str
    fingerprint: dict[str, object] | None
    fingerprint_id: str | None
    is_video: bool


async def _json(resp: aiohttp.ClientResponse, what: str) -> Any:
    body = await resp.read()
    if resp.status != 200:
        text = body.decode("utf-8", errors="replace")[:300]
        raise ProbeRequestError(f"{what}: HTTP {resp.status}: {text}")
    try:
        import json

        return json.loads(body)
    except ValueError as exc:
        raise ProbeRequestError(f"{what}: the answer is not JSON ({exc})") from exc


async def fetch_service_info(session: aiohttp.ClientSession, url: str) -> ServiceInfo:
    """Read the model id and fingerprint from ``GET {url}/v1/models`` (the first card).

    Raises:
        ProbeRequestError: unreachable, non-200, or no model card.
    """
    import aiohttp

    try:
        async with session.get(f"{url}/v1/models", headers=TRAFFIC_HEADER) as resp:
            data = await _json(resp, "GET /v1/models")
    except aiohttp.ClientError as exc:
        raise ProbeRequestError(f"GET {url}/v1/models: {type(exc).__name__}: {exc}") from exc
    except asyncio.TimeoutError as exc:
        raise ProbeRequestError(f"GET {url}/v1/models: timed out") from exc
    cards = data.get("data") if isinstance(data, dict) else None
    if not cards or not isinstance(cards[0], dict) or not isinstance(cards[0].get("id"), str):
        raise ProbeRequestError(f"GET {url}/v1/models: no model card in the answer ({str(data)[:200]})")
    card = cards[0]
    fp = card.get("fingerprint")
    fid = card.get("fingerprint_id")
    return ServiceInfo(model=card["id"], fingerprint=fp if isinstance(fp, dict) and fp else None,
                       fingerprint_id=fid if isinstance(fid, str) else None, is_video=bool(card.get("is_video")))


def check_fingerprint(reference: dict[str, object] | None, service: ServiceInfo, *, allow_unfingerprinted: bool,
                      where: str) -> str | None:
    """Refuse references made on another deployment.

    Args:
        reference: the manifest's ``fingerprint`` (None when the manifest has none).
        service: what the service reports.
        allow_unfingerprinted: accept a missing fingerprint on either side (risky: a reference from
            another precision, cache setting or library version then alarms, or hides a regression, for
            reasons that have nothing to do with the service's health).
        where: the reference directory, for messages.

    Returns:
        A warning to print when a fingerprint was missing and allowed; None when both matched.

    Raises:
        InputError: the fingerprints differ (names each field with both values and the fix), or one is
            missing without ``allow_unfingerprinted``.
    """
    if reference is None or service.fingerprint is None:
        side = (f"the reference manifest in {where} has no deployment fingerprint" if reference is None else
                f"the service ({service.model}) reports no deployment fingerprint in GET /v1/models "
                "(data[0].fingerprint)")
        risk = ("without one the probe cannot tell a regression from a reference made on another "
                "deployment (precision, cache, compile, library versions all move outputs)")
        if not allow_unfingerprinted:
            raise InputError(f"{side}; {risk}. Re-record the references on this deployment "
                             "(diffbench probe --record-reference DIR), or pass --allow-unfingerprinted to "
                             "accept the risk")
        return f"warning: {side}; {risk} (--allow-unfingerprinted)"
    diff = fingerprint_diff(reference, service.fingerprint)
    if diff:
        parts = "; ".join(f"{k}: reference {reference.get(k)!r}, service {service.fingerprint.get(k)!r}"
                          for k in diff)
        raise InputError(f"the references in {where} were made on another deployment ({parts}); a baseline is "
                         "valid only for its deployment: re-record references on this deployment with "
                         "diffbench probe --record-reference DIR")
    return None


# -- one request ------------------------------------------------------------------------------------------


def _decode_png(b64: str) -> np.ndarray:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(base64.b64decode(b64, validate=True))) as im:
            return np.asarray(im.convert("RGB"), dtype=np.uint8)
    except Exception as exc:  # noqa: BLE001 - any decoding problem is this answer's error
        raise ProbeRequestError(f"the answer's image does not decode as PNG ({exc})") from exc


def _decode_mp4(data: bytes) -> np.ndarray:
    from diffbench.quality.io import load_video

    with tempfile.NamedTemporaryFile(suffix=".mp4") as fh:
        fh.write(data)
        fh.flush()
        try:
            return load_video(Path(fh.name)).array
        except InputError as exc:
            raise ProbeRequestError(f"the video does not decode ({exc})") from exc


def _body(case: ProbeCase, **extra: object) -> dict[str, object]:
    """The request body of ``case``: prompt, size, seed, the optional steps and guidance, plus ``extra``."""
    body: dict[str, object] = {"prompt": case.prompt, "size": f"{case.width}x{case.height}", "seed": case.seed,
                               **extra}
    if case.steps is not None:
        body["num_inference_steps"] = case.steps
    if case.guidance is not None:
        body["guidance_scale"] = case.guidance
    return body


async def _generate_images(session: aiohttp.ClientSession, url: str, case: ProbeCase) -> tuple[np.ndarray, int]:
    body = _body(case, n=case.n, response_format="b64_json")
    async with session.post(f"{url}/v1/images/generations", json=body, headers=TRAFFIC_HEADER) as resp:
        data = await _json(resp, "POST /v1/images/generations")
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list) or len(items) != case.n:
        got = len(items) if isinstance(items, list) else "no"
        raise ProbeRequestError(f"POST /v1/images/generations: asked for n={case.n}, got {got} images")
    images = await asyncio.to_thread(lambda: np.stack([_decode_png(str(it.get("b64_json", ""))) for it in items]))
    steps = data.get("num_inference_steps")
    return images, int(steps) if isinstance(steps, int) else int(case.steps or 0)


async def _generate_video(session: aiohttp.ClientSession, url: str, case: ProbeCase) -> tuple[np.ndarray, int]:
    body = _body(case, num_frames=case.frames)
    async with session.post(f"{url}/v1/videos", json=body, headers=TRAFFIC_HEADER) as resp:
        job = await _json(resp, "POST /v1/videos")
    job_id = job.get("id") if isinstance(job, dict) else None
    if not isinstance(job_id, str):
        raise ProbeRequestError(f"POST /v1/videos: no job id in the answer ({str(job)[:200]})")
    try:
        while job.get("status") not in ("completed", "failed", "cancelled"):
            await asyncio.sleep(POLL_S)
            async with session.get(f"{url}/v1/videos/{job_id}", headers=TRAFFIC_HEADER) as resp:
                job = await _json(resp, f"GET /v1/videos/{job_id}")
        if job.get("status") != "completed":
            err = job.get("error")
            msg = err.get("message", err) if isinstance(err, dict) else err
            raise ProbeRequestError(f"video job {job_id} {job.get('status')}: {msg}")
        async with session.get(f"{url}/v1/videos/{job_id}/content", headers=TRAFFIC_HEADER) as resp:
            content = await resp.read()
            if resp.status != 200:
                raise ProbeRequestError(f"GET /v1/videos/{job_id}/content: HTTP {resp.status}")
    finally:
        import contextlib

        with contextlib.suppress(Exception):  # best effort: keep the service's job table small
            async with session.delete(f"{url}/v1/videos/{job_id}", headers=TRAFFIC_HEADER) as resp:
                await resp.read()
    frames = await asyncio.to_thread(_decode_mp4, content)
    steps = job.get("num_inference_steps")
    return frames[None], int(steps) if isinstance(steps, int) else int(case.steps or 0)


async def request_case(session: aiohttp.ClientSession, url: str, case: ProbeCase,
                       timeout_s: float) -> tuple[np.ndarray, int]:
    """Send one case; return its outputs and the step count the service used.

    Returns:
        ``(images, steps)``: uint8 ``(n, H, W, 3)`` for images, ``(1, F, H, W, 3)`` for a video.

    Raises:
        ProbeRequestError: any failure, including ``timeout_s`` (seconds, the whole request: for a video
            create + polls + download) running out, or an answer of another shape than asked.
    """
    import aiohttp

    gen = _generate_video if case.is_video else _generate_images
    try:
        out, steps = await asyncio.wait_for(gen(session, url, case), timeout_s)
    except asyncio.TimeoutError as exc:
        raise ProbeRequestError(f"{case.label}: no answer within --timeout {timeout_s:g} s") from exc
    except aiohttp.ClientError as exc:
        raise ProbeRequestError(f"{case.label}: {type(exc).__name__}: {exc}") from exc
    except ProbeRequestError as exc:
        raise ProbeRequestError(f"{case.label}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - whatever the service answered, a failed probe request is data
        raise ProbeRequestError(f"{case.label}: unexpected answer ({type(exc).__name__}: {exc})") from exc
    want = (case.height, case.width) if not case.is_video else (case.frames, case.height, case.width)
    got = tuple(out.shape[1:-1])
    if got != want:
        raise ProbeRequestError(f"{case.label}: the service answered shape {'x'.join(map(str, got))}, asked for "
                                f"{'x'.join(map(str, want))}")
    return out, steps


# -- comparison -------------------------------------------------------------------------------------------


def compare_output(reference: np.ndarray, answer: np.ndarray) -> tuple[float, float, int | None]:
    """PSNR (dB) and SSIM of one answer against its reference; the worst frame for a video.

    Args:
        reference, answer: uint8, same shape, ``(H, W, 3)`` or ``(T, H, W, 3)``; ``data_range`` 255.

    Returns:
        ``(psnr_db, ssim, worst_frame)``: PSNR ``+inf`` for identical outputs. For a video the minimum
        over frames of each (``worst_frame`` = the frame with the lowest PSNR); None for an image.

    Raises:
        ShapeError: the shapes differ.
    """
    from diffbench.quality.kernels import psnr, ssim
    from diffbench.quality.video import per_frame, worst_index

    if reference.ndim == 4:
        p, s = per_frame(reference, answer, 255.0)
        w = worst_index(p)
        return float(p[w]), float(s.min()), w
    return psnr(reference, answer, 255.0), ssim(reference, answer, 255.0), None


def verdict_of(psnr_db: float, threshold_db: float | None) -> Verdict:
    """``ok`` (≥ T), ``low`` (T − 3 dB ≤ PSNR < T) or ``alert`` (< T − 3 dB); ``ok`` without a threshold."""
    if threshold_db is None or psnr_db >= threshold_db:
        return "ok"
    return "low" if psnr_db >= threshold_db - ALERT_MARGIN_DB else "alert"


# -- results ----------------------------------------------------------------------------------------------


class EntryResult(BaseModel):
    """One reference output in one pass. PSNR in dB (``inf`` when identical), SSIM a ratio."""

    case: str
    prompt_id: str
    seed: int
    index: int
    file: str
    psnr_db: float | None = None
    ssim: float | None = None
    worst_frame: int | None = None
    verdict: Verdict
    error: str | None = None


class PassRecord(BaseModel):
    """One probe pass: one JSON document with ``--once``, one JSON line per pass otherwise.

    ``outcome``: ``ok`` (every case answered and was compared), ``error`` (something failed; gauges not
    updated) or ``recorded`` (the first pass of ``--record-reference``: answers stored, nothing compared).
    ``psnr_db``/``ssim`` are the worst over entries (None when nothing was compared). Times are Unix seconds.
    """

    kind: Literal["diffbench-probe-pass"] = "diffbench-probe-pass"
    schema_version: int = 1
    probe: str
    model: str
    url: str
    reference: str
    fingerprint_id: str | None
    pass_index: int
    started_unix: float
    finished_unix: float
    outcome: Literal["ok", "error", "recorded"]
    threshold_db: float | None
    alert_below_db: float | None
    psnr_db: float | None = None
    ssim: float | None = None
    verdict: Verdict
    errors: list[str] = []
    entries: list[EntryResult] = []


# -- metrics ----------------------------------------------------------------------------------------------

_PSNR = "diffusion_quality_psnr_decibels"
_SSIM = "diffusion_quality_ssim_ratio"
_THRESHOLD = "diffusion_quality_psnr_threshold_decibels"
_TIMESTAMP = "diffusion_quality_probe_timestamp_seconds"
_INTERVAL = "diffusion_quality_probe_interval_seconds"
_RUNS = "diffusion_quality_probe_runs"
RUN_OUTCOMES = ("ok", "error")


class ProbeMetrics:
    """The probe's own registry with the ``diffusion_quality_*`` families (names from :mod:`..names`).

    Initial values: ``runs_total`` 0 for ``ok`` and ``error``; timestamp 0 (never probed: stale until
    the first good pass); interval as configured; threshold as configured (NaN when none); PSNR and SSIM
    NaN until the first comparison, since a 0 would read as "quality collapsed" and fire the PSNR alert
    (NaN compares false in PromQL, and the staleness alert covers the gap).
    """

    def __init__(self, model: str, probe: str, *, interval_s: float, threshold_db: float | None,
                 registry: Any = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        from diffbench.metrics.names import spec
        from diffbench.monitor.exporter import NoCreatedCollector

        inner = CollectorRegistry(auto_describe=True)  # exported without _created series, as serve's
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.registry.register(NoCreatedCollector(inner))
        self.labels = {"model": model, "probe": probe}

        def gauge(name: str) -> Any:
            s = spec(name)
            return Gauge(s.name, s.help, s.labels, registry=inner).labels(**self.labels)

        self.psnr = gauge(_PSNR)
        self.ssim = gauge(_SSIM)
        self.threshold = gauge(_THRESHOLD)
        self.timestamp = gauge(_TIMESTAMP)
        self.interval = gauge(_INTERVAL)
        rs = spec(_RUNS)
        runs = Counter(rs.name, rs.help, rs.labels, registry=inner)
        self.runs = {o: runs.labels(outcome=o, **self.labels) for o in RUN_OUTCOMES}
        self.psnr.set(math.nan)
        self.ssim.set(math.nan)
        self.threshold.set(math.nan if threshold_db is None else threshold_db)
        self.timestamp.set(0.0)
        self.interval.set(interval_s)
        self._server: Any = None

    def record(self, rec: PassRecord) -> None:
        """Export one pass: a good pass sets PSNR/SSIM/timestamp; an error only counts (a recording pass
        exports nothing)."""
        if rec.outcome == "recorded":
            return
        if rec.outcome == "ok" and rec.psnr_db is not None and rec.ssim is not None:
            self.psnr.set(rec.psnr_db)
            self.ssim.set(rec.ssim)
            self.timestamp.set(rec.finished_unix)
            self.runs["ok"].inc()
        else:
            self.runs["error"].inc()

    def render(self) -> bytes:
        """The exposition text of the registry."""
        from prometheus_client import generate_latest

        return bytes(generate_latest(self.registry))

    def serve(self, host: str, port: int) -> int:
        """Serve ``/metrics`` on ``host:port`` (prometheus_client's threaded server); return the port.

        Raises:
            UsageError: the port is in use or the address cannot be bound (names ``--metrics-port``).
        """
        from prometheus_client import start_http_server

        try:
            server, _thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise UsageError(f"--metrics-port {port}: cannot listen on {host}:{port} ({exc.strerror or exc}); "
                             "choose a free port (0 picks one)") from exc
        self._server = server
        return int(server.server_address[1])

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


# -- passes -----------------------------------------------------------------------------------------------


@dataclass
class ProbeSettings:
    """What a probe run needs beyond the references. Seconds for times, dB for thresholds."""

    url: str
    probe: str
    interval_s: float
    threshold_db: float | None
    timeout_s: float
    allow_unfingerprinted: bool = False
    reference_label: str = ""


def _worst(results: list[EntryResult]) -> tuple[float | None, float | None]:
    ps = [r.psnr_db for r in results if r.psnr_db is not None]
    ss = [r.ssim for r in results if r.ssim is not None]
    return (min(ps) if ps else None), (min(ss) if ss else None)


def _pass_verdict(results: list[EntryResult], errors: list[str]) -> Verdict:
    if errors:
        return "error"
    if not results:
        return "ok"
    return max((r.verdict for r in results), key=_VERDICT_ORDER.__getitem__)


@dataclass
class Prober:
    """Runs passes against one service; holds the references once they exist.

    ``references`` None means recording: the next good pass stores its answers as references (through
    ``record``) instead of comparing.
    """

    settings: ProbeSettings
    session: aiohttp.ClientSession
    service: ServiceInfo
    references: References | None
    record: Callable[[list[tuple[ProbeCase, int, np.ndarray]], ServiceInfo], References] | None = None
    record_cases: list[ProbeCase] = field(default_factory=list)
    passes: int = 0

    async def run_pass(self) -> PassRecord:
        """One pass (see the module docstring). Never raises for a service failure: it is in the record."""
        s = self.settings
        started = time.time()
        index = self.passes
        self.passes += 1
        errors: list[str] = []
        results: list[EntryResult] = []
        service = self.service
        try:
            service = await asyncio.wait_for(fetch_service_info(self.session, s.url), s.timeout_s)
            if self.references is not None:
                check_fingerprint(self.references.manifest.fingerprint, service,
                                  allow_unfingerprinted=s.allow_unfingerprinted, where=s.reference_label)
            elif service.fingerprint != self.service.fingerprint:
                raise InputError("the service's deployment fingerprint changed since the probe started: "
                                 f"{fingerprint_diff(self.service.fingerprint or {}, service.fingerprint or {})}")
        except (ProbeRequestError, InputError, asyncio.TimeoutError) as exc:
            errors.append(str(exc) or f"GET {s.url}/v1/models: no answer within --timeout {s.timeout_s:g} s")
            return self._record(index, started, "error", errors, results, service)
        if self.references is None:
            return await self._record_pass(index, started, service)
        refs = self.references
        for case in refs.cases:
            try:
                out, _steps = await request_case(self.session, s.url, case, s.timeout_s)
            except ProbeRequestError as exc:
                errors.append(str(exc))
                results += [EntryResult(case=case.label, prompt_id=e.prompt_id, seed=e.seed, index=e.index,
                                        file=e.file, verdict="error", error=str(exc)) for e in case.entries]
                continue
            for e in case.entries:
                try:
                    p, ss, wf = await asyncio.to_thread(lambda e=e, out=out: compare_output(refs.array(e), out[e.index]))
                except Exception as exc:  # noqa: BLE001 - a bad reference or shape is this entry's error
                    msg = f"{case.label} index {e.index}: {exc}"
                    errors.append(msg)
                    results.append(EntryResult(case=case.label, prompt_id=e.prompt_id, seed=e.seed,
                                               index=e.index, file=e.file, verdict="error", error=msg))
                    continue
                results.append(EntryResult(case=case.label, prompt_id=e.prompt_id, seed=e.seed, index=e.index,
                                           file=e.file, psnr_db=p, ssim=ss, worst_frame=wf,
                                           verdict=verdict_of(p, s.threshold_db)))
        return self._record(index, started, "error" if errors else "ok", errors, results, service)

    async def _record_pass(self, index: int, started: float, service: ServiceInfo) -> PassRecord:
        answers: list[tuple[ProbeCase, int, np.ndarray]] = []
        errors: list[str] = []
        for case in self.record_cases:
            try:
                out, steps = await request_case(self.session, self.settings.url, case, self.settings.timeout_s)
            except ProbeRequestError as exc:
                errors.append(str(exc))
                continue
            answers.append((case, steps, out))
        if errors:
            return self._record(index, started, "error", errors, [], service)
        assert self.record is not None
        self.references = await asyncio.to_thread(self.record, answers, service)
        results = [EntryResult(case=c.label, prompt_id=e.prompt_id, seed=e.seed, index=e.index, file=e.file,
                               verdict="recorded") for c in self.references.cases for e in c.entries]
        return self._record(index, started, "recorded", [], results, service)

    def _record(self, index: int, started: float, outcome: Literal["ok", "error", "recorded"], errors: list[str],
                results: list[EntryResult], service: ServiceInfo) -> PassRecord:
        s = self.settings
        psnr_db, ssim = _worst(results)
        thr = s.threshold_db
        return PassRecord(probe=s.probe, model=service.model, url=s.url, reference=s.reference_label,
                          fingerprint_id=service.fingerprint_id, pass_index=index, started_unix=started,
                          finished_unix=time.time(), outcome=outcome, threshold_db=thr,
                          alert_below_db=None if thr is None else thr - ALERT_MARGIN_DB,
                          psnr_db=psnr_db if outcome != "recorded" else None,
                          ssim=ssim if outcome != "recorded" else None,
                          verdict="recorded" if outcome == "recorded" else _pass_verdict(results, errors),
                          errors=errors, entries=results)


def read_threshold(path: Path, probe: str) -> float:
    """``probes.<probe>.psnr_threshold_db`` of a calibration file (``diffbench monitor calibrate``), dB.

    The one place the probe reads a calibration file (kept to the fields it needs: ``probes``).

    Raises:
        InputError: the file is missing, not JSON, or has no finite threshold for ``probe`` (names the
            file, the probe and the fix).
    """
    import json

    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError as exc:
        raise InputError(f"--calibration {p}: file not found; write one with diffbench monitor calibrate, "
                         "or pass --psnr-threshold DB") from exc
    except (OSError, ValueError) as exc:
        raise InputError(f"--calibration {p}: cannot read it as JSON ({exc})") from exc
    probes = data.get("probes") if isinstance(data, dict) else None
    entry = probes.get(probe) if isinstance(probes, dict) else None
    value = entry.get("psnr_threshold_db") if isinstance(entry, dict) else None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(float(value)):
        known = ", ".join(sorted(probes)) if isinstance(probes, dict) and probes else "none"
        raise InputError(f"--calibration {p}: no finite probes.{probe}.psnr_threshold_db (probes in the file: "
                         f"{known}); calibrate this probe, choose it with --probe-name, or pass --psnr-threshold")
    return float(value)
