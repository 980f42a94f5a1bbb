"""Expand ``matrix:`` into target variants, the way GitHub Actions expands a job matrix.

``params`` axes make a cartesian product of combinations (first axis
outermost). ``exclude`` drops every combination that matches all the
key/value pairs of an entry. ``include`` then walks its entries in order: an
entry is merged into every combination whose *original* axis values it does
not contradict (keys that are not axes are extra request params; they may
overwrite what an earlier include added), and an entry that fits no
combination becomes a combination of its own. With no axes at all, each
``include`` entry is a combination.

Each combination turns a provider target into a variant: an axis named for a
key of the target that shapes the request (:data:`TARGET_KEYS`: ``model``,
``system``, ``prompt``, ``messages``, ``tools``, ``json_mode``, and the
``system_file``/``prompt_file``/``tools_file`` twins, read when the config
loads: :mod:`evalx.config.files`) sets that key, any other axis sets
``params[key]``. An axis value may be written ``{label: NAME, value: V}`` (and,
on a ``model`` axis, ``pricing:``): the variant id names it by its label; a
file's value is named by the file's stem. Variants get readable,
deterministic ids — ``mini[temperature=0.7]``, ``mini[model=gpt-4.1,system_file=terse]``
(``model`` first, then the other keys in alphabetical order) — so a variant
keeps its id when the axes are reordered, and baselines still line up. A
``model`` variant of another model than the target's is priced by the
provider definition's price for that model (or its value's ``pricing:``),
never by the target's own ``pricing:``. Targets of other types take no params
and run once, unchanged.

:func:`count_combinations` counts a matrix without expanding it, so a plan
can be refused (``evalx.execution.plan``) before 8 axes of 10 values become
10**8 dicts.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evalx.common.documents import did_you_mean
from evalx.common.json_types import JSON, JSONObject, as_array, as_object
from evalx.errors import Issue

if TYPE_CHECKING:
    from evalx.config.loader import Config
    from evalx.results.model import MatrixVariant

__all__ = [
    "FILE_AXES",
    "TARGET_KEYS",
    "MatrixCount",
    "Variant",
    "combinations",
    "count_combinations",
    "count_variants",
    "expand",
    "labelled",
    "matrix_count",
    "matrix_issues",
    "plain_value",
    "shown_value",
    "variant_id",
]

#: target types a matrix axis can apply to (the others take no request params)
AXIS_TYPES = ("provider",)
#: axes that set a provider target's own key rather than ``params[axis]``
TARGET_KEYS = ("model", "system", "prompt", "messages", "tools", "json_mode")
#: the ``_file`` twin of a target key (its values are read when the config loads: :mod:`evalx.config.files`)
FILE_AXES = {"system_file": "system", "prompt_file": "prompt", "tools_file": "tools"}
#: the keys of a labelled axis value, ``{label, value, pricing}``; ``file`` is added by the loader for a value read from a file
LABELLED_KEYS = frozenset({"label", "value", "pricing", "file"})
#: the longest inline ``system``/``prompt`` text a variant id shows as it is; a longer one needs a ``label:``
MAX_SHOWN_TEXT = 60
#: what a variant's key replaces on the target: a prompt axis drops the target's messages, and so on
_DISPLACES = {
    "system": ("system_file",),
    "prompt": ("prompt_file", "messages"),
    "messages": ("prompt", "prompt_file"),
    "tools": ("tools_file",),
}


def labelled(value: JSON) -> JSONObject | None:
    """``value`` when it is a labelled axis value (``{value, label?, pricing?}``), else None."""
    if isinstance(value, dict) and "value" in value and set(value) <= LABELLED_KEYS:
        return value
    return None


def plain_value(value: JSON) -> JSON:
    """What an axis value sets on the target: a labelled value's ``value``, else the value itself."""
    found = labelled(value)
    return found["value"] if found is not None else value


def shown_value(value: JSON) -> str:
    """An axis value as a variant id names it: its label, else :func:`format_value` of its value."""
    found = labelled(value)
    if found is not None and isinstance(found.get("label"), str):
        return str(found["label"])
    return format_value(plain_value(value))


def recorded_value(value: JSON) -> JSON:
    """An axis value as ``summary.json`` records it (``matrix.variants[].values``): a file's path, else a label, else the value."""
    found = labelled(value)
    if found is None:
        return value
    if isinstance(found.get("file"), str):
        return found["file"]
    if isinstance(found.get("label"), str):
        return found["label"]
    return found["value"]


@dataclass
class Variant:
    """One target of a matrix run: a provider target with a combination applied, or a target as is."""

    id: str
    target: str  # the id of the target in targets:
    #: the combination applied (axis and include values, as written in ``matrix:``)
    values: JSONObject = field(default_factory=dict)
    #: the ``targets:`` entry with the combination applied, as the config wrote it (typed later by ``target_spec``)
    spec: JSONObject = field(default_factory=dict)

    def to_dict(self) -> MatrixVariant:
        return {"id": self.id, "target": self.target, "values": {k: recorded_value(v) for k, v in self.values.items()}}


def _equal(a: JSON, b: JSON) -> bool:
    # YAML `true` must not equal `1`, nor `0` equal `false`; 0 and 0.0 are the same number
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    return bool(a == b)


def _same(a: JSON, b: JSON) -> bool:
    """Whether two axis values are the same: a labelled value is also named by its label, its file or its value."""
    la, lb = labelled(a), labelled(b)
    if la is None and lb is None:
        return _equal(a, b)
    if la is not None and lb is not None:
        for name in ("file", "label"):  # the same file, else the same label, else the same value
            if name in la and name in lb:
                return _equal(la[name], lb[name])
        return _equal(la["value"], lb["value"])
    found, other = (la, b) if la is not None else (lb, a)
    assert found is not None
    return any(_equal(name, other) for name in (found.get("label"), found.get("file"), found["value"]) if name is not None)


def _matches(combo: Mapping[str, JSON], entry: Mapping[str, JSON]) -> bool:
    return all(key in combo and _same(combo[key], value) for key, value in entry.items())


def combinations(
    params: Mapping[str, list[JSON]],
    include: Iterable[Mapping[str, JSON]] = (),
    exclude: Iterable[Mapping[str, JSON]] = (),
) -> list[JSONObject]:
    """The combinations of a matrix, in a stable order, without duplicates.

    GitHub Actions semantics: product of the axes, minus ``exclude`` matches,
    then ``include`` extends the combinations it fits (never overwriting an
    original axis value) or adds itself as a new one.
    """
    names = list(params)
    original: list[JSONObject] = []
    if names:
        for values in itertools.product(*(params[n] for n in names)):
            original.append(dict(zip(names, values)))
    excluded = [dict(e) for e in exclude]
    original = [c for c in original if not any(_matches(c, e) for e in excluded)]
    combos = [(c, frozenset(c)) for c in original]
    added: list[JSONObject] = []
    for entry in include:
        fitted = False
        for combo, axes in combos:
            if all(_same(combo[k], v) for k, v in entry.items() if k in axes):
                combo.update({k: v for k, v in entry.items() if k not in axes})  # an axis value stays as the axis wrote it
                fitted = True
        if not fitted:
            added.append(dict(entry))
    out: list[JSONObject] = []
    seen: set[str] = set()
    for combo in [c for c, _ in combos] + added:
        key = variant_id("", combo)
        if key not in seen:
            seen.add(key)
            out.append(combo)
    return out


#: the steps counting one matrix may take (about 0.1 s) before it settles for an upper bound
COUNT_BUDGET = 200_000


@dataclass(frozen=True)
class MatrixCount:
    """How many combinations a ``matrix:`` makes, counted without expanding it."""

    #: after exclude and include, at most (an axis that lists a value twice makes combinations that merge)
    combinations: int
    #: False when exclude entries were too entangled to count within :data:`COUNT_BUDGET`:
    #: ``combinations`` is then the product of the axes plus the include entries, an upper bound
    exact: bool
    product: int  # the product of the axis sizes
    axes: int


class _OutOfSteps(Exception):
    pass


class _Steps:
    def __init__(self, steps: int) -> None:
        self.left = steps

    def spend(self, steps: int = 1) -> None:
        self.left -= steps
        if self.left < 0:
            raise _OutOfSteps


def _survivors(values: Mapping[str, Sequence[JSON]], exclude: Sequence[Mapping[str, JSON]], steps: _Steps) -> int:
    """How many combinations of the axes ``values`` no ``exclude`` entry matches, without listing them.

    Only the axes an entry names matter: the values of each such axis fall into
    classes by which entries they satisfy, and a depth-first walk over the
    classes counts the combinations that escape every entry, weighting each
    class by how many values it holds (a walk stops as soon as no entry can
    match any more). Raises :class:`_OutOfSteps` past the budget.
    """
    names = list(values)
    if not names:
        return 0
    entries = [e for e in exclude if all(k in values for k in e)]  # an entry naming no axis matches nothing
    total = math.prod(len(values[n]) for n in names)
    if not entries or total == 0:
        return total
    if any(not e for e in entries):
        return 0
    mentioned = [n for n in names if any(n in e for e in entries)]
    free = math.prod(len(values[n]) for n in names if n not in mentioned)
    everyone = (1 << len(entries)) - 1
    classes: list[list[tuple[int, int]]] = []
    for name in mentioned:
        constrained = [i for i, e in enumerate(entries) if name in e]
        base = everyone & ~sum(1 << i for i in constrained)  # an entry that does not name this axis is satisfied by any value
        steps.spend(len(values[name]) * len(constrained))
        counts: Counter[int] = Counter()
        for value in values[name]:
            counts[base | sum(1 << i for i in constrained if _same(value, entries[i][name]))] += 1
        classes.append(sorted(counts.items()))
    # rest[k]: the combinations of the mentioned axes from k on
    rest = [1] * (len(mentioned) + 1)
    for k in range(len(mentioned) - 1, -1, -1):
        rest[k] = rest[k + 1] * len(values[mentioned[k]])

    def walk(k: int, alive: int) -> int:
        if not alive:  # no entry can match whatever the remaining axes are
            return rest[k]
        if k == len(mentioned):
            return 0
        steps.spend(len(classes[k]))
        return sum(count * walk(k + 1, alive & mask) for mask, count in classes[k])

    if len(mentioned) > 100:  # deeper than a walk should go: settle for the bound
        raise _OutOfSteps
    return free * walk(0, everyone)


def count_combinations(
    params: Mapping[str, Sequence[JSON]],
    include: Sequence[Mapping[str, JSON]] = (),
    exclude: Sequence[Mapping[str, JSON]] = (),
    *,
    budget: int = COUNT_BUDGET,
) -> MatrixCount:
    """The size of :func:`combinations` (``params``, ``include``, ``exclude``) without building one combination.

    The product of the axes, minus the combinations an ``exclude`` entry
    matches, plus each ``include`` entry that fits no remaining combination.
    Cheap whatever the product: 8 axes of 10 values count in microseconds.
    """
    values = {name: list(axis) for name, axis in params.items()}
    product = math.prod(len(v) for v in values.values()) if values else 0
    steps = _Steps(budget)
    try:
        survivors = _survivors(values, exclude, steps)
    except _OutOfSteps:
        return MatrixCount(product + len(include), False, product, len(values))
    exact = True
    added = 0
    for j, entry in enumerate(include):
        if not values or survivors == 0:
            added += 1  # nothing to extend: the entry is a combination of its own
            continue
        within = {n: ([v for v in axis if _same(v, entry[n])] if n in entry else axis) for n, axis in values.items()}
        try:
            steps.spend(sum(len(axis) for n, axis in values.items() if n in entry))
            fits = _survivors(within, exclude, steps)
        except _OutOfSteps:
            exact = False
            added += len(include) - j  # the bound: each entry left might add one
            break
        added += fits == 0
    return MatrixCount(survivors + added, exact, product, len(values))


def matrix_count(matrix: object) -> MatrixCount:
    """:func:`count_combinations` of a ``matrix:`` section as written (malformed parts ignored, as :func:`expand` does)."""
    params, include, exclude = _section(matrix)
    return count_combinations(params, include, exclude)


def count_variants(specs: Iterable[Mapping[str, JSON]], count: MatrixCount) -> dict[str, int]:
    """The variants each target of ``specs`` (by id) becomes under a matrix of ``count`` combinations, as :func:`expand` makes them."""
    return {str(spec["id"]): (count.combinations if spec.get("type") in AXIS_TYPES and count.combinations else 1) for spec in specs}


def _ordered(combo: Mapping[str, JSON]) -> list[tuple[str, JSON]]:
    keys = sorted(combo, key=lambda k: (k != "model", k))
    return [(k, combo[k]) for k in keys]


def format_value(value: Any) -> str:
    """An axis value as it appears in a variant id: strings bare, the rest as compact JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def variant_id(target_id: str, combo: Mapping[str, JSON]) -> str:
    """``target[key=value,...]``, ``model`` first then the keys alphabetically; the bare id without a combination."""
    if not combo:
        return target_id
    inner = ",".join(f"{k}={shown_value(v)}" for k, v in _ordered(combo))
    return f"{target_id}[{inner}]"


def apply(spec: Mapping[str, JSON], combo: Mapping[str, JSON], new_id: str) -> JSONObject:
    """A copy of a provider target spec with ``combo`` applied and its id replaced.

    A target key (:data:`TARGET_KEYS`, a ``_file`` axis setting its twin) replaces the target's own, and what it
    displaces (a prompt the target's ``messages:``); other keys are params. A model other than the target's
    drops the target's ``pricing:`` (it priced the target's model), and a value's ``pricing:`` sets it.
    """
    out = copy.deepcopy(dict(spec))
    out["id"] = new_id
    params = dict(as_object(out.get("params")))
    pricing: JSON = None
    for key, written in combo.items():
        found = labelled(written)
        if found is not None and "pricing" in found:
            pricing = found["pricing"]
        value = copy.deepcopy(plain_value(written))
        target_key = FILE_AXES.get(key, key)
        if target_key not in TARGET_KEYS:
            params[key] = value
            continue
        if target_key == "model" and not _equal(value, spec.get("model")):
            out.pop("pricing", None)
        for displaced in _DISPLACES.get(target_key, ()):
            out.pop(displaced, None)
        out[target_key] = value
    if pricing is not None:
        out["pricing"] = copy.deepcopy(pricing)
    if params or "params" in out:
        out["params"] = params
    return out


def _section(matrix: object) -> tuple[dict[str, list[JSON]], list[JSONObject], list[JSONObject]]:
    section = as_object(matrix)
    params = {k: v for k, v in as_object(section.get("params")).items() if isinstance(v, list)}
    include = [e for e in as_array(section.get("include")) if isinstance(e, dict)]
    exclude = [e for e in as_array(section.get("exclude")) if isinstance(e, dict)]
    return params, include, exclude


def expand(specs: Iterable[Mapping[str, JSON]], matrix: object) -> list[Variant]:
    """The variants of ``specs`` (in order) under the ``matrix:`` section."""
    params, include, exclude = _section(matrix)
    combos = combinations(params, include, exclude) if (params or include) else []
    variants: list[Variant] = []
    for spec in specs:
        if spec.get("type") not in AXIS_TYPES or not combos:
            variants.append(Variant(str(spec["id"]), str(spec["id"]), {}, dict(spec)))
            continue
        for combo in combos:
            vid = variant_id(str(spec["id"]), combo)
            variants.append(Variant(vid, str(spec["id"]), dict(_ordered(combo)), apply(spec, combo, vid)))
    return variants


# --- validation -------------------------------------------------------------

_PRICE_KEYS = ("input_per_mtok", "output_per_mtok", "cached_input_per_mtok")


def axis_value_problems(name: str, value: JSON) -> list[tuple[tuple[str, ...], str]]:
    """What is wrong with one value of axis ``name`` (a sub-path under the value, and a message); none for a params axis value."""
    key = FILE_AXES.get(name, name)
    found = labelled(value)
    if key not in TARGET_KEYS:
        if found is not None and "pricing" in found:
            return [(("pricing",), "pricing: goes with a model value (an axis named model)")]
        return []
    problems: list[tuple[tuple[str, ...], str]] = []
    if isinstance(value, dict) and found is None and ({"label", "pricing"} & set(value)):
        extra = sorted(set(value) - LABELLED_KEYS)
        why = f"unknown key {extra[0]!r}" if extra else "it has no value"
        return [((), f"a labelled value is {{label, value, pricing}}: {why}")]
    if found is not None:
        label = found.get("label")
        if "label" in found and (not isinstance(label, str) or not label.strip()):
            problems.append((("label",), "a label must be a non-empty string"))
        if "pricing" in found:
            problems += [(("pricing", *sub), message) for sub, message in _pricing_problems(name, found["pricing"])]
    plain = plain_value(value)
    inner: tuple[str, ...] = ("value",) if found is not None else ()
    if name in FILE_AXES:
        return problems  # read when the config loaded (evalx.config.files): its problems were said then
    if key == "model" and not isinstance(plain, str):
        problems.append((inner, f"a model must be a string, not {format_value(plain)}"))
    elif key in ("system", "prompt"):
        if not isinstance(plain, str):
            problems.append((inner, f"a {key} is a template string, not {format_value(plain)}"))
        elif found is None and ("\n" in plain or len(plain) > MAX_SHOWN_TEXT):
            problems.append(
                (
                    (),
                    f"a {key} longer than a short line needs a name in the variant id: write {{label: NAME, value: ...}}, or use a {key}_file axis",
                )
            )
    elif key in ("messages", "tools"):
        if not isinstance(plain, list):
            problems.append((inner, f"{key} is a list, not {format_value(plain)}"))
        elif found is None:
            problems.append(((), f"a {key} value needs a name in the variant id: write {{label: NAME, value: [...]}}"))
    elif key == "json_mode" and not isinstance(plain, bool):
        problems.append((inner, f"json_mode is true or false, not {format_value(plain)}"))
    return problems


def _pricing_problems(name: str, pricing: JSON) -> list[tuple[tuple[str, ...], str]]:
    if name != "model":
        return [((), "pricing: goes with a model value (an axis named model)")]
    if not isinstance(pricing, dict):
        return [((), "pricing is {input_per_mtok, output_per_mtok, cached_input_per_mtok}")]
    problems: list[tuple[tuple[str, ...], str]] = []
    for key in pricing:
        if key not in _PRICE_KEYS:
            problems.append(((str(key),), f"unknown pricing key {key!r}{did_you_mean(str(key), _PRICE_KEYS)}"))
    for key in _PRICE_KEYS:
        number = pricing.get(key)
        if key not in pricing:
            if key != "cached_input_per_mtok":
                problems.append(((), f"pricing needs {key}"))
        elif isinstance(number, bool) or not isinstance(number, (int, float)) or number < 0:
            problems.append(((key,), f"a price is a number of USD per million tokens, 0 or more, not {format_value(number)}"))
    return problems


def matrix_targets(config: Config) -> list[JSONObject]:
    """The targets ``--matrix`` expands: ``matrix.targets``, else the default targets."""
    by_id = {t.get("id"): t for t in config.data.get("targets") or [] if isinstance(t, dict)}
    matrix = config.data.get("matrix")
    listed = matrix.get("targets") if isinstance(matrix, dict) else None
    defaults = config.data.get("defaults")
    default_ids = defaults.get("targets") if isinstance(defaults, dict) else None
    ids: list[Any]
    if isinstance(listed, list) and listed:
        ids = listed
    elif isinstance(default_ids, list) and default_ids:
        ids = default_ids
    else:
        ids = list(by_id)
    return [by_id[i] for i in ids if isinstance(i, str) and i in by_id]


def matrix_issues(config: Config) -> list[Issue]:
    """Semantic problems of ``matrix:``, each naming its key path and line."""
    matrix = config.data.get("matrix")
    if not isinstance(matrix, dict):
        return []
    issues: list[Issue] = []
    raw_params = matrix.get("params")
    axes: JSONObject = raw_params if isinstance(raw_params, dict) else {}
    listed = matrix_targets(config)
    kinds = sorted({str(t.get("type")) for t in listed})
    applies = any(k in AXIS_TYPES for k in kinds)
    where = "matrix.targets" if matrix.get("targets") else "the default targets"
    no_params = f"{where} lists only {' and '.join(kinds)} targets, which take no params; axes set a provider target's model and params"

    for name, values in axes.items():
        path = ("matrix", "params", name)
        if isinstance(values, list) and not values:
            issues.append(config.issue(path, f"axis {name!r} is empty: list at least one value"))
        elif not applies and listed:
            issues.append(config.issue(path, f"axis {name!r} applies to no target: {no_params}"))
        elif isinstance(values, list):
            twin = next((f for f, key in FILE_AXES.items() if key == name and f in axes), None)
            if twin is not None:
                issues.append(config.issue(path, f"give axis {name!r} or {twin!r}, not both"))
            labels: dict[str, int] = {}
            for j, value in enumerate(values):
                issues += [config.issue((*path, j, *sub), message) for sub, message in axis_value_problems(name, value)]
                shown = shown_value(value) if labelled(value) is not None else None
                if shown is not None and shown in labels:
                    issues.append(
                        config.issue(
                            (*path, j), f"values {labels[shown]} and {j} of axis {name!r} are both named {shown!r}: give them other labels"
                        )
                    )
                elif shown is not None:
                    labels[shown] = j

    axis_list = ", ".join(axes) or "none"
    for j, entry in enumerate(matrix.get("exclude") or []):
        if not isinstance(entry, dict):
            continue
        if not entry:
            issues.append(config.issue(("matrix", "exclude", j), "an empty exclude entry would drop every combination"))
        for key in entry:
            if key not in axes:
                issues.append(
                    config.issue(
                        ("matrix", "exclude", j, key),
                        f"exclude key {key!r} names no axis (axes: {axis_list}){did_you_mean(str(key), axes)}",
                    )
                )
    for j, entry in enumerate(matrix.get("include") or []):
        if not isinstance(entry, dict):
            continue
        entry_path: tuple[str, str, int] = ("matrix", "include", j)
        if not entry:
            issues.append(config.issue(entry_path, "an empty include entry adds nothing"))
            continue
        if not applies and listed:
            issues.append(config.issue(entry_path, f"include applies to no target: {no_params}"))
            continue
        if axes and not any(k in axes for k in entry):
            hints = "".join(did_you_mean(str(k), axes) for k in entry)
            issues.append(
                config.issue(
                    entry_path,
                    f"include entry names no axis (axes: {axis_list}){hints}; "
                    "it would extend every combination — set such params on the target instead",
                )
            )
            continue
        for key, value in entry.items():
            if key not in axes and axes:
                hint = did_you_mean(str(key), axes)
                if hint:  # an extra param is fine; one that looks like a misspelt axis is not
                    issues.append(config.issue((*entry_path, key), f"include key {key!r} names no axis{hint}"))
            issues += [config.issue((*entry_path, key, *sub), message) for sub, message in axis_value_problems(str(key), value)]

    if not issues and applies:
        params, include, exclude = _section(matrix)
        counted = count_combinations(params, include, exclude)  # never expands: 10**8 combinations count as fast as 4
        if params and counted.exact and not counted.combinations:
            issues.append(config.issue(("matrix", "exclude"), "exclude removes every combination: nothing would run"))
    return issues
