"""What ``diffbench load`` is asked to do: every option's default, bound and cross-option rule, declared once.

:class:`LoadSpec` holds the options as given (one field per option; :meth:`LoadSpec.flag` names a field's
option). Constructing it checks, in this order:

1. the aliases of vllm bench serve's names (``--base-url``, ``--backend``, ``--endpoint``) resolved onto
   ``url`` and ``dialect``;
2. each option's own bound (a :class:`pydantic.ValidationError` whose errors have type ``"bound"`` and a
   message written after the option's name, e.g. ``must be > 0 seconds, got 0``): the CLI turns it into a
   one-line usage error naming the option;
3. the rules across options (aliases that disagree, options of the other loop, schedules above
   ``--max-requests``): a :class:`~diffbench.errors.UsageError` naming the options, raised as is.

Files (workload, prompts, trace, outputs) are read and checked later, by :func:`diffbench.load.run.run_load`.
Importing this module imports neither aiohttp nor the service.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, PrivateAttr, field_validator, model_validator
from pydantic_core import PydanticCustomError

from diffbench.errors import UsageError
from diffbench.load.goodput import GoodputConstraint, QualityFloor, parse_goodput_floors, with_slo
from diffbench.load.vllm_options import VllmOptions

if TYPE_CHECKING:
    from diffbench.load.client.http import Target
    from diffbench.load.client.workload import Workload

MAX_REQUESTS = 200_000
"""Default ``--max-requests`` per rate: every request is kept as a record (~1.6 kB) for the summary, so
200,000 requests hold ~0.3 GB; a larger schedule is refused unless asked for."""
LOCAL_SCRAPE = "local"
"""``--scrape local``: the reference service the command starts without ``--url``."""

_FLAG = {"json_out": "--json", "csv_out": "--csv"}
_SECONDS = ("duration", "timeout", "slo", "poll_interval", "abandon_after")
_SECONDS_ZERO_OK = ("drain", "think_time")
_AT_LEAST_ONE = {"max_inflight": "", "max_concurrency": "", "num_requests": " requests",
                 "num_prompts": " requests", "workers": " load processes", "max_requests": ""}
SHAPE_FLAGS = {"width": "--size", "height": "--size", "steps": "--steps", "frames": "--frames", "base_url": "--url"}
"""The options of the fields of the models built from a spec (:meth:`LoadSpec.shape_workload`, :meth:`LoadSpec.target`)."""
_PATHS = ("workload", "prompts", "jsonl", "json_out", "csv_out", "trace")


def _bound(text: str) -> PydanticCustomError:
    return PydanticCustomError("bound", text)


class LoadSpec(VllmOptions):
    """The options of ``diffbench load``, as given (field ``x`` is option ``--x``; :meth:`flag`). Times are
    seconds, rates requests per second. Derived values (:attr:`max_inflight_value`, :attr:`num_requests_value`,
    :attr:`rate_list`, :attr:`user_list`, :attr:`constraints`) are set by validation."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = None
    dialect: str | None = None
    mode: str = "open"
    duration: float = 30.0
    timeout: float = 600.0
    slo: float | None = None
    poll_interval: float = 0.25
    drain: float = 10.0
    think_time: float = 0.0
    max_inflight: int | None = None
    max_concurrency: int | None = None
    num_requests: int | None = None
    num_prompts: int | None = None
    workers: int = 1
    ray: str | None = None
    warmup: int = 1
    seed: int = 0
    rates: str | None = None
    request_rate: str | None = None
    users: str = "1,2,4"
    goodput: list[str] = []
    max_requests: int = MAX_REQUESTS
    arrival: str = "poisson"
    burstiness: float | None = None
    workload: str | None = None
    prompts: str | None = None
    size: str = "256x256"
    steps: int = 4
    frames: int | None = None
    delete_abandoned: bool = False
    abandon_after: float | None = None
    abandon_fraction: float = 1.0
    header: list[str] = []
    api_key: str | None = None
    insecure: bool = False
    no_decode: bool = False
    defer_checks: bool = False
    jsonl: str | None = None
    json_out: str | None = None
    csv_out: str | None = None
    mkdir: bool = False
    quiet: bool = False
    serve_engine: str = "diffusers"
    serve_model: str = "tiny-flux"
    scrape: str | None = None
    scrape_interval: float = 1.0
    trace: str | None = None
    trace_speed: float = 1.0
    slo_scale: float | None = None
    gpus: int | None = None
    gpu_hour_price: float | None = None
    reference: str | None = None
    quality_sample: float | None = None
    # the vLLM-named options (base_url, model, backend, endpoint, save_result, result_dir, result_filename,
    # percentile_metrics, metric_percentiles) are the fields of the base class VllmOptions

    _inflight: tuple[str, int | None] = PrivateAttr(default=("--max-inflight", None))
    _count: tuple[str, int | None] = PrivateAttr(default=("--num-requests", None))
    _rates: list[float] | None = PrivateAttr(default=None)
    _users: list[int] = PrivateAttr(default_factory=list)
    _constraints: list[GoodputConstraint] = PrivateAttr(default_factory=list)
    _floors: list[QualityFloor] = PrivateAttr(default_factory=list)

    @classmethod
    def flag(cls, name: str) -> str:
        """The option of field ``name`` (``json_out`` -> ``--json``, ``poll_interval`` -> ``--poll-interval``)."""
        return _FLAG.get(name, "--" + name.replace("_", "-"))

    @classmethod
    def flags(cls) -> dict[str, str]:
        """Every field's option, for :func:`diffbench.cli.validation.usage_error`."""
        return {name: cls.flag(name) for name in cls.model_fields}

    @classmethod
    def default(cls, name: str) -> Any:
        """The default of field ``name`` (the CLI's option defaults read them here)."""
        return cls.model_fields[name].get_default(call_default_factory=True)

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        """vllm bench serve's names: ``--base-url`` is ``--url``; ``--backend`` / ``--endpoint`` pick the dialect."""
        if not isinstance(data, dict):
            return data
        from diffbench.load.client.vllm_compat import resolve_dialect, resolve_url

        data = {k: str(v) if k in _PATHS and isinstance(v, Path) else v for k, v in data.items()}
        data["url"] = resolve_url(data.get("url"), data.get("base_url"))
        dialect = data.get("dialect")
        data["dialect"] = resolve_dialect(dialect or "vllm-omni", dialect is not None, data.get("backend"),
                                          data.get("endpoint"))
        return data

    @field_validator("mode")
    @classmethod
    def _mode(cls, v: str) -> str:
        if v not in ("open", "closed"):
            raise _bound(f"must be open or closed, got {v!r}")
        return v

    @field_validator("dialect")
    @classmethod
    def _dialect(cls, v: str) -> str:
        from diffbench.load.client.dialects import DIALECTS

        if v not in DIALECTS:
            raise _bound(f"must be one of {', '.join(DIALECTS)}, got {v!r}")
        return v

    @field_validator(*_SECONDS, *_SECONDS_ZERO_OK)
    @classmethod
    def _seconds(cls, v: float | None, info: Any) -> float | None:
        """A time that is finite and > 0 (>= 0 for ``drain`` and ``think_time``)."""
        zero_ok = info.field_name in _SECONDS_ZERO_OK
        if v is None:
            return v
        if not math.isfinite(v):
            raise _bound(f"must be a finite number of seconds, got {v:g}")
        if v < 0 or (v == 0 and not zero_ok):
            raise _bound(f"must be {'>= 0' if zero_ok else '> 0'} seconds, got {v:g}")
        return v

    @field_validator(*_AT_LEAST_ONE)
    @classmethod
    def _at_least_one(cls, v: int | None, info: Any) -> int | None:
        if v is not None and v < 1:
            raise _bound(f"must be >= 1{_AT_LEAST_ONE[info.field_name]}, got {v}")
        return v

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, v: int | None) -> int | None:
        from diffbench.core.workcost import gpus_error

        if v is not None and (why := gpus_error(v)):
            raise _bound(why)
        return v

    @field_validator("gpu_hour_price")
    @classmethod
    def _price(cls, v: float | None) -> float | None:
        from diffbench.core.workcost import price_error

        if v is not None and (why := price_error(v)):
            raise _bound(why)
        return v

    @field_validator("warmup")
    @classmethod
    def _warmup(cls, v: int) -> int:
        if v < 0:
            raise _bound(f"must be >= 0 requests per shape, got {v}")
        return v

    @field_validator("abandon_fraction")
    @classmethod
    def _fraction(cls, v: float) -> float:
        if not (0 < v <= 1):
            raise _bound(f"must be > 0 and <= 1 (the share of requests the client abandons), got {v:g}")
        return v

    @field_validator("quality_sample")
    @classmethod
    def _quality_sample(cls, v: float | None) -> float | None:
        if v is not None and not (math.isfinite(v) and 0 < v <= 1):
            raise _bound(f"must be a fraction in (0, 1] of the schedule, got {v:g}")
        return v

    @field_validator("seed")
    @classmethod
    def _seed(cls, v: int) -> int:
        if v < 0:
            raise _bound(f"must be >= 0 (a numpy seed), got {v}")
        return v

    @model_validator(mode="after")
    def _across(self) -> LoadSpec:
        """The rules across options (module docstring, step 3)."""
        from diffbench.queueing.schedules import parse_int_list

        self._inflight = _one_of("--max-inflight", self.max_inflight, "--max-concurrency", self.max_concurrency)
        self._count = count_opt, num_requests = _one_of("--num-requests", self.num_requests, "--num-prompts",
                                                        self.num_prompts)
        if num_requests is not None and self.mode == "closed":
            raise UsageError(f"{count_opt} applies to the open loop; a closed loop runs for --duration")
        self._rates = self._rate_list(num_requests)
        self._users = parse_int_list(self.users, "--users")
        if self.gpu_hour_price is not None and self.gpus is None:
            raise UsageError("--gpu-hour-price prices GPU time and needs --gpus N (the GPUs serving the load, paid "
                             "for the whole window)")
        if self.mode == "closed" and self._inflight[1] is not None:
            raise UsageError(f"{self._inflight[0]} applies to the open loop; a closed loop is capped by --users")
        from diffbench.load.client.http import parse_headers

        parse_headers(self.header)  # 'Name: value' each, checked before anything starts
        constraints, self._floors = parse_goodput_floors(self.goodput) if self.goodput else ([], [])
        self._constraints = with_slo(constraints, self.slo)
        if self.reference is None:
            if self._floors:
                raise UsageError(f"--goodput {self._floors[0].text()}: a quality floor needs --reference DIR (the "
                                 "requests it scores replay that directory's references)")
            if self.quality_sample is not None:
                raise UsageError("--quality-sample applies to --reference DIR; give the reference directory too")
        if self.mode == "closed" and max(self._users) > self.max_requests:
            raise UsageError(f"--users {max(self._users):,} is above --max-requests {self.max_requests:,} (each "
                             "user sends at least one request); use fewer users or raise --max-requests")
        if self.abandon_fraction != 1.0 and self.abandon_after is None:
            raise UsageError("--abandon-fraction applies with --abandon-after S (the clients that give up after S s)")
        if self.abandon_after is not None and self.abandon_after >= self.timeout:
            raise UsageError(f"--abandon-after {self.abandon_after:g} s is not before --timeout {self.timeout:g} s: "
                             "no request would be abandoned; lower it or raise --timeout")
        if self.url is not None and not self.url.strip():
            raise UsageError("--url is empty; give the service's base URL (e.g. http://host:8000) or leave --url "
                             "out to start the reference service")
        for rate in self._rates or []:
            if num_requests is None:
                check_request_count(rate * self.duration, f"--rates {rate:g} x --duration {self.duration:g} s",
                                    self.max_requests)
            else:
                check_request_count(min(rate * self.duration, num_requests), f"{count_opt} {num_requests}",
                                    self.max_requests)
        return self

    def _rate_list(self, num_requests: int | None) -> list[float] | None:
        """The open-loop rates of ``--rates`` or ``--request-rate`` (None: auto; ``[inf]``: a burst).

        Raises:
            UsageError: both options, a bad value, or ``inf`` without ``--num-requests``.
        """
        from diffbench.queueing.schedules import parse_rate_list

        if self.rates is not None and self.request_rate is not None:
            raise UsageError(f"--rates {self.rates} and --request-rate {self.request_rate} both set the rate; give "
                             "one (--request-rate R is --rates R)")
        if self.request_rate is not None:
            text = self.request_rate.strip().lower()
            if self.mode == "closed":
                raise UsageError("--request-rate applies to the open loop; a closed loop is set by --users")
            if text in ("inf", "infinity"):
                if num_requests is None:
                    raise UsageError("--request-rate inf sends every request at once and needs --num-requests N "
                                     "(or --num-prompts N)")
                return [math.inf]
            try:
                float(text)
            except ValueError:
                if "," not in text:
                    raise UsageError(f"--request-rate: {self.request_rate!r} is not a number; use e.g. "
                                     "--request-rate 2 (req/s) or --request-rate inf") from None
            rates = parse_rate_list(self.request_rate, "--request-rate")
            if len(rates) != 1:
                raise UsageError(f"--request-rate takes one rate, got {self.request_rate!r}; use --rates for a list")
            return rates
        text = self.rates if self.rates is not None else "auto"
        return None if text.strip().lower() == "auto" else parse_rate_list(text, "--rates")

    def shape_workload(self) -> Workload | None:
        """The one-shape workload of ``--size/--steps/--frames`` (None with ``--workload FILE``).

        Raises:
            UsageError: ``--size`` is not WIDTHxHEIGHT.
            pydantic.ValidationError: a size, step or frame count out of the workload's bounds (fields
                ``width``, ``height``, ``steps``, ``frames``: :data:`SHAPE_FLAGS`).
        """
        from diffbench.load.client.workload import default_workload, size_field

        if self.workload:
            return None
        try:
            w, h = size_field(self.size)
        except ValueError as exc:
            raise UsageError(f"--size: {exc}") from None
        return default_workload(width=w, height=h, steps=self.steps, frames=self.frames)

    def target(self, base_url: str) -> Target:
        """Where and how requests are sent: ``base_url`` with the transport options.

        Raises:
            pydantic.ValidationError: a bad URL (field ``base_url``: :data:`SHAPE_FLAGS`).
        """
        from diffbench.load.client.http import Target, parse_headers

        return Target(base_url=base_url, dialect=self.dialect, timeout_s=self.timeout,  # type: ignore[arg-type]
                      headers=parse_headers(self.header), api_key=self.api_key, poll_interval_s=self.poll_interval,
                      delete_abandoned=self.delete_abandoned, verify_tls=not self.insecure,
                      decode_payload=not self.no_decode, defer_checks=self.defer_checks,
                      abandon_after_s=self.abandon_after,
                      abandon_fraction=self.abandon_fraction)

    @property
    def inflight(self) -> tuple[str, int | None]:
        """(the option used, the client's in-flight cap) of ``--max-inflight`` / ``--max-concurrency``."""
        return self._inflight

    @property
    def count(self) -> tuple[str, int | None]:
        """(the option used, the request count per rate) of ``--num-requests`` / ``--num-prompts``."""
        return self._count

    @property
    def rate_list(self) -> list[float] | None:
        """The open-loop rates (req/s; None: automatic; ``[inf]``: a burst)."""
        return self._rates

    @property
    def user_list(self) -> list[int]:
        """The closed-loop user counts."""
        return self._users

    @property
    def constraints(self) -> list[GoodputConstraint]:
        """The goodput constraints, ``--slo`` included as ``latency``."""
        return self._constraints

    @property
    def quality_floors(self) -> list[QualityFloor]:
        """The ``psnr:``/``ssim:`` floors of ``--goodput`` (scored against ``--reference``)."""
        return self._floors

    @property
    def scrape_local(self) -> bool:
        """``--scrape local``: scrape the reference service started without ``--url``."""
        return self.scrape is not None and self.scrape.strip().lower() == LOCAL_SCRAPE


def _one_of(a_name: str, a: int | None, b_name: str, b: int | None) -> tuple[str, int | None]:
    """(the option name used, its value) of an option and its alias.

    Raises:
        UsageError: both given with different values.
    """
    if a is not None and b is not None and a != b:
        raise UsageError(f"{a_name} {a} and {b_name} {b} disagree ({b_name} is an alias of {a_name}); give one")
    return (a_name, a) if a is not None or b is None else (b_name, b)


def check_request_count(expected: float, what: str, limit: int) -> None:
    """Refuse a schedule of more than ``limit`` requests before anything is allocated.

    Raises:
        UsageError: ``expected`` (the schedule's mean request count) is above ``limit``.
    """
    if expected > limit:
        raise UsageError(f"{what} schedules ~{expected:.3g} requests, above --max-requests {limit:,}; "
                         "lower the rate or the duration, or raise --max-requests if you mean it")


__all__ = ["LOCAL_SCRAPE", "MAX_REQUESTS", "SHAPE_FLAGS", "LoadSpec", "check_request_count"]
