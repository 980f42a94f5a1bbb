"""The one loader of YAML and JSON documents that remembers where every value came from.

Configs, provider definitions and dataset files all come through here.
Each loader returns plain Python data plus a map from key path (a tuple of
keys and list indexes) to the 1-based line it was written on, so every error
can say ``evalconfig.yaml:14 targets[2].url: ...``. A key written twice in
one mapping (YAML) or object (JSON) is an error naming its file and line,
never a silent last-wins. Problems are raised as :class:`DocumentError`.

- :func:`load_yaml`: ``${VAR}`` and ``${VAR:-default}`` in string values are
  replaced from the environment while loading (configs; datasets turn it
  off); ``$${`` stands for a literal ``${``. libyaml composes when present
  (several times faster); a document it rejects is parsed again in pure
  Python so error texts do not depend on how PyYAML was installed.
- :func:`load_json`: a JSON file, or one line of a JSONL file
  (``first_line``). ``json.loads`` parses (in C); the lines are found only
  when asked, and only as deep as asked (a dataset asks for each case's
  line; deeper lines are needed only for an error message).
  :func:`parse_json` is its value alone, with the same errors (a JSONL
  dataset's line, whose case's line is the line itself).
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

from evalx.common.yaml_errors import describe as describe_yaml_error
from evalx.errors import ConfigError, Issue

KeyPath = tuple[str | int, ...]

_VAR = re.compile(r"\$(\$)?\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass
class Loaded:
    data: Any
    lines: Mapping[KeyPath, int]
    file: str
    #: variables used but unset, with the key path that used them
    missing_env: list[tuple[KeyPath, str]] = field(default_factory=list)
    #: values that came from the environment (candidates for redaction)
    env_values: dict[str, str] = field(default_factory=dict)
    #: the key paths of the values ``${VAR}`` was replaced in (not template strings), with the text as written
    interpolated: dict[KeyPath, str] = field(default_factory=dict)

    def line_of(self, path: KeyPath) -> int | None:
        """The line of ``path``, or of its nearest ancestor that has one."""
        p = tuple(path)
        while p:
            if p in self.lines:
                return self.lines[p]
            p = p[:-1]
        return self.lines.get((), None)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a document: its line, the key path inside the document, and what."""

    line: int | None
    path: KeyPath
    message: str


class DocumentError(ConfigError):
    """A document cannot be read; ``problems`` keep their key paths as tuples, for callers that re-root them."""

    def __init__(self, file: str, problems: list[Problem]) -> None:
        self.file = file
        self.problems = problems
        super().__init__([Issue(file, p.line, format_path(p.path), p.message) for p in problems])


def format_path(path: KeyPath) -> str:
    """``("targets", 2, "url")`` → ``targets[2].url``"""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


# ---------------------------------------------------------------------------- YAML

_STR_TAG = "tag:yaml.org,2002:str"
#: values built again through aliases are allowed up to this many, or ten times the document's own values if more
#: (a "billion laughs" document of a few lines would otherwise expand until memory runs out)
ALIAS_FLOOR = 100_000
_ALIAS_RATIO = 10
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Builder:
    """Builds plain data from a YAML node tree, recording lines, duplicate keys and ``${VAR}`` uses."""

    def __init__(self, env: Mapping[str, str], interpolate: bool) -> None:
        self.env = env
        self.interpolate = interpolate
        self.lines: dict[KeyPath, int] = {}
        self.missing: list[tuple[KeyPath, str]] = []
        self.env_values: dict[str, str] = {}
        self.interpolated: dict[KeyPath, str] = {}
        self.constructor = yaml.SafeLoader("")  # only its constructor methods are used
        self.scalars = self.constructor.yaml_constructors
        self.problems: list[Problem] = []
        self.open: set[int] = set()  # collections being built: an alias back into one is a cycle
        #: the key paths whose strings are Jinja templates: ``${VAR}`` goes in as a literal, never as template code
        self.template_path: Callable[[KeyPath], bool] | None = None
        self.built: set[int] = set()  # collections built once: meeting one again is an alias
        self.expanding = 0  # > 0 while building a collection again through an alias
        self.own = 0  # values built from their own place in the text
        self.expanded = 0  # values built again through aliases
        self.alias_use: tuple[KeyPath, int | None] = ((), None)

    def build(self, node: yaml.Node, path: KeyPath, key_line: int | None = None) -> Any:
        self.lines[path] = node.start_mark.line + 1
        if self.expanding:
            self.expanded += 1
            if self.expanded > ALIAS_FLOOR and self.expanded > _ALIAS_RATIO * self.own:
                raise _AliasBomb
        else:
            self.own += 1
        if isinstance(node, yaml.ScalarNode):
            if node.tag == _STR_TAG:
                value: Any = node.value
            else:
                make = self.scalars.get(node.tag)
                value = make(self.constructor, node) if make is not None else self.constructor.construct_object(node, deep=True)
            if self.interpolate and isinstance(value, str) and "$" in value:
                value = self.substitute(value, path)
            return value
        if id(node) in self.open:
            self.problems.append(Problem(node.start_mark.line + 1, path, "an alias refers to the collection it is in (a cycle)"))
            return None
        again = id(node) in self.built
        if again and not self.expanding:  # where the outermost alias is used: its key's line, or its list's
            self.alias_use = (path, key_line or self.lines.get(path[:-1]))
        self.built.add(id(node))
        self.open.add(id(node))
        self.expanding += again
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
            if isinstance(node, yaml.MappingNode):
                return self.mapping(node, path)
            return self.constructor.construct_object(node, deep=True)
        finally:
            self.open.discard(id(node))
            self.expanding -= again

    def mapping(self, node: yaml.MappingNode, path: KeyPath) -> dict[str, Any]:
        out: dict[str, Any] = {}
        merged, own = self.pairs(node, set())
        for key_node, value_node in merged:  # `<<: *base` values first: the mapping's own keys override them
            key = self.key(key_node, path)
            if key is not None:
                out[key] = self.build(value_node, (*path, key), key_node.start_mark.line + 1)
                self.lines[(*path, key)] = key_node.start_mark.line + 1
        own_keys: set[str] = set()
        for key_node, value_node in own:
            key = self.key(key_node, path)
            if key is None:
                continue
            line = key_node.start_mark.line + 1
            if key in own_keys:
                self.problems.append(Problem(line, (*path, key), f"duplicate key {key!r}"))
            own_keys.add(key)
            out[key] = self.build(value_node, (*path, key), line)
            self.lines[(*path, key)] = line  # a key's own line is more useful than its value's for errors
        return out

    def pairs(
        self, node: yaml.MappingNode, merging: set[int]
    ) -> tuple[list[tuple[yaml.Node, yaml.Node]], list[tuple[yaml.Node, yaml.Node]]]:
        """The pairs ``<<`` merges in (an earlier source wins over a later one) and the mapping's own pairs.

        PyYAML's ``flatten_mapping`` rewrites the node in place, which would
        make a merged key look written twice when an alias builds it again.
        """
        merged: list[tuple[yaml.Node, yaml.Node]] = []
        own: list[tuple[yaml.Node, yaml.Node]] = []
        merging = merging | {id(node)}
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                own.append((key_node, value_node))
                continue
            sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for source in reversed(sources):  # the first source wins: it is merged last
                if not isinstance(source, yaml.MappingNode) or id(source) in merging:
                    self.problems.append(
                        Problem(source.start_mark.line + 1, (), "'<<' merges a mapping, or a list of mappings (not in a cycle)")
                    )
                    continue
                m, o = self.pairs(source, merging)
                merged.extend(m + o)
        return merged, own

    def key(self, key_node: yaml.Node, path: KeyPath) -> str | None:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag == _STR_TAG:
            return str(key_node.value)
        raw = self.constructor.construct_object(key_node, deep=True) if isinstance(key_node, yaml.ScalarNode) else None
        if not isinstance(raw, (str, int, float, bool)):
            message = "mapping keys must be plain values"
            if isinstance(key_node, yaml.MappingNode) and key_node.flow_style:  # `prompt: {{ case.input }}` unquoted
                message = "a value that starts with '{{' is read as a YAML mapping: quote the template (prompt: \"{{ case.input }}\")"
            self.problems.append(Problem(key_node.start_mark.line + 1, path, message))
            return None
        return str(raw)

    def substitute(self, text: str, path: KeyPath) -> str:
        template = self.template_path is not None and self.template_path(path)
        data = jinja_literal if template else str

        def repl(m: re.Match[str]) -> str:
            if m.group(1):  # $${...} is a literal ${...}
                return m.group(0)[1:]
            if not template:  # a number or a boolean may be wanted here: the schema's reader coerces it
                self.interpolated[path] = text
            name, default = m.group(2), m.group(3)
            value = self.env.get(name)
            if value is None or (value == "" and default is not None):
                if default is not None:
                    return data(default)
                self.missing.append((path, name))
                return ""
            self.env_values[name] = value
            return data(value)

        return _VAR.sub(repl, text)


class _AliasBomb(Exception):
    """Aliases expanded past the bound."""


_TOO_DEEP = "nested too deeply (evalx reads a few hundred levels)"


def jinja_literal(value: str) -> str:
    """A Jinja template that renders to ``value`` exactly: ``{{ "..." }}`` with every non-alphanumeric escaped.

    Nothing of ``value`` can then end the string, the expression or combine with the text around it.
    """
    out = []
    for c in value:
        n = ord(c)
        if (c.isascii() and c.isalnum()) or c == " ":
            out.append(c)
        elif n < 0x100:
            out.append(f"\\x{n:02x}")
        elif n < 0x10000:
            out.append(f"\\u{n:04x}")
        else:
            out.append(f"\\U{n:08x}")
    return '{{ "' + "".join(out) + '" }}' if value else ""


def _compose(text: str) -> yaml.Node | None:
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None:
        try:
            return _compose_with(fast, text)
        except yaml.YAMLError:
            pass  # parsed again below, for the pure-Python error text
    return _compose_with(yaml.SafeLoader, text)


def _compose_with(loader_class: Any, text: str) -> yaml.Node | None:
    loader = loader_class(text)
    try:
        node: yaml.Node | None = loader.get_single_node()
        return node
    finally:
        loader.dispose()


def load_yaml(
    text: str,
    file: str,
    *,
    env: Mapping[str, str] | None = None,
    interpolate: bool = True,
    template_path: Callable[[KeyPath], bool] | None = None,
) -> Loaded:
    """Parse ``text``; raise :class:`DocumentError` naming the line of a syntax error or a duplicate key.

    ``template_path(path)`` says which strings are Jinja templates: a ``${VAR}`` in one is
    interpolated as a template that renders to the value, so the value is never template code.
    """
    try:
        node = _compose(text)
    except yaml.MarkedYAMLError as exc:
        line, message = describe_yaml_error(exc, text)
        raise DocumentError(file, [Problem(line, (), f"invalid YAML: {message}")]) from None
    except yaml.YAMLError as exc:
        raise DocumentError(file, [Problem(None, (), f"invalid YAML: {exc}")]) from None
    except RecursionError:
        raise DocumentError(file, [Problem(None, (), f"invalid YAML: {_TOO_DEEP}")]) from None
    if node is None:
        return Loaded(None, {}, file)
    builder = _Builder(os.environ if env is None else env, interpolate)
    builder.template_path = template_path
    try:
        data = builder.build(node, ())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise DocumentError(file, [Problem(mark.line + 1 if mark else None, (), f"invalid YAML: {problem}")]) from None
    except RecursionError:
        raise DocumentError(file, [Problem(None, (), f"invalid YAML: {_TOO_DEEP}")]) from None
    except _AliasBomb:
        path, line = builder.alias_use
        message = f"aliases expand to more than {ALIAS_FLOOR:,} values ({builder.own:,} written out): an alias bomb?"
        raise DocumentError(file, [Problem(line, path, message)]) from None
    if builder.problems:
        raise DocumentError(file, builder.problems)
    return Loaded(data, builder.lines, file, builder.missing, builder.env_values, builder.interpolated)


# ---------------------------------------------------------------------------- JSON


class _DuplicateKey(Exception):
    pass


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _DuplicateKey
    return out


_decoder = json.JSONDecoder(object_pairs_hook=_object)


def load_json(text: str, file: str, *, first_line: int = 1) -> Loaded:
    """Parse JSON ``text`` (a file, or a JSONL line starting at ``first_line``); raise :class:`DocumentError`."""
    return Loaded(parse_json(text, file, first_line=first_line), _JsonLines(text, first_line), file)


def parse_json(text: str, file: str, *, first_line: int = 1) -> Any:
    """The value of JSON ``text`` (:func:`load_json` without the lines of its keys: a JSONL line, a case, needs none)."""
    try:
        return _decoder.decode(text)
    except json.JSONDecodeError as exc:
        line = exc.lineno + first_line - 1
        raise DocumentError(file, [Problem(line, (), f"invalid JSON: {exc.msg} (column {exc.colno})")]) from None
    except _DuplicateKey:
        _, duplicates = _json_walk(text, None, first_line)
        raise DocumentError(file, [Problem(line, path, f"duplicate key {path[-1]!r}") for line, path in duplicates]) from None
    except RecursionError:
        raise DocumentError(file, [Problem(first_line, (), f"invalid JSON: {_TOO_DEEP}")]) from None


class _JsonLines(Mapping[KeyPath, int]):
    """The lines of a JSON document, found when first asked and only as deep as asked."""

    _CASE_DEPTH = 2  # ("cases", 3): deeper than this, a caller wants an error's line: find them all, once

    def __init__(self, text: str, first_line: int) -> None:
        self._text = text
        self._first_line = first_line
        self._depth = -1
        self._lines: dict[KeyPath, int] = {}

    def _upto(self, depth: int | None) -> dict[KeyPath, int]:
        if depth is not None and depth > self._CASE_DEPTH:
            depth = None
        if self._depth is not None and (depth is None or depth > self._depth):
            self._lines, _ = _json_walk(self._text, depth, self._first_line)
            self._depth = depth  # type: ignore[assignment]
        return self._lines

    def __getitem__(self, path: KeyPath) -> int:
        return self._upto(len(path))[path]

    def __contains__(self, path: object) -> bool:
        return isinstance(path, tuple) and path in self._upto(len(path))

    def __iter__(self) -> Iterator[KeyPath]:
        return iter(self._upto(None))

    def __len__(self) -> int:
        return len(self._upto(None))


_WS = re.compile(r"[ \t\n\r]*")
#: the C string scanner behind ``json`` (not in the typeshed stubs)
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
_plain_decoder = json.JSONDecoder()


def _json_walk(text: str, max_depth: int | None, first_line: int = 1) -> tuple[dict[KeyPath, int], list[tuple[int, KeyPath]]]:
    """The line of every value down to ``max_depth`` (None: all), and the duplicate keys, of valid JSON.

    An object member's line is its key's. Values below ``max_depth`` are
    skipped by the C decoder. Lines are counted forward as the walk goes.
    """
    positions: dict[KeyPath, int] = {}
    duplicates: list[tuple[int, KeyPath]] = []
    at = [0, first_line]  # the last offset a line was counted to, and its line

    def line_at(i: int) -> int:
        at[1] += text.count("\n", at[0], i)
        at[0] = i
        return at[1]

    def ws(i: int) -> int:
        m = _WS.match(text, i)
        return m.end() if m else i

    def walk(i: int, path: KeyPath) -> int:
        positions[path] = line_at(i)
        opener = text[i]
        if opener not in "[{":
            return _plain_decoder.raw_decode(text, i)[1]
        if max_depth is not None and len(path) >= max_depth:
            return _plain_decoder.raw_decode(text, i)[1]
        closer = "]" if opener == "[" else "}"
        i = ws(i + 1)
        index = 0
        seen: set[str] = set()
        while text[i] != closer:
            if opener == "{":
                key_line = line_at(i)
                key, i = _scanstring(text, i + 1)
                i = ws(ws(i) + 1)  # past the ':'
                if key in seen:
                    duplicates.append((key_line, (*path, key)))
                seen.add(key)
                i = walk(i, (*path, key))
                positions[(*path, key)] = key_line
            else:
                i = walk(i, (*path, index))
                index += 1
            i = ws(i)
            if text[i] == ",":
                i = ws(i + 1)
        return i + 1

    try:
        walk(ws(0), ())
    except (IndexError, ValueError, RecursionError):
        pass  # not valid JSON after all: the lines found so far
    return positions, duplicates


# ---------------------------------------------------------------------------- wording


def relative_path(path: Path | str) -> str:
    """``path`` relative to the cwd, even above it (``../app/evalconfig.yaml``): what a run records and reports show,
    so no report carries an absolute local path, and a command printed with it works from where the run started."""
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows): no relative form
        return str(path)


def display_path(path: Path) -> str:
    """``path`` as a person would type it here: relative below the cwd, or up to two folders above it inside the
    same project (``../evalconfig.yaml``, found from a subfolder); else absolute."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    if not rel.startswith(".."):
        return rel
    absolute = Path(path).resolve()
    parts = Path(rel).parts
    ups = next((i for i, part in enumerate(parts) if part != ".."), len(parts))
    shared = Path(os.path.commonpath([Path.cwd().resolve(), absolute]))
    near = 0 < ups <= 2 and len(shared.parts) > 2  # /tmp/a/b and /tmp/a/c share a project; /work and /tmp do not
    return rel if near else str(absolute)


def _finite_number(checker: Any, value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and (isinstance(value, int) or math.isfinite(value))


#: The validator of evalx's own schemas (configs, provider definitions, cases):
#: Draft 2020-12 whose ``number`` is a finite one, so ``timeout_s: .nan`` or
#: ``threshold: .inf`` is an error (NaN slips through every ``minimum`` check).
#: Users' own JSON Schemas (``json_schema`` assertions) keep the standard meaning.
_extend: Any = validators.extend  # untyped in jsonschema
SchemaValidator: Any = _extend(Draft202012Validator, type_checker=Draft202012Validator.TYPE_CHECKER.redefine("number", _finite_number))


def schema_error_leaves(err: ValidationError) -> list[ValidationError]:
    """The errors worth showing: for anyOf, the branch that got furthest (or the one whose type matched)."""
    if err.validator in ("anyOf", "oneOf") and err.context:
        deepest = max(len(e.absolute_path) for e in err.context)
        best = [e for e in err.context if len(e.absolute_path) == deepest]
        if deepest > len(err.absolute_path):
            return [leaf for e in best for leaf in schema_error_leaves(e)]
        # a mapping for a branch that takes mappings: that branch's complaint (an unknown key), not "none matched"
        typed = [e for e in err.context if e.validator not in ("type", "const", "enum")]
        if typed and len(typed) < len(err.context) and isinstance(err.instance, dict):
            return [leaf for e in typed for leaf in schema_error_leaves(e)]
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
    if v == "type" and isinstance(err.instance, float) and not math.isfinite(err.instance):
        return path, f"{err.instance} is not a finite number"
    if v == "type":
        return path, f"{_short(err.instance)} is not of type {_types(err.validator_value)}"
    if v == "anyOf" and isinstance(err.validator_value, list):
        choices = [_choice(branch) for branch in err.validator_value]
        if all(choices):
            return path, f"{_short(err.instance)} is not {' or '.join(choices)}"
    if v == "pattern" and path and path[-1] == "callable":
        return path, f"{err.instance!r} must look like module:function or path/to/file.py:function"
    return path, err.message


def _choice(branch: Any) -> str:
    """One alternative of an anyOf as a person reads it (``a number``, ``'auto'``, ``a mapping``); '' when it cannot say."""
    if not isinstance(branch, dict):
        return ""
    if "const" in branch:
        return repr(branch["const"])
    kind = branch.get("type")
    names = {"integer": "an integer", "number": "a number", "string": "a string", "boolean": "true or false",
             "object": "a mapping", "array": "a list"}  # fmt: skip
    if isinstance(kind, str) and kind in names:
        low = branch.get("minimum", branch.get("exclusiveMinimum"))
        if kind == "object" and isinstance(branch.get("properties"), dict) and branch["properties"]:
            return "a mapping of " + ", ".join(branch["properties"])
        return f"{names[kind]} of at least {low}" if low is not None and "minimum" in branch else names[kind]
    return ""


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
