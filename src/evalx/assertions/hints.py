"""What to write instead, when an assertion is written the way another tool spells it.

``- contains: Paris`` (a mapping with no ``type`` whose one key is an
assertion type) is promptfoo's and many harnesses' shorthand; evalx wants
``{type: contains, value: Paris}``, and says so.
"""

from __future__ import annotations

import json
import re
from typing import Any

from evalx.assertions.registry import registered

__all__ = ["missing_type_hint"]

_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_ .,/-]*")
_YAML_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "null", "~"})


def missing_type_hint(spec: Any) -> str:
    """`` (did you mean {type: contains, value: Paris}?)`` for a one-key mapping named after an assertion type, else ''."""
    if not isinstance(spec, dict) or "type" in spec or len(spec) != 1:
        return ""
    ((kind, value),) = spec.items()
    if not isinstance(kind, str) or kind not in registered():
        return ""
    if isinstance(value, dict) and "type" not in value:
        rest = ", ".join(f"{k}: {_flow(v)}" for k, v in value.items())
        written = f"{{type: {kind}, {rest}}}" if rest else f"{{type: {kind}}}"
    else:
        written = f"{{type: {kind}, value: {_flow(value)}}}"
    return f" (did you mean {written}?)"


def _flow(value: Any) -> str:
    """``value`` as it would be written in YAML's flow style (JSON when not a plain word)."""
    if isinstance(value, str) and _PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS and not value.endswith(" "):
        try:
            float(value)
        except ValueError:
            return value
    return json.dumps(value, ensure_ascii=False)
