"""Service-time distributions for the simulator: a small expression syntax, or a measured run.

Syntax (``--service``), a sum of products of factors, all in seconds::

    expr   := term ('+' term)*
    term   := factor ('*' factor)*
    factor := NUMBER | NAME '(' NUMBER (',' NUMBER)* ')'

Factors (each drawn independently per request):

==================  =====================================================  ===========
factor              meaning                                                mean
==================  =====================================================  ===========
``2.5``             the constant 2.5                                       2.5
``const(x)``        the constant x                                         x
``N(m, sd)``        normal with mean m and standard deviation sd >= 0      m
``B(p)``            Bernoulli: 1 with probability p in [0, 1], else 0      p
``U(a, b)``         uniform on [a, b]                                      (a + b) / 2
``exp(m)``          exponential with mean m > 0                            m
==================  =====================================================  ===========

Example: ``"3.0*N(1,0.02)+0.8*B(0.1)"`` is 3.0 s × Normal(1, 0.02) plus 0.8 s with probability 0.1
(mean 3.08 s). A drawn total below 0 (possible with a wide normal) is clipped to 0 and counted
(:attr:`ExpressionService.clipped_fraction`; ``simulate`` reports it as a warning and in the JSON);
:attr:`mean` is the unclipped analytic mean, so keep ``sd`` well below ``m``.

A measured run (``--service-from FILE``) gives an empirical distribution, resampled with replacement:

- ``.json``: every list of numbers found at any depth under a ``"samples_s"`` key (the per-run latencies
  of each shape in a ``diffbench bench`` result; all shapes pooled, so pass a single-shape run) or under
  ``"latency_s"`` (directly, or as its ``"samples"`` / ``"values"`` list); summaries are not samples and
  are ignored;
- ``.jsonl``: load records; ``done_s - sent_s`` of ``ok`` records (or a ``"latency_s"`` number per line).
  Use a run measured at low load (one user): a loaded run's latencies already contain queueing;
- anything else: one number (seconds) per line.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from diffbench.errors import InputError, UsageError

_TOKEN = re.compile(r"\s*(?:(?P<num>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)"
                    r"|(?P<name>[A-Za-z_]+)|(?P<op>[-+*(),]))")
_ARITY = {"const": 1, "N": 2, "B": 1, "U": 2, "exp": 1}


class ServiceTime:
    """Base of service-time distributions: ``sample(n, rng)`` gives ``n`` float64 seconds >= 0."""

    text: str = ""

    @property
    def mean(self) -> float:
        """Mean service time in seconds."""
        raise NotImplementedError

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` independent draws (float64 seconds, >= 0)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.text!r}, mean={self.mean:.6g} s)"


class _Factor:
    def __init__(self, name: str, args: tuple[float, ...]) -> None:
        self.name, self.args = name, args

    @property
    def mean(self) -> float:
        a = self.args
        return {"num": a[0], "const": a[0], "N": a[0], "B": a[0],
                "U": (a[0] + a[1]) / 2 if len(a) == 2 else 0.0, "exp": a[0]}[self.name]

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray | float:
        a = self.args
        if self.name in ("num", "const"):
            return a[0]
        if self.name == "N":
            return rng.normal(a[0], a[1], n) if a[1] > 0 else a[0]
        if self.name == "B":
            return (rng.random(n) < a[0]).astype(np.float64)
        if self.name == "U":
            return rng.uniform(a[0], a[1], n)
        return rng.exponential(a[0], n)


class ExpressionService(ServiceTime):
    """A parsed service-time expression (see the module docstring); build it with :func:`parse_service`.

    ``drawn`` and ``clipped`` count the draws so far and those below 0 that were clipped to 0 s, so a
    caller can report :attr:`clipped_fraction` (the clipped draws make the real mean differ from
    :attr:`mean`).
    """

    def __init__(self, text: str, terms: list[list[_Factor]]) -> None:
        self.text, self._terms = text, terms
        self.drawn = 0
        self.clipped = 0

    @property
    def clipped_fraction(self) -> float:
        """Fraction of draws so far that were negative and clipped to 0 (0.0 before any draw)."""
        return self.clipped / self.drawn if self.drawn else 0.0

    @property
    def mean(self) -> float:
        return float(sum(math.prod(f.mean for f in term) for term in self._terms))

    @property
    def is_constant(self) -> bool:
        """True when every factor is a constant (then every draw equals :attr:`mean`)."""
        return all(f.name in ("num", "const") for term in self._terms for f in term)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        total = np.zeros(n, dtype=np.float64)
        for term in self._terms:
            value: np.ndarray | float = 1.0
            for f in term:
                value = value * f.sample(n, rng)
            total += value
        self.drawn += n
        self.clipped += int(np.count_nonzero(total < 0))
        return np.maximum(total, 0.0, out=total)


class EmpiricalService(ServiceTime):
    """Resampling (with replacement) of measured service times in seconds (float64, all >= 0)."""

    def __init__(self, samples: np.ndarray, source: str) -> None:
        self.samples = np.asarray(samples, dtype=np.float64)
        self.text = f"empirical({source}, n={self.samples.size})"

    @property
    def mean(self) -> float:
        return float(self.samples.mean())

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.choice(self.samples, size=n, replace=True)


def _tokens(text: str, option: str = "--service") -> Iterator[tuple[str, str]]:
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise UsageError(f"{option} {text!r}: unexpected {text[pos:].strip()[:10]!r} at position {pos}; "
                             "use e.g. \"3.0*N(1,0.02)+0.8*B(0.1)\"")
        kind = m.lastgroup or ""
        yield kind, m.group(kind)
        pos = m.end()


def parse_service(text: str, option: str = "--service") -> ExpressionService:
    """Parse a service-time expression (syntax in the module docstring).

    Args:
        text: the expression.
        option: the option it came from, named in every error (``--service`` or ``--think``).

    Raises:
        UsageError: a syntax error, an unknown factor, a wrong number of arguments, a number that is not
            finite (``1e400``), an invalid parameter (sd < 0, p outside [0, 1], b < a, exp mean <= 0), or a
            mean that is not > 0 and finite.
    """
    hint = "use e.g. \"3.0*N(1,0.02)+0.8*B(0.1)\", \"const(2.5)\", \"exp(3.0)\" or \"2.5\""
    toks = list(_tokens(text, option))
    if not toks:
        raise UsageError(f"{option} is empty; {hint}")
    i = 0

    def peek() -> tuple[str, str]:
        return toks[i] if i < len(toks) else ("end", "")

    def number() -> float:
        nonlocal i
        sign = 1.0
        if peek() == ("op", "-"):
            sign, i = -1.0, i + 1
        kind, value = peek()
        if kind != "num":
            raise UsageError(f"{option} {text!r}: expected a number, got {value or 'the end'!r}; {hint}")
        i += 1
        f = sign * float(value)
        if not math.isfinite(f):
            raise UsageError(f"{option} {text!r}: {value} is not a finite number of seconds; {hint}")
        return f

    def factor() -> _Factor:
        nonlocal i
        kind, value = peek()
        if kind == "num":
            i += 1
            if not math.isfinite(float(value)):
                raise UsageError(f"{option} {text!r}: {value} is not a finite number of seconds; {hint}")
            return _Factor("num", (float(value),))
        if kind != "name":
            raise UsageError(f"{option} {text!r}: expected a number or a factor, got {value or 'the end'!r}; {hint}")
        name = {"n": "N", "b": "B", "u": "U"}.get(value, value)
        if name not in _ARITY:
            raise UsageError(f"{option} {text!r}: unknown factor {value!r}; known: {', '.join(_ARITY)}")
        i += 1
        if peek() != ("op", "("):
            raise UsageError(f"{option} {text!r}: {value} needs arguments in parentheses; {hint}")
        i += 1
        args = [number()]
        while peek() == ("op", ","):
            i += 1
            args.append(number())
        if peek() != ("op", ")"):
            raise UsageError(f"{option} {text!r}: missing ')' after the arguments of {value}")
        i += 1
        if len(args) != _ARITY[name]:
            raise UsageError(f"{option} {text!r}: {name}() takes {_ARITY[name]} argument(s), got {len(args)}")
        _check(name, tuple(args), text, option)
        return _Factor(name, tuple(args))

    terms: list[list[_Factor]] = []
    while True:
        term = [factor()]
        while peek() == ("op", "*"):
            i += 1
            term.append(factor())
        terms.append(term)
        if peek() == ("op", "+"):
            i += 1
            continue
        if peek()[0] != "end":
            raise UsageError(f"{option} {text!r}: unexpected {peek()[1]!r}; {hint}")
        break
    svc = ExpressionService(text.strip(), terms)
    if not (svc.mean > 0 and math.isfinite(svc.mean)):
        raise UsageError(f"{option} {text!r}: the mean time must be a finite number > 0 s, got {svc.mean:g}")
    return svc


def _check(name: str, a: tuple[float, ...], text: str, option: str = "--service") -> None:
    bad = None
    if name == "N" and a[1] < 0:
        bad = f"N(m, sd) needs sd >= 0, got {a[1]:g}"
    elif name == "B" and not 0 <= a[0] <= 1:
        bad = f"B(p) needs p in [0, 1], got {a[0]:g}"
    elif name == "U" and a[1] < a[0]:
        bad = f"U(a, b) needs a <= b, got {a[0]:g}, {a[1]:g}"
    elif name == "exp" and a[0] <= 0:
        bad = f"exp(m) needs a mean m > 0, got {a[0]:g}"
    elif name == "const" and a[0] < 0:
        bad = f"const(x) needs x >= 0, got {a[0]:g}"
    if bad:
        raise UsageError(f"{option} {text!r}: {bad}")


def _latency_lists(obj: object, out: list[float], under_key: bool = False) -> None:
    if isinstance(obj, dict):
        for key, value in obj.items():
            is_samples = key in ("latency_s", "samples_s") or (under_key and key in ("samples", "values"))
            _latency_lists(value, out, is_samples)
    elif isinstance(obj, list):
        if under_key and obj and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in obj):
            out.extend(float(v) for v in obj)
        else:
            for v in obj:
                _latency_lists(v, out, False)


def load_service_samples(path: str | Path) -> EmpiricalService:
    """An :class:`EmpiricalService` from a measured run (formats in the module docstring).

    Raises:
        InputError: unreadable file, a malformed line (names file and line), or no usable latency (all
            values must be finite and >= 0).
    """
    from diffbench.core.textfile import read_text_input

    p = Path(path)
    text = read_text_input(p, "--service-from", "latencies (a bench .json, a load .jsonl, or one number "
                           "of seconds per line)")
    values: list[float] = []
    if p.suffix == ".json":
        try:
            _latency_lists(json.loads(text), values)
        except json.JSONDecodeError as exc:
            raise InputError(f"--service-from {p}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    else:
        for lineno, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            where = f"--service-from {p}:{lineno}"
            if p.suffix == ".jsonl" or line.startswith("{"):
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InputError(f"{where}: not valid JSON ({exc.msg})") from exc
                if not isinstance(obj, dict):
                    raise InputError(f"{where}: expected a JSON object per line")
                if isinstance(obj.get("latency_s"), (int, float)):
                    values.append(float(obj["latency_s"]))
                elif obj.get("outcome", "ok") == "ok" and obj.get("done_s") is not None \
                        and obj.get("sent_s") is not None:
                    values.append(float(obj["done_s"]) - float(obj["sent_s"]))
            else:
                try:
                    values.append(float(line))
                except ValueError as exc:
                    raise InputError(f"{where}: {line[:40]!r} is not a number of seconds") from exc
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        raise InputError(f"--service-from {p}: no latencies found (expected \"samples_s\" in a bench JSON, ok records "
                         "in a load JSONL, or one number per line)")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise InputError(f"--service-from {p}: latencies must be finite and >= 0 seconds")
    if not arr.mean() > 0:
        raise InputError(f"--service-from {p}: the mean latency is 0 s; a service time must be > 0")
    return EmpiricalService(arr, p.name)


__all__ = ["EmpiricalService", "ExpressionService", "ServiceTime", "load_service_samples", "parse_service"]
