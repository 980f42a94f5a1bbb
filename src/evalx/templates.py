"""Jinja2 templates rendered in a sandbox; undefined names are errors."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

_env = ImmutableSandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False)
_env.filters["tojson"] = lambda v: json.dumps(v, ensure_ascii=False)


class TemplateRenderError(ValueError):
    pass


@lru_cache(maxsize=512)
def _compile(source: str) -> Any:
    return _env.from_string(source)


@lru_cache(maxsize=512)
def _compile_expression(source: str) -> Any:
    return _env.compile_expression(source, undefined_to_none=False)


def render(source: str, context: dict[str, Any]) -> str:
    try:
        return str(_compile(source).render(**context))
    except TemplateError as exc:
        raise TemplateRenderError(f"template error: {exc}") from None


def render_value(value: Any, context: dict[str, Any]) -> Any:
    """Render every string inside ``value`` (a mapping, list or string).

    A string that is exactly one ``{{ expr }}`` keeps the expression's type,
    so ``input: "{{ case.input }}"`` can pass a mapping through.
    """
    if isinstance(value, str):
        if "{" not in value:
            return value
        stripped = value.strip()
        if stripped.startswith("{{") and stripped.endswith("}}") and stripped.count("{{") == 1:
            try:
                return _compile_expression(stripped[2:-2].strip())(**context)
            except TemplateError as exc:
                raise TemplateRenderError(f"template error: {exc}") from None
        return render(value, context)
    if isinstance(value, dict):
        return {k: render_value(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [render_value(v, context) for v in value]
    return value
