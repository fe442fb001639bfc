"""``vllm bench serve`` option names on ``diffbench load``: each one mapped onto diffbench's.

vLLM's meanings (``vllm/benchmarks/serve.py``):

- ``--base-url URL``: the server's base URL; diffbench's ``--url`` (the same value: no ``/v1``).
- ``--model NAME``: the model name sent in every request (the ``model`` field of every dialect, the
  workload file's ``model:`` overridden); also names the result file.
- ``--backend NAME``: the request format, mapped onto ``--dialect`` (:data:`BACKENDS`).
- ``--endpoint PATH``: the route requests go to. diffbench derives the route from the dialect, so PATH must
  be that dialect's route (``/v1/chat/completions`` alone selects ``vllm-omni-chat``).
- ``--save-result`` / ``--result-dir DIR`` / ``--result-filename NAME``: write the result JSON (the same
  as ``--json``) to ``DIR/NAME``; vLLM's default name is
  ``{backend}-{request_rate}qps[-concurrency{N}]-{model basename}-{YYYYmmdd-HHMMSS}.json`` (``request_rate``
  printed as a float, ``inf`` by default), and ``DIR`` is created.
- ``--percentile-metrics e2el`` / ``--metric-percentiles 50,90,99``: the percentiles printed after the
  tables, in vLLM's form (``P99 E2EL (ms): 12.34``). vLLM's ``e2el`` (send to last byte) is diffbench's
  latency from send; diffbench's own tables and JSON give p50/p90/p99/p99.9 in **seconds**, vLLM's block
  in **milliseconds**. Token metrics (``ttft``, ``tpot``, ``itl``) have no meaning for one image/video body
  and are refused; a percentile outside 50/90/99/99.9 (what the summaries hold) is refused.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Sequence

from diffbench.errors import UsageError
from diffbench.load.vllm_options import VllmOptions

BACKENDS: dict[str, str] = {
    "openai": "openai", "openai-image": "openai", "vllm": "vllm-omni", "vllm-omni": "vllm-omni",
    "openai-chat": "vllm-omni-chat", "openai-chat-omni": "vllm-omni-chat", "vllm-omni-chat": "vllm-omni-chat",
    "sglang": "sglang", "sglang-image": "sglang",
}
"""vLLM ``--backend`` → diffbench ``--dialect``."""
METRICS: dict[str, str] = {"e2el": "latency_from_send_s", "latency": "latency_from_arrival_s"}
"""``--percentile-metrics`` names → the row summary they read (``latency``: diffbench's, from arrival)."""
TOKEN_METRICS = frozenset({"ttft", "tpot", "itl", "ttfs", "input_token", "output_token"})
PERCENTILES: dict[float, str] = {50.0: "p50", 90.0: "p90", 99.0: "p99", 99.9: "p999"}


def resolve_url(url: str | None, base_url: str | None) -> str | None:
    """``--url`` or its alias ``--base-url`` (both: they must agree).

    Raises:
        UsageError: both given with different values.
    """
    if url is not None and base_url is not None and url.rstrip("/") != base_url.rstrip("/"):
        raise UsageError(f"--url {url} and --base-url {base_url} disagree (--base-url is vllm bench serve's name "
                         "for --url); give one")
    return url if url is not None else base_url


def resolve_dialect(dialect: str, dialect_given: bool, backend: str | None, endpoint: str | None) -> str:
    """The dialect from ``--dialect``, ``--backend`` and ``--endpoint``; the endpoint must be the dialect's
    image or video route.

    Raises:
        UsageError: an unknown backend, a backend that contradicts ``--dialect``, an endpoint that is not
            the dialect's route.
    """
    from diffbench.load.client.dialects import CHAT_PATH, VIDEOS_PATH, image_path

    if backend is not None:
        mapped = BACKENDS.get(backend.strip().lower())
        if mapped is None:
            raise UsageError(f"--backend {backend!r}: diffbench speaks {', '.join(sorted(BACKENDS))} "
                             "(mapped onto --dialect; see the vllm bench serve table in the load-test guide, "
                             "docs/guides/load-test.md)")
        if dialect_given and mapped != dialect:
            raise UsageError(f"--backend {backend} means --dialect {mapped}, but --dialect {dialect} was given; "
                             "give one")
        dialect = mapped
    if endpoint is not None:
        path = "/" + endpoint.strip().lstrip("/")
        if path.rstrip("/") == CHAT_PATH and not dialect_given and backend is None:
            dialect = "vllm-omni-chat"
        routes = {image_path(dialect), image_path(dialect, edit=True), VIDEOS_PATH}  # type: ignore[arg-type]
        if path.rstrip("/") not in routes:
            raise UsageError(f"--endpoint {endpoint}: --dialect {dialect} sends to {', '.join(sorted(routes))} "
                             "(the route follows the dialect and the workload kind); drop --endpoint or "
                             "choose the dialect of that route")
    return dialect


def result_path(v: VllmOptions, *, label: str, request_rate: str | None, max_concurrency: int | None,
                model: str | None, now: _dt.datetime | None = None) -> str | None:
    """Where ``--save-result`` writes, as vLLM names it (None without ``--save-result``); ``--result-dir``
    is created.

    Raises:
        UsageError: ``--result-dir`` or ``--result-filename`` without ``--save-result``; a ``--result-dir``
            that is a file or cannot be created.
    """
    if not v.save_result:
        if v.result_dir is not None or v.result_filename is not None:
            raise UsageError("--result-dir / --result-filename apply with --save-result (vllm bench serve's "
                             "rule); add --save-result or use --json PATH")
        return None
    name = v.result_filename
    if name is None:
        rate = "inf" if request_rate is None else request_rate.strip().lower()
        try:
            rate = str(float(rate))
        except ValueError:
            rate = rate.replace(",", "_")
        conc = f"-concurrency{max_concurrency}" if max_concurrency is not None else ""
        stamp = (now or _dt.datetime.now()).strftime("%Y%m%d-%H%M%S")
        name = f"{label}-{rate}qps{conc}-{(model or 'unknown').split('/')[-1]}-{stamp}.json"
    if v.result_dir:
        if os.path.exists(v.result_dir) and not os.path.isdir(v.result_dir):
            raise UsageError(f"--result-dir {v.result_dir}: is a file, not a folder; give a folder (it is "
                             "created when missing) or --json PATH")
        try:
            os.makedirs(v.result_dir, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--result-dir {v.result_dir}: cannot create it ({exc.strerror or exc}); give a "
                             "writable folder") from None
        return os.path.join(v.result_dir, name)
    return name


def parse_percentiles(metrics: str | None, percentiles: str | None) -> tuple[list[str], list[float]]:
    """(metric names, percentiles) of ``--percentile-metrics`` and ``--metric-percentiles``; ([], []) when
    neither is given (the default metric is ``e2el``, the default percentile 99, as vLLM's).

    Raises:
        UsageError: a token metric, an unknown metric, a percentile the summaries do not hold.
    """
    if metrics is None and percentiles is None:
        return [], []
    names = [m.strip().lower() for m in (metrics or "e2el").split(",") if m.strip()]
    for m in names:
        if m in TOKEN_METRICS:
            raise UsageError(f"--percentile-metrics {m}: a token metric; a diffusion answer is one body, so use "
                             "e2el (send to last byte, diffbench's latency from send)")
        if m not in METRICS:
            raise UsageError(f"--percentile-metrics {m}: choose from {', '.join(METRICS)}")
    qs: list[float] = []
    for text in (percentiles or "99").split(","):
        try:
            q = float(text)
        except ValueError:
            raise UsageError(f"--metric-percentiles {text!r}: not a number; e.g. 50,90,99") from None
        if q not in PERCENTILES:
            raise UsageError(f"--metric-percentiles {text.strip()}: diffbench's summaries hold the "
                             f"{', '.join(f'{p:g}' for p in PERCENTILES)}th percentiles; choose among them")
        qs.append(q)
    return names, qs


def percentile_lines(rows: Sequence[object], metrics: Sequence[str], percentiles: Sequence[float]) -> list[str]:
    """vLLM's percentile block for each row, in milliseconds: ``P99 E2EL (ms): 12.34``."""
    out: list[str] = []
    for row in rows:
        rate = getattr(row, "offered_rate", None)
        users = getattr(row, "users", None)
        head = f"{rate:g} req/s" if rate is not None else f"{users} users" if users is not None else "burst"
        parts = []
        for m in metrics:
            s = getattr(row, METRICS[m])
            parts.extend(f"P{q:g} {m.upper()} (ms): {getattr(s, PERCENTILES[q]) * 1e3:.2f}" for q in percentiles)
        out.append(f"{head}: " + " · ".join(parts))
    return out
