"""Targets turn a case into a trajectory: python callables, engines, providers."""

from __future__ import annotations

from typing import Any

from evalx.targets.base import HIDDEN_TARGET_KEYS, TEMPLATE_NAMES, RunContext, Target, close_all, task_id
from evalx.targets.settings import TargetSettings, resolve_settings


def build_target(spec: dict[str, Any], settings: TargetSettings) -> Target:
    """A target object for one validated ``targets:`` entry, running under its resolved ``settings``."""
    kind = spec["type"]
    if kind == "python":
        from evalx.targets.python import PythonTarget

        return PythonTarget(spec, settings)
    if kind == "engine":
        from evalx.targets.engine import EngineTarget

        return EngineTarget(spec, settings)
    if kind == "provider":
        from evalx.targets.provider import ProviderTarget

        return ProviderTarget(spec, settings)
    raise ValueError(f"unknown target type {kind!r}")


__all__ = [
    "HIDDEN_TARGET_KEYS",
    "TEMPLATE_NAMES",
    "RunContext",
    "Target",
    "TargetSettings",
    "build_target",
    "close_all",
    "resolve_settings",
    "task_id",
]
