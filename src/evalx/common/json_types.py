"""The shapes of plain data evalx passes around: JSON values and chat messages.

Typed records (``config/model.py``, ``models.py``) hold what evalx owns. What it
only carries — a provider's request body, a response it has not read yet, a
case's free-form ``vars`` — is JSON, and these names say so to mypy instead of
``dict[str, Any]``. Read a :data:`JSON` value by narrowing it (``isinstance``);
the helpers below do the common narrowings once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ForwardRef, Literal, TypeAlias, TypedDict

JSONScalar: TypeAlias = bool | int | float | str | None
if TYPE_CHECKING:
    JSON: TypeAlias = JSONScalar | list["JSON"] | dict[str, "JSON"]
else:  # the same, its references to itself naming this module: typing.get_type_hints resolves them from any module
    _SELF = ForwardRef("JSON", module=__name__)
    JSON = JSONScalar | list[_SELF] | dict[str, _SELF]
JSONObject: TypeAlias = dict[str, JSON]
JSONArray: TypeAlias = list[JSON]

Role = Literal["system", "user", "assistant", "tool"]


class _MessageCore(TypedDict):
    role: str
    content: JSON


class Message(_MessageCore, total=False):
    """One chat message as evalx keeps a conversation's history.

    ``tool_call_index`` ties a ``tool`` message to the assistant's call it
    answers; provider definitions turn it into their own id scheme.
    """

    name: str
    tool_calls: list[JSONObject]
    tool_call_id: str
    tool_call_index: int


def as_object(value: JSON | object) -> JSONObject:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def as_array(value: JSON | object) -> JSONArray:
    """``value`` when it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


def as_str(value: JSON | object, default: str = "") -> str:
    """``value`` when it is a string, else ``default``."""
    return value if isinstance(value, str) else default


def json_encoder(
    *, default: Callable[[Any], Any] | None = None, separators: tuple[str, str] = (",", ":"), allow_nan: bool = True
) -> Callable[[Any], str]:
    """``json.JSONEncoder(ensure_ascii=False, check_circular=False, ...).encode``, built once, for encoders that run per cell.

    The C encoder is called directly: ``JSONEncoder.encode`` makes a new one
    (and a closure) on every call, ~2 µs of a results line's ~9. Without the
    circular-reference check a value that contains itself raises ``RecursionError``
    (every caller's values were made safe before: :func:`evalx.models.safe_value`,
    or read back from JSON). NaN and the infinities raise ``ValueError`` unless ``allow_nan``; without a
    ``default``, what JSON cannot hold raises ``json.dumps``'s ``TypeError`` (``Object of type X is not JSON serializable``).
    """
    item_separator, key_separator = separators
    if default is None:
        default = json.JSONEncoder().default
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator: the pure-Python encoder, as json.dumps would use
        return json.JSONEncoder(
            ensure_ascii=False, check_circular=False, default=default, separators=separators, allow_nan=allow_nan
        ).encode
    encode = make(None, default, json.encoder.encode_basestring, None, key_separator, item_separator, False, False, allow_nan)

    def encoded(value: Any) -> str:
        return "".join(encode(value, 0))

    return encoded
