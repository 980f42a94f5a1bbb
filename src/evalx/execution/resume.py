"""Resume a run that was killed or interrupted: run only the cells without a result.

``run.json`` records the run's selection and a fingerprint of its planned
cells (their keys, the cases' content, the target specs, the global
assertions and the judge). A resume rebuilds the plan from that selection and
refuses when the fingerprint differs: the cells would not be the same cells.
Other config changes (``gates:``, descriptions...) are allowed, with a note.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from evalx.common import written
from evalx.common.json_types import JSON, JSONObject
from evalx.common.reading import RUN_RECORD, read_json
from evalx.datasets.table import FINGERPRINT_JSON, case_digest, content_digest
from evalx.errors import EvalxError, ResumeError, UnreadableFile
from evalx.execution.plan import Plan, Selection
from evalx.results.model import CellResult

if TYPE_CHECKING:
    from evalx.config.loader import Config

__all__ = [
    "FINGERPRINT_VERSION",
    "ResumeError",
    "check_plan",
    "check_result",
    "config_hash",
    "load_run_meta",
    "plan_fingerprint",
    "resume_selection",
    "selection_args",
    "selection_from_meta",
    "stored_fingerprint_version",
]


def config_hash(config: Config) -> str:
    """The config's fingerprint, as ``run.json`` records it: a resume or a merge notes that the config changed since."""
    text = json.dumps(written.document(config), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def selection_args(selection: Selection) -> JSONObject:
    """The selection as stored in ``run.json`` (every field, by its own name)."""
    return dataclasses.asdict(selection)


def selection_from_meta(meta: JSONObject) -> Selection:
    """The selection a stored ``run.json`` records (its fields were written by :func:`selection_args`)."""
    stored = meta.get("selection_args")
    if not isinstance(stored, dict):
        raise ResumeError(f"run {meta.get('run_id')!r} predates resumable runs (its run.json has no selection_args)")
    return Selection(
        targets=_strings(stored.get("targets")),
        datasets=_strings(stored.get("datasets")),
        case_globs=_strings(stored.get("case_globs")),
        categories=_strings(stored.get("categories")),
        repeat=_count(stored.get("repeat")),
        matrix=stored.get("matrix") is True,
        max_cells=_count(stored.get("max_cells")),
        max_variants=_count(stored.get("max_variants")),
        shard=_shard(stored.get("shard")),
        tags=_strings(stored.get("tags")),
    )


def _strings(value: JSON) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _count(value: JSON) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _shard(value: JSON) -> tuple[int, int] | None:
    """``[index, count]`` as stored (a tuple becomes a list in JSON)."""
    if isinstance(value, list) and len(value) == 2:
        index, count = _count(value[0]), _count(value[1])
        if index is not None and count is not None:
            return index, count
    return None


#: the version of the plan fingerprint a new run records in ``run.json`` (``plan_digest_version``; absent: 1)
FINGERPRINT_VERSION = 2


def plan_fingerprint(config: Config, plan: Plan, version: int = FINGERPRINT_VERSION) -> str:
    """A digest of everything that decides what the cells are and how they are scored.

    Version 2 (what a run records now) feeds each selected case once: its
    :func:`case_digest`, dataset, id, targets and repeats, which fix its cells
    and their indexes. Version 1, fed a line a cell with :func:`content_digest`,
    is what a run started by an older evalx recorded: such a run resumes with it.
    """
    h = hashlib.sha256()
    encode = FINGERPRINT_JSON.encode

    def feed(value: object) -> None:
        h.update(encode(value).encode())
        h.update(b"\x1e")

    # a secret's value never goes into run.json, not even hashed
    redact = config.redactor.obj if config.redactor else (lambda value: value)
    feed(redact(plan.target_specs))  # as written: the digest older runs recorded
    feed(redact(written.global_asserts(config)))
    feed(redact(written.document(config).get("judge")))
    if version == 1:
        index = 0
        for dataset, table, pos, targets, repeats in plan.cells.cases():  # a case's cells (targets x repeats) share one digest
            digest = content_digest(table.case(pos), redact).hex()
            case_id = table.case_id(pos)
            for target in targets:
                for repeat in range(repeats):
                    feed([index, f"{target}\x1f{dataset}\x1f{case_id}\x1f{repeat}", digest])
                    index += 1
        return h.hexdigest()[:32]
    h.update(b"v2\x1e")
    update = h.update
    for dataset, table, pos, targets, repeats in plan.cells.cases():
        on = "\x1d".join(targets)
        made = table.digest(pos)  # made when the case was loaded
        update(made if made is not None else case_digest(table.case(pos), redact))
        update(f"{dataset}\x1f{table.case_id(pos)}\x1f{on}\x1f{repeats}\x1e".encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:32]


def stored_fingerprint_version(meta: JSONObject) -> int:
    """The version of the fingerprint in a run's ``run.json`` (1 when it does not say: an older evalx)."""
    version = meta.get("plan_digest_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version not in (1, FINGERPRINT_VERSION):
        raise ResumeError(
            f"cannot resume {meta.get('run_id')}: its run.json has a plan fingerprint of version {version!r}, "
            "which this evalx does not know (was it started by a newer evalx?)"
        )
    return version


def load_run_meta(
    ref: str, output_dir: Path, *, option: str = "--resume", error: type[EvalxError] = ResumeError, name: str | None = None
) -> tuple[Path, JSONObject]:
    """The directory and ``run.json`` of run ``ref`` (an id under ``output_dir``, a path, or ``latest`` of config ``name``).

    Problems raise ``error`` in one line that starts with ``option`` (``--resume``, ``--from``).
    """
    from evalx.results.history import RunNotFound, resolve_run

    try:
        run_dir = resolve_run(ref, output_dir, name=name)
    except RunNotFound as exc:
        raise error(f"{option}: {exc}") from None
    try:
        value = read_json(run_dir / "run.json", RUN_RECORD)
    except UnreadableFile as exc:
        raise error(f"{option}: cannot read {exc}") from None
    except (OSError, ValueError) as exc:
        raise error(f"{option}: cannot read {run_dir / 'run.json'}: {exc}") from None
    meta = value if isinstance(value, dict) else None
    if meta is None or not meta.get("run_id"):
        raise error(f"{option}: {run_dir / 'run.json'} is not a run's metadata")
    return run_dir, meta


def check_plan(meta: JSONObject, config: Config, plan: Plan, fingerprint: str) -> list[str]:
    """Raise :class:`ResumeError` when the cells changed; return notes for allowed changes."""
    run_id = meta.get("run_id")
    if meta.get("name") and meta["name"] != config.name:
        raise ResumeError(f"cannot resume {run_id}: it is a run of config {meta['name']!r}, not {config.name!r}")
    if meta.get("plan_digest") is None:
        raise ResumeError(f"cannot resume {run_id}: its run.json has no plan fingerprint (made by an older evalx)")
    if meta["plan_digest"] != fingerprint:
        before, now = meta.get("cells"), len(plan.cells)
        what = (
            f"{before} planned cells then, {now} now"
            if before != now
            else "the same number of cells, but cases, targets, assertions or the judge differ"
        )
        raise ResumeError(
            f"cannot resume {run_id}: the config or datasets changed in ways that alter its cells ({what}); "
            "restore them, or start a new run"
        )
    notes = []
    if meta.get("config_hash") and meta["config_hash"] != config_hash(config):
        notes.append(f"the config changed since {run_id} started, but not its cells; resuming")
    return notes


def check_result(result: CellResult, plan: Plan) -> None:
    """A stored result must be the planned cell at its index (same target, dataset, case, repeat)."""
    cells = plan.cells
    i = result.get("index")
    if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < cells.total:
        raise ResumeError(f"results.jsonl has a result for cell {i!r}, which the plan does not have; start a new run")
    target, dataset, case_id, repeat = cells.key_of(i)
    if (result.get("target"), result.get("dataset"), result.get("case_id"), result.get("repeat")) != (target, dataset, case_id, repeat):
        raise ResumeError(
            f"results.jsonl cell {i} is {result.get('target')} {result.get('dataset')}/{result.get('case_id')}, "
            f"but the plan has {target} {dataset}/{case_id} there; start a new run"
        )


def resume_selection(meta: JSONObject, given: Selection) -> Selection:
    """The stored run's selection; options given with ``--resume`` must agree with it."""
    stored = selection_from_meta(meta)
    if given != Selection() and given != stored:
        raise ResumeError(
            f"--resume {meta['run_id']} runs that run's own selection ({_describe(stored)}); "
            f"the options given select {_describe(given)} — drop them, or start a new run"
        )
    return stored


def _describe(sel: Selection) -> str:
    parts = [
        f"{f.name}={getattr(sel, f.name)!r}" for f in dataclasses.fields(Selection) if getattr(sel, f.name) not in (None, False, [], ())
    ]
    return ", ".join(parts) or "everything"
