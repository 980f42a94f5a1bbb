"""Jinja2 templates rendered in a sandbox; undefined names are errors, and size and time are bounded.

A template (a target's ``prompt:``/``system:``/``messages:``/``params:``, an
engine's ``body:``, a judge prompt) may come from a file someone else wrote,
and it renders data from a dataset. The sandbox keeps it from reaching
Python's internals; on top of it, :class:`BoundedSandbox` keeps one render
from eating the machine:

- every string, list or other sized value a template makes (by ``*``, ``+``,
  ``~``, ``%``, a filter, a method or a macro) and the rendered text may hold
  at most :data:`MAX_RENDER_CHARS` items; operations that would make a
  larger one (``'a' * 10**8``, ``'a'|center(10**9)``, ``'%1000000000s' % x``)
  are refused before they run, and big powers (``10 ** 10**8``) too;
- a render may take :data:`RENDER_TIME_S`, and no longer than its cell's
  deadline (:mod:`evalx.common.deadline`) allows (:func:`evalx.common.timebox.timebox`
  stops nested ``range(20000)`` loops);
- ``range`` keeps Jinja's sandbox limit (100,000 items) and ``lipsum`` 100
  paragraphs.

A refused or stopped render raises :class:`TemplateRenderError`, which the
caller turns into that cell's error naming the template's field.

``{% include 'file' %}`` (and ``import``/``extend``) reads files from the
config's folder (:func:`use_folder`, called when a config loads): a name that
is absolute, climbs out with ``..`` or is a symlink leading out is refused,
and each file is read once (the loader keeps its text until the next config
loads). :func:`template_problem` finds them statically for ``evalx validate``.

:func:`template_references` lists the names and fields a template reads
(``case.input``, ``vars.lang``, ``case.metadata["team"]``: the chains of
literal ``.attr`` and ``[key]`` steps on a name the context provides), and
:func:`missing_step` finds where such a chain leaves the data: ``evalx
validate`` checks a config's templates against its cases with them, and a
render that meets an undefined field names it and the fields there are.
"""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from jinja2 import BaseLoader, Environment, StrictUndefined, TemplateError, TemplateNotFound, Undefined, UndefinedError, meta, nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2.nodes import Concat
from jinja2.sandbox import ImmutableSandboxedEnvironment

from evalx.common.deadline import Deadline
from evalx.common.deadline import current as current_deadline
from evalx.common.reading import TEMPLATE, read_text
from evalx.common.timebox import TimeUp, timebox
from evalx.errors import EvalxError, TemplateRenderError, UnreadableFile

__all__ = [
    "MAX_RENDER_CHARS",
    "RENDER_TIME_S",
    "BoundedSandbox",
    "FolderLoader",
    "Reference",
    "TemplateFileError",
    "TemplateRenderError",
    "folder_scope",
    "missing_step",
    "read_template_file",
    "render",
    "render_value",
    "resolve_in_folder",
    "sandbox",
    "template_problem",
    "template_references",
    "use_folder",
]

#: the most characters (or items) a rendered template, or any value made while rendering, may hold
MAX_RENDER_CHARS = 8_000_000
#: the most seconds one render may take
RENDER_TIME_S = 1.0
#: the largest exponent size (bits of the result) ``**`` may produce
_MAX_POWER_BITS = 100_000


class TemplateRefused(EvalxError, SecurityError):
    """A template tried to make a value past :data:`MAX_RENDER_CHARS` (or a huge number)."""


def _refuse(what: str) -> TemplateRefused:
    return TemplateRefused(f"{what} would exceed the render limit of {MAX_RENDER_CHARS:,} characters")


_SIZED = (str, bytes, list, tuple, dict, set, frozenset)


def _sized(value: Any) -> Any:
    """``value``, unless it is a string or collection past the limit."""
    if isinstance(value, _SIZED) and len(value) > MAX_RENDER_CHARS:
        raise _refuse(f"a {type(value).__name__} of {len(value):,} items")
    return value


def _count(value: Any) -> int | None:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else None


def _big_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_RENDER_CHARS


#: a width or precision of 7+ digits in a %-format or a {}-format spec
_WIDE_PERCENT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(?:\d{7,}|\d*\.\d{7,})")
_WIDE_FIELD = re.compile(r"\{[^{}]*:[^{}]*?\d{7,}")
_NESTED_FIELD = re.compile(r"\{[^{}]*:[^{}]*\{")


def _check_binop(operator: str, left: Any, right: Any) -> None:
    if operator == "*":
        for seq, times in ((left, right), (right, left)):
            n = _count(seq)
            if n is not None and isinstance(times, int) and n * times > MAX_RENDER_CHARS:
                raise _refuse(f"repeating a {type(seq).__name__} of {n:,} items {times:,} times")
    elif operator == "**":
        big = isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left).bit_length() * right > _MAX_POWER_BITS
        if big and abs(left) > 1:
            raise TemplateRefused(f"{left} ** {right} is too large a number for a template")
    elif operator == "+":
        a, b = _count(left), _count(right)
        if a is not None and b is not None and a + b > MAX_RENDER_CHARS:
            raise _refuse(f"joining values of {a:,} and {b:,} items")
    elif operator == "%" and isinstance(left, str):
        args = right if isinstance(right, tuple) else (right,)
        if _WIDE_PERCENT.search(left) or ("*" in left and any(_big_int(a) for a in args)):
            raise _refuse("a %-format width")


def _check_format(fmt: str, args: tuple[object, ...], kwargs: Mapping[str, object]) -> None:
    if _WIDE_FIELD.search(fmt) or (_NESTED_FIELD.search(fmt) and any(_big_int(a) for a in (*args, *kwargs.values()))):
        raise _refuse("a format width")


#: str methods whose int arguments are the size of what they make
_PADDING = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})


def _check_call(obj: object, args: tuple[object, ...], kwargs: Mapping[str, object]) -> None:
    owner = getattr(obj, "__self__", None)
    name = getattr(obj, "__name__", "")
    if isinstance(owner, str):
        if name in _PADDING and any(_big_int(a) for a in (*args, *kwargs.values())):
            raise _refuse(f"str.{name}")
        if name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
            _check_replace(owner, args[0], args[1])


def _check_replace(text: str, old: str, new: str) -> None:
    if len(new) > len(old):
        grows = (text.count(old) if old else len(text) + 1) * (len(new) - len(old))
        if len(text) + grows > MAX_RENDER_CHARS:
            raise _refuse("replace")


def _bounded_filter(name: str, fn: Any) -> Any:
    """A filter whose size arguments are checked before it runs and whose result after."""

    def bounded(*args: Any, **kwargs: Any) -> Any:
        rest = [a for a in args[1:] if not hasattr(a, "environment")]  # the value is args[0] (after a context)
        if name in ("center", "indent", "wordwrap", "truncate", "batch", "slice") and any(_big_int(a) for a in (*rest, *kwargs.values())):
            raise _refuse(f"the {name} filter")
        if name == "format" and args:
            fmt = next((a for a in args if isinstance(a, str)), "")
            if _WIDE_PERCENT.search(fmt) or ("*" in fmt and any(_big_int(a) for a in (*rest, *kwargs.values()))):
                raise _refuse("the format filter")
        if name == "replace":
            strs = [a for a in args if isinstance(a, str)]
            if len(strs) >= 3:
                _check_replace(strs[0], strs[1], strs[2])
        return _sized(fn(*args, **kwargs))

    for attr in ("jinja_pass_arg", "__name__", "__doc__"):  # pass_context / pass_eval_context markers
        if hasattr(fn, attr):
            setattr(bounded, attr, getattr(fn, attr))
    return bounded


class _BoundedCodeGenerator(CodeGenerator):
    """Compiles ``a ~ b`` to a size-checked join (Jinja's own joins every piece, however large)."""

    def visit_Concat(self, node: Concat, frame: Frame) -> None:
        self.write("environment.bounded_join((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


def _lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    from jinja2.utils import generate_lorem_ipsum

    if n > 100 or max > 1000:
        raise TemplateRefused("lipsum is limited to 100 paragraphs of 1,000 words")
    return generate_lorem_ipsum(n, html, min, max)


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox with sizes bounded (see the module docstring)."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})
    code_generator_class = _BoundedCodeGenerator

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.filters = {name: _bounded_filter(name, fn) for name, fn in self.filters.items()}
        self.globals["lipsum"] = _lipsum

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _check_binop(operator, left, right)
        return _sized(self.binop_table[operator](left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _check_call(__obj, args, kwargs)
        return _sized(super().call(__context, __obj, *args, **kwargs))

    def wrap_str_format(self, value: Any) -> Any:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fmt: str = value.__self__
        is_map = value.__name__ == "format_map"

        def checked(*args: Any, **kwargs: Any) -> Any:
            mapping = args[0] if is_map and args and isinstance(args[0], dict) else kwargs
            _check_format(fmt, () if is_map else args, mapping)
            return _sized(wrapped(*args, **kwargs))

        return checked

    @staticmethod
    def bounded_join(pieces: tuple[Any, ...]) -> str:
        total = 0
        parts = []
        for piece in pieces:
            text = str(piece)
            total += len(text)
            if total > MAX_RENDER_CHARS:
                raise _refuse("joining with ~")
            parts.append(text)
        return "".join(parts)


# --- template files ------------------------------------------------------------


class TemplateFileError(EvalxError, TemplateError):
    """A template file that may not be read (outside the config's folder) or cannot be (missing, not text)."""


def resolve_in_folder(root: Path, name: str, *, what: str = "template file") -> Path:
    """The file ``name`` (relative, ``/``-separated) names inside ``root``; raise :class:`TemplateFileError` when it is outside.

    Refused: an absolute path, a ``..`` that climbs out of ``root``, and a
    path that leads out through a symlink. The file need not exist.
    """
    if not name:
        raise TemplateFileError(f"{what}: an empty file name")
    posix = name.replace("\\", "/")
    if PurePosixPath(posix).is_absolute() or PureWindowsPath(name).drive or posix.startswith("~"):
        raise TemplateFileError(f"{what} {name!r}: an absolute path; give a path relative to the config's folder")
    normal = os.path.normpath(posix)
    if normal == ".." or normal.startswith("../"):
        raise TemplateFileError(f"{what} {name!r}: '..' leads outside the config's folder")
    base = root.resolve()
    target = (base / normal).resolve()
    if not target.is_relative_to(base):
        raise TemplateFileError(f"{what} {name!r}: a symlink leads outside the config's folder")
    return target


def read_template_file(root: Path, name: str, *, what: str = "template file") -> str:
    """The text of ``name`` inside ``root`` (see :func:`resolve_in_folder`); :class:`TemplateFileError` says why not.

    Read through :mod:`evalx.common.reading`: a FIFO, a device or a directory is
    refused as such (never read, never "no such file"), and so is a file past
    the render limit.
    """
    path = resolve_in_folder(root, name, what=what)
    try:
        text = read_text(path, TEMPLATE)
    except UnreadableFile as exc:
        if exc.missing:
            from evalx.common.documents import display_path

            raise TemplateFileError(f"{what} {name!r}: no such file in {display_path(root)}/") from None
        if exc.errno == errno.EISDIR:
            raise TemplateFileError(f"{what} {name!r}: a directory, not a file") from None
        if exc.errno == errno.EFBIG:
            raise TemplateFileError(f"{what} {name!r}: larger than the render limit of {MAX_RENDER_CHARS:,} characters") from None
        raise TemplateFileError(f"{what} {name!r}: {exc.reason}") from None
    if len(text) > MAX_RENDER_CHARS:
        raise TemplateFileError(f"{what} {name!r}: larger than the render limit of {MAX_RENDER_CHARS:,} characters")
    return text


class FolderLoader(BaseLoader):
    """Loads included templates from one folder (sandboxed by :func:`resolve_in_folder`), each file read once."""

    def __init__(self, root: Path | None) -> None:
        self.root = root
        self._texts: dict[str, str] = {}

    def get_source(self, environment: Environment, template: str) -> tuple[str, str | None, Callable[[], bool]]:
        text = self._texts.get(template)
        if text is None:
            if self.root is None:
                raise TemplateFileError(f"cannot include {template!r}: templates include files only from a config's folder")
            try:
                text = read_template_file(self.root, template, what="included file")
            except TemplateFileError as exc:
                if "no such file" in str(exc):
                    raise TemplateNotFound(template, str(exc)) from None
                raise
            self._texts[template] = text
        return text, None, lambda: True


def sandbox(undefined: type[Undefined] = StrictUndefined, root: Path | None = None) -> BoundedSandbox:
    """A new :class:`BoundedSandbox` whose includes read from ``root`` (none without one): every Jinja environment
    of evalx that renders what users write is one of these (the config's templates here, provider definitions')."""
    env = BoundedSandbox(undefined=undefined, keep_trailing_newline=True, autoescape=False, loader=FolderLoader(root))
    env.filters["tojson"] = _bounded_filter("tojson", lambda v: json.dumps(v, ensure_ascii=False))
    return env


def _make_env(root: Path | None) -> BoundedSandbox:
    return sandbox(StrictUndefined, root)


_env = _make_env(None)
#: a run's own include folder (:func:`folder_scope`), which wins over the last config loaded in the process
_scoped_env: ContextVar[BoundedSandbox | None] = ContextVar("evalx_template_folder", default=None)


def use_folder(root: Path | None) -> None:
    """Templates rendered from now on include files from ``root`` (the config's folder), read afresh."""
    global _env
    _env = _make_env(root.resolve() if root is not None else None)


@contextmanager
def folder_scope(root: Path) -> Iterator[None]:
    """Within this context (and the tasks and worker threads it starts with a copy of it), includes read from ``root``.

    Two configs run in one process (the Python API, the pytest plugin) each keep their own
    folder, whichever was loaded last.
    """
    token = _scoped_env.set(_make_env(root.resolve()))
    try:
        yield
    finally:
        _scoped_env.reset(token)


@lru_cache(maxsize=512)
def _compile_in(env: BoundedSandbox, source: str) -> Any:
    return env.from_string(source)


@lru_cache(maxsize=512)
def _compile_expression_in(env: BoundedSandbox, source: str) -> Any:
    return env.compile_expression(source, undefined_to_none=False)


def _compile(source: str) -> Any:
    return _compile_in(_scoped_env.get() or _env, source)


def _compile_expression(source: str) -> Any:
    return _compile_expression_in(_scoped_env.get() or _env, source)


def _joined(chunks: Iterator[str]) -> str:
    total = 0
    parts = []
    for chunk in chunks:
        total += len(chunk)
        if total > MAX_RENDER_CHARS:
            raise _refuse("the rendered text")
        parts.append(chunk)
    return "".join(parts)


def _time_box() -> tuple[float, Deadline | None]:
    """How long a render may take: :data:`RENDER_TIME_S`, or what is left of the cell's deadline (then returned) when less."""
    deadline = current_deadline()
    if deadline is not None and (left := deadline.left()) < RENDER_TIME_S:
        return max(left, 0.0), deadline
    return RENDER_TIME_S, None


def _error(exc: BaseException, field: str | None, deadline: Deadline | None = None) -> TemplateRenderError:
    where = f"{field}: " if field else ""
    if isinstance(exc, TimeUp) and deadline is not None:
        return TemplateRenderError(where + deadline.message("rendering the template: a loop too large?"))
    if isinstance(exc, TimeUp):
        return TemplateRenderError(f"{where}template refused: rendering took more than {RENDER_TIME_S:g}s (a loop too large?)")
    if isinstance(exc, TemplateRefused):
        return TemplateRenderError(f"{where}template refused: {exc}")
    if isinstance(exc, MemoryError):
        return TemplateRenderError(f"{where}template refused: out of memory while rendering")
    return TemplateRenderError(f"{where}template error: {exc}")


def _undefined_error(exc: UndefinedError, source: str, context: Mapping[str, Any], field: str | None) -> TemplateRenderError:
    """An undefined name or field, worded as the name and the fields the data has there (else Jinja's words)."""
    where = f"{field}: " if field else ""
    try:
        refs = template_references(source)
    except TemplateError:
        refs = []
    for ref in refs:
        if ref.guarded:
            continue
        root = str(ref.chain[0])
        if root not in context:
            names = sorted(k for k in context if not k.startswith("_"))
            return TemplateRenderError(f"{where}template error: unknown name {root!r} (a template here sees {', '.join(names)})")
        missing = missing_step(context[root], ref.chain[1:])
        if missing is not None:
            depth, keys = missing
            shown = ".".join(str(step) for step in ref.chain[: depth + 2])
            has = ", ".join(str(k) for k in keys[:20]) + (", ..." if len(keys) > 20 else "")
            above = ".".join(str(step) for step in ref.chain[: depth + 1])
            what = f"{above} has {has}" if keys else f"{above} is empty"
            from evalx.common.documents import did_you_mean

            hint = did_you_mean(str(ref.chain[depth + 1]), [str(k) for k in keys])
            return TemplateRenderError(f"{where}template error: unknown field {shown!r}{hint} ({what})")
    return _error(exc, field)


# --- what a template reads -------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    """A chain of literal steps a template reads from its context: ``("case", "metadata", "team")``."""

    chain: tuple[str | int, ...]
    #: under ``is defined``/``is undefined``, ``| default``, or after a ``'key' in ...`` test: a missing value is expected
    guarded: bool = False


#: names Jinja gives a template itself (loop variables, macro internals): never the context's
_SPECIAL_NAMES = frozenset({"loop", "self", "caller", "varargs", "kwargs", "super", "true", "false", "none", "True", "False", "None"})
_GUARD_TESTS = frozenset({"defined", "undefined"})
_GUARD_FILTERS = frozenset({"default", "d"})


def template_references(source: str) -> list[Reference]:
    """Every chain of literal ``.attr``/``[key]`` steps on a context name in ``source`` (its includes not followed).

    Names the template sets itself (``{% set %}``, ``{% for x in %}``, macro
    arguments) and Jinja's globals are left out; ``case.input[vars.i]``
    yields ``case.input`` and ``vars.i``. Raises :class:`TemplateError` for a syntax error.
    """
    if "{" not in source:
        return []
    ast = _env.parse(source)
    local = {n.name for n in ast.find_all(nodes.Name) if n.ctx in ("store", "param")}
    skip = local | _SPECIAL_NAMES | set(_env.globals)
    found: list[Reference] = []
    guards: set[tuple[str | int, ...]] = set()

    def visit(node: nodes.Node, guarded: bool) -> None:
        if isinstance(node, (nodes.Name, nodes.Getattr, nodes.Getitem)) and getattr(node, "ctx", "load") == "load":
            chain, inner = _chain(node)
            if chain:
                found.append(Reference(chain, guarded))
            for other in inner:
                visit(other, False)
            return
        if isinstance(node, nodes.Test) and node.name in _GUARD_TESTS:
            chain, _ = _chain(node.node)
            if chain:
                guards.add(chain)
            visit(node.node, True)
            for arg in node.args:
                visit(arg, False)
            return
        if isinstance(node, nodes.Filter) and node.name in _GUARD_FILTERS and node.node is not None:
            visit(node.node, True)
            for arg in node.args:
                visit(arg, False)
            return
        if isinstance(node, nodes.Compare) and isinstance(node.expr, nodes.Const) and node.ops and node.ops[0].op in ("in", "notin"):
            chain, _ = _chain(node.ops[0].expr)
            if chain and isinstance(node.expr.value, (str, int)):
                guards.add((*chain, node.expr.value))
        for child in node.iter_child_nodes():
            visit(child, guarded)

    visit(ast, False)
    out: list[Reference] = []
    for ref in found:
        if ref.chain[0] in skip:
            continue
        guarded = ref.guarded or any(ref.chain[: len(g)] == g for g in guards)
        item = Reference(ref.chain, guarded)
        if item not in out:
            out.append(item)
    return out


def _chain(node: nodes.Node) -> tuple[tuple[str | int, ...], list[nodes.Node]]:
    """The literal chain ``node`` reads (outermost steps dropped past a computed key), and the nodes inside it to visit."""
    steps: list[str | int] = []
    inner: list[nodes.Node] = []
    while True:
        if isinstance(node, nodes.Name):
            return (node.name, *reversed(steps)), inner
        if isinstance(node, nodes.Getattr):
            steps.append(node.attr)
            node = node.node
        elif isinstance(node, nodes.Getitem):
            arg = node.arg
            if isinstance(arg, nodes.Const) and isinstance(arg.value, (str, int)) and not isinstance(arg.value, bool):
                steps.append(arg.value)
            else:  # a computed key: the steps after it cannot be known
                steps.clear()
                inner.append(arg)
            node = node.node
        else:
            inner.append(node)
            return (), inner


def missing_step(value: Any, steps: tuple[str | int, ...]) -> tuple[int, list[str | int]] | None:
    """Where ``steps`` leave ``value``'s mappings: the index of the step that is not there, and the keys there are; else None.

    A step past a list, a string or a number is not judged (a method, an
    index: the render decides); a mapping's method (``.get``, ``.items``) is there.
    """
    for depth, step in enumerate(steps):
        if not isinstance(value, dict):
            return None
        if step in value:
            value = value[step]
        elif isinstance(step, str) and hasattr(dict, step):
            return None
        else:
            return depth, list(value)
    return None


def template_problem(source: str, root: Path | None = None) -> str | None:
    """Why ``source`` cannot render whatever the data, or None: for ``evalx validate``.

    A syntax error; an included file (a literal name: a computed one is
    checked when it renders) that is outside ``root``, missing, not text or
    itself broken; a file that includes itself.
    """
    if "{" not in source:
        return None
    try:
        ast = _env.parse(source)
    except TemplateError as exc:
        line = getattr(exc, "lineno", None)
        return f"template syntax error{f' (template line {line})' if line and source.count(chr(10)) else ''}: {exc}"
    return _includes_problem(ast, root, ())


def _includes_problem(ast: Any, root: Path | None, chain: tuple[str, ...]) -> str | None:
    for name in meta.find_referenced_templates(ast):
        if name is None:
            continue
        where = "".join(f"{n} → " for n in chain)
        if root is None:
            return f"template includes {name!r}: templates include files only from a config's folder"
        if name in chain:
            return f"template includes {where}{name!r}: a file that includes itself"
        try:
            text = read_template_file(root, name, what="included file")
        except TemplateFileError as exc:
            return f"{where}{exc}" if chain else str(exc)
        try:
            inner = _env.parse(text, name=name)
        except TemplateError as exc:
            line = getattr(exc, "lineno", None)
            return f"included file {where}{name}{f':{line}' if line else ''}: template syntax error: {exc}"
        problem = _includes_problem(inner, root, (*chain, name))
        if problem:
            return problem
    return None


def render(source: str, context: Mapping[str, object], *, field: str | None = None) -> str:
    """``source`` rendered with ``context`` (the names a template sees, any values); ``field`` (like ``prompt``) names it in errors."""
    seconds, deadline = _time_box()
    try:
        with timebox(seconds):
            return _joined(_compile(source).generate(**context))
    except UndefinedError as exc:
        raise _undefined_error(exc, source, context, field) from None
    except (TemplateError, TimeUp, MemoryError, RecursionError) as exc:
        raise _error(exc, field, deadline) from None


def render_value(value: Any, context: Mapping[str, object], *, field: str | None = None) -> Any:
    """Render every string inside ``value`` (a mapping, list or string).

    A string that is exactly one ``{{ expr }}`` keeps the expression's type,
    so ``input: "{{ case.input }}"`` can pass a mapping through.
    """
    if isinstance(value, str):
        if "{" not in value:
            return value
        stripped = value.strip()
        if stripped.startswith("{{") and stripped.endswith("}}") and stripped.count("{{") == 1:
            seconds, deadline = _time_box()
            try:
                with timebox(seconds):
                    return _sized(_compile_expression(stripped[2:-2].strip())(**context))
            except UndefinedError as exc:
                raise _undefined_error(exc, value, context, field) from None
            except (TemplateError, TimeUp, MemoryError, RecursionError) as exc:
                raise _error(exc, field, deadline) from None
        return render(value, context, field=field)
    if isinstance(value, dict):
        return {k: render_value(v, context, field=f"{field}.{k}" if field else None) for k, v in value.items()}
    if isinstance(value, list):
        return [render_value(v, context, field=f"{field}[{i}]" if field else None) for i, v in enumerate(value)]
    return value
