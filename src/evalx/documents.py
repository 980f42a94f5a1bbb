"""YAML loading that remembers where every value came from.

``load_yaml`` returns plain Python data plus a map from key path (a tuple of
keys and list indexes) to the 1-based line it was written on, so every error
can say ``evalconfig.yaml:14 targets[2].url: ...``. ``${VAR}`` and
``${VAR:-default}`` in string values are replaced from the environment while
loading; ``$${`` stands for a literal ``${``.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from jsonschema.exceptions import ValidationError

from evalx.errors import ConfigError, Issue

KeyPath = tuple[str | int, ...]

_VAR = re.compile(r"\$(\$)?\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass
class Loaded:
    data: Any
    lines: dict[KeyPath, int]
    file: str
    #: variables used but unset, with the key path that used them
    missing_env: list[tuple[KeyPath, str]] = field(default_factory=list)
    #: values that came from the environment (candidates for redaction)
    env_values: dict[str, str] = field(default_factory=dict)

    def line_of(self, path: KeyPath) -> int | None:
        """The line of ``path``, or of its nearest ancestor that has one."""
        p = tuple(path)
        while p:
            if p in self.lines:
                return self.lines[p]
            p = p[:-1]
        return self.lines.get((), None)


def format_path(path: KeyPath) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


class _Builder:
    def __init__(self, file: str, env: Mapping[str, str], interpolate: bool) -> None:
        self.file = file
        self.env = env
        self.interpolate = interpolate
        self.lines: dict[KeyPath, int] = {}
        self.missing: list[tuple[KeyPath, str]] = []
        self.env_values: dict[str, str] = {}
        self.constructor = yaml.SafeLoader("")  # only its constructor methods are used
        self.issues: list[Issue] = []

    def build(self, node: yaml.Node, path: KeyPath) -> Any:
        self.lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            self.constructor.flatten_mapping(node)
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = self.constructor.construct_object(key_node, deep=True)
                if not isinstance(key, (str, int, float, bool)) or key is None:
                    self.issues.append(Issue(self.file, key_node.start_mark.line + 1, format_path(path), "mapping keys must be plain values"))
                    continue
                key = str(key) if not isinstance(key, str) else key
                if key in out:
                    self.issues.append(
                        Issue(self.file, key_node.start_mark.line + 1, format_path((*path, key)), f"duplicate key {key!r}")
                    )
                self.lines[(*path, key)] = key_node.start_mark.line + 1
                out[key] = self.build(value_node, (*path, key))
                # a key's own line is more useful than its value's for errors
                self.lines[(*path, key)] = key_node.start_mark.line + 1
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        value = self.constructor.construct_object(node, deep=True)
        if isinstance(value, str) and self.interpolate and "$" in value:
            value = self.substitute(value, path)
        return value

    def substitute(self, text: str, path: KeyPath) -> str:
        def repl(m: re.Match[str]) -> str:
            if m.group(1):  # $${...} is a literal ${...}
                return m.group(0)[1:]
            name, default = m.group(2), m.group(3)
            value = self.env.get(name)
            if value is None or (value == "" and default is not None):
                if default is not None:
                    return default
                self.missing.append((path, name))
                return ""
            self.env_values[name] = value
            return value

        return _VAR.sub(repl, text)


def load_yaml(text: str, file: str, *, env: Mapping[str, str] | None = None, interpolate: bool = True) -> Loaded:
    """Parse ``text``; raise :class:`ConfigError` naming the line on a syntax error."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(Issue(file, line, "", f"YAML syntax error: {problem}")) from None
    except yaml.YAMLError as exc:
        raise ConfigError(Issue(file, None, "", f"YAML syntax error: {exc}")) from None
    if node is None:
        return Loaded(None, {}, file)
    builder = _Builder(file, os.environ if env is None else env, interpolate)
    try:
        data = builder.build(node, ())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError(Issue(file, mark.line + 1 if mark else None, "", f"YAML error: {getattr(exc, 'problem', exc)}")) from None
    if builder.issues:
        raise ConfigError(builder.issues)
    return Loaded(data, builder.lines, file, builder.missing, builder.env_values)


def display_path(path: Path) -> str:
    """``path`` as a person would type it here: relative below the cwd, else absolute."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(Path(path).resolve()) if rel.startswith("..") else rel


def schema_error_leaves(err: ValidationError) -> list[ValidationError]:
    """The errors worth showing: for anyOf, the branch that got furthest."""
    if err.validator in ("anyOf", "oneOf") and err.context:
        deepest = max(len(e.absolute_path) for e in err.context)
        best = [e for e in err.context if len(e.absolute_path) == deepest]
        if deepest > len(err.absolute_path):
            return [leaf for e in best for leaf in schema_error_leaves(e)]
    return [err]


def describe_schema_error(err: ValidationError) -> tuple[KeyPath, str]:
    path: KeyPath = tuple(err.absolute_path)
    v = err.validator
    if v == "additionalProperties":
        schema = err.schema if isinstance(err.schema, dict) else {}
        allowed = list((schema.get("properties") or {}).keys())
        extra = [k for k in err.instance if k not in allowed] if isinstance(err.instance, dict) else []
        if extra:
            key = extra[0]
            return (*path, key), f"unknown key {key!r}{did_you_mean(key, allowed)}"
    if v == "required":
        missing = err.message.split("'")[1] if "'" in err.message else ""
        return (*path, missing) if missing else path, err.message
    if v == "enum" and path and path[-1] == "type":
        choices = [str(c) for c in err.validator_value] if isinstance(err.validator_value, list) else []
        what = "assertion type" if _is_assertion_path(path) else "type"
        return path, f"unknown {what} {err.instance!r}{did_you_mean(str(err.instance), choices)}"
    if v == "const" and path and path[-1] == "version":
        return path, f"unsupported version {err.instance!r} (this evalx reads version: 1)"
    if v == "type":
        return path, f"{_short(err.instance)} is not of type {_types(err.validator_value)}"
    if v == "pattern" and path and path[-1] == "callable":
        return path, f"{err.instance!r} must look like module:function or path/to/file.py:function"
    return path, err.message


def _is_assertion_path(path: KeyPath) -> bool:
    return any(p == "assert" for p in path)


def _types(value: Any) -> str:
    if isinstance(value, list):
        return " or ".join(repr(v) for v in value)
    return repr(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """' (did you mean X?)' for the closest of ``choices``, or ''."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
