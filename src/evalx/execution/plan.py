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
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property, partial
from itertools import islice
from typing import Any, overload

from evalx.common import trace_context, written
from evalx.common.json_types import JSONObject
from evalx.config.loader import Config
from evalx.config.matrix import MatrixCount, Variant, count_variants, expand, matrix_count
from evalx.datasets.spec import dataset_spec
from evalx.datasets.table import CaseTable, case_digest
from evalx.errors import ConfigError, DatasetError, Issue
from evalx.models import Case, Cell
from evalx.results.model import MatrixInfo
from evalx.targets.spec import TargetSpec, target_spec


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
    shard: tuple[int, int] | None = None  # --shard I/N: (I, N), 1-based; only that shard's cases run
    tags: list[str] = field(default_factory=list)  # --tag NAME: cases with any of these tags; --tag '!NAME' leaves them out

    def __post_init__(self) -> None:
        if self.shard is not None:  # as stored in run.json: a list
            self.shard = (int(self.shard[0]), int(self.shard[1]))


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


class PlanCells:
    """A plan's cells in matrix order, made as they are read: ``len``, iteration, indexing, per target.

    Only the selected cases' positions and where each case's cells start are
    kept (a few bytes a case); a :class:`Cell` and its :class:`Case` are made
    when a cell is read, so a million-cell plan costs megabytes, not gigabytes.
    ``skip``: a byte a cell index, non-zero for a cell left out (a resumed run's finished cells).
    """

    def __init__(
        self,
        targets: list[tuple[str, str]],
        chosen: list[tuple[str, CaseTable, array[int]]],
        repeat: int | None,
        default_repeat: int,
        skip: bytes | bytearray = b"",
    ) -> None:
        self._targets = targets  # (run target id, the targets: id it comes from), in order
        self._chosen = chosen  # (dataset id, its cases, the selected positions)
        self._repeat, self._default_repeat = repeat, default_repeat
        self._skip = skip
        self._skipped = len(skip) - skip.count(0)
        # (a table, a case's targets: code in it) -> the positions in _targets it runs on; the codes are each table's own
        self._applies: dict[tuple[int, int], list[int]] = {}
        starts = array("Q")
        total = 0
        for _, table, positions in chosen:
            if table.uniform() and positions:  # every case of the table has the same cells: no per-case lookups
                k = len(self._on(table, positions[0])) * self._repeats(table, positions[0])
                starts.extend(range(total, total + k * len(positions), k) if k else [total] * len(positions))
                total += k * len(positions)
                continue
            for pos in positions:
                starts.append(total)
                total += len(self._on(table, pos)) * self._repeats(table, pos)
        self._starts = starts
        self.total = total  # every planned cell, skipped ones included

    def _on(self, table: CaseTable, pos: int) -> list[int]:
        code = table.targets_code(pos)
        key = (id(table), code)  # the tables live as long as the plan (self._chosen)
        applies = self._applies.get(key)
        if applies is None:
            only = table.target_lists[code]
            applies = self._applies[key] = [i for i, (_, base) in enumerate(self._targets) if only is None or base in only]
        return applies

    def _repeats(self, table: CaseTable, pos: int) -> int:
        return self._repeat or table.repeat(pos) or self._default_repeat

    def __len__(self) -> int:
        return self.total - self._skipped

    def without(self, done: Iterable[int]) -> PlanCells:
        """These cells but those whose index is in ``done`` (a resume)."""
        skip = bytearray(self._skip) + bytes(max(0, self.total - len(self._skip)))
        for i in done:
            if 0 <= i < self.total:
                skip[i] = 1
        return PlanCells(self._targets, self._chosen, self._repeat, self._default_repeat, skip)

    def _walk(self, only: int | None = None) -> Iterator[Cell]:
        skip = self._skip if self._skipped else None
        n = 0
        for ds_id, table, positions in self._chosen:
            # every case of a uniform table runs on the same targets as often: looked up once, not per case
            same = (self._on(table, positions[0]), self._repeats(table, positions[0])) if positions and table.uniform() else None
            for pos in positions:
                on, repeats = same if same is not None else (self._on(table, pos), self._repeats(table, pos))
                case: Case | None = None
                for t in on:
                    if only is not None and t != only:
                        n += repeats
                        continue
                    for r in range(repeats):
                        if skip is None or not skip[n]:
                            if case is None:
                                case = table.case(pos)
                            yield Cell(n, self._targets[t][0], ds_id, case, r)
                        n += 1

    def __iter__(self) -> Iterator[Cell]:
        return self._walk()

    def for_target(self, target_id: str) -> TargetCells:
        """The cells of one target, in matrix order (each read makes them again)."""
        at = next((i for i, (t, _) in enumerate(self._targets) if t == target_id), None)
        return TargetCells(self, at)

    def count_for(self, at: int | None) -> int:
        if at is None:
            return 0
        n = 0
        for _, table, positions in self._chosen:
            if table.uniform() and positions:
                if at in self._on(table, positions[0]):
                    n += self._repeats(table, positions[0]) * len(positions)
                continue
            for pos in positions:
                if at in self._on(table, pos):
                    n += self._repeats(table, pos)
        if self._skipped and self._skipped <= len(self._starts):
            n -= sum(1 for i in _set_bytes(self._skip) if self._locate(i)[2] == at)
        elif self._skipped:  # most cells left out (a shard): count them case by case, not cell by cell
            skip, k = self._skip, 0
            for _, table, positions in self._chosen:
                for pos in positions:
                    on = self._on(table, pos)
                    if at in on:
                        repeats = self._repeats(table, pos)
                        first = self._starts[k] + on.index(at) * repeats
                        left_out = skip[first : first + repeats]
                        n -= len(left_out) - left_out.count(0)
                    k += 1
        return n

    def _locate(self, index: int) -> tuple[int, int, int, int]:
        """(chosen dataset, case position, target position, repeat) of cell ``index``."""
        if not 0 <= index < self.total:
            raise IndexError("cell index out of range")
        k = bisect_right(self._starts, index) - 1  # the selected case the cell belongs to
        offset = index - self._starts[k]
        for d, (_, table, positions) in enumerate(self._chosen):
            if k < len(positions):
                pos = positions[k]
                repeats = self._repeats(table, pos)
                return d, pos, self._on(table, pos)[offset // repeats], offset % repeats
            k -= len(positions)
        raise IndexError("cell index out of range")  # pragma: no cover  (the starts cover every case)

    @overload
    def __getitem__(self, i: int) -> Cell: ...
    @overload
    def __getitem__(self, i: slice) -> list[Cell]: ...
    def __getitem__(self, i: int | slice) -> Cell | list[Cell]:
        """Cell ``i`` by its index (skipped ones too); a slice: the first cells read."""
        if isinstance(i, slice):
            return list(islice(self, i.start, i.stop, i.step))
        d, pos, t, r = self._locate(i)
        ds_id, table, _ = self._chosen[d]
        return Cell(i, self._targets[t][0], ds_id, table.case(pos), r)

    def case_span(self, index: int) -> tuple[int, int]:
        """(the index of the first cell of cell ``index``'s case, how many cells the case has)."""
        k = bisect_right(self._starts, index) - 1
        first = self._starts[k]
        end = self._starts[k + 1] if k + 1 < len(self._starts) else self.total
        return first, end - first

    def key_of(self, index: int) -> tuple[str, str, str, int]:
        """(target, dataset, case id, repeat) of cell ``index``, without making its case."""
        d, pos, t, r = self._locate(index)
        ds_id, table, _ = self._chosen[d]
        return self._targets[t][0], ds_id, table.case_id(pos), r

    def cases(self) -> Iterator[tuple[str, CaseTable, int, list[str], int]]:
        """Each selected case: (dataset id, its table, its position, the run targets it runs on, repeats)."""
        for ds_id, table, positions in self._chosen:
            for pos in positions:
                yield ds_id, table, pos, [self._targets[t][0] for t in self._on(table, pos)], self._repeats(table, pos)

    @property
    def case_count(self) -> int:
        return len(self._starts)

    def shard(self, index: int, count: int) -> PlanCells:
        """Only the cells of shard ``index`` of ``count`` (1-based): whole cases, dealt by :func:`evalx.execution.shards.deal`.

        The other cells are left out as a resume leaves finished ones out, so
        every cell keeps its index in the whole plan (a merge puts them back in order).
        """
        starts, total = self._starts, self.total
        ends = [*starts[1:], total]
        cells = [end - start for start, end in zip(starts, ends)]
        skip = bytearray(self._skip) + bytes(max(0, total - len(self._skip)))
        for k, owner in enumerate(self.case_shards(count)):
            if owner != index - 1 and cells[k]:
                skip[starts[k] : ends[k]] = b"\x01" * cells[k]
        return PlanCells(self._targets, self._chosen, self._repeat, self._default_repeat, skip)

    def case_shards(self, count: int) -> list[int]:
        """The shard (0-based) each selected case is dealt to among ``count`` (:func:`evalx.execution.shards.deal`)."""
        from evalx.execution.shards import case_key, deal

        starts, total = self._starts, self.total
        keys = [case_key(ds_id, table.case_id(pos)) for ds_id, table, positions in self._chosen for pos in positions]
        ends = [*starts[1:], total]
        return deal(keys, [end - start for start, end in zip(starts, ends)], count)

    def shard_of(self, count: int) -> Callable[[int], int]:
        """A function: a cell's index -> the shard (1-based) of ``count`` that ``--shard I/count`` runs it in."""
        owners, starts = self.case_shards(count), self._starts
        return lambda index: owners[bisect_right(starts, index) - 1] + 1


def _set_bytes(flags: bytes | bytearray) -> Iterator[int]:
    """The positions of the non-zero bytes of ``flags``."""
    i = flags.find(1)
    while i != -1:
        yield i
        i = flags.find(1, i + 1)


class TargetCells:
    """One target's cells of a :class:`PlanCells`, in matrix order: ``len`` and iteration."""

    def __init__(self, cells: PlanCells, at: int | None) -> None:
        self._cells, self._at = cells, at
        self._len: int | None = None

    def __len__(self) -> int:
        if self._len is None:
            self._len = self._cells.count_for(self._at)
        return self._len

    def __iter__(self) -> Iterator[Cell]:
        return iter(()) if self._at is None else self._cells._walk(self._at)


@dataclass
class Plan:
    #: the run's targets as written (a matrix variant's as config/matrix.py made it): what each target is built from
    target_specs: list[JSONObject]
    cases: dict[str, CaseTable]
    cells: PlanCells
    #: --matrix runs: every target of the run as a variant (id -> variant), in order
    variants: dict[str, Variant] = field(default_factory=dict)

    @cached_property
    def targets(self) -> list[TargetSpec]:
        """The run's targets as typed records, in order (what the planner, the budget and the executors read)."""
        return [target_spec(entry) for entry in self.target_specs]

    @property
    def target_ids(self) -> list[str]:
        """The run's target ids, in order."""
        return [t.id for t in self.targets]

    def target_types(self) -> dict[str, str]:
        """Each target's kind by its id (what the results file's run record says)."""
        return {t.id: t.type for t in self.targets}

    def cells_for(self, target_id: str) -> TargetCells:
        """The cells of one target, in order."""
        return self.cells.for_target(target_id)

    def graded_targets(self) -> set[str]:
        """The run targets with at least one case a model grades."""
        hit: set[str] = set()
        if not any(table.any_graded() for table in self.cases.values()):
            return hit
        for _, table, pos, targets, _ in self.cells.cases():
            if table.graded(pos):
                hit.update(targets)
        return hit

    def base_id(self, target_id: str) -> str:
        """The ``targets:`` id a run target comes from (a matrix variant's own target)."""
        variant = self.variants.get(target_id)
        return variant.target if variant is not None else target_id

    @property
    def base_target_ids(self) -> list[str]:
        """The ``targets:`` entries this plan runs, each once, in order."""
        return list(dict.fromkeys(self.base_id(t) for t in self.target_ids))

    def matrix_summary(self) -> MatrixInfo | None:
        """What summary.json records of a matrix run: its variants."""
        if not self.variants:
            return None
        return {"variants": [v.to_dict() for v in self.variants.values()]}


def load_all_datasets(config: Config, only: list[str] | None = None) -> dict[str, CaseTable]:
    redact = config.redactor.obj if config.redactor else (lambda value: value)
    # `evalx validate` reads the datasets of a config with errors elsewhere: each entry on its own, not Config.typed whole
    target_ids = tuple(written.target_entries(config))
    tracing = config.data.get("tracing")
    # the trace_* checks are an error in a config that does not receive traces (assertions/traces.py)
    receiving = trace_context.RECEIVING.set(isinstance(tracing, dict) and tracing.get("receive") is True)
    try:
        return _load_datasets(config, only, redact, target_ids)
    finally:
        trace_context.RECEIVING.reset(receiving)


def _load_datasets(
    config: Config, only: list[str] | None, redact: Callable[[Any], Any], target_ids: tuple[str, ...]
) -> dict[str, CaseTable]:
    from evalx.datasets.loader import load_dataset

    out: dict[str, CaseTable] = {}
    errors: list[str] = []
    for i, entry in enumerate(written.dataset_entries(config)):
        spec = dataset_spec(entry)
        if only and spec.id not in only:
            continue
        try:
            out[spec.id] = load_dataset(
                spec,
                base_dir=config.base_dir,
                config_file=config.file,
                line=config.line(("datasets", i)),
                positions=config.loaded.lines,
                path_prefix=("datasets", i),
                digest=partial(case_digest, redact=redact),  # for --resume's fingerprint, made while the case is at hand
                target_ids=target_ids,  # a simulate: user target must be one
            )
        except DatasetError as exc:
            errors.extend(str(exc).splitlines())
    if errors:
        # a dataset error's text already names FILE:LINE key.path
        raise ConfigError([Issue(e, None, "", "") for e in errors])
    return out


def select_targets(config: Config, sel: Selection) -> list[JSONObject]:
    """The entries (as written) of the targets ``sel`` runs, before a matrix expands them."""
    entries = written.target_entries(config)
    known = list(entries)
    matrix = config.typed.matrix
    if sel.targets:
        unknown = [t for t in sel.targets if t not in known]
        if unknown:
            raise ConfigError(f"unknown target {unknown[0]!r} in --target (known: {', '.join(known)})")
        ids = sel.targets
    elif sel.matrix and matrix is not None and matrix.targets:
        ids = list(matrix.targets)
    else:
        ids = config.default_target_ids()
    return [entries[t] for t in ids]


def _limit(given: int | None, configured: int | None, default: int) -> int:
    """``--max-cells``/``--max-variants`` when given, else ``defaults.max_cells``/``max_variants``, else the built-in."""
    if given is not None:
        return given
    return configured if configured is not None else default


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def _check_variants(config: Config, sel: Selection, per_target: dict[str, int], counted: MatrixCount) -> None:
    """Refuse a ``--matrix`` run whose targets expand past the variant limit, before anything is expanded."""
    limit = _limit(sel.max_variants, config.typed.defaults.max_variants, MAX_VARIANTS)
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


Chosen = list[tuple[str, CaseTable, "array[int]"]]


def _selected(cases: dict[str, CaseTable], sel: Selection) -> Chosen:
    """Each dataset's selected cases: (dataset id, its table, the positions selected), in order."""
    out: Chosen = []
    categories = set(sel.categories)
    wanted, unwanted = split_tags(sel.tags)
    for ds_id, table in cases.items():
        keep = array("L")
        if not sel.case_globs and not categories and not sel.tags:
            keep.extend(range(len(table)))
        else:
            for i in range(len(table)):
                if sel.case_globs and not any(fnmatch.fnmatchcase(table.case_id(i), g) for g in sel.case_globs):
                    continue
                if categories and table.category(i) not in categories:
                    continue
                if sel.tags and not tags_match(table.case(i).tags, wanted, unwanted):  # the case is rebuilt only with --tag
                    continue
                keep.append(i)
        out.append((ds_id, table, keep))
    return out


def split_tags(tags: Iterable[str]) -> tuple[set[str], set[str]]:
    """``--tag`` values as (wanted, unwanted): ``!NAME`` leaves a tag out, any other names one a case may have."""
    wanted = {t for t in tags if not t.startswith("!")}
    return wanted, {t[1:] for t in tags if t.startswith("!")}


def tags_match(case_tags: Iterable[object], wanted: set[str], unwanted: set[str]) -> bool:
    """A case is selected when it has any wanted tag (or none is asked for) and no unwanted one."""
    have = {str(t) for t in case_tags or ()}
    return (not wanted or not have.isdisjoint(wanted)) and have.isdisjoint(unwanted)


def _n_selected(chosen: Chosen) -> int:
    return sum(len(positions) for _, _, positions in chosen)


def _check_cells(config: Config, sel: Selection, selected: Chosen, per_target: dict[str, int]) -> int:
    """Count the cells (targets × cases × repeats) without making them; refuse past the cell limit, naming the biggest factor."""
    default_repeat = config.typed.defaults.repeat
    everyone = sum(per_target.values())
    cells = 0
    most_repeat, most_repeated = 1, None
    on: dict[tuple[str, ...] | None, int] = {None: everyone}  # a case's targets: -> its cells a repeat
    for _, table, positions in selected:
        # every case of a uniform table runs on the same targets as often: counted once for all, as PlanCells walks it
        cases = len(positions) if positions and table.uniform() else 1
        for pos in positions[:1] if cases > 1 else positions:
            repeat = sel.repeat or table.repeat(pos) or default_repeat
            only = table.targets(pos)
            n = on.get(only)
            if n is None:
                n = on[only] = sum(count for t, count in per_target.items() if only is not None and t in only)
            cells += repeat * n * cases
            if repeat > most_repeat:
                most_repeat, most_repeated = repeat, (table, pos)
    limit = _limit(sel.max_cells, config.typed.defaults.max_cells, MAX_CELLS)
    if cells <= limit:
        return cells
    n_cases = _n_selected(selected)
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
        elif most_repeated is not None and most_repeated[0].repeat(most_repeated[1]) == most_repeat:
            case = most_repeated[0].case(most_repeated[1])
            issue = Issue(case.source or case.dataset, None, "repeat", message)
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
        sizes = {ds_id: len(positions) for ds_id, _, positions in selected}
        largest = max(sizes, key=lambda d: sizes[d])
        index = next(i for i, d in enumerate(config.typed.datasets) if d.id == largest)
        issue = config.issue(
            ("datasets", index),
            f"{cells:,} cells ({shape}) is more than the limit of {limit:,} cells; select fewer with --case or --dataset, or {fix}",
        )
    raise ConfigError(issue)


def measure_plan(config: Config, sel: Selection, cases: dict[str, CaseTable] | None = None) -> PlanSize:
    """The size of the plan ``sel`` selects, without building it; raise :class:`ConfigError` past a limit.

    ``cases``: the datasets, already loaded (else they are loaded here).
    """
    return _measure(config, sel, cases)[0]


def _measure(config: Config, sel: Selection, cases: dict[str, CaseTable] | None) -> tuple[PlanSize, list[JSONObject], dict[str, CaseTable]]:
    known_ds = [d.id for d in config.typed.datasets]
    for d in sel.datasets:
        if d not in known_ds:
            raise ConfigError(f"unknown dataset {d!r} in --dataset (known: {', '.join(known_ds)})")
    target_specs = select_targets(config, sel)
    per_target = {str(t["id"]): 1 for t in target_specs}
    counted = None
    if sel.matrix:
        counted = matrix_count(written.matrix_section(config))
        per_target = count_variants(target_specs, counted)
        _check_variants(config, sel, per_target, counted)  # before the datasets are read
    if cases is None:
        cases = load_all_datasets(config, sel.datasets or None)
    elif sel.datasets:
        cases = {k: v for k, v in cases.items() if k in sel.datasets}
    selected = _selected(cases, sel)
    n_cells = _check_cells(config, sel, selected, per_target)
    return PlanSize(sum(per_target.values()), _n_selected(selected), n_cells, counted), target_specs, cases


def build_plan(config: Config, sel: Selection) -> Plan:
    # the cases read and a million new cells live for the whole run: collections would scan the whole heap again and
    # again for nothing (reading 10,000 cases set off one that walked every imported object: 24 ms, issue 29)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        size, target_specs, cases = _measure(config, sel, None)
        if not size.cells:
            _refuse_empty(sel)
        try:
            return _build(config, sel, target_specs, cases)
        except MemoryError:  # only when a limit was raised past what this machine holds
            raise ConfigError(
                f"evalx: {size.cells:,} cells do not fit in memory; plan fewer (the cell limit was raised past what fits)"
            ) from None
    finally:
        if was_enabled:
            gc.enable()


def _refuse_empty(sel: Selection) -> None:
    """A selection (``--case``, ``--category``, ``--tag``, ``--target``, ``--dataset``) that matches no cell: a usage error (exit 2)."""
    given = [
        *(f"--target {t}" for t in sel.targets),
        *(f"--dataset {d}" for d in sel.datasets),
        *(f"--case {g}" for g in sel.case_globs),
        *(f"--category {c}" for c in sel.categories),
        *(f"--tag {t}" for t in sel.tags),
    ]
    if given:
        raise ConfigError(f"evalx: {' '.join(given)} selects no cell: nothing to run")


def _build(config: Config, sel: Selection, target_specs: list[JSONObject], cases: dict[str, CaseTable]) -> Plan:
    variants: dict[str, Variant] = {}
    if sel.matrix:
        # --target narrows which targets the matrix expands; provider ones become variants
        expanded = expand(target_specs, written.matrix_section(config))
        variants = {v.id: v for v in expanded}
        target_specs = [v.spec for v in expanded]
    default_repeat = config.typed.defaults.repeat
    targets = [(str(spec["id"]), variants[spec["id"]].target if spec["id"] in variants else str(spec["id"])) for spec in target_specs]
    cells = PlanCells(targets, _selected(cases, sel), sel.repeat, default_repeat)
    if sel.shard is not None:
        cells = cells.shard(*sel.shard)
    return Plan(target_specs, cases, cells, variants)


def measure_runs(
    config: Config, cases: dict[str, CaseTable], max_cells: int | None = None, max_variants: int | None = None
) -> tuple[str, list[str]]:
    """What ``evalx validate`` says of the runs a config makes (``evalx run``, and ``--matrix`` with a ``matrix:``).

    Their sizes as one phrase, and the refusals (one line each), counted
    without building a plan.
    """
    runs = [("evalx run", Selection(max_cells=max_cells, max_variants=max_variants))]
    if config.typed.matrix is not None:
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
