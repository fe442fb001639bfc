"""Payload checks, run after the request's done time is taken (outside the timed region).

A chat-completions answer (:func:`check_chat`) is valid when ``choices[0].message.content`` holds ``n``
``image_url`` parts whose data URLs pass the same checks. An image response is valid when it is JSON with ``data`` holding ``n`` items whose ``b64_json`` decodes
(strict base64) to an image Pillow can fully decode, of the requested width and height. A video download
is valid when it is non-empty, starts like an ISO-BMFF/MP4 file (an ``ftyp`` box at byte 4) and holds the
requested number of frames (read from the MP4 sample table and from the job's ``num_frames``; the client
does not decode video frames).

With ``sanity`` on (the default when decoding), each decoded image also passes the pixel checks of
:mod:`diffbench.load.client.sanity`: an all-black or constant image is an ``invalid_payload`` whose
:attr:`Verdict.invalid_kind` names it, and every image's pixel hash comes back in :attr:`Verdict.hashes`
(the row summary finds the same picture answered to different seeds).

These functions are pure and CPU-bound. :class:`~diffbench.load.client.http.HttpBackend` runs
:func:`check_images` in worker processes (:mod:`diffbench.load.client.checker`), never on the measuring
event loop; :func:`check_video` walks the MP4 box headers only (no decoding, no copy: microseconds for the
few dozen boxes of a generated clip), so it runs on the loop and saves copying the whole file to a worker.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import re
import zlib
from dataclasses import dataclass, field

from diffbench.errors import require
from diffbench.load.client.dialects import server_timings


@dataclass
class Verdict:
    """Result of a payload check: ``ok`` or the reason it is an ``invalid_payload``."""

    ok: bool
    error: str | None = None
    stages_s: dict[str, float] = field(default_factory=dict)
    peak_memory_bytes: int | None = None
    job_id: str | None = None
    job_status: str | None = None
    checked_pid: int | None = None
    """Process id of the process that ran the check (set by the checker's workers)."""
    invalid_kind: str | None = None
    """The named kind of a failed sanity check (:data:`diffbench.load.client.sanity.KINDS`), else None."""
    hashes: list[str] | None = None
    """Pixel hash of each answer image (:func:`~diffbench.load.client.sanity.pixel_hash`), in answer order;
    None when the images were not decoded or sanity was off."""
    quality: dict[str, float | None] | None = None
    """Scores against a reference (``psnr_db``, ``ssim``; :mod:`diffbench.load.client.scoring`)."""


def decode_body(body: bytes, encoding: str | None) -> bytes:
    """``body`` with its HTTP ``Content-Encoding`` removed (the client asks for ``identity``; a server may
    compress anyway). Supports ``identity``, ``gzip``/``x-gzip`` and ``deflate`` (zlib or raw).

    Raises:
        ValueError: an unsupported encoding, or a body that does not decompress.
    """
    enc = (encoding or "identity").strip().lower()
    if enc in ("", "identity"):
        return body
    try:
        if enc in ("gzip", "x-gzip"):
            return zlib.decompress(body, wbits=16 + zlib.MAX_WBITS)
        if enc == "deflate":
            try:
                return zlib.decompress(body)
            except zlib.error:
                return zlib.decompress(body, wbits=-zlib.MAX_WBITS)
    except zlib.error as exc:
        raise ValueError(f"Content-Encoding {enc} body does not decompress: {exc}") from None
    raise ValueError(f"unsupported Content-Encoding {encoding!r}")


def parse_json(body: bytes) -> tuple[dict[str, object] | None, str | None]:
    """(object, None) for a JSON object body, else (None, reason)."""
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"malformed JSON: {str(exc)[:120]}"
    if not isinstance(obj, dict):
        return None, f"JSON body is a {type(obj).__name__}, expected an object"
    return obj, None


def _json_answer(body: bytes, encoding: str | None) -> tuple[dict[str, object] | None, str | None]:
    """The answer's JSON object after undoing ``encoding``, or (None, why it is not one)."""
    try:
        body = decode_body(body, encoding)
    except ValueError as exc:
        return None, str(exc)
    return parse_json(body)


def _check_image(b64: object, width: int, height: int, what: str = "b64_json",
                 sanity: bool = False) -> tuple[str | None, str | None, str | None]:
    """(reason, sanity kind, pixel hash) of one base64 image: reason None when it is a picture of the
    requested size; kind and hash only with ``sanity``."""
    if not isinstance(b64, str) or not b64:
        return ("data[].b64_json missing or not a string (the server may not support response_format=b64_json)",
                None, None)
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError) as exc:
        return f"{what} is not valid base64: {exc}", None, None
    require("PIL", "serve")
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(raw)) as img:
            img.load()
            size = img.size
            if size != (width, height):
                return f"image is {size[0]}x{size[1]}, requested {width}x{height} (WIDTHxHEIGHT)", None, None
            if not sanity:
                return None, None, None
            from diffbench.load.client.sanity import image_kind, pixel_hash

            kind, why = image_kind(img)
            return why, kind, pixel_hash(img)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        text = re.sub(r"\s*<_io\.BytesIO object at 0x[0-9a-f]+>", "", str(exc))  # Pillow names its buffer
        return f"image does not decode: {text[:120]}", None, None


def check_images(body: bytes, width: int, height: int, n: int, decode: bool = True,
                 encoding: str | None = None, sanity: bool = False) -> Verdict:
    """Check an images-API response body.

    Args:
        body: the raw response body (as received: ``encoding`` is removed here).
        width, height: the requested size in pixels.
        n: the requested number of images.
        decode: False skips base64/image decoding (JSON shape and server timings are still read).
        encoding: the response's ``Content-Encoding`` (None: identity).
        sanity: with ``decode``, also the pixel checks and hashes of :mod:`diffbench.load.client.sanity`.
    """
    obj, err = _json_answer(body, encoding)
    if obj is None:
        return Verdict(False, err)
    stages, peak = server_timings(obj)
    data = obj.get("data")
    if not isinstance(data, list) or not data:
        what = "an empty data[] list" if isinstance(data, list) else "no data[] list"
        return Verdict(False, f"response has {what}", stages, peak)
    if len(data) != n:
        return Verdict(False, f"response holds {len(data)} images, requested n={n}", stages, peak)
    hashes: list[str] | None = [] if decode and sanity else None
    if decode:
        for i, item in enumerate(data):
            if not isinstance(item, dict):
                return Verdict(False, f"data[{i}] is not an object", stages, peak)
            reason, kind, digest = _check_image(item.get("b64_json"), width, height, sanity=sanity)
            if reason is not None:
                return Verdict(False, f"data[{i}]: {reason}", stages, peak, invalid_kind=kind)
            if hashes is not None and digest is not None:
                hashes.append(digest)
    return Verdict(True, None, stages, peak, hashes=hashes)


def chat_timings(obj: dict[str, object]) -> tuple[dict[str, float], int | None]:
    """Server timings of a chat answer: the top level, else its ``metrics`` object, else the first content
    part (where vLLM-Omni's benchmark looks for ``stage_durations`` and ``peak_memory_mb``)."""
    stages, peak = server_timings(obj)
    sources: list[object] = [obj.get("metrics")]
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        msg = choices[0].get("message")
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, list) and content:
            sources.append(content[0])
    for src in sources:
        if isinstance(src, dict):
            more, more_peak = server_timings(src)
            stages = stages or more
            peak = peak if peak is not None else more_peak
    return stages, peak


def _data_url_b64(url: object) -> tuple[str | None, str | None]:
    """(base64 payload, None) of an image data URL ``data:image/<type>;base64,<payload>``, else (None, reason)."""
    if not isinstance(url, str) or not url:
        return None, "image_url.url missing or not a string"
    head, sep, payload = url.partition(",")
    if not sep or not head.startswith("data:"):
        return None, f"image_url.url is not a data URL (starts {url[:24]!r}); expected data:image/png;base64,..."
    if not head.startswith("data:image/") or not head.endswith(";base64"):
        return None, f"image_url.url header {head[:40]!r} is not data:image/<type>;base64"
    return payload, None


def check_chat(body: bytes, width: int, height: int, n: int, decode: bool = True,
               encoding: str | None = None, sanity: bool = False) -> Verdict:
    """Check a chat-completions answer (``vllm-omni-chat``): the images are data URLs in
    ``choices[0].message.content[*].image_url.url``.

    Not ok: no ``choices``, an assistant message whose content is text (vLLM-Omni answers 200 with "Image
    generation completed but no images were produced." when the pipeline gave none), a number of image parts
    other than ``n``, a URL that is not an image data URL, base64 that does not decode, an image Pillow
    cannot decode, or one of another size than ``width`` x ``height`` (pixels); with ``sanity``, as
    :func:`check_images`.
    """
    obj, err = _json_answer(body, encoding)
    if obj is None:
        return Verdict(False, err)
    stages, peak = chat_timings(obj)
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return Verdict(False, "chat answer has no choices[0]", stages, peak)
    msg = choices[0].get("message")
    content = msg.get("content") if isinstance(msg, dict) else None
    if isinstance(content, str):
        return Verdict(False, f"choices[0].message.content is text, not images: {' '.join(content.split())[:120]!r}",
                       stages, peak)
    if not isinstance(content, list):
        return Verdict(False, "choices[0].message.content is missing (expected a list of image_url parts)",
                       stages, peak)
    parts = [p for p in content if isinstance(p, dict) and p.get("type") == "image_url"]
    if len(parts) != n:
        return Verdict(False, f"choices[0].message.content holds {len(parts)} image_url parts, requested n={n}",
                       stages, peak)
    hashes: list[str] | None = [] if decode and sanity else None
    if decode:
        for i, part in enumerate(parts):
            iu = part.get("image_url")
            b64, reason = _data_url_b64(iu.get("url") if isinstance(iu, dict) else None)
            kind = digest = None
            if reason is None:
                reason, kind, digest = _check_image(b64, width, height, "the data URL's base64", sanity=sanity)
            if reason is not None:
                return Verdict(False, f"content[{i}]: {reason}", stages, peak, invalid_kind=kind)
            if hashes is not None and digest is not None:
                hashes.append(digest)
    return Verdict(True, None, stages, peak, hashes=hashes)


_CONTAINERS = frozenset({b"moov", b"trak", b"mdia", b"minf", b"stbl", b"moof", b"traf", b"edts", b"mvex"})


def _boxes(data: bytes, start: int, end: int) -> list[tuple[bytes, int, int]]:
    """(type, payload start, payload end) of the ISO-BMFF boxes in ``data[start:end]``."""
    out = []
    pos = start
    while pos + 8 <= end:
        size = int.from_bytes(data[pos:pos + 4], "big")
        kind = data[pos + 4:pos + 8]
        head = 8
        if size == 1:
            if pos + 16 > end:
                break
            size, head = int.from_bytes(data[pos + 8:pos + 16], "big"), 16
        elif size == 0:
            size = end - pos
        if size < head or pos + size > end:
            break
        out.append((kind, pos + head, pos + size))
        pos += size
    return out


def mp4_frame_count(content: bytes) -> int | None:
    """Frames of the first video track of an MP4, from its sample tables (no decoding), or None.

    ISO/IEC 14496-12: the track whose ``hdlr`` handler type is ``vide``; its sample count is ``stsz`` (or
    ``stz2``) ``sample_count``; a fragmented file adds the ``trun`` sample counts of its fragments. None
    when the file has no such table (the count is then unknown, not zero).
    """
    def walk(start: int, end: int, track: dict[str, object]) -> None:
        for kind, a, b in _boxes(content, start, end):
            if kind == b"trak":
                sub: dict[str, object] = {}
                walk(a, b, sub)
                if sub.get("handler") == b"vide" and "samples" not in found:
                    found["samples"] = sub.get("samples")
            elif kind in _CONTAINERS:
                walk(a, b, track)
            elif kind == b"hdlr" and b - a >= 12:
                track["handler"] = content[a + 8:a + 12]
            elif kind in (b"stsz", b"stz2") and b - a >= 12:  # both: version/flags, 4 bytes, sample_count
                track["samples"] = int.from_bytes(content[a + 8:a + 12], "big")
            elif kind == b"trun" and b - a >= 8:
                found["fragments"] = int(found.get("fragments") or 0) + int.from_bytes(content[a + 4:a + 8], "big")

    found: dict[str, object] = {}
    walk(0, len(content), {})
    samples = found.get("samples")
    total = (int(samples) if isinstance(samples, int) else 0) + int(found.get("fragments") or 0)
    if samples is None and "fragments" not in found:
        return None
    return total


def check_video_frames(content: bytes, encoding: str | None = None) -> Verdict:
    """The answer sanity of a downloaded video (after :func:`check_video` passed): its frames decoded with
    PyAV, an all-black frame a ``black_frame``, and one pixel hash of the clip
    (:func:`~diffbench.load.client.sanity.video_sanity`). For the checker processes: decoding a clip takes
    tens to hundreds of ms."""
    from diffbench.load.client.sanity import video_sanity

    kind, why, digest = video_sanity(decode_body(content, encoding))
    if kind is not None:
        return Verdict(False, why, invalid_kind=kind)
    return Verdict(True, hashes=[digest] if digest is not None else None)


def check_video(content: bytes, frames: int | None = None) -> Verdict:
    """Check a downloaded video: non-empty, an MP4 (``ftyp`` box) header, and — when ``frames`` is given
    and the file's sample table tells — exactly ``frames`` video frames."""
    if not content:
        return Verdict(False, "video content is empty")
    if len(content) < 12 or content[4:8] != b"ftyp":
        return Verdict(False, "video content is not an MP4 (no ftyp box at byte 4)")
    if frames is not None:
        got = mp4_frame_count(content)
        if got is not None and got != frames:
            return Verdict(False, f"video has {got} frames, requested {frames}")
    return Verdict(True)
