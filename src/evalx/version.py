"""evalx's version, in one place: the package, the CLI's ``--version``, the reports and pyproject.toml (hatch reads it here)."""

from __future__ import annotations

__version__ = "0.1.0"
