"""Assertion types: a registry and the built-in types that use it."""

from __future__ import annotations

from evalx.assertions.evaluate import cell_status, evaluate_case
from evalx.assertions.registry import AssertionContext, AssertionType, Grader, assertion, get_assertion, registered, use_builtins


def _import_builtins() -> object:
    """The built-in types, imported (and so registered) the first time the registry is asked: ``import evalx`` stays light."""
    from evalx.assertions import builtin

    return builtin


use_builtins(_import_builtins)

__all__ = [
    "AssertionContext",
    "AssertionType",
    "Grader",
    "assertion",
    "cell_status",
    "evaluate_case",
    "get_assertion",
    "registered",
]
