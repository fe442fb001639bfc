"""LoRA adapters: loaded once at start, one active per request (``GenerationRequest.adapter``).

An adapter is a directory in the PEFT/diffusers LoRA format (``pytorch_lora_weights.safetensors``, as
``FluxPipeline.save_lora_weights`` writes it, or ``adapter_model.safetensors``). ``serve --lora NAME=DIR``
declares them; the engine loads each with diffusers' ``load_lora_weights(DIR, adapter_name=NAME)`` at start
and switches per request with ``set_adapters([NAME], [scale])`` / ``disable_lora()`` (diffusers' PEFT
integration, https://huggingface.co/docs/diffusers/main/en/tutorials/using_peft_for_inference). A switch —
the active adapter or its scale changes from one request to the next — is an *adapter swap*; its time is
measured (synchronized) and reported with the request, so a LoRA-mixing workload's cost is visible.

Adapters are declared at start, never loaded from a path a request names: the service has no
authentication, and a request that could make it read any directory would be a file-read hole. A request
may repeat the declared ``local_path`` (vLLM-Omni's request field), which must then match.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from diffbench.errors import ShapeError, UsageError

WEIGHT_FILES = ("pytorch_lora_weights.safetensors", "adapter_model.safetensors")
"""Files a LoRA directory holds (diffusers' ``save_lora_weights``; PEFT's ``save_pretrained``)."""
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
SWAP_STAGE = "adapter_swap"
"""The stage name under which a request's adapter swap time is reported (seconds; 0 without a swap)."""


def parse_adapters(specs: list[str] | tuple[str, ...], option: str = "--lora") -> dict[str, str]:
    """``["NAME=DIR", ...]`` → ``{NAME: absolute DIR}``, each directory checked.

    Raises:
        UsageError: not ``NAME=DIR``, a name outside ``[A-Za-z0-9_.-]`` (at most 64 characters, a metric
            label), a repeated name, a missing directory, or one without a LoRA weight file.
    """
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise UsageError(f"{option} {spec!r}: give NAME=DIR, e.g. {option} style=./loras/style")
        if not NAME.match(name):
            raise UsageError(f"{option} {spec!r}: the name may hold letters, digits, '_', '.', '-' (at most 64)")
        if name in out:
            raise UsageError(f"{option}: the name {name!r} is given twice")
        d = Path(path).expanduser()
        if not d.is_dir():
            raise UsageError(f"{option} {name}={path}: no such directory")
        if not any((d / f).is_file() for f in WEIGHT_FILES):
            raise UsageError(f"{option} {name}={path}: no LoRA weights in it (expected one of "
                             f"{', '.join(WEIGHT_FILES)})")
        out[name] = str(d.resolve())
    return out


def check_adapter(adapters: dict[str, str], name: str | None) -> None:
    """Raise :class:`ShapeError` (a request the deployment cannot take: HTTP 400) when ``name`` is not one of
    the declared ``adapters`` (None: no adapter)."""
    if name is None or name in adapters:
        return
    if not adapters:
        raise ShapeError(f"LoRA adapter {name!r}: this deployment loads none (serve --lora NAME=DIR loads one)")
    raise ShapeError(f"LoRA adapter {name!r} is not loaded; loaded: {', '.join(sorted(adapters))}")


def adapter_hashes(adapters: dict[str, str]) -> dict[str, str]:
    """``{NAME: sha256 (16 hex)}`` of each adapter directory's weight and config files (the
    :data:`WEIGHT_FILES` present and ``adapter_config.json``, in name order, file names included): what the
    deployment fingerprint names, so a reference made with other adapter weights under the same name is
    told apart. Reads every weight file once (LoRA files are MBs to a few hundred MB).

    Raises:
        OSError: a file cannot be read.
    """
    out: dict[str, str] = {}
    for name, path in sorted(adapters.items()):
        h = hashlib.sha256()
        for fname in sorted((*WEIGHT_FILES, "adapter_config.json")):
            f = Path(path) / fname
            if f.is_file():
                h.update(fname.encode() + b"\0")
                with f.open("rb") as fh:
                    for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""):
                        h.update(chunk)
        out[name] = h.hexdigest()[:16]
    return out


SIM_SWAP_S = 0.02
"""Host seconds the simulated engine spends on an adapter swap: an assumption for testing the protocol (a
real swap's cost depends on the adapter's rank and the layers it touches; measure it with ``serve --lora``
on the real pipeline). Not a :class:`~diffbench.engines.config.SimParams` field, so the sim's model hash is
unchanged."""


__all__ = ["NAME", "SIM_SWAP_S", "SWAP_STAGE", "WEIGHT_FILES", "adapter_hashes", "check_adapter", "parse_adapters"]
