"""Prompt-truncation warnings of transformers / diffusers, shown once per kind instead of once per call.

FLUX pipelines log "The following part of your input was truncated because CLIP can only handle sequences
up to 77 tokens: [...]" (and the T5 ``max_sequence_length`` variant) on *every* generation of a long prompt,
and tokenizers log "Token indices sequence length is longer than the specified maximum ...". A benchmark
makes hundreds of calls with the same prompts, so the console drowns. :func:`install_once_filter` adds a
:class:`logging.Filter` to the handlers of the ``diffusers`` and ``transformers`` library loggers that
passes the first record of each kind (the text before the first ``:``), marked "shown once", and drops
the repeats. Other records pass untouched. The same goes for the "should be kept in float32" record that an
SDXL img2img call logs every time it upcasts its VAE (image edits).
"""

from __future__ import annotations

import logging

PREFIXES = (
    "The following part of your input was truncated because",
    "Token indices sequence length is longer than the specified maximum",
    # diffusers' ModelMixin.to(dtype) on every call of an img2img pipeline that upcasts its VAE (SDXL
    # force_upcast): "There are modules in AutoencoderKL that should be kept in float32: [] ..."
    "There are modules in ",
)
SUFFIX = " (shown once; later records of this kind are not repeated)"


class OnceFilter(logging.Filter):
    """Passes the first prompt-truncation record of each kind; drops the rest."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if not msg.startswith(PREFIXES):
            return True
        kind = msg.split(":", 1)[0]
        if kind in self.seen:
            return False
        self.seen.add(kind)
        record.msg, record.args = msg + SUFFIX, None
        return True


_FILTER = OnceFilter()


def install_once_filter() -> OnceFilter:
    """Attach the shared :class:`OnceFilter` to the diffusers and transformers handlers (idempotent)."""
    for name in ("diffusers", "transformers"):
        try:
            mod = __import__(f"{name}.utils.logging", fromlist=["_get_library_root_logger"])
            root = mod._get_library_root_logger()
        except (ImportError, AttributeError):
            root = logging.getLogger(name)
        for h in root.handlers:
            if _FILTER not in h.filters:
                h.addFilter(_FILTER)
    return _FILTER
