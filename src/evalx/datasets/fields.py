"""A dataset's ``fields:`` and ``extra:``: read a file in another tool's shape as evalx cases.

``fields: {input: question, expected: answer}`` reads each case's column
``question`` as its ``input`` (any case field, shorthands included);
``extra: vars | metadata | error`` says what becomes of the columns that are
neither case fields nor mapped: template variables, metadata, or (the
default) an unknown-field error. A :class:`Shape` is made only for a
dataset that declares one of them, so a plain dataset pays nothing per case.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from evalx.common.documents import did_you_mean
from evalx.common.json_types import JSONObject
from evalx.datasets.shorthands import KeyPath, unknown_field

__all__ = ["EXTRA_MODES", "UNKNOWN_FIELD_HINT", "Shape"]

EXTRA_MODES = ("vars", "metadata", "error")
#: appended to an unknown case field's message: the ways to keep a foreign column
UNKNOWN_FIELD_HINT = "; or map it with fields:, or set extra: vars | metadata on the dataset"
_SHOWN_COLUMNS = 12  # columns listed when a mapped one is missing


class Shape:
    """How the columns of one dataset's cases become case fields, vars or metadata."""

    def __init__(self, fields: Mapping[str, str], extra: str, case_fields: Collection[str]) -> None:
        self.fields = dict(fields)  # case field -> column
        self.extra = extra
        self.case_fields = tuple(case_fields)
        self._known = frozenset(case_fields)
        self.columns: dict[str, list[str]] = {}  # column -> the case fields read from it
        for name, column in self.fields.items():
            self.columns.setdefault(column, []).append(name)
        self.seen: set[str] = set()  # every column met, for "appears in no case"
        self.cases = 0
        self._roles: dict[str, str | None] = {}

    @classmethod
    def of(cls, fields: Mapping[str, str] | None, extra: str, case_fields: Collection[str]) -> Shape | None:
        """The shape a ``datasets:`` entry declares (its ``fields:`` and ``extra:``), or None when it declares none
        (its cases are read as written)."""
        if not fields and extra == "error":
            return None
        return cls(dict(fields or {}), extra, case_fields)

    def role(self, column: str) -> str | None:
        """``"field"`` (read as a case field), ``"extra"`` (into vars or metadata) or None (an error)."""
        if column in self._roles:
            return self._roles[column]
        if column in self.columns or (column in self._known and column not in self.fields):
            role: str | None = "field"
        else:
            role = "extra" if self.extra != "error" else None
        self._roles[column] = role
        return role

    def field_of(self, column: str) -> str:
        """The case field a column is read as (the first, when several are read from it)."""
        names = self.columns.get(column)
        return names[0] if names else column

    def problem(self, column: str) -> str:
        """Why ``column`` cannot be read under ``extra: error``."""
        if column in self.fields:
            return (
                f"{column!r} is read from column {self.fields[column]!r} (fields:), so this column would be lost: "
                "map it to another field, or set extra: vars | metadata on the dataset"
            )
        return unknown_field(column, self.case_fields) + UNKNOWN_FIELD_HINT

    def apply(self, data: Any) -> tuple[Any, list[tuple[KeyPath, str]]]:
        """One case as written → the case evalx reads, and the problems of its columns (key path, message)."""
        self.cases += 1
        if not isinstance(data, dict):
            return data, []
        self.seen.update(data)
        out: JSONObject = {}
        moved: JSONObject = {}
        problems: list[tuple[KeyPath, str]] = []
        for key, value in data.items():
            role = self.role(key)
            if role == "field":
                for name in self.columns.get(key) or (key,):
                    out[name] = value
            elif role == "extra":
                moved[key] = value
            elif key in self.fields:
                problems.append(((key,), self.problem(key)))
            else:
                out[key] = value  # the case check reports it as an unknown field, with the hint
        if moved:
            own = out.get(self.extra)
            if own is None:
                out[self.extra] = moved
            elif isinstance(own, dict):
                out[self.extra] = {**moved, **own}  # the case's own vars/metadata win over its loose columns
        if "id" not in out and "id" not in self.fields:
            out["id"] = str(self.cases)  # files from other tools seldom have ids: the case's place in the dataset
        return out, problems

    def missing_columns(self) -> list[tuple[str, str]]:
        """``(case field, message)`` for each mapped column that no case has (nothing when no case was read)."""
        if not self.cases:
            return []
        seen = sorted(self.seen)
        shown = ", ".join(seen[:_SHOWN_COLUMNS]) + (f", ... ({len(seen)} in all)" if len(seen) > _SHOWN_COLUMNS else "")
        out = []
        for name, column in self.fields.items():
            if column not in self.seen:
                listing = f" (columns seen: {shown})" if seen else ""
                out.append((name, f"column {column!r} appears in no case{did_you_mean(column, seen)}{listing}"))
        return out
