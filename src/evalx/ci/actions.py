"""GitHub Actions' files a step writes to: ``$GITHUB_OUTPUT`` (step outputs) and ``$GITHUB_STEP_SUMMARY``."""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping

from evalx.errors import writing

__all__ = ["append_step_summary", "set_step_outputs"]


def set_step_outputs(values: Mapping[str, str]) -> bool:
    """Append ``values`` to ``$GITHUB_OUTPUT`` (a value with a line break in the runner's delimiter form); False when unset."""
    path = os.environ.get("GITHUB_OUTPUT")
    if not path:
        return False
    lines = []
    for name, value in values.items():
        if "\n" in value or "\r" in value:
            delimiter = f"EVALX_{secrets.token_hex(8)}"
            lines.append(f"{name}<<{delimiter}\n{value}\n{delimiter}")
        else:
            lines.append(f"{name}={value}")
    with writing(path), open(path, "a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return True


def append_step_summary(text: str) -> bool:
    """Append ``text`` to ``$GITHUB_STEP_SUMMARY``; False when unset."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return False
    with writing(path), open(path, "a", encoding="utf-8") as f:
        f.write(text.rstrip("\n") + "\n\n")
    return True
