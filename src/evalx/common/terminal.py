"""What evalx writes to a terminal: colour or not (``--color``, ``NO_COLOR``, ``FORCE_COLOR``), and ASCII where a stream cannot encode its symbols.

The command line calls :func:`prepare_streams` once, before any command
runs: stdout and stderr then write each character their encoding cannot hold
(``·``, ``─``, ``✓``, ``…`` on an ASCII or cp1252 stdout: ``LC_ALL=C``, a
Windows redirect) as its ASCII stand-in, so a finished run never turns into
an "internal error" because of the terminal, and nothing it wrote is lost or
relabelled. Colour is decided by :func:`color_for`: ``--color always|never``
first, then ``NO_COLOR`` (any non-empty value: no colour, https://no-color.org),
then ``FORCE_COLOR`` (any non-empty value but ``0``: colour), else colour on a
terminal that is not ``TERM=dumb``.
"""

from __future__ import annotations

import codecs
import os
from typing import Any

__all__ = ["COLOR_CHOICES", "ascii_text", "color_for", "color_setting", "json_for", "prepare_streams", "set_color"]

#: ``--color``'s values
COLOR_CHOICES = ("auto", "always", "never")

#: ASCII stand-ins for the symbols evalx's own text uses; anything else unencodable becomes ``?``
_ASCII = {
    "·": "-",
    "─": "-",
    "━": "=",
    "│": "|",
    "┼": "+",
    "…": "...",
    "–": "-",
    "—": "--",
    "→": "->",
    "←": "<-",
    "↑": "^",
    "↓": "v",
    "≥": ">=",
    "≤": "<=",
    "±": "+/-",
    "×": "x",
    "÷": "/",
    "✓": "ok",
    "✔": "ok",
    "✗": "x",
    "✘": "x",
    "✅": "[ok]",
    "❌": "[x]",
    "⚠": "!",
    "️": "",
    "•": "*",
    "▸": ">",
    "█": "#",
    "░": ".",
    "▏": "|",
    "°": "deg",
    "’": "'",
    "‘": "'",
    "“": '"',
    "”": '"',
    "\u00a0": " ",
}

_ERROR_HANDLER = "evalx-ascii"
_choice = "auto"


def _stand_in(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    text = exc.object[exc.start : exc.end]
    return "".join(_ASCII.get(char, "?") for char in text), exc.end


codecs.register_error(_ERROR_HANDLER, _stand_in)


def ascii_text(text: str) -> str:
    """``text`` with evalx's symbols as their ASCII stand-ins (anything else non-ASCII as ``?``)."""
    return text.encode("ascii", _ERROR_HANDLER).decode("ascii")


def _cannot_encode(stream: Any) -> bool:
    encoding = "utf-8" if stream is None else getattr(stream, "encoding", None) or "ascii"
    try:
        "".join(_ASCII).encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return True
    return False


def json_for(stream: Any, value: Any) -> str:
    """``value`` as indented JSON for ``stream``: as written on a UTF-8 stream (None: a file evalx writes, UTF-8), else
    with ``\\u`` escapes.

    The ASCII stand-ins are for what a person reads; JSON is data a program reads, and a ``?`` in place of
    ``é`` would change it. Escaped, it stays exact on any stream.
    """
    import codecs
    import json

    encoding = getattr(stream, "encoding", None) or "ascii"
    try:
        unicode = codecs.lookup(encoding).name.startswith("utf")
    except LookupError:
        unicode = False
    return json.dumps(value, indent=2, ensure_ascii=not unicode)


def prepare_streams(*streams: Any) -> None:
    """Make each text stream write ASCII stand-ins for what its encoding cannot hold, instead of raising."""
    for stream in streams:
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is None or not _cannot_encode(stream):
            continue
        try:
            reconfigure(errors=_ERROR_HANDLER)
        except (ValueError, OSError):  # a closed or detached stream: nothing will be written to it
            continue


def set_color(choice: str) -> None:
    """Record ``--color`` (``auto``, ``always`` or ``never``) for the rest of the process."""
    global _choice
    if choice not in COLOR_CHOICES:
        raise ValueError(f"--color {choice!r}: expected one of {', '.join(COLOR_CHOICES)}")
    _choice = choice


def color_setting() -> bool | None:
    """True or False when ``--color`` or the environment decides; None when it depends on the stream (a terminal or not)."""
    if _choice != "auto":
        return _choice == "always"
    if os.environ.get("NO_COLOR"):
        return False
    force = os.environ.get("FORCE_COLOR")
    if force and force != "0":
        return True
    return None


def color_for(stream: Any) -> bool:
    """Whether to colour what goes to ``stream`` (this module's docstring says how it is decided)."""
    decided = color_setting()
    if decided is not None:
        return decided
    try:
        tty = bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        tty = False
    return tty and os.environ.get("TERM") != "dumb"
