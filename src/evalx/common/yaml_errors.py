"""PyYAML's syntax errors as one line a person can act on: the line to look at, what is wrong there, what to write.

:func:`describe` is used by the one YAML loader (:func:`evalx.common.documents.load_yaml`),
so a config, a dataset in YAML and a provider definition word a syntax error
the same way: ``evalconfig.yaml:5: invalid YAML: this line is indented 3
spaces, but the keys above it 4 (column 4): line up the keys of one mapping``.
A problem PyYAML words in a way not listed here keeps its own words.
"""

from __future__ import annotations

import re

import yaml

__all__ = ["describe"]

_CANNOT_START = re.compile(r"found character '(.*)' that cannot start any token")
_ESCAPE = re.compile(r"found unknown escape character '(.*)'")
_ALIAS = re.compile(r"found undefined alias '(.*)'")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _key_column(line: str) -> int:
    """Where the keys of ``line``'s mapping start: its indent, or past the ``- `` of a list item."""
    column = _indent(line)
    rest = line[column:]
    while rest.startswith("- "):
        skipped = len(rest) - len(rest[1:].lstrip(" "))
        column, rest = column + skipped, rest[skipped:]
    return column


def _spaces(n: int) -> str:
    return f"{n} space{'s' if n != 1 else ''}"


def _where(mark: yaml.Mark | None) -> str:
    return f" (column {mark.column + 1})" if mark is not None else ""


def describe(exc: yaml.MarkedYAMLError, text: str) -> tuple[int | None, str]:
    """The 1-based line to show and the message (after ``invalid YAML: ``) for a syntax error in ``text``."""
    problem = exc.problem or ""
    context = exc.context or ""
    mark = exc.problem_mark or exc.context_mark
    lines = text.splitlines()
    line = mark.line + 1 if mark is not None else None

    def source(n: int | None) -> str:
        return lines[n - 1] if n is not None and 0 < n <= len(lines) else ""

    here = source(line)
    if "'\\t'" in problem or "tab character" in problem:
        return line, f"a tab{_where(exc.problem_mark)}: YAML indents with spaces only; replace the tab with spaces"
    if m := _CANNOT_START.search(problem):
        char = m.group(1)
        return line, f'a value cannot start with {char!r}{_where(exc.problem_mark)}: quote it (key: "{char}...")'
    if "unexpected end of stream" in problem and "quoted scalar" in context and exc.context_mark is not None:
        start = exc.context_mark.line + 1
        return start, f"a quoted string starts here{_where(exc.context_mark)} and is never closed: add the closing quote"
    if m := _ESCAPE.search(problem):
        return line, (
            f"'\\{m.group(1)}' is not an escape in a double-quoted string{_where(exc.problem_mark)}: "
            "use single quotes ('C:\\dir') or write the backslash twice"
        )
    if m := _ALIAS.search(problem):
        return line, f"'*{m.group(1)}' refers to no anchor '&{m.group(1)}' above it: quote a value that starts with '*'"
    if problem == "mapping values are not allowed here":
        if ": " in here.split(":", 1)[-1] or here.rstrip().count(":") > 1:
            return line, f"a second ':' on this line{_where(exc.problem_mark)}: quote a value that contains ': ' (key: \"a: b\")"
        return line, "a 'key:' indented deeper than the line above, which has a value: indent it under a key with no value, or line it up"
    if problem.startswith("could not find expected ':'"):
        begins = exc.context_mark.line + 1 if exc.context_mark is not None else line
        return begins, "a line that is neither 'key: value' nor a list item '- ...': a missing ':'?"
    if problem.startswith("expected <block end>"):
        above = next((source(n) for n in range((line or 1) - 1, 0, -1) if source(n).strip()), "")
        what = "this list item is" if here.lstrip().startswith("-") else "this line is"
        return line, (
            f"{what} indented {_spaces(_indent(here))}, but the lines above it {_key_column(above)}{_where(exc.problem_mark)}: "
            "line up the keys of one mapping and the items of one list"
        )
    if problem.startswith(("expected ',' or ']'", "expected ',' or '}'")):
        opener = "[" if "]" in problem else "{"
        opened = exc.context_mark.line + 1 if exc.context_mark is not None else line
        closer = "]" if opener == "[" else "}"
        hint = f"close it with '{closer}' on this line, or write it as an indented block"
        if "{{" in source(opened):
            hint = 'quote a value that is a template (prompt: "{{ case.input }}")'
        return opened, f"a '{opener}' opened on this line is not closed: {hint}"
    if "single document" in context:
        return line, "a second document ('---'): the file must hold one YAML document"
    if "block scalar" in context:
        return line, f"after '|' or '>' only '-', '+' or a digit may follow on the same line{_where(exc.problem_mark)}"
    if "anchor" in context or "alias" in context:
        return line, f"'&' and '*' start an anchor or alias{_where(exc.problem_mark)}: quote a value that starts with one"
    return line, f"{problem or context or 'not YAML'}{_where(exc.problem_mark)}"
