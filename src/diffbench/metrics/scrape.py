"""Read a Prometheus text exposition: from a file, a ``/metrics`` URL, or a Prometheus server's HTTP API.

- :func:`parse_text` parses exposition text with ``prometheus_client.parser.text_string_to_metric_families``
  into a :class:`Scrape` (a flat list of :class:`Sample` plus when and where it was taken);
- :func:`read_scrape` reads a saved scrape file, :func:`read_scrapes` a list of files or one directory of
  them (sorted by name: the first is *before*, the last *after*);
- :func:`fetch_metrics` GETs a ``/metrics`` URL (standard library, so it can run off the event loop on any thread; a total deadline per request, :mod:`diffbench.core.httpget`);
- :class:`PromQuery` runs instant queries against ``/api/v1/query`` of a Prometheus server.

A saved scrape may start with the comment line ``# diffbench-scrape time=<unix seconds> source=<text>``
(:func:`format_scrape` writes it; Prometheus parsers ignore comments), which keeps the time of the scrape
for rates between two files. Without it the time is unknown (None) and only deltas are available.

Every failure to get or read a metrics text raises :class:`~diffbench.errors.InputError` naming the input
(exit 2). This module imports neither torch nor aiohttp.
"""

from __future__ import annotations

import json
import math
import re
import time
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from diffbench.errors import InputError

HEADER = "# diffbench-scrape"
_HEADER_RE = re.compile(r"^# diffbench-scrape time=(?P<time>[0-9.eE+-]+)(?: source=(?P<source>.*))?$", re.M)
PREFIX = "diffusion_"
SCRAPE_SUFFIXES = (".prom", ".txt", ".metrics")
"""File name endings :func:`read_scrapes` picks up from a directory."""


@dataclass(frozen=True)
class Sample:
    """One sample line: ``name`` as written (``_total``/``_bucket``/``_sum``/``_count`` included), its
    labels and its value (float; ``+Inf`` bucket edges stay in the ``le`` label as text)."""

    name: str
    labels: dict[str, str]
    value: float


def matches(labels: dict[str, str], want: dict[str, str | None]) -> bool:
    """True when every label of ``want`` equals the sample's. A wanted label the sample does not carry
    is not filtered on (an older exporter without e.g. ``traffic``); a wanted value of None matches any."""
    for k, v in want.items():
        if v is None or k not in labels:
            continue
        if labels[k] != v:
            return False
    return True


@dataclass
class Scrape:
    """The samples of one exposition, with the Unix time it was taken (None when unknown) and its source
    (a URL or a file path)."""

    samples: list[Sample]
    time_s: float | None = None
    source: str = ""
    _by_name: dict[str, list[Sample]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for s in self.samples:
            self._by_name.setdefault(s.name, []).append(s)

    def names(self) -> frozenset[str]:
        """Every sample name in the scrape."""
        return frozenset(self._by_name)

    def has(self, name: str) -> bool:
        """True when the scrape holds at least one sample called ``name``."""
        return name in self._by_name

    def select(self, name: str, **want: str | None) -> list[Sample]:
        """Samples called ``name`` whose labels match ``want`` (see :func:`matches`)."""
        return [s for s in self._by_name.get(name, ()) if matches(s.labels, want)]

    def grouped(self, name: str, by: Sequence[str], **want: str | None) -> dict[tuple[str, ...], float]:
        """Sum of the matching samples of ``name`` per value tuple of the labels ``by`` (a missing label
        reads ``""``), like PromQL's ``sum by (...)``."""
        out: dict[tuple[str, ...], float] = {}
        for s in self.select(name, **want):
            key = tuple(s.labels.get(b, "") for b in by)
            out[key] = out.get(key, 0.0) + s.value
        return out

    def total(self, name: str, **want: str | None) -> float | None:
        """Sum of the matching samples of ``name`` (None when there is none)."""
        sel = self.select(name, **want)
        return sum(s.value for s in sel) if sel else None


def parse_text(text: str, source: str, *, require_prefix: str | None = PREFIX) -> Scrape:
    """Parse Prometheus text exposition ``text`` (from ``source``, named in errors) into a :class:`Scrape`.

    Args:
        text: the exposition (``text/plain; version=0.0.4``).
        source: the URL or file it came from.
        require_prefix: refuse a text without any sample whose name starts with it (default
            ``diffusion_``: not a diffusion exporter); None accepts any metrics text.

    Raises:
        InputError: the text does not parse as an exposition, holds no sample, or no sample with
            ``require_prefix``.
    """
    from prometheus_client.parser import text_string_to_metric_families

    head = text.lstrip()[:200].lower()
    if head.startswith(("<!doctype", "<html", "{", "[")):
        raise InputError(f"{source}: not a Prometheus metrics text (it looks like "
                         f"{'HTML' if head.startswith('<') else 'JSON'}); give the service's /metrics endpoint")
    samples: list[Sample] = []
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                samples.append(Sample(s.name, dict(s.labels), float(s.value)))
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise InputError(f"{source}: not a Prometheus metrics text ({exc}); give a /metrics endpoint or a "
                         "file saved from one") from None
    if not samples:
        raise InputError(f"{source}: no metric samples (empty or comments only); give a /metrics endpoint or "
                         "a file saved from one")
    if require_prefix and not any(s.name.startswith(require_prefix) for s in samples):
        raise InputError(f"{source}: a metrics text without any {require_prefix}* metric (not a diffusion "
                         "service's exporter); point at diffbench serve's /metrics or a service with the exporter")
    t = None
    m = _HEADER_RE.search(text)
    if m:
        try:
            t = float(m.group("time"))
        except ValueError:
            t = None
    return Scrape(samples, time_s=t if t is not None and math.isfinite(t) else None, source=source)


def format_scrape(text: str, *, time_s: float, source: str) -> str:
    """``text`` with the :data:`HEADER` line in front (so :func:`read_scrape` knows when it was taken)."""
    return f"{HEADER} time={time_s!r} source={source}\n{text}"


def read_scrape(path: str | Path, **kw: object) -> Scrape:
    """Read and parse one saved scrape file.

    Raises:
        InputError: the file is missing, unreadable, not text, or not a metrics text (see :func:`parse_text`).
    """
    p = Path(path)
    if p.is_dir():
        raise InputError(f"--scrape {p}: a directory; give a scrape file (or use read_scrapes for a directory)")
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"--scrape {p}: no such file") from None
    except UnicodeDecodeError:
        raise InputError(f"--scrape {p}: not a text file (a metrics scrape is UTF-8 text)") from None
    except OSError as exc:
        raise InputError(f"--scrape {p}: cannot read ({exc.strerror or exc})") from None
    return parse_text(text, str(p), **kw)  # type: ignore[arg-type]


def merge(scrapes: Sequence[Scrape], source: str) -> Scrape:
    """One scrape holding the samples of several taken at the same moment from different endpoints (the
    service's ``/metrics`` and the probe's); its time is the latest of theirs."""
    times = [s.time_s for s in scrapes if s.time_s is not None]
    return Scrape([x for s in scrapes for x in s.samples], time_s=max(times) if times else None, source=source)


def read_scrapes(paths: Iterable[str | Path]) -> list[Scrape]:
    """Read scrape files in the order given. A directory expands to its scrape files
    (:data:`SCRAPE_SUFFIXES`): files whose names start with ``before`` are merged into one scrape (e.g.
    ``before.prom`` and ``before-probe.prom``, the service's and the probe's endpoints), likewise ``after``;
    any other files are single scrapes sorted by name between them (``0.prom``, ``1.prom`` …). The drills'
    recorded fixtures are one such directory.

    Raises:
        InputError: no path, a directory without scrape files, or any file that :func:`read_scrape` refuses.
    """
    out: list[Scrape] = []
    for raw in paths:
        p = Path(raw)
        if not p.is_dir():
            out.append(read_scrape(p))
            continue
        found = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(SCRAPE_SUFFIXES))
        if not found:
            raise InputError(f"--scrape {p}: a directory without scrape files "
                             f"({', '.join('*' + s for s in SCRAPE_SUFFIXES)})")
        before = [f for f in found if f.name.lower().startswith("before")]
        after = [f for f in found if f.name.lower().startswith("after")]
        middle = [f for f in found if f not in before and f not in after]
        if before:
            out.append(merge([read_scrape(f) for f in before], " + ".join(str(f) for f in before)))
        out.extend(read_scrape(f) for f in middle)
        if after:
            out.append(merge([read_scrape(f) for f in after], " + ".join(str(f) for f in after)))
    if not out:
        raise InputError("--scrape: give at least one scrape file or directory")
    return out


def metrics_url(url: str, option: str = "--metrics") -> str:
    """``url`` with ``/metrics`` appended when it has no path (a service's base URL).

    Raises:
        InputError: not an http(s) URL with a host.
    """
    u = urllib.parse.urlsplit(url.strip())
    if u.scheme not in ("http", "https") or not u.netloc:
        raise InputError(f"{option} {url!r}: not an http(s) URL; give e.g. http://127.0.0.1:8000/metrics")
    if u.path in ("", "/"):
        u = u._replace(path="/metrics")
    return urllib.parse.urlunsplit(u)


def _get(url: str, option: str, timeout_s: float, accept: str) -> bytes:
    """GET ``url``'s body under a total deadline of ``timeout_s`` seconds (connect + whole body,
    :func:`diffbench.core.httpget.request`); InputError naming ``option`` otherwise."""
    import http.client

    from diffbench.core.httpget import request

    try:
        resp = request(url, deadline_s=timeout_s, headers={"Accept": accept, "User-Agent": "diffbench"})
    except TimeoutError:
        raise InputError(f"{option} {url}: no complete answer within {timeout_s:g} s") from None
    except (OSError, http.client.HTTPException) as exc:
        raise InputError(f"{option} {url}: unreachable ({type(exc).__name__}: {exc}); check that the service "
                         "is up and the host and port") from None
    except ValueError as exc:
        raise InputError(f"{option} {url}: bad URL ({exc})") from None
    if not 200 <= resp.status < 300:
        where = f" to {resp.headers['location']}" if 300 <= resp.status < 400 and "location" in resp.headers else ""
        raise InputError(f"{option} {url}: HTTP {resp.status}{where}; check the URL (a service's /metrics "
                         "or a Prometheus server's base URL)")
    return resp.body


def fetch_text(url: str, *, option: str = "--metrics", timeout_s: float = 5.0) -> str:
    """GET ``url`` (a ``/metrics`` endpoint) and return its text (no parsing). Raises InputError."""
    body = _get(url, option, timeout_s, "text/plain; version=0.0.4")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{option} {url}: the answer is not UTF-8 text (not a metrics endpoint)") from None


def fetch_metrics(url: str, *, option: str = "--metrics", timeout_s: float = 5.0) -> Scrape:
    """GET and parse a ``/metrics`` endpoint (``url`` as given; see :func:`metrics_url`); the scrape's
    time is the Unix time after the answer arrived.

    Raises:
        InputError: unreachable, an HTTP error, a timeout, or not a diffusion metrics text.
    """
    text = fetch_text(url, option=option, timeout_s=timeout_s)
    scrape = parse_text(text, url)
    scrape.time_s = time.time()
    return scrape


@dataclass(frozen=True)
class VectorSample:
    """One element of an instant-vector answer: its labels and value."""

    labels: dict[str, str]
    value: float


class PromQuery:
    """Instant queries against a Prometheus server's HTTP API (``GET /api/v1/query``).

    Args:
        url: the server's base URL (``http://host:9090``; a trailing ``/`` or path prefix is kept).
        timeout_s: per query.
        at: evaluate every query at this Unix time (a post-mortem, a replay); None: now.
    """

    def __init__(self, url: str, *, timeout_s: float = 10.0, option: str = "--prometheus",
                 at: float | None = None) -> None:
        u = urllib.parse.urlsplit(url.strip())
        if u.scheme not in ("http", "https") or not u.netloc:
            raise InputError(f"{option} {url!r}: not an http(s) URL; give e.g. http://127.0.0.1:9090")
        self.base = url.strip().rstrip("/")
        self.timeout_s = timeout_s
        self.option = option
        self.at = at

    def query(self, expr: str) -> list[VectorSample]:
        """Evaluate ``expr`` now; an instant vector (or a scalar, as one sample without labels).

        Raises:
            InputError: the server is unreachable, answers something that is not the Prometheus API, or
                reports an error for the expression (its message included).
        """
        params = {"query": expr} | ({"time": f"{self.at:.3f}"} if self.at is not None else {})
        url = f"{self.base}/api/v1/query?" + urllib.parse.urlencode(params)
        try:
            body = _get(url, self.option, self.timeout_s, "application/json")
        except InputError as exc:
            if "HTTP 400" in str(exc) or "HTTP 422" in str(exc):
                raise InputError(f"{self.option}: Prometheus refused the query {expr!r}") from None
            raise
        try:
            doc = json.loads(body)
        except ValueError:
            raise InputError(f"{self.option} {self.base}: not a Prometheus API answer (not JSON); give the "
                             "Prometheus server's base URL, e.g. http://127.0.0.1:9090") from None
        if not isinstance(doc, dict) or "status" not in doc:
            raise InputError(f"{self.option} {self.base}: not a Prometheus API answer (no status)")
        if doc["status"] != "success":
            raise InputError(f"{self.option}: query {expr!r} failed: {doc.get('error', doc.get('errorType'))}")
        data = doc.get("data") or {}
        kind, result = data.get("resultType"), data.get("result")
        if kind == "scalar":
            return [VectorSample({}, float(result[1]))]
        if kind != "vector" or not isinstance(result, list):
            raise InputError(f"{self.option}: query {expr!r} gave a {kind}, not an instant vector")
        return [VectorSample(dict(r.get("metric", {})), float(r["value"][1])) for r in result]

    def check(self) -> None:
        """One cheap query (``vector(1)``) so a wrong URL fails before any check runs. Raises InputError."""
        self.query("vector(1)")


__all__ = [
    "HEADER", "PromQuery", "Sample", "Scrape", "VectorSample", "fetch_metrics", "fetch_text", "format_scrape",
    "matches", "merge", "metrics_url", "parse_text", "read_scrape", "read_scrapes",
]
