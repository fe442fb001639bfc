"""Encode frames to MP4 bytes with PyAV (imported lazily; the ``serve`` extra installs it)."""

from __future__ import annotations

import io

import numpy as np

from diffbench.errors import InputError, require


def encode_mp4(frames: np.ndarray, fps: int) -> bytes:
    """Encode ``frames`` (uint8, (F, H, W, 3), RGB) to an H.264 MP4 (yuv420p, CRF 18) at ``fps``.

    Falls back to MPEG-4 Part 2 when PyAV has no H.264 encoder. H and W must be even (yuv420p).

    Raises:
        InputError: frames of the wrong shape or dtype, or an odd width/height.
        MissingDependencyError: PyAV is not installed.
    """
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise InputError(f"frames must be uint8 (F, H, W, 3), got {frames.dtype} {frames.shape}")
    _, height, width, _ = frames.shape
    if height % 2 or width % 2:
        raise InputError(f"MP4 (yuv420p) needs an even width and height, got {width}x{height}")
    av = require("av", "serve")
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"  # type: ignore[attr-defined]
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as container:  # type: ignore[attr-defined]
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        if codec == "libx264":
            stream.options = {"crf": "18", "preset": "veryfast"}
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):  # type: ignore
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buf.getvalue()
