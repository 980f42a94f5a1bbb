"""Terminal escape sequences in text that came from elsewhere (a report's cell text, a Ray worker's error): found and removed."""

from __future__ import annotations

import re

#: CSI (colours, cursor), OSC (titles, hyperlinks) and two-character escapes
ANSI_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")


def strip_ansi(text: str) -> str:
    """``text`` without its ANSI escape sequences (``text`` itself when it has none)."""
    return ANSI_ESCAPE.sub("", text) if "\x1b" in text else text
