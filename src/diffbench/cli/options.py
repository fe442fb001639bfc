"""What several commands of the CLI share: the usage errors of their options.

* :func:`shape_option`: the flag an engine's shape message is about (``bench``, ``sweep``);
* :func:`http_params`: ``--engine http``'s ``--url``/``--dialect``/``--timeout``, checked (``bench``, ``sweep``);
* :func:`config_error`: a pydantic error on a config model as a usage error naming the flag (``ledger``, ``plan``);
* :func:`pipeline_knobs`: ``--quantization``, ``--fuse-projections`` and ``--offload`` checked, with the help texts
  :data:`QUANTIZATION_HELP`, :data:`FUSE_PROJECTIONS_HELP` and :data:`OFFLOAD_HELP` (``bench``, ``serve``, ``sweep``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from diffbench.errors import UsageError

if TYPE_CHECKING:
    from diffbench.engines.config import HttpParams


def shape_option(message: str, shapes: str | None) -> str:
    """The option a (neutral) engine shape message is about: ``--shapes SPEC`` or the single-shape flag."""
    if shapes:
        return f"--shapes {shapes}"
    low = message.lower()
    if "frames" in low:
        return "--frames"
    if low.startswith("height"):
        return "--height"
    if low.startswith("width"):
        return "--width"
    return "--height/--width"


def http_params(url: str | None, dialect: str, timeout: float, model: str | None,
                locals_given: dict[str, bool]) -> HttpParams:
    """The http engine's parameters from the CLI, checked before anything connects.

    Raises:
        UsageError: no ``--url``, a malformed URL, an unknown dialect, a timeout out of range, or an option
            that configures a local pipeline (it lives in the service's launch flags).
    """
    from typing import get_args

    from diffbench.engines.config import HttpParams
    from diffbench.engines.http_engine import check_url
    from diffbench.load.client.dialects import DIALECTS

    if url is None:
        raise UsageError("--engine http needs --url URL: the base URL of the running service, e.g. "
                         "--url http://127.0.0.1:8000")
    base = check_url(url)
    served = get_args(HttpParams.model_fields["dialect"].annotation)
    if dialect not in DIALECTS:
        raise UsageError(f"--dialect {dialect!r}: choose one of {', '.join(served)}")
    if dialect not in served:
        raise UsageError(f"--dialect {dialect}: the HTTP engine of bench and sweep speaks {', '.join(served)}; "
                         f"{dialect} is measured with `diffbench load --dialect {dialect}`")
    if not (0 < timeout <= 86400):
        raise UsageError(f"--timeout {timeout:g}: must be seconds in (0, 86400]")
    local = [flag for flag, given in locals_given.items() if given]
    if local:
        raise UsageError(f"{', '.join(local)}: configure{'s' if len(local) == 1 else ''} a local pipeline; with "
                         "--engine http the service's own launch flags decide it (drop the option)")
    return HttpParams(url=base, dialect=dialect, timeout_s=timeout, model=model)  # type: ignore[arg-type]


def config_error(exc: Exception) -> Exception:
    """A pydantic error on a config model as a one-line :class:`UsageError` naming the real flag."""
    from diffbench.errors import UsageError
    from diffbench.ledger.options import flag_of

    errs = getattr(exc, "errors", None)
    if callable(errs):
        e = errs()[0]
        field = flag_of(str(e["loc"][0])) if e["loc"] else "input"
        return UsageError(f"{field} {e.get('input')!r}: {e['msg']}")
    return UsageError(str(exc))


QUANTIZATION_HELP = (
    "Quantized linear layers of the denoiser: none | int8-dynamic (CPU and float32 only) | fp8 (an NVIDIA GPU with "
    "FP8 tensor cores, compute capability 8.9+, and the torchao package). Refused at start where it cannot run."
)
FUSE_PROJECTIONS_HELP = (
    "Fuse the attention QKV projections (diffusers fuse_qkv_projections: Flux, Wan, SD3, SD, SDXL): one matmul "
    "instead of three, same output up to float rounding."
)
OFFLOAD_HELP = "none | model | sequential CPU offload (CUDA only)."
OFFLOADS = ("none", "model", "sequential")


def pipeline_knobs(engine: str, quantization: str, fuse_projections: bool, offload: str = "none") -> None:
    """Check ``--quantization``, ``--fuse-projections`` and ``--offload`` before anything is loaded (where each
    can run is checked when the engine starts: :func:`~diffbench.engines.quantize.quantization_unavailable`).

    Raises:
        UsageError: an unknown quantization or offload mode, or one of them set on the sim engine (it has no
            pipeline to apply it to).
    """
    from diffbench.engines.quantize import check_quantization

    check_quantization(quantization)
    if offload not in OFFLOADS:
        raise UsageError(f"--offload {offload!r}: choose none, model or sequential")
    if engine == "sim":
        given = {"--quantization": quantization != "none", "--fuse-projections": fuse_projections,
                 "--offload": offload != "none"}
        for flag, on in given.items():
            if on:
                raise UsageError(f"{flag}: the sim engine has no pipeline to apply it to; use --engine diffusers")
