"""The pairwise pass: after a run's cells, judge each case's pairs of targets and record the verdicts on both cells.

``pairwise`` (in a case's ``assert`` or the config's) is never graded with a
cell (:mod:`evalx.judge.pairwise` says how a pair is judged). Once every
cell has run — on the driver, before the summary is finished — this pass
reads ``results.jsonl`` (in matrix order: a case's cells are together), and
for each case with a ``pairwise`` assertion, each pair of the run's targets
(in target order) and each repeat ``r``, compares repeat ``r`` of target A
with repeat ``r`` of target B. (Repeats are paired by number: each is an
independent sample of both targets, so a run with ``--repeat 3`` makes three
comparisons a pair; a repeat either side lacks is not compared.) A pair whose
cell on either side errored, was skipped by the cost guard or is missing is
recorded as not compared, with why.

**Storage.** Each record is written on *both* cells, as the cell key
``pairwise: [{against, a, b, winner, ...}]``, by rewriting ``results.jsonl``
once (:func:`evalx.results.store.rewrite_results`). So the file stays the
run's one record: ``evalx report`` rebuilds the summary's judge-preference
figures from the cells alone, and a merge of shards carries them with the
cells; the summary (:mod:`evalx.results.preferences`) counts each pair once
(keyed by case, targets, repeat and criterion) whichever of its two cells it
reads. A separate ``pairwise.jsonl`` would be one more file every reader,
merger and resume must know about. The judgement never changes a cell's
status: a preference is not a failure of either side.

A resumed run (``--resume``) keeps the comparisons its cells already carry
a verdict of, and asks again only for those that ended in an error.

The pairwise judge calls count in the run's cost (the summary's
``judge_cost_usd`` and ``judge`` usage, from the records) and against
``defaults.max_total_cost``: once the cost guard's limit is reached, the
remaining pairs are recorded as not compared, saying so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalx.assertions.spec import AssertionSpec, assertion_spec
from evalx.common import written
from evalx.common.json_types import JSONObject, as_object
from evalx.judge.spec import judge_settings
from evalx.results.model import CellResult, PairwiseRecord
from evalx.results.store import RESULTS, by_case, read_results, rewrite_results
from evalx.targets.settings import Overrides

if TYPE_CHECKING:
    from evalx.config.loader import Config
    from evalx.execution.budget import CostGuard
    from evalx.execution.plan import Plan
    from evalx.judge.pairwise import Side
    from evalx.models import Case

__all__ = [
    "PAIRWISE",
    "PairwiseOutcome",
    "PairwiseSpecs",
    "attach_records",
    "count_pairs",
    "judge_stored_pairs",
    "pairwise_specs",
    "pairwise_warnings",
]

#: the assertion type judged by this pass
PAIRWISE = "pairwise"
#: pairs being judged at once (each asks twice; the judge target's own concurrency limits the calls)
IN_FLIGHT = 16


@dataclass
class PairwiseSpecs:
    """The run's ``pairwise`` assertions: the config's (every case) and each case's own."""

    everywhere: list[AssertionSpec] = field(default_factory=list)
    by_case: dict[tuple[str, str], list[AssertionSpec]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.everywhere or self.by_case)

    def for_case(self, dataset: str, case_id: str) -> list[AssertionSpec]:
        return [*self.everywhere, *self.by_case.get((dataset, case_id), [])]


def pairwise_specs(global_asserts: Sequence[AssertionSpec], plan: Plan) -> PairwiseSpecs:
    """The ``pairwise`` assertions of a plan's cases (only cases a model grades are looked at: ``pairwise`` is one)."""
    specs = PairwiseSpecs([a for a in global_asserts if a.type == PAIRWISE])
    if not any(table.any_graded() for table in plan.cases.values()):
        return specs
    for ds_id, table, pos, _, _ in plan.cells.cases():
        if table.graded(pos):
            case = table.case(pos)
            own = [assertion_spec(a) for a in case.asserts if a.get("type") == PAIRWISE]
            if own:
                specs.by_case[(ds_id, case.id)] = own
    return specs


def count_pairs(specs: PairwiseSpecs, plan: Plan) -> tuple[int, int]:
    """``(pairs of cells, characters of case input over them)`` the pass would ask about (each in two orders), for ``--dry-run``."""
    pairs = chars = 0
    if not specs:
        return 0, 0
    for ds_id, table, pos, targets, repeats in plan.cells.cases():
        n = len(targets)
        if n < 2:
            continue
        own = specs.by_case.get((ds_id, table.case_id(pos)), [])
        k = len(specs.everywhere) + len(own)
        if not k:
            continue
        here = k * repeats * n * (n - 1) // 2
        pairs += here
        case = table.case(pos)
        chars += here * len(case.input if isinstance(case.input, str) else str(case.input))
    return pairs, chars


def pairwise_warnings(config: Config, cases: Mapping[str, Iterable[Case]]) -> list[str]:
    """``evalx validate``'s warnings: a ``pairwise`` assertion in a config whose runs have one target (nothing to compare).

    A config with a ``matrix:`` is not warned about (``--matrix`` may expand it to several targets).
    """
    if config.typed.matrix is not None or len(config.default_target_ids()) >= 2:
        return []
    only = ", ".join(config.default_target_ids()) or "none"
    why = f"pairwise compares the targets of a run; this config has one target ({only}): nothing to compare"
    lines = [
        str(config.issue(("assert", i, "type"), why, warning=True)) for i, spec in enumerate(config.typed.asserts) if spec.type == PAIRWISE
    ]
    for ds_cases in cases.values():
        lines += [f"{case.source} case {case.id!r}: {why}" for case in ds_cases if any(a.get("type") == PAIRWISE for a in case.asserts)]
    return lines


@dataclass
class PairwiseOutcome:
    """What the pass did: every record (the summary counts them), and lines to show once."""

    records: list[PairwiseRecord] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)


@dataclass
class _Job:
    dataset: str
    case_id: str
    case_input: Any
    spec: AssertionSpec
    a: Side
    b: Side


def _finished(cell: CellResult) -> bool:
    """A cell with an output to compare: it ran and its target did not fail."""
    return cell.get("status") != "error" and not cell.get("error") and not cell.get("skip_reason")


def _why_not(cell: CellResult | None, target: str) -> str:
    if cell is None:
        return f"no cell of {target}"
    if cell.get("skip_reason"):
        return f"{target}'s cell was not run"
    return f"{target}'s cell errored"


def _criterion(spec: AssertionSpec) -> str:
    """What the pair is compared on (a record's ``criterion``: one key, whether the pair was judged or not)."""
    from evalx.judge.pairwise import DEFAULT_RUBRIC

    return str(_rubric(spec) or DEFAULT_RUBRIC)


def _rubric(spec: AssertionSpec) -> str | None:
    rubric = spec.params.get("rubric")
    return rubric if isinstance(rubric, str) else None


def _not_compared(
    dataset: str, case_id: str, spec: AssertionSpec, a: str, b: str, repeat: int, why: str, cells: list[int | None]
) -> PairwiseRecord:
    return {
        "dataset": dataset,
        "case_id": case_id,
        "name": spec.name,
        "criterion": _criterion(spec),
        "a": a,
        "b": b,
        "repeat": repeat,
        "cells": cells,
        "winner": None,
        "not_compared": why,
    }


def _judged_before(cell: CellResult, b: CellResult, repeat: int, spec: AssertionSpec) -> PairwiseRecord | None:
    """The record of this comparison already on ``cell`` (a resumed run judged it before), if it has a verdict."""
    stored = cell.get("pairwise")
    if not isinstance(stored, list):
        return None
    cells = [cell.get("index"), b.get("index")]
    criterion = _criterion(spec)
    for record in stored:
        if (
            isinstance(record, dict)
            and record.get("cells") == cells
            and record.get("repeat") == repeat
            and record.get("name") == spec.name
            and record.get("criterion") == criterion
            and record.get("winner") is not None
            and not record.get("error")
        ):
            kept = record.copy()
            kept.pop("against", None)
            return kept
    return None


def _plan_jobs(results: Iterable[CellResult], specs: PairwiseSpecs, targets: list[str]) -> tuple[list[_Job], list[PairwiseRecord]]:
    """The comparisons to ask the judge for, and the records that need no judge call.

    Those are the pairs that cannot be compared and, in a resumed run, the
    comparisons its cells already carry a verdict of (an error is asked again).
    """
    from evalx.judge.pairwise import Side

    jobs: list[_Job] = []
    skipped: list[PairwiseRecord] = []
    order = {t: i for i, t in enumerate(targets)}
    for cells in by_case(results):
        dataset, case_id = str(cells[0].get("dataset") or ""), str(cells[0].get("case_id") or "")
        case_specs = specs.for_case(dataset, case_id)
        if not case_specs:
            continue
        by_target: dict[str, dict[int, CellResult]] = {}
        for cell in cells:
            by_target.setdefault(str(cell.get("target")), {})[int(cell.get("repeat") or 0)] = cell
        here = sorted((t for t in by_target if t in order), key=order.__getitem__)
        repeats = sorted({r for t in here for r in by_target[t]})
        for spec in case_specs:
            for i, a in enumerate(here):
                for b in here[i + 1 :]:
                    for r in repeats:
                        ca, cb = by_target[a].get(r), by_target[b].get(r)
                        indexes = [c.get("index") if c is not None else None for c in (ca, cb)]
                        if ca is None or cb is None or not _finished(ca) or not _finished(cb):
                            why = _why_not(ca, a) if ca is None or not _finished(ca) else _why_not(cb, b)
                            skipped.append(_not_compared(dataset, case_id, spec, a, b, r, why, indexes))
                            continue
                        before = _judged_before(ca, cb, r, spec)
                        if before is not None:
                            skipped.append(before)
                            continue
                        side_a = Side(a, _text(ca), int(ca.get("index") or 0), r)
                        side_b = Side(b, _text(cb), int(cb.get("index") or 0), r)
                        jobs.append(_Job(dataset, case_id, ca.get("input"), spec, side_a, side_b))
    return jobs, skipped


def _text(cell: CellResult) -> str:
    output = cell.get("output")
    text = output.get("text") if isinstance(output, dict) else None
    return text if isinstance(text, str) else ""


def attach_records(results: Iterable[CellResult], records: list[PairwiseRecord]) -> Iterator[CellResult]:
    """``results`` with each record on both of its cells (``pairwise: [...]``, ``against`` the other side); others unchanged.

    A cell's earlier ``pairwise`` records (a resumed run judged again) are replaced.
    """
    by_cell: dict[int, list[PairwiseRecord]] = {}
    for record in records:
        for index, against in zip(record["cells"], (record["b"], record["a"]), strict=False):
            if index is not None:  # None: no cell on that side
                by_cell.setdefault(index, []).append({"against": against, **record})
    for cell in results:
        index = cell.get("index")
        mine = by_cell.get(index) if type(index) is int else None
        if mine is not None:
            cell = {**cell, "pairwise": mine}
        yield cell


def judge_stored_pairs(
    config: Config,
    plan: Plan,
    run_dir: Path,
    *,
    run_id: str,
    overrides: Overrides | None = None,
    guard: CostGuard | None = None,
) -> PairwiseOutcome | None:
    """Judge the pairs of a run whose cells are in ``run_dir/results.jsonl`` and write the records on the cells.

    None when the run has no ``pairwise`` assertion. A run with fewer than two
    targets, or without a judge, compares nothing and says so once.
    """
    specs = pairwise_specs(config.typed.asserts, plan)
    if not specs:
        return None
    outcome = PairwiseOutcome()
    targets = plan.target_ids
    if len(targets) < 2:
        outcome.messages.append(
            f"pairwise: this run has one target ({targets[0] if targets else 'none'}): nothing to compare "
            "(run two or more targets, or --matrix)"
        )
        return outcome
    settings = written.judge_section(config)
    unjudged = [s for s in specs.everywhere + [s for v in specs.by_case.values() for s in v] if not _judged(settings, s)]
    path = run_dir / RESULTS
    jobs, skipped = _plan_jobs(read_results(path), specs, targets)
    if unjudged:
        outcome.messages.append("pairwise: no judge configured (judge.target): the pairs were not compared")
        jobs = [j for j in jobs if _judged(settings, j.spec)]
    from evalx.common.usercode import user_code_on_path

    with user_code_on_path(config.base_dir):
        judged = asyncio.run(_judge_all(config, jobs, settings, run_id, overrides, guard))
    outcome.records = [*judged, *skipped]
    if outcome.records:
        rewrite_results(path, attach_records(read_results(path), outcome.records))
    return outcome


def _merged(settings: JSONObject, spec: AssertionSpec) -> JSONObject:
    """The ``judge:`` settings (as written) with the assertion's own ``judge:`` over them."""
    return {**settings, **as_object(spec.judge)} if spec.judge else settings


def _judged(settings: JSONObject, spec: AssertionSpec) -> bool:
    return judge_settings(_merged(settings, spec)).target is not None


async def _judge_all(
    config: Config, jobs: list[_Job], settings: JSONObject, run_id: str, overrides: Overrides | None, guard: CostGuard | None
) -> list[PairwiseRecord]:
    """Every job's record, in job order; the judge started once, closed at the end."""
    if not jobs:
        return []
    from evalx.execution.runtime import run_context
    from evalx.judge import Judge
    from evalx.judge.pairwise import judge_pair

    ctx = run_context(config, run_id)
    judge = Judge(ctx, targets=written.target_entries(config), defaults=config.typed.defaults, overrides=overrides, settings=settings)

    slots = asyncio.Semaphore(IN_FLIGHT)  # the cost guard is asked as each pair starts, not all at once

    spent = [0.0, 0, 0]  # the judged pairs' cost, how many, and pairs in flight: the guard's projection

    async def one(job: _Job) -> PairwiseRecord:
        async with slots:
            mean = spent[0] / spent[1] if spent[1] else 0.0
            over = guard.over_limit(mean * (spent[2] + 1)) if guard is not None else None
            if over is not None:
                return _not_compared(job.dataset, job.case_id, job.spec, job.a.target, job.b.target, job.a.repeat, over,
                                     [job.a.index, job.b.index])  # fmt: skip
            spent[2] += 1
            try:
                record = await judge_pair(
                    judge, _merged(settings, job.spec), job.case_input, job.a, job.b, rubric=_rubric(job.spec), name=job.spec.name
                )
            finally:
                spent[2] -= 1
            cost = record.get("cost_usd")
            spent[0] += float(cost) if isinstance(cost, (int, float)) else 0.0
            spent[1] += 1
        if guard is not None:
            guard.spend(cost)
        redacted: PairwiseRecord = config.redactor.obj({"dataset": job.dataset, "case_id": job.case_id, **record})
        return redacted

    try:
        return list(await asyncio.gather(*(one(job) for job in jobs)))
    finally:
        await judge.aclose()
