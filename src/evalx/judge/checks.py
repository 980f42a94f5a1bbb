"""Judge checks made before any cell runs: references to judge targets, embedders, self-grading, and grounded checks' context."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from evalx.assertions.spec import AssertionSpec, assertion_spec
from evalx.models import Case
from evalx.targets.spec import EngineTargetSpec, ProviderTargetSpec, PythonTargetSpec, TargetSpec

__all__ = ["check_judge_refs", "graded_target_ids", "same_family", "same_model"]


def same_model(judge: TargetSpec, graded: TargetSpec, resolve: Callable[[str], Any] | None = None) -> str | None:
    """A description of the shared model when ``judge`` would grade itself, else None."""
    if isinstance(judge, ProviderTargetSpec) and isinstance(graded, ProviderTargetSpec):
        if judge.provider == graded.provider and judge.model == graded.model:
            return f"{judge.provider}/{judge.model}"
        return None
    if isinstance(judge, EngineTargetSpec) and isinstance(graded, EngineTargetSpec):
        return f"engine {judge.url}" if judge.url == graded.url else None
    if isinstance(judge, PythonTargetSpec) and isinstance(graded, PythonTargetSpec):
        a, b = judge.callable, graded.callable
        if a == b:
            return f"callable {a}"
        if resolve is not None:
            try:
                if resolve(a) is resolve(b):
                    return f"callable {a}"
            except Exception:  # an unimportable callable fails elsewhere, with its own message
                return None
    return None


def same_family(judge: TargetSpec, graded: TargetSpec) -> str | None:
    """The provider definition name when ``judge`` and ``graded`` are provider targets of one family (the same
    definition, e.g. both ``openai``) with different models, else None (:func:`same_model` covers the same model).

    A family is the provider definition, not the vendor behind a base URL: ``openai`` pointed at a local
    server is still the ``openai`` family, the rule DESIGN.md fixes ("same provider definition name").
    """
    if not isinstance(judge, ProviderTargetSpec) or not isinstance(graded, ProviderTargetSpec):
        return None
    name = judge.provider
    if not name or name != graded.provider or judge.model == graded.model:
        return None
    return name


def graded_target_ids(graded: set[str], global_asserts: Sequence[AssertionSpec], target_ids: list[str]) -> list[str]:
    """The targets (of ``target_ids``, in order) with at least one model-graded assertion to grade.

    ``graded``: the targets with a case a model grades (:meth:`evalx.execution.plan.Plan.graded_targets`).
    """
    from evalx.assertions import get_assertion

    if any((t := get_assertion(a.type)) is not None and t.model_graded for a in global_asserts):
        return list(target_ids)
    return [t for t in target_ids if t in graded]


def check_judge_refs(config: Any, cases: Mapping[str, Sequence[Case]]) -> int:
    """``evalx validate``'s judge checks: the number of model-graded assertions no judge will grade.

    Raises :class:`ConfigError` for a per-assertion ``judge.target`` or an
    ``embedding:`` that names no target, for an ``embedding:`` provider
    target whose definition has no ``embeddings:`` request, and for a
    config-level ``assert:`` that checks the context (``faithfulness``,
    ``context_recall``) while a case has none (the first such case is named;
    a case's own assertions are checked when its dataset loads).
    """
    from evalx.assertions import get_assertion
    from evalx.errors import ConfigError, Issue

    known = {t.id for t in config.typed.targets}
    has_global = config.typed.judge.target is not None
    unjudged = 0
    issues: list[Issue] = []
    entries: list[tuple[str, Case | None, AssertionSpec]] = [("assert", None, a) for a in config.typed.asserts]
    entries += [(case.source, case, assertion_spec(a)) for cs in cases.values() for case in cs for a in case.asserts]
    cannot_embed = _providers_without_embeddings(config) if any(spec.params.get("embedding") for _, _, spec in entries) else {}
    for where, case, spec in entries:
        atype = get_assertion(spec.type)
        if atype is None or not atype.model_graded:
            continue
        label = f"{where} case {case.id!r}" if case is not None else f"{config.file} assert"
        judge_ref = (spec.judge or {}).get("target")
        embedder = spec.params.get("embedding")
        for key, ref in (("judge.target", judge_ref), ("embedding", embedder)):
            if isinstance(ref, str) and ref not in known:
                issues.append(Issue(f"{label}: {spec.type}.{key}: unknown target {ref!r}", None, "", ""))
        if isinstance(embedder, str) and embedder in cannot_embed:
            issues.append(
                Issue(
                    f"{label}: {spec.type}.embedding: target {embedder!r} cannot produce embeddings: {cannot_embed[embedder]}",
                    None,
                    "",
                    "",
                )
            )
        if not has_global and judge_ref is None and embedder is None:
            unjudged += 1
    issues += _global_context_checks(config, cases)
    if issues:
        raise ConfigError(issues)
    return unjudged


def _global_context_checks(config: Any, cases: Mapping[str, Sequence[Case]]) -> list[Any]:
    """An issue for each config-level assertion that needs a case's context, naming the first case without one."""
    from evalx.assertions import get_assertion
    from evalx.assertions.model_graded import NEEDS_CONTEXT
    from evalx.common import written

    out = []
    for i, spec in enumerate(written.global_asserts(config)):
        if spec.get("type") not in NEEDS_CONTEXT:
            continue
        atype = get_assertion(str(spec["type"]))
        check = atype.check if atype is not None else None
        if check is None:
            continue
        for case in (c for cs in cases.values() for c in cs):
            problem = check(spec, case)
            if problem is not None:
                out.append(config.issue(("assert", i), f"{spec['type']}: case {case.id!r} ({case.source}): {problem}"))
                break
    return out


def _providers_without_embeddings(config: Any) -> dict[str, str]:
    """Provider target id → why it cannot embed, for targets whose definition has no ``embeddings:``."""
    from evalx.errors import ConfigError
    from evalx.targets.definitions import find_provider, providers_dir_of
    from evalx.targets.spec import ProviderTargetSpec

    out: dict[str, str] = {}
    for target in config.typed.targets:
        if not isinstance(target, ProviderTargetSpec):
            continue
        try:
            definition = find_provider(target.provider, providers_dir_of(config))
        except ConfigError:  # an unknown or broken provider is reported by the config checks
            continue
        if definition.embeddings is None:
            out[target.id] = f"provider {definition.name!r} has no embeddings: section in its definition ({definition.file})"
    return out
