"""Targets turn a case into a trajectory: python callables, engines, providers."""

from __future__ import annotations

from collections.abc import Mapping

from evalx.targets.base import HIDDEN_TARGET_KEYS, TEMPLATE_NAMES, RunContext, Target, close_all, code_parts, task_id
from evalx.targets.settings import TargetSettings, resolve_settings
from evalx.targets.spec import TargetSpec
from evalx.targets.transport.pacing import EndpointLimiters, Tally, current_tally, tally


def build_target(spec: TargetSpec | Mapping[str, object], settings: TargetSettings) -> Target:
    """A target object for one validated ``targets:`` entry (its record, or the entry as written), running under ``settings``."""
    kind = spec.type if isinstance(spec, TargetSpec) else spec.get("type")
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
    "EndpointLimiters",
    "RunContext",
    "Tally",
    "Target",
    "TargetSettings",
    "build_target",
    "close_all",
    "code_parts",
    "current_tally",
    "resolve_settings",
    "tally",
    "task_id",
]
