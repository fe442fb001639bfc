"""Image files behind ``response_format="url"``: PNGs kept for a bounded time and served by the service.

An answer with ``response_format="url"`` stores each PNG under a temporary directory the service owns
(made on first use, removed when the service stops) and returns ``data[].url`` =
``{scheme}://{Host}/v1/files/images/{name}.png``, the host taken from the request (so a client that reached
the service through a name or a proxy gets a URL it can fetch). A file is served for ``ServerConfig.url_ttl_s``
seconds (``serve --url-ttl``, default 3600, as OpenAI's image URLs last about an hour); after that it is
deleted and its URL answers 404 ``expired`` with the expiry time. An unknown name answers 404 ``not_found``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from diffbench.server.http_errors import APIError

FILES_PREFIX = "/v1/files/images"
"""URL path under which stored images are served (``{FILES_PREFIX}/{name}``)."""
_NAME = re.compile(r"^[0-9a-f]{32}\.png$")
_TOMBSTONES = 10_000  # names of expired files remembered (to answer "expired" rather than "not found")


@dataclass(frozen=True)
class StoredFile:
    """A stored image: its path on disk and its expiry (Unix time, seconds)."""

    path: str
    expires_at: float


def _utc(unix: float) -> str:
    return datetime.fromtimestamp(unix, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ImageFiles:
    """Thread-safe store of PNG files, each readable for ``ttl_s`` seconds after it was written.

    ``clock`` returns Unix time in seconds (``time.time``; tests pass their own).
    """

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.time) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self._dir: str | None = None
        self._files: dict[str, StoredFile] = {}
        self._expired: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, data: bytes) -> str:
        """Write ``data`` (PNG bytes) and return its file name (32 hex digits + ``.png``)."""
        self.purge()
        name = f"{uuid.uuid4().hex}.png"
        with self._lock:
            if self._dir is None:
                self._dir = tempfile.mkdtemp(prefix="diffbench-serve-files-")
            path = os.path.join(self._dir, name)
        with open(path, "wb") as fh:
            fh.write(data)
        with self._lock:
            self._files[name] = StoredFile(path, self.clock() + self.ttl_s)
        return name

    def get(self, name: str) -> bytes:
        """The bytes of a stored file.

        Raises:
            APIError: 404 ``expired`` (naming the expiry time) for a file past its TTL, 404 ``not_found``
                for a name this service never stored (or forgot).
        """
        self.purge()
        with self._lock:
            stored = self._files.get(name)
            expired_at = self._expired.get(name)
        if stored is None:
            if expired_at is not None:
                raise APIError(404, f"{FILES_PREFIX}/{name} expired at {_utc(expired_at)} (files are kept "
                               f"{self.ttl_s:g} s, serve --url-ttl); generate the image again, or ask for "
                               "response_format b64_json", param="name", code="expired")
            why = "not a file name this service issued" if not _NAME.match(name) else "no such file"
            raise APIError(404, f"{FILES_PREFIX}/{name}: {why}; use the url of a response_format=url answer",
                           param="name", code="not_found")
        with open(stored.path, "rb") as fh:
            return fh.read()

    def purge(self) -> None:
        """Delete the files past their expiry (remembering their names, to answer ``expired``)."""
        now = self.clock()
        with self._lock:
            gone = [(n, f) for n, f in self._files.items() if f.expires_at <= now]
            for name, f in gone:
                del self._files[name]
                self._expired[name] = f.expires_at
            while len(self._expired) > _TOMBSTONES:
                self._expired.popitem(last=False)
        for _, f in gone:
            with contextlib.suppress(FileNotFoundError):
                os.remove(f.path)

    def close(self) -> None:
        """Remove the directory and every file in it (the service is stopping)."""
        with self._lock:
            directory, self._dir = self._dir, None
            self._files.clear()
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)
