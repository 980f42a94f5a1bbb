"""Targets turn a case into a trajectory: python callables, engines, providers."""

from __future__ import annotations

from typing import Any

from evalx.targets.base import RunContext, Target, task_id


def build_target(spec: dict[str, Any], *, defaults: dict[str, Any]) -> Target:
    """A target object for one validated ``targets:`` entry."""
    concurrency = int(spec.get("concurrency", defaults["concurrency"]))
    kind = spec["type"]
    if kind == "python":
        from evalx.targets.python import PythonTarget

        return PythonTarget(spec, concurrency=concurrency)
    if kind == "engine":
        from evalx.targets.engine import EngineTarget

        return EngineTarget(spec, defaults=defaults)
    if kind == "provider":
        from evalx.targets.provider import ProviderTarget

        return ProviderTarget(spec, defaults=defaults)
    raise ValueError(f"unknown target type {kind!r}")


def cache_enabled(spec: dict[str, Any], defaults: dict[str, Any]) -> bool:
    """Whether a target's cells go through the response cache: on for providers, opt-in (`cache: true`) otherwise."""
    if spec.get("cache") is not None:
        return bool(spec["cache"])
    if defaults.get("cache") is not None:
        return bool(defaults["cache"])
    return spec.get("type") == "provider"


__all__ = ["RunContext", "Target", "build_target", "cache_enabled", "task_id"]
