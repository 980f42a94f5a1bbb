"""The names and fields a config's templates read, checked against the cases they will render with, before any cell runs.

A target's ``prompt:``/``system:``/``messages:``/``params:``/``body:`` (and
what ``prompt_file:``/``system_file:`` read) sees the names of
:data:`evalx.targets.TEMPLATE_NAMES`; a judge's ``prompt:`` those of
:data:`evalx.judge.JUDGE_PROMPT_NAMES`. Each chain of literal steps a
template reads (:func:`evalx.common.templates.template_references`) is
looked up in the data a cell would render with, case by case, over the
datasets the target runs (a judge prompt: every dataset):

- a name the template cannot see, or a field no case has, is an error:
  ``evalconfig.yaml:9 targets[0].prompt: unknown field 'inptu' (did you mean 'input'?)``;
- a field some cases have and others lack is a warning naming the first case without it.

``env.X`` is not checked (the environment of a run may differ from that of
``evalx validate``), nor a chain under ``is defined``, ``| default`` or
after a ``'key' in ...`` test. A dataset is checked on its first
:data:`SAMPLE_CASES` cases.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

from evalx.common.documents import KeyPath, did_you_mean, display_path
from evalx.common.templates import Reference, missing_step, template_references
from evalx.errors import EvalxError, Issue
from evalx.judge import JUDGE_PROMPT_NAMES
from evalx.models import Case
from evalx.targets import HIDDEN_TARGET_KEYS, TEMPLATE_NAMES

if TYPE_CHECKING:
    from evalx.config.loader import Config
    from evalx.targets.definitions import ProviderDefinition

__all__ = ["SAMPLE_CASES", "attachment_issues", "reference_issues", "template_reference_issues"]

#: the cases of each dataset a template is checked against (a dataset of millions is not read twice over)
SAMPLE_CASES = 2_000
#: context names whose values evalx makes itself, whole (no field of theirs is checked)
_OPAQUE = frozenset({"env", "repeat", "task_id", "run_id", "turn"})


@dataclass(frozen=True)
class _Template:
    """One templated string of the config: where it is written, its text, and what it names in a message."""

    path: KeyPath
    source: str
    #: ``prompt_file prompts/a.txt: `` for a value read from a file
    prefix: str


def reference_issues(
    config: Config, cases: Mapping[str, Sequence[Case]], target_ids: Sequence[str] | None = None, *, matrix: bool = True
) -> list[Issue]:
    """What ``evalx validate`` and a run check before any cell: :func:`template_reference_issues`, then :func:`attachment_issues`.

    The first :data:`SAMPLE_CASES` cases of each dataset, which every check reads, are rebuilt from their table once.
    """
    sampled: dict[str, Sequence[Case]] = {name: _Sampled(found) for name, found in cases.items()}
    return template_reference_issues(config, sampled, target_ids, matrix=matrix) + attachment_issues(config, sampled, target_ids)


class _Sampled(Sequence[Case]):
    """A dataset's cases with its first :data:`SAMPLE_CASES` kept as built: the checks each read them, a table rebuilds each read."""

    def __init__(self, cases: Sequence[Case]) -> None:
        self._cases = cases
        self._first = [cases[i] for i in range(min(len(cases), SAMPLE_CASES))]

    def __len__(self) -> int:
        return len(self._cases)

    @overload
    def __getitem__(self, i: int) -> Case: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Case]: ...
    def __getitem__(self, i: int | slice) -> Case | Sequence[Case]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self._first[i] if 0 <= i < len(self._first) else self._cases[i]

    def __iter__(self) -> Iterator[Case]:
        yield from self._first
        for i in range(len(self._first), len(self._cases)):
            yield self._cases[i]


def template_reference_issues(
    config: Config, cases: Mapping[str, Sequence[Case]], target_ids: Sequence[str] | None = None, *, matrix: bool = True
) -> list[Issue]:
    """Every unknown name and field the config's templates read (errors) and fields only some cases have (warnings).

    ``cases``: the cases of each dataset (by id); ``target_ids``: the targets to check (default: all); ``matrix``:
    also the prompt axes of ``matrix:`` (``evalx validate``, a ``--matrix`` run). Besides the targets' and the
    judge's templates: a dataset's ``defaults: {system}`` and each case's own ``system:``.
    """
    from evalx.config.loader import template_path

    prefixes = {v.path: f"{v.file_key[-1]} {display_path(v.file)}: " for v in config.file_values}
    datasets = [d for d in config.datasets if isinstance(d, dict) and d.get("id") in cases]
    specs = {str(s.get("id")): s for s in config.targets if isinstance(s, dict)}
    issues: list[Issue] = []
    for i, spec in enumerate(config.targets):
        if not isinstance(spec, dict) or (target_ids is not None and spec.get("id") not in target_ids):
            continue
        ran = [cases[str(d["id"])] for d in datasets if not d.get("targets") or spec.get("id") in d["targets"]]
        for template in _templates(spec, ("targets", i), template_path, prefixes):
            issues += _check(config, template, TEMPLATE_NAMES, ran, spec)
    judge = config.data.get("judge")
    if isinstance(judge, dict) and isinstance(judge.get("prompt"), str):
        template = _Template(("judge", "prompt"), judge["prompt"], prefixes.get(("judge", "prompt"), ""))
        issues += _check(config, template, JUDGE_PROMPT_NAMES, list(cases.values()), None)
    if matrix:
        issues += _matrix_issues(config, cases, datasets, specs, prefixes)
    issues += _literal_issues(config, cases, template_path)
    for i, d in enumerate(config.datasets):
        if isinstance(d, dict) and d.get("id") in cases:
            running = [
                s for t, s in specs.items() if (target_ids is None or t in target_ids) and (not d.get("targets") or t in d["targets"])
            ]
            if running:
                issues += _system_issues(config, i, d, cases[str(d["id"])], running[0], prefixes)
    return issues


#: where ``{{ ... }}`` is text of its own, never a template evalx would render: nothing to warn about there
_TEXT_KEYS = frozenset({"vars", "description", "name", "metadata", "input", "expected", "turns", "context", "tool_results"})
_LITERAL = "is used as written, not rendered: only a target's prompt, system, messages, params and body, and judge prompts, are templates"


def _looks_templated(value: Any) -> bool:
    return isinstance(value, str) and (("{{" in value and "}}" in value) or ("{%" in value and "%}" in value))


def _literal_issues(config: Config, cases: Mapping[str, Sequence[Case]], is_template: Any) -> list[Issue]:
    """A warning for ``{{ ... }}`` where nothing renders it (an assertion's value, a header, a rubric): it is compared or sent as written.

    The config's own values (a path the loader renders as a template is left alone), and each dataset's case
    assertions (the first case that has one, per dataset).
    """
    issues: list[Issue] = []

    def walk(value: Any, path: KeyPath) -> None:
        if path and isinstance(path[-1], str) and path[-1] in _TEXT_KEYS:
            return
        if _looks_templated(value):
            if not is_template(path) and not (path and path[0] == "matrix"):
                issues.append(config.issue(path, f"{str(value)[:60]!r} {_LITERAL}", warning=True))
            return
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in items:
            walk(item, (*path, key))

    for key in ("targets", "assert", "hooks", "judge"):
        walk(config.data.get(key), (key,))
    for found in cases.values():  # inline cases too: a case's source is its own line of the config
        for n, case in enumerate(found):
            if n >= SAMPLE_CASES:
                break
            hit = next((a for a in case.asserts if any(_looks_templated(v) for v in _strings(a))), None)
            if hit is None:
                continue
            file, _, line = case.source.rpartition(":")
            where: tuple[str, int | None] = (file, int(line)) if line.isdigit() else (case.source, None)
            shown = next(v for v in _strings(hit) if _looks_templated(v))
            message = f"case {case.id!r}: assert {hit.get('type')!s}: {shown[:60]!r} {_LITERAL}"
            issues.append(Issue(where[0], where[1], "assert", message, True))
            break  # one a dataset: the rest are likely the same pattern
    return issues


def _strings(value: Any) -> list[str]:
    """Every string inside ``value`` (an assertion as written)."""
    if isinstance(value, str):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return [s for item in items for s in _strings(item)]


#: the matrix axes whose values are templates (a ``_file`` axis: the file's text, read when the config loaded)
_MATRIX_TEMPLATE_AXES = ("system", "prompt", "messages", "system_file", "prompt_file")


def _matrix_issues(
    config: Config,
    cases: Mapping[str, Sequence[Case]],
    datasets: list[dict[str, Any]],
    specs: Mapping[str, dict[str, Any]],
    prefixes: dict[KeyPath, str],
) -> list[Issue]:
    """The prompt axes of ``matrix:`` (``params`` values and ``include`` entries), against the datasets its targets run."""
    section = config.data.get("matrix")
    if not isinstance(section, dict):
        return []
    on = [specs[str(t)] for t in section.get("targets") or [] if str(t) in specs]
    if not on:
        return []
    ids = {str(s.get("id")) for s in on}
    ran = [cases[str(d["id"])] for d in datasets if not d.get("targets") or ids & {str(t) for t in d["targets"]}]
    found: list[_Template] = []
    params = section.get("params")
    for axis in _MATRIX_TEMPLATE_AXES:
        values = params.get(axis) if isinstance(params, dict) else None
        for j, value in enumerate(values if isinstance(values, list) else []):
            found += _axis_templates(value, ("matrix", "params", axis, j), prefixes)
    for j, entry in enumerate(section.get("include") or []):
        for axis in _MATRIX_TEMPLATE_AXES:
            if isinstance(entry, dict) and axis in entry:
                found += _axis_templates(entry[axis], ("matrix", "include", j, axis), prefixes)
    return [issue for template in found for issue in _check(config, template, TEMPLATE_NAMES, ran, on[0])]


def _axis_templates(value: Any, path: KeyPath, prefixes: dict[KeyPath, str]) -> list[_Template]:
    """An axis value's templates: the value itself, or a ``{label, value}``'s value (a file's text under a ``_file`` axis)."""
    if isinstance(value, dict) and "value" in value:
        return _templates(value["value"], (*path, "value"), lambda _: True, prefixes)
    return _templates(value, path, lambda _: True, prefixes)


def _system_issues(
    config: Config, index: int, dataset: dict[str, Any], cases: Sequence[Case], spec: dict[str, Any], prefixes: dict[KeyPath, str]
) -> list[Issue]:
    """A dataset's ``defaults: {system}`` (at its own line) and each case's own templated ``system:`` (at the case's line)."""
    issues: list[Issue] = []
    defaults = dataset.get("defaults")
    shared = defaults.get("system") if isinstance(defaults, dict) else None
    if isinstance(shared, str) and "{" in shared:
        path = ("datasets", index, "defaults", "system")
        issues += _check(config, _Template(path, shared, prefixes.get(path, "")), TEMPLATE_NAMES, [cases], spec)
    said: dict[str, int] = {}
    for n, case in enumerate(cases):
        if n >= SAMPLE_CASES:
            break
        if not isinstance(case.system, str) or "{" not in case.system or case.system == shared:
            continue
        file, _, line = case.source.rpartition(":")
        where: tuple[str, int | None] = (file, int(line)) if line.isdigit() else (case.source, None)
        for issue in _check(config, _Template(("system",), case.system, ""), TEMPLATE_NAMES, [[case]], spec):
            said[issue.message] = said.get(issue.message, 0) + 1
            if said[issue.message] <= _SAME_SYSTEM_SHOWN:
                issues.append(Issue(where[0], where[1], "system", f"case {case.id!r}: {issue.message}", issue.warning))
    for message, times in said.items():
        if times > _SAME_SYSTEM_SHOWN:
            issues.append(
                Issue(str(dataset.get("path") or dataset.get("id")), None, "system", f"{message}: {times - _SAME_SYSTEM_SHOWN} more cases")
            )
    return issues


#: the cases named for one problem of their own ``system:``; the others are counted in one more line
_SAME_SYSTEM_SHOWN = 3


def _templates(value: Any, path: KeyPath, is_template: Any, prefixes: dict[KeyPath, str]) -> list[_Template]:
    if isinstance(value, str):
        return [_Template(path, value, prefixes.get(path, ""))] if "{" in value and is_template(path) else []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return [t for key, item in items for t in _templates(item, (*path, key), is_template, prefixes)]


def _check(
    config: Config, template: _Template, names: Sequence[str], datasets: list[Sequence[Case]], spec: dict[str, Any] | None
) -> list[Issue]:
    try:
        refs = [r for r in template_references(template.source) if not r.guarded]
    except Exception:  # a syntax error: the loader's template check says so
        return []
    issues: list[Issue] = []
    said: set[str] = set()

    def say(message: str, *, warning: bool = False) -> None:
        if message not in said:
            said.add(message)
            issues.append(config.issue(template.path, template.prefix + message, warning=warning))

    for ref in refs:
        root = str(ref.chain[0])
        if root not in names:
            say(f"unknown name {root!r}{did_you_mean(root, names)} (a template here sees {', '.join(names)})")
        elif root not in _OPAQUE and len(ref.chain) > 1:
            problem = _field_problem(ref, datasets, config.vars, spec)
            if problem is not None:
                say(problem[0], warning=problem[1])
    return issues


def _field_problem(
    ref: Reference, datasets: list[Sequence[Case]], config_vars: dict[str, Any], spec: dict[str, Any] | None
) -> tuple[str, bool] | None:
    """``(message, is_warning)`` when ``ref`` leaves the data of no case (an error) or of some (a warning)."""
    root = ref.chain[0]
    steps = ref.chain[1:]
    target = {k: v for k, v in (spec or {}).items() if k not in HIDDEN_TARGET_KEYS}
    if root == "target":
        missing = missing_step(target, steps)
        return (_unknown(ref, missing, "target field"), False) if missing is not None else None
    seen = 0
    lacking: Case | None = None
    misses = 0
    first_miss: tuple[int, list[str | int]] | None = None
    keys: set[str] = set()
    for cases in datasets:
        for n, case in enumerate(cases):
            if n >= SAMPLE_CASES:
                break
            seen += 1
            value = _root_value(str(root), case, config_vars, spec, steps[0])
            if value is None:  # a name whose value this check does not know
                return None
            missing = missing_step(value, steps)
            if missing is None:
                continue
            misses += 1
            lacking = lacking or case
            first_miss = first_miss or missing
            keys.update(str(k) for k in missing[1])
    if not misses or first_miss is None:
        return None
    what = "var" if root == "vars" else "field"
    if misses == seen:  # no case has it
        return _unknown(ref, (first_miss[0], sorted(keys)), what), False
    shown = ".".join(str(s) for s in steps)
    where = f"{lacking.source} case {lacking.id!r}" if lacking is not None else "a case"
    return f"{misses} of {seen} cases lack the {what} {shown!r} (the first: {where}); its cells will error", True


def _root_value(root: str, case: Case, config_vars: dict[str, Any], spec: dict[str, Any] | None, first: Any = None) -> Any:
    if root == "case":  # what case.to_dict() has under ``first`` (without copying the whole case for every reference)
        return _case_view(case, first)
    if root == "vars":
        return {**config_vars, **((spec or {}).get("vars") or {}), **case.vars}
    return None


def _unknown(ref: Reference, missing: tuple[int, list[Any]], what: str) -> str:
    depth, keys = missing
    steps = [str(s) for s in ref.chain[1:]]
    shown = ".".join(steps[: depth + 1])
    above = ".".join(steps[:depth])
    names = [f"{above}.{k}" if above else str(k) for k in keys]
    hint = did_you_mean(shown, names)
    if not hint:
        listed = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        hint = f" (known: {listed})" if names else ""
    return f"unknown {what} {shown!r}{hint}"


#: the keys of every case's mapping (``Case.to_dict``), and those only some cases have
_CASE_KEYS = tuple(Case(id="", input=None).to_dict())
_OPTIONAL_CASE_KEYS = ("turns", "tool_results", "simulate", "context")


def _case_view(case: Case, first: Any) -> dict[str, Any]:
    """``case.to_dict()`` as far as ``first`` goes: its value under ``first`` if the case has it, else the keys it has."""
    if first in _OPTIONAL_CASE_KEYS:
        value = getattr(case, str(first))
        if value is not None:
            return {first: value}
    elif first in _CASE_KEYS:
        return {first: getattr(case, "asserts" if first == "assert" else str(first))}
    return {k: None for k in (*_CASE_KEYS, *(k for k in _OPTIONAL_CASE_KEYS if getattr(case, k) is not None))}


def attachment_issues(config: Config, cases: Mapping[str, Sequence[Case]], target_ids: Sequence[str] | None = None) -> list[Issue]:
    """A provider target that cannot send a case's images or documents (its definition's ``parts:``), one error a case.

    Each names the case's ``FILE:LINE``; engine and Python targets take every part. Every case is read once, and
    only for a target whose definition refuses some kind of part.
    """
    from evalx.common.attachments import is_parts
    from evalx.targets.definitions import UnknownProvider, find_provider, providers_dir_of

    providers = {
        str(spec.get("id")): spec["provider"]
        for spec in config.targets
        if isinstance(spec, dict)
        and spec.get("type", "provider") == "provider"
        and isinstance(spec.get("provider"), str)
        and (target_ids is None or spec.get("id") in target_ids)
    }
    definitions: dict[str, ProviderDefinition | None] = {}
    for name in providers.values():
        if name not in definitions:
            try:
                definitions[name] = find_provider(name, providers_dir_of(config))  # loaded already: the config's check read it
            except (UnknownProvider, EvalxError):  # the config's own check names it
                definitions[name] = None
    # only a target whose definition refuses some kind of part can refuse a case's: without one, no case is read
    refusing = {t: definitions[name] for t, name in providers.items() if _refuses_some_part(definitions[name])}
    if not refusing:
        return []
    issues: list[Issue] = []
    for d in config.datasets:
        if not isinstance(d, dict) or d.get("id") not in cases:
            continue
        on = [t for t in refusing if not d.get("targets") or t in d["targets"]]
        for case in cases[str(d["id"])] if on else ():
            if not is_parts(case.input):
                continue
            kinds = {("image_url" if "url" in p else p["type"]) for p in case.input if p["type"] != "text"}
            for target in on:
                if case.targets and target not in case.targets:
                    continue
                definition = refusing[target]
                reason = definition.refuses_parts(kinds) if definition is not None else None
                if reason is not None:
                    file, _, line = case.source.rpartition(":")
                    where = (file, int(line)) if line.isdigit() else (case.source, None)
                    message = f"case {case.id!r} has {' and '.join(sorted(kinds))} parts, which target {target!r} cannot send: {reason}"
                    issues.append(Issue(where[0], where[1], "input", message))
    return issues


#: the kinds of part a case's input may hold besides text (``image_url``: an image given by url)
_PART_KINDS = frozenset({"image", "image_url", "document"})


def _refuses_some_part(definition: ProviderDefinition | None) -> bool:
    """Whether a case's parts could be refused by ``definition`` (it refuses a kind of part on its own, so some kinds together)."""
    return definition is not None and any(definition.refuses_parts({kind}) is not None for kind in _PART_KINDS)
