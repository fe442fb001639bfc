"""One translation of a :class:`pydantic.ValidationError` into the usage error a command prints.

A model validated from command-line options reports its first error here, named by the option the user
typed (``flags`` maps a model field to its option), as one line (``error: ...``, exit 2) instead of
pydantic's multi-line dump. Three shapes, by the error's type:

- ``"bound"`` (a bound the model states in words, e.g. ``must be > 0 seconds, got 0``):
  ``--duration must be > 0 seconds, got 0``;
- ``"value_error"`` (a validator's own sentence): ``--url: URL 'http://:8000' has no host``;
- any other (pydantic's constraint messages): the option, what was given, the field and the rule, e.g.
  ``--size 0x0: width input should be greater than 0`` (``shown``: the text given for an option whose value
  the field does not hold verbatim).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import ValidationError

from diffbench.errors import UsageError


def usage_error(exc: ValidationError, flags: Mapping[str, str], shown: Mapping[str, str] | None = None) -> UsageError:
    """The :class:`~diffbench.errors.UsageError` (exit 2) of ``exc``'s first error, naming its option.

    ``flags``: field name -> option (the last element of the error's location is the field; a field not in
    it is named ``--field``); ``shown``: option -> the text the user gave for it, printed instead of the
    field's input."""
    err = exc.errors()[0]
    name = str(err["loc"][-1]) if err["loc"] else "?"
    option = flags.get(name, f"--{name}")
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "bound":
        return UsageError(f"{option} {msg}")
    if err["type"] == "value_error":
        return UsageError(f"{option}: {msg}")
    given = (shown or {}).get(option, err.get("input"))
    return UsageError(f"{option} {given}: {name} {msg.lower()}")


__all__ = ["usage_error"]
