"""Rerun what failed: ``evalx run --rerun failed|errors --from RUN`` makes a new run of a stored run's plan.

The new run starts with the parent's cells copied into its ``results.jsonl``
(not run again), except the (target, case) pairs that failed or errored —
every repeat of such a pair runs again. Its ``run.json`` records ``parent``
and ``rerun``; its summary, gates and reports count the whole suite. The
plan must be the parent's: the same fingerprint :mod:`evalx.execution.resume`
checks, so a config change that alters the cells is refused in one line, and
other changes (``gates:``, descriptions...) are allowed. The prepared folder
is then finished as a resume finishes a run: only the cells without a result run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from evalx.common.documents import relative_path
from evalx.common.json_types import JSONObject, as_array
from evalx.errors import NothingToRerun, RerunError, ResumeError, writing
from evalx.execution.plan import Plan, Selection
from evalx.execution.resume import (
    check_result,
    plan_fingerprint,
    selection_args,
    selection_from_meta,
    stored_fingerprint_version,
)
from evalx.execution.run_record import RunMeta
from evalx.results.store import RESULTS, ReadProblems, ResultWriter, read_results, write_json

if TYPE_CHECKING:
    from evalx.config.loader import Config

__all__ = [
    "PREPARED",
    "RERUN_KINDS",
    "NothingToRerun",
    "Rerun",
    "RerunError",
    "carried",
    "load_parent",
    "parse_rerun",
    "prepare_rerun",
    "rerun_note",
    "rerun_plan",
    "rerun_selection",
]

#: what ``--rerun`` takes, and the cell status each reruns
RERUN_KINDS = {"failed": "fail", "errors": "error"}
#: ``run.json``'s status while a rerun's folder holds only the parent's copied cells
PREPARED = "prepared"


@dataclass
class Rerun:
    """A parent run and what of it to run again."""

    parent_dir: Path
    meta: JSONObject  # the parent's run.json
    kinds: tuple[str, ...]  # ("failed",), ("errors",) or both
    #: filled by :func:`prepare_rerun`: the (target, dataset, case id) pairs run again, and their cells
    pairs: list[tuple[str, str, str]] = field(default_factory=list)
    cells: int = 0

    @property
    def parent_id(self) -> str:
        return str(self.meta["run_id"])


def parse_rerun(value: str) -> tuple[str, ...]:
    """``failed``, ``errors`` or ``failed,errors`` (either order) as a tuple; else :class:`RerunError`."""
    kinds = [part.strip() for part in value.split(",") if part.strip()]
    unknown = [k for k in kinds if k not in RERUN_KINDS]
    if not kinds or unknown:
        raise RerunError(f"--rerun {value}: give failed, errors or failed,errors")
    return tuple(k for k in RERUN_KINDS if k in kinds)


def load_parent(ref: str, output_dir: Path, kinds: tuple[str, ...], *, name: str | None = None) -> Rerun:
    """The run ``--from RUN`` names (an id under ``output_dir``, a path, or ``latest`` of config ``name``)."""
    from evalx.execution.resume import load_run_meta

    run_dir, meta = load_run_meta(ref, output_dir, option="--from", error=RerunError, name=name)
    return Rerun(run_dir, meta, kinds)


def rerun_selection(rerun: Rerun, given: Selection) -> Selection:
    """The parent's selection (the same plan); selection options given with ``--rerun`` must agree with it."""
    try:
        stored = selection_from_meta(rerun.meta)
    except ResumeError as exc:
        raise RerunError(f"cannot rerun from {rerun.parent_id}: {exc}") from None
    if given != Selection() and given != stored:
        raise RerunError(f"--rerun runs the plan of {rerun.parent_id}; the selection options given differ from that run's — drop them")
    return stored


def _check_plan(rerun: Rerun, config: Config, plan: Plan) -> str:
    """The plan's fingerprint, as the parent recorded it; :class:`RerunError` when the cells would not be the same."""
    meta, parent = rerun.meta, rerun.parent_id
    if meta.get("name") and meta["name"] != config.name:
        raise RerunError(f"cannot rerun from {parent}: it is a run of config {meta['name']!r}, not {config.name!r}")
    if meta.get("plan_digest") is None:
        raise RerunError(f"cannot rerun from {parent}: its run.json has no plan fingerprint (made by an older evalx)")
    try:
        version = stored_fingerprint_version(meta)
    except ResumeError as exc:
        raise RerunError(str(exc).replace("cannot resume", "cannot rerun from")) from None
    fingerprint = plan_fingerprint(config, plan, version)
    if meta["plan_digest"] != fingerprint:
        raise RerunError(
            f"cannot rerun from {parent}: the config or datasets changed in ways that alter its cells; restore them, or start a new run"
        )
    return fingerprint


def _pairs(rerun: Rerun, plan: Plan) -> set[tuple[str, str, str]]:
    """The (target, dataset, case id) pairs with a cell of the kinds asked for in the parent (every cell of it checked)."""
    statuses = {RERUN_KINDS[k] for k in rerun.kinds}
    pairs: dict[tuple[str, str, str], None] = {}
    seen = 0
    try:
        for result in read_results(rerun.parent_dir / RESULTS, ReadProblems(), raw=True):  # as the parent ran: review marks stay with it
            check_result(result, plan)
            seen += 1
            if result.get("status") in statuses:
                pairs[(str(result["target"]), str(result["dataset"]), str(result["case_id"]))] = None
    except ResumeError as exc:
        raise RerunError(str(exc).replace("start a new run", f"cannot rerun from {rerun.parent_id}")) from None
    if seen < len(plan.cells):
        raise RerunError(
            f"cannot rerun from {rerun.parent_id}: it has results for {seen} of its {len(plan.cells)} cells; "
            f"finish it first with --resume {rerun.parent_id}"
        )
    if not pairs:
        raise NothingToRerun(f"nothing to rerun: run {rerun.parent_id} has no {' or '.join(rerun.kinds)} cells")
    rerun.pairs = list(pairs)
    return set(pairs)


def rerun_plan(config: Config, plan: Plan, rerun: Rerun) -> Plan:
    """The cells a rerun would run (``--dry-run``): the parent's plan without the cells it copies."""
    _check_plan(rerun, config, plan)
    pairs = _pairs(rerun, plan)
    kept = (i for i in range(plan.cells.total) if _key(plan, i) not in pairs)
    return Plan(plan.target_specs, plan.cases, plan.cells.without(kept), plan.variants)


def _key(plan: Plan, index: int) -> tuple[str, str, str]:
    target, dataset, case_id, _ = plan.cells.key_of(index)
    return target, dataset, case_id


def prepare_rerun(config: Config, plan: Plan, rerun: Rerun, run_id: str, run_dir: Path, *, config_hash: str) -> None:
    """Make the new run's folder: its ``run.json`` (parent, rerun) and the parent's cells that are not run again.

    Raises :class:`RerunError` when the plan is not the parent's and
    :class:`NothingToRerun` when no cell of the kinds asked for is there.
    """
    fingerprint = _check_plan(rerun, config, plan)
    pairs = _pairs(rerun, plan)
    source = rerun.parent_dir / RESULTS
    with writing(run_dir):
        run_dir.mkdir(parents=True, exist_ok=False)
    types = plan.target_types()
    writer = ResultWriter(run_dir, run_id=run_id, target_types=types, cases=plan.cells, dataset=next(iter(plan.cases), None))
    again = 0
    for result in read_results(source, raw=True):
        if (result["target"], result["dataset"], result["case_id"]) in pairs:
            again += 1
            continue
        result["run_id"] = run_id
        writer.write(result)
    writer.close(reorder=True)
    rerun.cells = again
    now = datetime.now(timezone.utc)
    meta: RunMeta = {
        "run_id": run_id,
        "name": config.name,
        "config": relative_path(config.path),
        "config_hash": config_hash,
        "started_at": now.isoformat(timespec="seconds"),
        "started_unix": now.timestamp(),
        "cells": len(plan.cells),
        "selection_args": selection_args(selection_from_meta(rerun.meta)),
        "plan_digest": fingerprint,
        "plan_digest_version": stored_fingerprint_version(rerun.meta),
        "parent": rerun.parent_id,
        "rerun": list(rerun.kinds),
        "status": PREPARED,
    }
    write_json(run_dir / "run.json", meta)


def rerun_note(meta: JSONObject, todo: int, total: int) -> str:
    """What a rerun says as it starts."""
    kinds = ", ".join(str(kind) for kind in as_array(meta.get("rerun")))
    return f"rerunning {todo} of {total} cells of {meta.get('parent')} ({kinds}); the rest are copied from it"


def carried(previous: JSONObject) -> RunMeta:
    """What a run's ``run.json`` keeps from the one it continues: a rerun's parent (also across a resume of the rerun)."""
    kept: RunMeta = {}
    if "parent" in previous:
        kept["parent"] = previous["parent"]
    if "rerun" in previous:
        kept["rerun"] = previous["rerun"]
    return kept
