"""Built-in assertion types (importing this module registers them)."""

from __future__ import annotations

from evalx.assertions import deterministic, model_graded, text_metrics, trajectory  # noqa: F401
from evalx.assertions import tools  # noqa: F401
