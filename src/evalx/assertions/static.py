"""Checks made when a dataset is loaded: what would make an assertion fail on any output, found before anything runs.

Each is a ``check(spec, case)`` given to :func:`evalx.assertions.registry.assertion`;
it returns why the assertion cannot work (one line), or None. ``evalx
validate`` reports it at the assertion's ``file:line`` with exit 2, and
``evalx run`` refuses to start, instead of every cell of the case erroring.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from evalx.common.json_types import JSON
from evalx.models import Case

__all__ = ["needs_one_of", "needs_value", "needs_values"]


def needs_value(key: str = "value", convert: Callable[[Any], Any] | None = None) -> Callable[[Mapping[str, JSON], Case], str | None]:
    """The assertion compares with ``key``, else the case's ``expected``: one of them must be given (and ``convert`` must take it)."""

    def check(spec: Mapping[str, JSON], case: Case) -> str | None:
        value = spec.get(key)
        source = f"'{key}'"
        if value is None:
            value, source = case.expected, "the case's 'expected'"
        if value is None:
            return f"no {key!r} given and the case has no 'expected' to compare with"
        if convert is not None:
            try:
                convert(value)
            except (TypeError, ValueError) as exc:
                return f"{source}: {exc}"
        return None

    return check


def needs_values(key: str = "values") -> Callable[[Mapping[str, JSON], Case], str | None]:
    """The assertion takes a list ``key``, else the case's ``expected`` when that is a list."""

    def check(spec: Mapping[str, JSON], case: Case) -> str | None:
        if spec.get(key) is None and not isinstance(case.expected, list):
            return f"no {key!r} given and the case's 'expected' is not a list"
        if spec.get(key) == []:
            return f"{key!r} is empty: it would check nothing"
        return None

    return check


def needs_one_of(*keys: str) -> Callable[[Mapping[str, JSON], Case], str | None]:
    """At least one of ``keys`` must be given (and not empty)."""

    def check(spec: Mapping[str, JSON], case: Case) -> str | None:
        if any(spec.get(k) not in (None, "", []) for k in keys):
            return None
        return "needs " + " or ".join(repr(k) for k in keys)

    return check
