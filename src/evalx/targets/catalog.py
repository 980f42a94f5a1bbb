"""The provider definitions a project can use, as ``evalx providers`` lists and shows them.

:func:`catalog` is one row per definition (shipped ones and the config's
``providers_dir:``), name first, with what it declares it supports;
:func:`show` is one definition as YAML, resolved through ``extends:``
(values read from ``${VAR}`` shown as written, so no secret is printed).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from evalx.common.documents import KeyPath, display_path
from evalx.common.redaction import redact_url
from evalx.errors import ConfigError
from evalx.targets.definitions import CAPABILITIES, ProviderDefinition, available, find_provider, load_definition


@dataclass(frozen=True)
class CatalogRow:
    """One definition as ``evalx providers`` lists it."""

    name: str
    description: str
    #: ``streaming, tools, ...``: what it declares true; ``-`` for none, ``?`` when it declares nothing
    capabilities: str
    extends: str
    base_url: str
    origin: str
    file: str


def capabilities_text(definition: ProviderDefinition) -> str:
    """The declared capabilities that are true, in :data:`CAPABILITIES` order; ``batch`` when the definition has a batch API."""
    batch = ["batch"] if definition.batch is not None else []
    if not definition.capabilities:
        return ",".join(batch) or "?"
    return ",".join([*(c for c in CAPABILITIES if definition.capabilities.get(c)), *batch]) or "-"


def catalog(user_dir: Path | None) -> tuple[list[CatalogRow], list[str]]:
    """Every definition found (a project file winning over a shipped one), and the problems of the invalid ones."""
    rows: list[CatalogRow] = []
    problems: list[str] = []
    for name, entry in available(user_dir).items():
        origin = "shipped" if entry.shipped else ("providers_dir, overrides shipped" if entry.overrides_shipped else "providers_dir")
        try:
            d = load_definition(entry.path, shipped=entry.shipped, user_dir=user_dir)
        except ConfigError as exc:
            problems.extend(str(i) for i in exc.issues)
            rows.append(CatalogRow(name, "(invalid: see below)", "", "", "", origin, display_path(entry.path)))
            continue
        rows.append(
            CatalogRow(
                name,
                d.description,
                capabilities_text(d),
                ",".join(d.extends),
                redact_url(d.base_url or ""),
                origin,
                display_path(entry.path),
            )
        )
    return rows, problems


class _Dumper(yaml.SafeDumper):
    """Block scalars (``|``) for the multi-line strings (templates), as a definition is written."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value and not any(c in value for c in "\r\t") and value == value.rstrip(" ") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def show(name: str, user_dir: Path | None) -> str:
    """The definition ``name`` as YAML, resolved through ``extends:``; raises ConfigError (UnknownProvider) as loading does."""
    d = find_provider(name, user_dir)
    data = {"name": d.name, **copy.deepcopy(d.loaded.data)}
    for path, text in d.loaded.interpolated.items():  # a value read from the environment is shown as written
        _put(data, path, text)
    header = f"# {d.name}: {display_path(d.source)}"
    if d.extends:
        header += " extends " + " -> ".join(d.extends) + " (resolved below)"
    return header + "\n" + yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)


def _put(data: object, path: KeyPath, value: str) -> None:
    """Set ``path`` in ``data`` when it is there (a key another layer replaced is left alone)."""
    if not path:
        return
    node: Any = data
    for part in path:
        parent, node = node, _child(node, part)
        if node is _MISSING:
            return
    parent[path[-1]] = value


_MISSING = object()


def _child(node: object, part: str | int) -> object:
    if isinstance(node, dict):
        return node.get(part, _MISSING)
    if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
        return node[part]
    return _MISSING
