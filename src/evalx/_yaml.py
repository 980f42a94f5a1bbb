"""YAML loading that remembers where every value came from.

``load_yaml`` returns plain Python data plus a map from key path (a tuple of
keys and list indexes) to the 1-based line it was written on, so every error
can say ``evalconfig.yaml:14 targets[2].url: ...``. ``${VAR}`` and
``${VAR:-default}`` in string values are replaced from the environment while
loading; ``$${`` stands for a literal ``${``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from ._errors import ConfigError, Issue

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
