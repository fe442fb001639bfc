"""usage_error: one ValidationError -> the one-line usage error naming the option, in its three shapes."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from diffbench.cli.validation import usage_error


class _Model(BaseModel):
    duration: float = 1.0
    width: int = Field(default=1, gt=0)
    base_url: str = "http://h"

    @field_validator("duration")
    @classmethod
    def _d(cls, v: float) -> float:
        if v <= 0:
            raise PydanticCustomError("bound", f"must be > 0 seconds, got {v:g}")
        return v

    @field_validator("base_url")
    @classmethod
    def _u(cls, v: str) -> str:
        if ":" not in v:
            raise ValueError(f"URL {v!r} has no scheme")
        return v


FLAGS = {"duration": "--duration", "width": "--size", "base_url": "--url"}


@pytest.mark.parametrize(("kwargs", "shown", "text"), [
    ({"duration": 0}, None, "--duration must be > 0 seconds, got 0"),
    ({"base_url": "h"}, None, "--url: URL 'h' has no scheme"),
    ({"width": 0}, {"--size": "0x9"}, "--size 0x9: width input should be greater than 0"),
    ({"width": 0}, None, "--size 0: width input should be greater than 0"),
])
def test_each_shape_names_the_option(kwargs: dict[str, object], shown: dict[str, str] | None, text: str) -> None:
    with pytest.raises(ValidationError) as info:
        _Model(**kwargs)
    err = usage_error(info.value, FLAGS, shown)
    assert str(err) == text and err.exit_code == 2


def test_a_field_without_an_option_is_named_after_itself() -> None:
    with pytest.raises(ValidationError) as info:
        _Model(duration=-1)
    assert str(usage_error(info.value, {})) == "--duration must be > 0 seconds, got -1"
