"""evalx: a declarative eval runner for LLM apps and agents."""

from __future__ import annotations

from evalx.errors import ConfigError, DatasetError, EvalxError, JudgeError, TargetError, TargetProtocolError, TargetTimeout
from evalx.models import Case, Cell, ToolCall, Trajectory, Usage, Verdict
from evalx.assertions import AssertionContext, assertion

__version__ = "0.1.0"

__all__ = [
    "AssertionContext",
    "Case",
    "Cell",
    "ConfigError",
    "DatasetError",
    "EvalxError",
    "JudgeError",
    "TargetError",
    "TargetProtocolError",
    "TargetTimeout",
    "ToolCall",
    "Trajectory",
    "Usage",
    "Verdict",
    "__version__",
    "assertion",
]
