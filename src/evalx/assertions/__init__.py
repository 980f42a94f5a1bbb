"""Assertion types: a registry and the built-in types that use it."""

from __future__ import annotations

from evalx.assertions.evaluate import cell_status, evaluate_case
from evalx.assertions.registry import AssertionContext, AssertionType, Grader, assertion, get_assertion, registered

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
