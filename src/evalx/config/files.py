"""``system_file:``, ``prompt_file:``, ``tools_file:``: values read from files beside the config, once, when it loads.

Where a config accepts ``system:``, ``prompt:`` or ``tools:`` it accepts the
``_file`` twin instead (a provider target, an inline judge target, a
``judge:`` prompt, a dataset's ``defaults:`` system prompt). The path is
relative to the config's folder and may not leave it (the rule of
``{% include %}``, :func:`evalx.common.templates.resolve_in_folder`). Loading
replaces the twin by the value it names, so everything downstream (the
request, the cache key, the budget) sees the text itself; a text file is
still a template (it renders like an inline one), a tools file is YAML or
JSON checked against the inline ``tools:`` schema, its errors naming its own
``FILE:LINE``. Values in a dataset *file* stay inline: only the config's
keys are read from files.

A ``matrix:`` axis named ``system_file``, ``prompt_file`` or ``tools_file``
(and such a key of an ``include`` entry) is read the same way, each value
through the same reader, its problems at the value's own line: a value
becomes ``{label, value: <the file's value>, file: NAME}``, labelled by the
file's stem (its name when two files of the axis share a stem) unless it
was written ``{label: L, value: NAME}`` (:mod:`evalx.config.matrix` names
variants by the label).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalx.common.documents import (
    DocumentError,
    KeyPath,
    Loaded,
    SchemaValidator,
    describe_schema_error,
    display_path,
    format_path,
    load_json,
    load_yaml,
    schema_error_leaves,
)
from evalx.common.json_types import JSON, JSONObject
from evalx.common.templates import TemplateFileError, read_template_file, resolve_in_folder
from evalx.errors import Issue

__all__ = ["FILE_KEYS", "FileValue", "resolve_file_keys"]

#: the ``_file`` twin of each key whose value may come from a file
FILE_KEYS: dict[str, str] = {"system_file": "system", "prompt_file": "prompt", "tools_file": "tools"}


@dataclass(frozen=True)
class FileValue:
    """A value read from a file: where it went in the config, the key that named it, and the file."""

    path: KeyPath
    file_key: KeyPath
    file: Path


def _places(data: JSONObject) -> Iterator[tuple[KeyPath, JSONObject, tuple[str, ...]]]:
    """Each mapping of the config that may hold file keys, with its path and the keys it may hold."""
    for i, target in enumerate(_list(data.get("targets"))):
        if isinstance(target, dict) and target.get("type") == "provider":
            yield ("targets", i), target, tuple(FILE_KEYS)
        elif isinstance(target, dict) and target.get("type") in ("python", "engine"):  # they declare tools, not prompts
            yield ("targets", i), target, ("tools_file",)
    for i, dataset in enumerate(_list(data.get("datasets"))):
        defaults = dataset.get("defaults") if isinstance(dataset, dict) else None
        if isinstance(defaults, dict):
            yield ("datasets", i, "defaults"), defaults, ("system_file",)
    yield from _judges((), data)


def _judges(path: KeyPath, value: JSON) -> Iterator[tuple[KeyPath, JSONObject, tuple[str, ...]]]:
    """Every ``judge:`` mapping (the config's, an assertion's override) and its inline provider target."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if key == "judge" and isinstance(item, dict):
            yield (*path, key), item, ("prompt_file",)
            target = item.get("target")
            if isinstance(target, dict) and target.get("type") == "provider":
                yield (*path, key, "target"), target, tuple(FILE_KEYS)
        elif key != "targets" or path:
            yield from _judges((*path, key), item)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def resolve_file_keys(loaded: Loaded, base_dir: Path, tools_schema: JSONObject) -> tuple[list[FileValue], list[Issue]]:
    """Replace each ``X_file: PATH`` in ``loaded.data`` by ``X: <the file's value>`` (in place); the values read and the problems.

    A key with a problem is dropped (its problem is reported, not also the
    schema's view of it). ``loaded``'s lines learn the new keys (at their twin's line).
    """
    data = loaded.data
    if not isinstance(data, dict):
        return [], []
    read: list[FileValue] = []
    issues: list[Issue] = []
    validator: SchemaValidator | None = None

    def issue(path: KeyPath, message: str) -> None:
        issues.append(Issue(loaded.file, loaded.line_of(path), format_path(path), message))

    for where, mapping, keys in list(_places(data)):
        for file_key in keys:
            if file_key not in mapping:
                continue
            key = FILE_KEYS[file_key]
            file_path: KeyPath = (*where, file_key)
            name = mapping.pop(file_key)
            if key in mapping:
                issue(file_path, f"give {key} or {file_key}, not both")
                continue
            if not isinstance(name, str):
                issue(file_path, f"{file_key} must be a file name (relative to the config), not {type(name).__name__}")
                continue
            try:
                text = read_template_file(base_dir, name, what=file_key)
            except TemplateFileError as exc:
                issue(file_path, str(exc))
                continue
            file = resolve_in_folder(base_dir, name)
            value: Any = text
            if key == "tools":
                validator = validator or SchemaValidator(tools_schema)
                value, problems = _tools(text, file, validator, f" (the tools_file of {format_path(where)})")
                if problems:
                    issues.extend(problems)
                    continue
            mapping[key] = value
            if isinstance(loaded.lines, dict):
                loaded.lines[(*where, key)] = loaded.line_of(file_path) or 0
            read.append(FileValue((*where, key), file_path, file))

    def read_value(path: KeyPath, file_key: str, written: JSON, stems: Counter[str]) -> JSON:
        """A matrix axis value of a ``_file`` axis: ``{label, value: <the file's value>, file}``, or as written with its problem."""
        labelled = written if isinstance(written, dict) and "value" in written and set(written) <= {"label", "value", "pricing"} else None
        name = labelled["value"] if labelled is not None else written
        at = (*path, "value") if labelled is not None else path
        if not isinstance(name, str):
            issue(at, f"{file_key} must be a file name (relative to the config), not {type(name).__name__}")
            return written
        try:
            text = read_template_file(base_dir, name, what=file_key)
        except TemplateFileError as exc:
            issue(at, str(exc))
            return written
        file = resolve_in_folder(base_dir, name)
        value: Any = text
        if FILE_KEYS[file_key] == "tools":
            nonlocal validator
            validator = validator or SchemaValidator(tools_schema)
            value, problems = _tools(text, file, validator, f" (the {file_key} axis value {format_path(path)})")
            if problems:
                issues.extend(problems)
                return written
        stem = Path(name).stem
        out: JSONObject = {"label": stem if stems[stem] < 2 else name, **(labelled or {}), "value": value, "file": name}
        if isinstance(loaded.lines, dict):
            for key in ("label", "value", "file"):
                loaded.lines.setdefault((*path, key), loaded.line_of(at) or 0)
        read.append(FileValue((*path, "value"), (*path, file_key) if path[-1] != file_key else path, file))
        return out

    matrix = data.get("matrix")
    if isinstance(matrix, dict):
        axes = matrix.get("params")
        for file_key in FILE_KEYS:
            values = axes.get(file_key) if isinstance(axes, dict) else None
            if isinstance(values, list):
                stems = Counter(Path(n).stem for n in (_named(v) for v in values) if n is not None)
                for j, written in enumerate(values):
                    values[j] = read_value(("matrix", "params", file_key, j), file_key, written, stems)
        for j, entry in enumerate(_list(matrix.get("include"))):
            for file_key in FILE_KEYS:
                if isinstance(entry, dict) and file_key in entry:
                    entry[file_key] = read_value(("matrix", "include", j, file_key), file_key, entry[file_key], Counter())
    return read, issues


def _named(value: JSON) -> str | None:
    """The file name a matrix axis value of a ``_file`` axis gives (``NAME`` or ``{label, value: NAME}``)."""
    if isinstance(value, dict):
        value = value.get("value")
    return value if isinstance(value, str) else None


def _tools(text: str, file: Path, validator: SchemaValidator, whose: str) -> tuple[Any, list[Issue]]:
    """A tools file's list (YAML, or JSON when it is named .json), or its problems at its own lines."""
    shown = display_path(file)
    try:
        doc = load_json(text, shown) if file.suffix.lower() == ".json" else load_yaml(text, shown, interpolate=False)
    except DocumentError as exc:
        return None, [dataclasses.replace(i, message=i.message + whose) for i in exc.issues]
    problems = []
    for err in validator.iter_errors(doc.data):
        for leaf in schema_error_leaves(err):
            path, message = describe_schema_error(leaf)
            problems.append(Issue(shown, doc.line_of(path) or (1 if not path else None), format_path(path), message + whose))
    if problems and not isinstance(doc.data, list):
        problems = [
            Issue(shown, 1, "", f"a tools file holds a list of tools ({{name, description, parameters}}), not {_kind(doc.data)}{whose}")
        ]
    return doc.data, problems


def _kind(value: Any) -> str:
    return "a mapping" if isinstance(value, dict) else "nothing" if value is None else f"a {type(value).__name__}"
