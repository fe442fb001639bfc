"""A fake diffusion server on 127.0.0.1 for the load-client tests (a raw asyncio HTTP/1.1 server in a
background thread; no framework, so every fault is under the test's control).

The first path segment selects the behaviour, so one server serves every mode:
``http://127.0.0.1:PORT/<mode>/v1/images/generations``.

Modes: ``ok`` (PNG of the requested size after ``delay_s``, honouring a pause window), ``r429`` (429 with
``Retry-After: 3``), ``r503`` (503 without it), ``r500``, ``badjson`` (truncated JSON), ``badimg`` (valid
base64 that is not an image), ``wrongsize`` (an image 8 px wider than asked), ``reset`` (closes the
connection without answering), ``short`` (announces a longer body than it sends, then closes),
``gzip`` (an ``ok`` answer gzip-compressed although the client asked for ``identity``), ``r301`` (a
redirect to ``ok``), ``stall`` (never answers), ``noise`` / ``noisewrong`` (an incompressible PNG, of the
requested size /
8 px wider: large bodies checked in the worker pool), ``mix`` (cycles through ``MIX_CYCLE``),
``mix60`` (cycles through ``MIX60_CYCLE``: 60 % failures), ``vid`` (video jobs finishing after ``video_s``), ``vidstuck`` (jobs that never finish), ``vidmp4`` (a real
MP4 with the requested frame count, reported in the job; each job's clip is tinted apart), ``vidblack`` (as
``vidmp4``, every frame black), ``vidmp4short`` (one frame missing from the MP4)
and ``vidjobwrong`` (the job reports 4 frames more than requested).

Answer pictures are not blank: each is a colour pattern drawn from a hash of the request body, so equal
requests get equal pictures and different seeds or prompts different ones (the client's sanity checks pass).
Sanity modes: ``const`` (a flat-colour picture), ``black`` (an all-black one), ``same`` (one patterned
picture for every request, whatever its seed).

On ``/v1/chat/completions`` (vLLM-Omni's diffusion chat form; the body is kept in ``chat_bodies``): ``ok``
(a data-URL PNG of ``extra_body`` width x height per ``num_outputs_per_prompt``), ``chattext`` (200 with
vLLM-Omni's text answer when no image was produced), ``chatwrong`` (8 px wider), ``chaturl`` (an https URL,
not a data URL), ``chatbad64`` (a data URL whose base64 is broken).

On ``/v1/images/edits`` (multipart; the bodies are kept in ``edit_bodies``) the image modes answer as on the
generations route, sized by the form's ``size`` and ``n`` fields.
"""

from __future__ import annotations

import asyncio
import base64
import io
import itertools
import json
import re
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

MIX_CYCLE = ("ok", "r429", "r500", "badjson", "badimg", "wrongsize", "reset", "stall")
MIX60_CYCLE = ("ok", "r429", "ok", "r500", "badjson", "ok", "r429", "badimg", "ok", "r500")
"""``mix60``: 4 ok in every 10 requests (60 % fail: 429, 500, malformed JSON, an undecodable image)."""
MP4_BYTES = b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom" + b"\x00" * 64


def _mp4(frames: int, tint: int = 0, black: bool = False) -> bytes:
    """A real H.264/MPEG-4 MP4 of ``frames`` 64x48 frames (PyAV, via the reference encoder): a gradient
    whose blue channel is ``tint``, or all black."""
    from diffbench.server.mp4 import encode_mp4

    if black:
        return encode_mp4(np.zeros((frames, 48, 64, 3), dtype=np.uint8), 8)
    y, x = np.mgrid[0:48, 0:64]
    one = np.stack([x * 4, y * 5, np.full((48, 64), tint % 256)], axis=-1).astype(np.uint8)
    return encode_mp4(np.repeat(one[None], frames, axis=0), 8)


class FakeServer:
    def __init__(self) -> None:
        self.delay_s = 0.0
        self.video_s = 0.3
        self.pause_window: tuple[float, float] | None = None
        self._pause_at: tuple[int, float] | None = None
        self.deleted: list[str] = []
        self.requests = 0
        self.polls = 0
        self.last_headers: dict[str, str] = {}
        self.create_headers: dict[str, str] = {}
        self.create_body = b""
        self.chat_bodies: list[bytes] = []
        self.edit_bodies: list[bytes] = []
        self._jobs: dict[str, tuple[float | None, int, int]] = {}
        self._ids = itertools.count()
        self._mix = itertools.count()
        self._png: dict[tuple[int, int, bool, str], str] = {}
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    # -- lifecycle ---------------------------------------------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=4096))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _shutdown(self) -> None:
        self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self.port}/{mode}"

    def reset_state(self) -> None:
        self.delay_s, self.video_s, self.pause_window, self._pause_at = 0.0, 0.3, None, None
        self.deleted.clear()
        self.chat_bodies.clear()
        self.requests = self.polls = 0
        self._mix = itertools.count()

    def pause(self, after_requests: int, length_s: float) -> None:
        """The server stalls for ``length_s`` from the arrival of the ``after_requests``-th request from now:
        requests arriving in that window are held until it ends. Counting requests (not seconds) keeps the
        pause inside the client's run however long the client takes to start."""
        self.pause_window = None
        self._pause_at = (self.requests + after_requests, length_s)

    # -- HTTP ----------------------------------------------------------------------------------------
    def _png_b64(self, w: int, h: int, noise: bool = False, key: str = "", look: str = "pattern") -> str:
        """A PNG of ``w`` x ``h``: noise, or a pattern drawn from ``key`` (``look`` ``const``/``black``: a flat
        colour / black instead)."""
        if (w, h, noise, key + look) not in self._png:
            import hashlib

            import numpy as np
            from PIL import Image

            if len(self._png) > 512:
                self._png.clear()
            seed = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")
            buf = io.BytesIO()
            if noise:  # incompressible: the PNG is ~3 bytes per pixel
                pixels = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
                Image.fromarray(pixels, "RGB").save(buf, format="PNG", compress_level=1)
            elif look == "const":
                Image.new("RGB", (w, h), (200, 30, 30)).save(buf, format="PNG")
            elif look == "black":
                Image.new("RGB", (w, h), (0, 0, 0)).save(buf, format="PNG")
            else:  # a gradient with a key-dependent tint and a key-dependent 8x8 block of colour
                rng = np.random.default_rng(seed)
                y, x = np.mgrid[0:h, 0:w]
                pixels = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1),
                                   np.full((h, w), rng.integers(0, 256))], axis=-1).astype(np.uint8)
                pixels[: min(8, h), : min(8, w)] = rng.integers(0, 256, 3, dtype=np.uint8)
                Image.fromarray(pixels, "RGB").save(buf, format="PNG", compress_level=1)
            self._png[(w, h, noise, key + look)] = base64.b64encode(buf.getvalue()).decode()
        return self._png[(w, h, noise, key + look)]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            first = await reader.readexactly(1)
            if first == b"\x16":  # a TLS ClientHello: answer like a plain-HTTP server does
                writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                return
            while True:
                head = first + await reader.readuntil(b"\r\n\r\n")
                first = b""
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for ln in lines[1:]:
                    if ":" in ln:
                        k, v = ln.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                self.last_headers = headers
                n = int(headers.get("content-length", "0"))
                body = await reader.readexactly(n) if n else b""
                if not await self._route(method, target, body, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, ValueError,
                asyncio.CancelledError):
            pass
        finally:
            writer.close()

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, status: int, body: bytes, extra: str = "",
                    ctype: str = "application/json") -> bool:
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                     f"{extra}\r\n".encode() + body)
        await writer.drain()
        return True

    async def _route(self, method: str, target: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        self.requests += 1
        if self._pause_at is not None and self.requests == self._pause_at[0]:
            now = time.monotonic()
            self.pause_window, self._pause_at = (now, now + self._pause_at[1]), None
        mode, _, path = target.lstrip("/").partition("/")
        path = "/" + path
        if mode == "mix":
            mode = MIX_CYCLE[next(self._mix) % len(MIX_CYCLE)]
        elif mode == "mix60":
            mode = MIX60_CYCLE[next(self._mix) % len(MIX60_CYCLE)]
        if mode.startswith("gpus"):  # a service stating its GPU count on /v1/models, answering as "ok"
            if path == "/v1/models":
                card = {"id": "fake", "object": "model", "gpus": json.loads(mode[4:])}
                return await self._send(writer, 200, json.dumps({"object": "list", "data": [card]}).encode())
            mode = "ok"
        if mode.startswith("vid"):
            return await self._video(mode, method, path, writer, body)
        if path == "/v1/chat/completions" and mode in ("ok", "chattext", "chatwrong", "chaturl", "chatbad64"):
            return await self._chat(mode, body, writer)
        if mode == "reset":
            writer.transport.abort()
            return False
        if mode == "short":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                         b'{"data": [')
            await writer.drain()
            writer.transport.abort()
            return False
        if mode == "stall":
            await asyncio.sleep(3600)
            return False
        if mode == "r429":
            return await self._send(writer, 429, b'{"error":"overloaded"}', "Retry-After: 3\r\n")
        if mode == "r301":
            return await self._send(writer, 301, b"", f"Location: /ok{path}\r\n")
        if mode == "r503":
            return await self._send(writer, 503, b'{"error":"not ready"}')
        if mode == "r500":
            return await self._send(writer, 500, b'{"error":"boom"}')
        if mode == "badjson":
            return await self._send(writer, 200, b'{"data": [{"b64_json": "abc')
        t_in = time.perf_counter()
        if path == "/v1/images/edits":  # multipart: the text fields read back by name
            self.edit_bodies.append(body)
            req = {m.group(1).decode(): m.group(2).decode() for m in
                   re.finditer(rb'name="(size|n)"\r\n\r\n([^\r]*)\r\n', body or b"")}
        else:
            req = json.loads(body or b"{}")
        w, h = (int(x) for x in str(req.get("size", "64x64")).split("x"))
        key = "" if mode == "same" else body.decode("latin-1")
        look = mode if mode in ("const", "black") else "pattern"
        if mode == "badimg":
            b64 = base64.b64encode(b"this is not an image").decode()
        else:
            b64 = self._png_b64(w + (8 if mode in ("wrongsize", "noisewrong") else 0), h,
                                noise=mode.startswith("noise"), key=key, look=look)
        if self.pause_window is not None:
            a, b = self.pause_window
            now = time.monotonic()
            if a <= now < b:
                await asyncio.sleep(b - now)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        out = {"created": 0, "data": [{"b64_json": b64}] * int(req.get("n", 1)),
               "stage_durations": {"denoise": 0.25, "vae_decode": 0.05}, "peak_memory_mb": 512.0,
               "service_time_s": time.perf_counter() - t_in}  # measured: what this server really held it
        if mode == "gzip":
            import gzip

            return await self._send(writer, 200, gzip.compress(json.dumps(out).encode()), "Content-Encoding: gzip\r\n")
        return await self._send(writer, 200, json.dumps(out).encode())

    async def _chat(self, mode: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        self.chat_bodies.append(body)
        t_in = time.perf_counter()
        extra = json.loads(body).get("extra_body") or {}
        w, h = int(extra.get("width", 64)), int(extra.get("height", 64))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        url = "data:image/png;base64," + self._png_b64(w + (8 if mode == "chatwrong" else 0), h,
                                                       key=body.decode("latin-1"))
        if mode == "chaturl":
            url = "https://example.invalid/image.png"
        elif mode == "chatbad64":
            url = "data:image/png;base64,@@not-base64@@"
        parts = [{"type": "image_url", "image_url": {"url": url}}] * int(extra.get("num_outputs_per_prompt", 1))
        content: object = "Image generation completed but no images were produced." if mode == "chattext" else parts
        out = {"id": "chatcmpl-0", "object": "chat.completion", "created": 0, "model": "fake",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
               "metrics": {"stage_durations": {"denoise": 0.25}, "peak_memory_mb": 256.0,
                           "service_time_s": time.perf_counter() - t_in}}
        return await self._send(writer, 200, json.dumps(out).encode())

    async def _video(self, mode: str, method: str, path: str, writer: asyncio.StreamWriter,
                     body: bytes = b"") -> bool:
        now = time.monotonic()
        parts = path.strip("/").split("/")  # v1 videos [id] [content]
        if method == "POST" and parts == ["v1", "videos"]:
            jid = f"video_{next(self._ids)}"
            self.create_headers, self.create_body = dict(self.last_headers), body
            m = re.search(rb'num_frames"\s*(?:\r\n\r\n|:\s*)(\d+)', body)  # multipart form or JSON
            frames = int(m.group(1)) if m else 0
            self._jobs[jid] = (None if mode == "vidstuck" else now + self.video_s, frames, 0)
            return await self._send(writer, 200, json.dumps({"id": jid, "status": "queued"}).encode())
        if len(parts) >= 3 and parts[2] in self._jobs:
            jid = parts[2]
            done_at = self._jobs[jid][0]
            finished = done_at is not None and now >= done_at
            if method == "DELETE":
                self.deleted.append(jid)
                return await self._send(writer, 200, json.dumps({"id": jid, "deleted": True}).encode())
            frames = self._jobs[jid][1]
            if len(parts) == 4 and parts[3] == "content":
                if not finished:
                    return await self._send(writer, 404, b'{"error":"not ready"}')
                if mode in ("vidmp4", "vidmp4short", "vidblack"):  # a real MP4, one frame missing for "short"
                    clip = _mp4(frames - (mode == "vidmp4short"), tint=int(jid.split("_")[1]) * 37,
                                black=mode == "vidblack")
                    return await self._send(writer, 200, clip, ctype="video/mp4")
                return await self._send(writer, 200, MP4_BYTES, ctype="video/mp4")
            self.polls += 1
            status = "completed" if finished else "in_progress"
            job = {"id": jid, "status": status, "stage_durations": {"denoise": 0.2}}
            if mode.startswith("vidmp4") or mode in ("vidjobwrong", "vidblack"):
                job["num_frames"] = frames + (4 if mode == "vidjobwrong" else 0)  # e.g. rounded to 4k+1
            return await self._send(writer, 200, json.dumps(job).encode())
        return await self._send(writer, 404, b'{"error":"no such route"}')


@pytest.fixture(scope="session")
def fake_server() -> Iterator[FakeServer]:
    srv = FakeServer()
    yield srv
    srv.close()


@pytest.fixture()
def fake(fake_server: FakeServer) -> Iterator[FakeServer]:
    fake_server.reset_state()
    yield fake_server
    fake_server.reset_state()


def check_closed_loop_rate(latencies_s: list[float], service_s: list[float], users: int, duration_s: float,
                           ok_rate: float) -> None:
    """Closed-loop ok rate against the times measured in the same run (never a constant rate).

    Each of ``users`` users cycles through one request after another, so by Little's law the rate is
    ``users / E[cycle]`` with ``cycle >= latency from ready >= the server's service time``:

    - upper bound ``users / E[service]`` (server-reported ``service_time_s`` of the ok requests);
    - ``users / E[latency]`` within the sampling error of the mean (3 standard errors, from n and the
      latencies' own spread) plus the edge of a window that ends mid-cycle (2 E[latency] / duration,
      which also covers the client's few-ms gap between a completion and the next send).
    """
    lat = np.asarray(latencies_s, dtype=np.float64)
    svc = np.asarray(service_s, dtype=np.float64)
    assert lat.size >= 5 and svc.size == lat.size
    se = 3.0 * lat.std(ddof=1) / lat.mean() / np.sqrt(lat.size)
    edge = 2.0 * lat.mean() / duration_s
    assert ok_rate <= users / svc.mean() * (1.0 + 3.0 * svc.std(ddof=1) / svc.mean() / np.sqrt(svc.size) + 1e-9)
    assert ok_rate <= users / lat.mean() * (1.0 + se + edge)
    assert ok_rate >= users / lat.mean() * (1.0 - se - edge)
