"""Sweep axes: the one knob a sweep varies, chosen with ``--cache`` or ``--option``, and the fingerprint field
it changes.

The knobs themselves (cache and option axes, value parsing, diffusers cache configs) are engine knowledge in
:mod:`diffbench.engines.knobs`; the fingerprint field each axis changes (and that the fingerprint comparison
therefore ignores) is in :data:`AXIS_FIELD`.
"""

from __future__ import annotations

import re

from diffbench.engines.knobs import CACHE_AXES, OPTION_AXES
from diffbench.errors import UsageError

AXIS_FIELD = {**{k: "cache" for k in CACHE_AXES}, "precision": "precision",
              "attention-backend": "attention_backend", "compile": "compile", "quantization": "quantization",
              "fuse-projections": "fused_projections"}

# The internal axis of ``diffbench derive``: each value is a whole engine configuration
# (``SweepOptions.value_configs``) that may change any of these fingerprint fields at once.
DEPLOYMENT_AXIS = "deployment"
DEPLOYMENT_FIELDS = ("precision", "attention_backend", "compile", "cache", "quantization", "fused_projections")


def axis_name(cache: str | None, option: str | None, any_option: bool = False) -> str:
    """The single axis of a sweep from ``--cache`` / ``--option``.

    ``any_option`` (``--engine http``): ``--option`` may name any server-side option (a launch flag of the
    services, e.g. ``cfg-parallel``): lower-case letters, digits, ``-`` and ``_``; its values are labels.

    Raises:
        UsageError: neither or both given, or an unknown name.
    """
    if (cache is None) == (option is None):
        raise UsageError(
            f"give exactly one of --cache ({'|'.join(CACHE_AXES)}) or --option ({'|'.join(OPTION_AXES)})"
        )
    if cache is not None and cache not in CACHE_AXES:
        raise UsageError(f"--cache {cache!r}: choose one of {', '.join(CACHE_AXES)}")
    if option is not None and any_option and option not in OPTION_AXES:
        if not re.fullmatch(r"[a-z][a-z0-9_-]{0,63}", option):
            raise UsageError(f"--option {option!r}: name the server-side option in lower case (letters, digits, "
                             f"- and _), e.g. cfg-parallel; or one of {', '.join(OPTION_AXES)}")
        return option
    if option is not None and option not in OPTION_AXES:
        raise UsageError(f"--option {option!r}: choose one of {', '.join(OPTION_AXES)}")
    return str(cache or option)
