"""evalx: a declarative eval runner for LLM apps and agents.

This module is the public API: what plugin and target authors import
(docs/plugins.md), and running evals from Python: ``load_config``, ``run``,
``arun`` and their results (docs/python-api.md). ``__all__`` is curated and
pinned by a test; everything else (``evalx.config``, ``evalx.execution``...)
is internal.
"""

from __future__ import annotations

from evalx.api import AssertionResult, CellResult, RunResult, arun, load_config, run
from evalx.assertions import AssertionContext, assertion
from evalx.errors import ConfigError, DatasetError, EvalxError, JudgeError, TargetError, TargetProtocolError, TargetTimeout
from evalx.models import Case, Cell, ToolCall, Trajectory, Usage, Verdict
from evalx.version import __version__

__all__ = [
    "AssertionContext",
    "AssertionResult",
    "Case",
    "Cell",
    "CellResult",
    "ConfigError",
    "DatasetError",
    "EvalxError",
    "JudgeError",
    "RunResult",
    "TargetError",
    "TargetProtocolError",
    "TargetTimeout",
    "ToolCall",
    "Trajectory",
    "Usage",
    "Verdict",
    "__version__",
    "arun",
    "assertion",
    "load_config",
    "run",
]
