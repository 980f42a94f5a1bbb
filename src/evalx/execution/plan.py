"""Turn a config and the command line's selections into cells, in matrix order.

Matrix order is (dataset, case, target, repeat): reports list cells that way
so two runs diff cleanly.

A plan is counted before it is built: the matrix's variants (without
expanding it) and the cells (variants × cases × repeats). Past
:data:`MAX_VARIANTS` or :data:`MAX_CELLS` (or the limits a config or the
command line sets) it is refused with a one-line :class:`ConfigError` naming
what made it that big, so a typo like ``--repeat 100000000`` costs nothing.
"""

from __future__ import annotations

import fnmatch
import gc
from dataclasses import dataclass, field
from typing import Any

from evalx.config.loader import Config
from evalx.config.matrix import MatrixCount, Variant, count_variants, expand, matrix_count
from evalx.errors import ConfigError, DatasetError, Issue
from evalx.models import Case, Cell


@dataclass
class Selection:
    targets: list[str] = field(default_factory=list)
    datasets: list[str] = field(default_factory=list)
    case_globs: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    repeat: int | None = None
    matrix: bool = False
    max_cells: int | None = None  # --max-cells; None: defaults.max_cells, else MAX_CELLS
    max_variants: int | None = None  # --max-variants; None: defaults.max_variants, else MAX_VARIANTS


#: the most cells a plan may have (``--max-cells``, ``defaults.max_cells``): ten times the largest run
#: evalx is built for (a million cells), so only a mistake reaches it; planning it takes seconds and ~1.5 GB
MAX_CELLS = 10_000_000
#: the most targets a ``--matrix`` run may expand to (``--max-variants``, ``defaults.max_variants``): each
#: variant is a target with its own connections, ``concurrency`` slots and report column
MAX_VARIANTS = 10_000


@dataclass(frozen=True)
class PlanSize:
    """What a plan holds, counted before it is built."""

    targets: int  # the run's targets, each matrix variant counted
    cases: int
    cells: int
    matrix: MatrixCount | None = None  # --matrix runs: the combinations of matrix:


@dataclass
class Plan:
    target_specs: list[dict[str, Any]]
    cases: dict[str, list[Case]]
    cells: list[Cell]
    #: --matrix runs: every target of the run as a variant (id -> variant), in order
    variants: dict[str, Variant] = field(default_factory=dict)
    #: target id -> its cells, made on first use (for the cells list it was made from)
    _by_target: tuple[int, int, dict[str, list[Cell]]] | None = field(default=None, repr=False, compare=False)

    def cells_for(self, target_id: str) -> list[Cell]:
        """The cells of one target, in order (one pass over the cells for all targets, not one per target)."""
        made = self._by_target
        if made is None or made[0] != id(self.cells) or made[1] != len(self.cells):
            index: dict[str, list[Cell]] = {}
            for cell in self.cells:
                index.setdefault(cell.target, []).append(cell)
            made = self._by_target = (id(self.cells), len(self.cells), index)
        return list(made[2].get(target_id, ()))

    def base_id(self, target_id: str) -> str:
        """The ``targets:`` id a run target comes from (a matrix variant's own target)."""
        variant = self.variants.get(target_id)
        return variant.target if variant is not None else target_id

    @property
    def base_target_ids(self) -> list[str]:
        """The ``targets:`` entries this plan runs, each once, in order."""
        return list(dict.fromkeys(self.base_id(t["id"]) for t in self.target_specs))

    def matrix_summary(self) -> dict[str, Any] | None:
        """What summary.json records of a matrix run: its variants."""
        if not self.variants:
            return None
        return {"variants": [v.to_dict() for v in self.variants.values()]}


def load_all_datasets(config: Config, only: list[str] | None = None) -> dict[str, list[Case]]:
    from evalx.datasets.loader import load_dataset

    out: dict[str, list[Case]] = {}
    errors: list[str] = []
    for i, spec in enumerate(config.datasets):
        if only and spec["id"] not in only:
            continue
        try:
            out[spec["id"]] = load_dataset(
                spec,
                base_dir=config.base_dir,
                config_file=config.file,
                line=config.line(("datasets", i)),
                positions=config.loaded.lines,
                path_prefix=("datasets", i),
            )
        except DatasetError as exc:
            errors.extend(str(exc).splitlines())
    if errors:
        # a dataset error's text already names FILE:LINE key.path
        raise ConfigError([Issue(e, None, "", "") for e in errors])
    return out


def select_targets(config: Config, sel: Selection) -> list[dict[str, Any]]:
    known = [t["id"] for t in config.targets]
    if sel.targets:
        unknown = [t for t in sel.targets if t not in known]
        if unknown:
            raise ConfigError(f"unknown target {unknown[0]!r} in --target (known: {', '.join(known)})")
        ids = sel.targets
    elif sel.matrix and (config.data.get("matrix") or {}).get("targets"):
        ids = list(config.data["matrix"]["targets"])
    else:
        ids = config.default_target_ids()
    return [config.target(t) for t in ids]


def _limit(config: Config, given: int | None, key: str, default: int) -> int:
    if given is not None:
        return given
    value = config.defaults.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def _check_variants(config: Config, sel: Selection, per_target: dict[str, int], counted: MatrixCount) -> None:
    """Refuse a ``--matrix`` run whose targets expand past the variant limit, before anything is expanded."""
    limit = _limit(config, sel.max_variants, "max_variants", MAX_VARIANTS)
    total = sum(per_target.values())
    if total <= limit:
        return
    expanded = sum(1 for n in per_target.values() if n > 1)
    what = _count(counted.axes, "axis", "axes") if counted.axes else "include entries"
    about = "" if counted.exact else "up to "
    raise ConfigError(
        config.issue(
            ("matrix",),
            f"{about}{_count(total, 'variant')} ({what} over {_count(expanded, 'provider target')}) is more than the limit of "
            f"{limit:,} variants; narrow the axes or exclude combinations, or raise the limit with --max-variants N or defaults.max_variants",
        )
    )


def _selected(cases: dict[str, list[Case]], sel: Selection) -> list[tuple[str, Case]]:
    out: list[tuple[str, Case]] = []
    for ds_id, ds_cases in cases.items():
        for case in ds_cases:
            if sel.case_globs and not any(fnmatch.fnmatchcase(case.id, g) for g in sel.case_globs):
                continue
            if sel.categories and case.category not in sel.categories:
                continue
            out.append((ds_id, case))
    return out


def _check_cells(config: Config, sel: Selection, selected: list[tuple[str, Case]], per_target: dict[str, int]) -> int:
    """Count the cells (targets × cases × repeats) without making them; refuse past the cell limit, naming the biggest factor."""
    default_repeat = int(config.defaults.get("repeat", 1))
    everyone = sum(per_target.values())
    cells = 0
    most_repeat, most_repeated = 1, None
    for _, case in selected:
        repeat = sel.repeat or case.repeat or default_repeat
        if case.targets is None:
            n = everyone
        else:
            n = sum(count for t, count in per_target.items() if t in case.targets)
        cells += repeat * n
        if repeat > most_repeat:
            most_repeat, most_repeated = repeat, case
    limit = _limit(config, sel.max_cells, "max_cells", MAX_CELLS)
    if cells <= limit:
        return cells
    n_cases = len(selected)
    uniform = cells == n_cases * everyone * most_repeat
    sep = " × " if uniform else ", "
    shape = sep.join(
        [
            _count(n_cases, "case"),
            _count(everyone, "variant" if sel.matrix else "target"),
            ("" if uniform else "up to ") + _count(most_repeat, "repeat"),
        ]
    )
    fix = "raise the limit with --max-cells N or defaults.max_cells"
    biggest = max(most_repeat, everyone, n_cases)
    issue: Issue
    if most_repeat == biggest and most_repeat > 1:
        message = f"{cells:,} cells ({shape}) is more than the limit of {limit:,} cells; lower the repeat, or {fix}"
        if sel.repeat:
            issue = Issue(f"--repeat {sel.repeat}", None, "", message)
        elif most_repeated is not None and most_repeated.repeat == most_repeat:
            issue = Issue(most_repeated.source or most_repeated.dataset, None, "repeat", message)
        else:
            issue = config.issue(("defaults", "repeat"), message)
    elif everyone == biggest and sel.matrix:
        issue = config.issue(
            ("matrix",), f"{cells:,} cells ({shape}) is more than the limit of {limit:,} cells; narrow the matrix, or {fix}"
        )
    elif everyone == biggest:
        issue = config.issue(
            ("targets",), f"{cells:,} cells ({shape}) is more than the limit of {limit:,} cells; select fewer with --target, or {fix}"
        )
    else:
        sizes: dict[str, int] = {}
        for ds_id, _ in selected:
            sizes[ds_id] = sizes.get(ds_id, 0) + 1
        largest = max(sizes, key=lambda d: sizes[d])
        index = next(i for i, d in enumerate(config.datasets) if d.get("id") == largest)
        issue = config.issue(
            ("datasets", index),
            f"{cells:,} cells ({shape}) is more than the limit of {limit:,} cells; select fewer with --case or --dataset, or {fix}",
        )
    raise ConfigError(issue)


def measure_plan(config: Config, sel: Selection, cases: dict[str, list[Case]] | None = None) -> PlanSize:
    """The size of the plan ``sel`` selects, without building it; raise :class:`ConfigError` past a limit.

    ``cases``: the datasets, already loaded (else they are loaded here).
    """
    return _measure(config, sel, cases)[0]


def _measure(
    config: Config, sel: Selection, cases: dict[str, list[Case]] | None
) -> tuple[PlanSize, list[dict[str, Any]], dict[str, list[Case]]]:
    known_ds = [d["id"] for d in config.datasets]
    for d in sel.datasets:
        if d not in known_ds:
            raise ConfigError(f"unknown dataset {d!r} in --dataset (known: {', '.join(known_ds)})")
    target_specs = select_targets(config, sel)
    per_target = {str(t["id"]): 1 for t in target_specs}
    counted = None
    if sel.matrix:
        counted = matrix_count(config.data.get("matrix"))
        per_target = count_variants(target_specs, counted)
        _check_variants(config, sel, per_target, counted)  # before the datasets are read
    if cases is None:
        cases = load_all_datasets(config, sel.datasets or None)
    elif sel.datasets:
        cases = {k: v for k, v in cases.items() if k in sel.datasets}
    selected = _selected(cases, sel)
    n_cells = _check_cells(config, sel, selected, per_target)
    return PlanSize(sum(per_target.values()), len(selected), n_cells, counted), target_specs, cases


def build_plan(config: Config, sel: Selection) -> Plan:
    size, target_specs, cases = _measure(config, sel, None)
    was_enabled = gc.isenabled()
    gc.disable()  # a million new cells would set off collections that scan the whole heap again and again
    try:
        return _build(config, sel, target_specs, cases)
    except MemoryError:  # only when a limit was raised past what this machine holds
        raise ConfigError(
            f"evalx: {size.cells:,} cells do not fit in memory; plan fewer (the cell limit was raised past what fits)"
        ) from None
    finally:
        if was_enabled:
            gc.enable()


def _build(config: Config, sel: Selection, target_specs: list[dict[str, Any]], cases: dict[str, list[Case]]) -> Plan:
    variants: dict[str, Variant] = {}
    if sel.matrix:
        # --target narrows which targets the matrix expands; provider ones become variants
        expanded = expand(target_specs, config.data.get("matrix"))
        variants = {v.id: v for v in expanded}
        target_specs = [v.spec for v in expanded]
    default_repeat = int(config.defaults.get("repeat", 1))
    cells: list[Cell] = []
    for ds_id, case in _selected(cases, sel):
        repeat = sel.repeat or case.repeat or default_repeat
        for spec in target_specs:
            base = variants[spec["id"]].target if spec["id"] in variants else spec["id"]
            if case.targets is not None and base not in case.targets:
                continue
            for r in range(repeat):
                cells.append(Cell(len(cells), spec["id"], ds_id, case, r))
    return Plan(target_specs, cases, cells, variants)


def measure_runs(
    config: Config, cases: dict[str, list[Case]], max_cells: int | None = None, max_variants: int | None = None
) -> tuple[str, list[str]]:
    """What ``evalx validate`` says of the runs a config makes (``evalx run``, and ``--matrix`` with a ``matrix:``).

    Their sizes as one phrase, and the refusals (one line each), counted
    without building a plan.
    """
    runs = [("evalx run", Selection(max_cells=max_cells, max_variants=max_variants))]
    if isinstance(config.data.get("matrix"), dict):
        runs.append(("evalx run --matrix", Selection(matrix=True, max_cells=max_cells, max_variants=max_variants)))
    parts: list[str] = []
    refused: list[str] = []
    for label, sel in runs:
        try:
            size = measure_plan(config, sel, cases)
        except ConfigError as exc:
            refused += [str(i) for i in exc.issues if str(i) not in refused]  # --repeat too big refuses both runs: say it once
            continue
        variants = f"{_count(size.targets, 'variant')}, " if sel.matrix else ""
        parts.append(f"{label}: {variants}{_count(size.cells, 'cell')}")
    return "; ".join(parts), refused
