"""``load --reference DIR``: read the reference directory and check the service's fingerprint (CLI layer).

The reading is the probe's (:func:`diffbench.monitor.probe_refs.load_references`: a ``bench --save-outputs``
or ``probe --record-reference`` manifest, whole batches, sha256 verified) and so is the fingerprint check
(:func:`diffbench.monitor.probe.check_fingerprint`); ``load`` sits below ``monitor`` on the package ladder,
so this module reads them and hands ``load`` plain :class:`~diffbench.load.client.workload.ReferenceRequest`
values.
"""

from __future__ import annotations

from pathlib import Path

from diffbench.errors import InputError
from diffbench.load.client.workload import ReferenceRequest


def read_references(directory: str) -> tuple[list[ReferenceRequest], dict[str, object] | None]:
    """The requests of the reference directory and its manifest's deployment fingerprint.

    Raises:
        InputError: the directory or manifest is missing or invalid (names ``--reference``), a file changed
            since it was recorded, a video reference without PyAV installed (scoring decodes the answers), or
            a reference without a step count.
    """
    from diffbench.errors import install_hint
    from diffbench.load.client.sanity import av_available
    from diffbench.monitor.probe_refs import load_references

    refs = load_references(Path(directory), option="--reference")
    out: list[ReferenceRequest] = []
    for case in refs.cases:
        if case.is_video and not av_available():
            raise InputError(f"--reference {directory}: {case.label} is a video; scoring its answers decodes "
                             f"them with PyAV, which is not installed: {install_hint('serve')}")
        if case.steps is None:
            raise InputError(f"--reference {directory}: {case.label} has no step count in the manifest; "
                             "re-record it with diffbench probe --record-reference DIR --steps N")
        files = tuple(str((refs.directory / e.file).resolve()) for e in case.entries)
        out.append(ReferenceRequest(label=case.label, prompt=case.prompt, seed=case.seed, width=case.width,
                                    height=case.height, steps=case.steps, guidance=case.guidance,
                                    frames=case.frames, files=files))
    return out, refs.manifest.fingerprint


def check_service_fingerprint(url: str, fingerprint: dict[str, object] | None, where: str,
                              timeout_s: float = 30.0) -> str | None:
    """Compare the service's deployment fingerprint (``GET {url}/v1/models``) with the references', as the
    probe does. A fingerprint missing on either side is a warning (returned), never silent.

    Raises:
        InputError: the fingerprints differ (each differing field with both values), or the service does
            not answer ``GET /v1/models``.
    """
    import asyncio

    import aiohttp

    from diffbench.monitor.probe import ProbeRequestError, check_fingerprint, fetch_service_info

    async def fetch() -> object:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
            return await fetch_service_info(session, url.rstrip("/"))

    try:
        service = asyncio.run(fetch())
    except ProbeRequestError as exc:
        raise InputError(f"--reference: cannot read the service's fingerprint: {exc}") from None
    return check_fingerprint(fingerprint, service, allow_unfingerprinted=True, where=where)  # type: ignore[arg-type]


__all__ = ["check_service_fingerprint", "read_references"]
