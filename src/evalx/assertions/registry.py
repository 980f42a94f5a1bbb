"""The assertion registry: one decorator registers a type.

Built-in types register through :func:`assertion` exactly as a user's plugin
would. The decorator reads the function's keyword-only parameters and their
type hints; that parameter schema feeds the config JSON Schema, so the schema
and the code cannot disagree.

An assertion function looks like::

    @assertion("contains")
    def contains(ctx: AssertionContext, *, value: str | None = None) -> Verdict:
        ...

The first parameter is always the context; the rest are keyword-only and
become the assertion's config keys. It returns a :class:`Verdict` (or is
``async`` and returns one).

Plugins (:mod:`evalx.assertions.plugins`) register the same way; the entry-point group
``evalx.plugins`` is imported the first time the registry is asked, after
the built-ins. A name registered twice is an error, unless it is the same
function imported a second time (a plugin file also imported by a target).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from evalx.assertions.spec import AssertionSpec
from evalx.common.json_types import JSON, JSONObject
from evalx.common.typeschema import properties, schema_of
from evalx.models import Case, Trajectory, Verdict

if TYPE_CHECKING:
    from evalx.tracing.spans import StoredSpan

#: keys every assertion accepts, whatever its type (:class:`AssertionSpec`'s fields, but the model-graded types' ``judge:``)
COMMON_KEYS: dict[str, JSONObject] = {key: sub for key, sub in properties(AssertionSpec).items() if key != "judge"}


class Grader(Protocol):
    """What model-graded assertion types ask of a judge (:class:`evalx.judge.Judge` is one)."""

    async def llm_judge(
        self, ctx: AssertionContext, *, rubric: str | None, characteristics: list[str] | None, threshold: float | None
    ) -> Verdict: ...

    async def semantic_similar(
        self, ctx: AssertionContext, *, expected: Any, threshold: float | None, embedding: str | None
    ) -> Verdict: ...

    async def factuality(self, ctx: AssertionContext, *, expected: Any, pass_on: list[str] | None) -> Verdict: ...

    async def grounded(self, ctx: AssertionContext, kind: str, params: dict[str, Any]) -> Verdict: ...


@dataclass
class AssertionContext:
    """What an assertion may look at."""

    case: Case
    output: Trajectory
    config_dir: Path = field(default_factory=Path.cwd)
    judge: Grader | None = None  # the run's judge when one is configured (model-graded types)
    judge_settings: dict[str, Any] = field(default_factory=dict)
    target: str = ""
    #: the target's declared ``tools:`` (``tool_calls_valid``), None when it declares none
    tools: list[JSONObject] | None = None
    #: a traced run (docs/tracing.md): the cell's received spans, in start order (None: not traced, e.g. a cached answer)
    spans: list[StoredSpan] | None = None
    #: whether the run receives traces at all
    traced: bool = False
    #: the cell's ``max_response_bytes``: the most a check's record (its reason, error, details) stores (None: no bound)
    max_bytes: int | None = None

    @property
    def text(self) -> str:
        return self.output.text

    @property
    def expected(self) -> Any:
        return self.case.expected


AssertionFn = Callable[..., "Verdict | Awaitable[Verdict]"]
#: a check made when a dataset is loaded (``evalx validate`` and before a run): (spec, case) -> why it would fail, or None
SpecCheck = Callable[[Mapping[str, JSON], Case], "str | None"]


@dataclass
class AssertionType:
    name: str
    fn: AssertionFn
    params: dict[str, JSONObject]
    required: list[str]
    model_graded: bool = False
    description: str = ""
    is_async: bool = False
    _schema: JSONObject | None = field(default=None, repr=False, compare=False)
    #: parameter name in the function for each config key (`not_` style names)
    arg_names: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    #: what can be known to fail before anything runs (a regex that does not compile, no value to compare with...)
    check: SpecCheck | None = field(default=None, repr=False, compare=False)

    def schema(self) -> JSONObject:
        """The JSON Schema of one assertion of this type in a config (built once)."""
        if self._schema is None:
            self._schema = self._build_schema()
        return self._schema

    def _build_schema(self) -> JSONObject:
        props: JSONObject = {k: dict(v) for k, v in COMMON_KEYS.items()}
        props["type"] = {"const": self.name}
        if self.model_graded:
            props["judge"] = properties(AssertionSpec)["judge"]
        props.update(self.params)
        out: JSONObject = {
            "type": "object",
            "properties": props,
            "required": ["type", *self.required],
            "additionalProperties": False,
        }
        if self.description:
            out["description"] = self.description
        return out


_REGISTRY: dict[str, AssertionType] = {}
_generation = 0


def assertion(
    name: str,
    *,
    schema: Mapping[str, JSONObject] | None = None,
    model_graded: bool = False,
    check: SpecCheck | None = None,
) -> Callable[[AssertionFn], AssertionFn]:
    """Register ``fn`` as the assertion type ``name``.

    ``schema`` may refine the JSON Schema of named parameters (e.g. a value
    that may be a string or a number); every key in it must be a parameter.
    ``check(spec, case)`` says, when the dataset is loaded, why an assertion
    would fail on any output (None when it would not): ``evalx validate``
    reports it at the assertion's ``file:line``.
    """

    def register(fn: AssertionFn) -> AssertionFn:
        if not getattr(fn, "__module__", "").startswith("evalx.assertions."):
            _load_builtins()  # a plugin: the built-ins first, so taking one of their names is caught here
        existing = _REGISTRY.get(name)
        if existing is not None and not _same_definition(existing.fn, fn):
            where = f"{getattr(existing.fn, '__module__', '?')}.{getattr(existing.fn, '__qualname__', '?')}"
            raise ValueError(f"assertion type {name!r} is already registered (by {where})")
        if name in COMMON_KEYS:
            raise ValueError(f"{name!r} cannot be an assertion type name")
        sig = inspect.signature(fn)
        params = list(sig.parameters.values())
        if not params or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
            raise TypeError(f"assertion {name!r}: the first parameter must be the context")
        hints = typing.get_type_hints(fn)
        props: dict[str, JSONObject] = {}
        required: list[str] = []
        arg_names: dict[str, str] = {}
        for p in params[1:]:
            if p.kind is not p.KEYWORD_ONLY:
                raise TypeError(f"assertion {name!r}: parameter {p.name!r} must be keyword-only (after *)")
            if p.name in COMMON_KEYS or p.name == "judge":
                raise TypeError(f"assertion {name!r}: parameter {p.name!r} clashes with a common key")
            key = p.name.rstrip("_")  # `not_` style names for reserved words
            arg_names[key] = p.name
            props[key] = schema_of(hints.get(p.name, Any))
            if p.default is p.empty:
                required.append(key)
        for key, sub in (schema or {}).items():
            if key not in props:
                raise TypeError(f"assertion {name!r}: schema names {key!r}, which is not a parameter")
            props[key] = sub
        doc = inspect.getdoc(fn) or ""
        _REGISTRY[name] = AssertionType(
            name=name,
            fn=fn,
            params=props,
            required=required,
            model_graded=model_graded,
            description=doc.split("\n\n")[0].replace("\n", " "),
            is_async=inspect.iscoroutinefunction(fn),
            arg_names=arg_names,
            check=check,
        )
        global _generation
        _generation += 1
        return fn

    return register


def _same_definition(a: AssertionFn, b: AssertionFn) -> bool:
    """The same function imported twice (a plugin file listed in ``plugins:`` and imported by a target module)."""
    code_a, code_b = getattr(a, "__code__", None), getattr(b, "__code__", None)
    return (
        code_a is not None
        and code_b is not None
        and getattr(a, "__qualname__", None) == getattr(b, "__qualname__", None)
        and code_a.co_filename == code_b.co_filename
        and code_a.co_firstlineno == code_b.co_firstlineno
    )


def generation() -> int:
    """A number that changes whenever a type is registered (the config schema is rebuilt then)."""
    return _generation


def get_assertion(name: str) -> AssertionType | None:
    if not _builtins_loaded:  # asked for every assertion of every case and cell: the flag read here, no call
        _load_builtins()
    return _REGISTRY.get(name)


def registered() -> dict[str, AssertionType]:
    _load_builtins()
    return dict(sorted(_REGISTRY.items()))


def check_entry_point_plugins() -> None:
    """The built-ins, then the ``evalx.plugins`` entry points; raise :class:`ConfigError` naming each plugin that failed."""
    from evalx.assertions.plugins import load_entry_points
    from evalx.errors import ConfigError

    _load_builtins()
    issues = load_entry_points()
    if issues:
        raise ConfigError(issues)


_builtins_loaded = False
#: imports the built-in types; the package (evalx/assertions/__init__.py) gives it, so the registry imports none of them
_builtins: Callable[[], object] | None = None


def use_builtins(load: Callable[[], object]) -> None:
    """How the registry loads the built-in types the first time it is asked (they register like any plugin)."""
    global _builtins
    _builtins = load


def _load_builtins() -> None:
    global _builtins_loaded
    if _builtins_loaded:  # asked for every assertion of every cell: skip the import machinery
        return
    if _builtins is not None:
        _builtins()
    _builtins_loaded = True
    from evalx.assertions.plugins import load_entry_points

    load_entry_points()  # the `evalx.plugins` group, once; a failure is raised by load_config and `evalx schema`
