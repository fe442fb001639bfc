"""LoadSpec: the defaults, bounds and cross-option rules of ``diffbench load``, without the command line."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from diffbench.errors import UsageError
from diffbench.load.spec import MAX_REQUESTS, LoadSpec


def test_defaults_and_derived_values() -> None:
    spec = LoadSpec()
    assert spec.dialect == "vllm-omni" and spec.mode == "open" and spec.duration == 30.0
    assert spec.max_requests == MAX_REQUESTS == LoadSpec.default("max_requests")
    assert spec.rate_list is None and spec.user_list == [1, 2, 4] and spec.constraints == []
    assert spec.inflight == ("--max-inflight", None) and spec.count == ("--num-requests", None)


def test_aliases_resolve_onto_the_option_they_name() -> None:
    spec = LoadSpec(base_url="http://h:1", backend="openai", max_concurrency=3, num_prompts=5, rates="2,4",
                    slo=2.0)
    assert spec.url == "http://h:1" and spec.dialect == "openai"
    assert spec.inflight == ("--max-concurrency", 3) and spec.count == ("--num-prompts", 5)
    assert spec.rate_list == [2.0, 4.0] and [c.name for c in spec.constraints] == ["latency"]
    burst = LoadSpec(request_rate="inf", num_requests=8)
    assert burst.rate_list is not None and math.isinf(burst.rate_list[0])


@pytest.mark.parametrize(("field", "value", "text"), [
    ("duration", 0.0, "must be > 0 seconds, got 0"),
    ("drain", -1.0, "must be >= 0 seconds, got -1"),
    ("timeout", math.inf, "must be a finite number of seconds, got inf"),
    ("workers", 0, "must be >= 1 load processes, got 0"),
    ("num_prompts", 0, "must be >= 1 requests, got 0"),
    ("warmup", -1, "must be >= 0 requests per shape, got -1"),
    ("mode", "sideways", "must be open or closed, got 'sideways'"),
])
def test_a_bound_is_a_bound_error_on_its_field(field: str, value: object, text: str) -> None:
    with pytest.raises(ValidationError) as info:
        LoadSpec(**{field: value})
    err = info.value.errors()[0]
    assert (err["type"], err["loc"], err["msg"]) == ("bound", (field,), text)


@pytest.mark.parametrize(("kwargs", "text"), [
    ({"max_inflight": 2, "max_concurrency": 3}, "--max-inflight 2 and --max-concurrency 3 disagree"),
    ({"mode": "closed", "num_prompts": 4}, "--num-prompts applies to the open loop"),
    ({"mode": "closed", "max_concurrency": 4}, "--max-concurrency applies to the open loop"),
    ({"rates": "1", "request_rate": "2"}, "--rates 1 and --request-rate 2 both set the rate"),
    ({"rates": "100", "duration": 1e9}, "--rates 100 x --duration 1e+09 s schedules ~1e+11 requests, above"),
    ({"url": " "}, "--url is empty"),
    ({"header": ["nocolon"]}, "--header 'nocolon' must look like 'Name: value'"),
])
def test_a_rule_across_options_is_a_usage_error_naming_them(kwargs: dict[str, object], text: str) -> None:
    with pytest.raises(UsageError) as info:
        LoadSpec(**kwargs)
    assert str(info.value).startswith(text)


def test_every_field_has_its_option() -> None:
    flags = LoadSpec.flags()
    assert flags["json_out"] == "--json" and flags["csv_out"] == "--csv" and flags["poll_interval"] == "--poll-interval"
    assert len(set(flags.values())) == len(flags)


@pytest.mark.parametrize(("kwargs", "text"), [
    ({"abandon_fraction": 0.5}, "--abandon-fraction applies with --abandon-after S"),
    ({"abandon_after": 10.0, "timeout": 10.0}, "--abandon-after 10 s is not before --timeout 10 s"),
])
def test_abandonment_rules(kwargs: dict[str, object], text: str) -> None:
    with pytest.raises(UsageError) as info:
        LoadSpec(**kwargs)
    assert str(info.value).startswith(text)


@pytest.mark.parametrize(("field", "value", "text"), [
    ("abandon_after", 0.0, "must be > 0 seconds, got 0"),
    ("abandon_fraction", 0.0, "must be > 0 and <= 1 (the share of requests the client abandons), got 0"),
    ("abandon_fraction", 1.5, "must be > 0 and <= 1 (the share of requests the client abandons), got 1.5"),
])
def test_abandonment_bounds(field: str, value: float, text: str) -> None:
    with pytest.raises(ValidationError) as info:
        LoadSpec(**{field: value, **({} if field == "abandon_after" else {"abandon_after": 1.0})})
    err = info.value.errors()[0]
    assert (err["type"], err["loc"], err["msg"]) == ("bound", (field,), text)


def test_the_target_carries_the_abandonment() -> None:
    t = LoadSpec(abandon_after=2.5, abandon_fraction=0.25).target("http://h:1")
    assert (t.abandon_after_s, t.abandon_fraction) == (2.5, 0.25)
    assert LoadSpec().target("http://h:1").abandon_after_s is None
