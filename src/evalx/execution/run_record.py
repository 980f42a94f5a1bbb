"""A run folder's ``run.json``: what evalx writes there (:class:`RunMeta`), and reading it back.

``evalx run`` writes it before any cell runs (status ``running``) and again
at the end; a rerun writes a ``prepared`` one first, ``evalx merge`` its
own. ``--resume``, ``--rerun --from`` and ``evalx merge`` read it back: a
file on disk, perhaps of an older (or newer) evalx, so it is read as JSON
(:func:`read_run_meta`) and each key narrowed where it is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

from evalx.common.json_types import JSON, JSONObject
from evalx.common.reading import RUN_RECORD, FileKind, stored_json
from evalx.results.model import MergeReport

__all__ = ["RunMeta", "SelectionRecord", "ShardRecord", "read_run_meta"]


class SelectionRecord(TypedDict):
    """``selection``: what the run selected, for a reader (``selection_args`` is what a resume rebuilds it from)."""

    targets: list[str]
    datasets: list[str]
    cases: list[str]
    categories: list[str]
    tags: list[str]
    repeat: int | None
    matrix: bool


class ReportsRecord(TypedDict):
    """``reports``: how the reports were rendered; ``evalx report`` keeps it unless told otherwise."""

    junit_passes: str
    html_max_cells: int | None


class ShardRecord(TypedDict):
    """``shard``: what ``evalx merge`` checks, the shards of one plan, all of them."""

    index: int
    count: int
    plan_digest: str
    """The whole plan's fingerprint: a shard keeps every cell's index in it."""
    plan_cells: int
    plan_cases: int
    target_types: dict[str, str]
    """Each target's kind, and below the first dataset: what the merged results.jsonl's run record says."""
    dataset: str | None


class RunMeta(TypedDict, total=False):
    """``run.json`` as evalx writes it.

    A key typed :data:`~evalx.common.json_types.JSON` (or ``... | JSON``) may be
    carried over from a stored ``run.json``: the run a resume continues, the
    first shard of a merge.
    """

    run_id: str
    name: str
    config: str
    config_hash: JSON
    """The config's fingerprint (:func:`evalx.execution.resume.config_hash`); a merge copies its first shard's."""
    started_at: str
    started_unix: JSON
    """Orders runs started within the same second."""
    targets: list[str] | JSON
    cells: int
    selection: SelectionRecord | JSON
    selection_args: JSONObject
    """:class:`~evalx.execution.plan.Selection`'s fields by name, for ``--resume`` and ``--rerun``."""
    plan_digest: str
    plan_digest_version: JSON
    reports: ReportsRecord
    status: str
    """``running``, ``complete``, ``interrupted``, ``failed``, or ``prepared`` (a rerun not started yet)."""
    shard: ShardRecord
    parent: JSON
    """A rerun's: the run it reruns, and ``rerun`` what of it."""
    rerun: JSON
    resumed_at: list[JSON]
    batch: bool
    """The run was made with ``--batch``: ``--resume`` keeps it (the batches it created are polled, never sent again)."""
    merged: MergeReport
    finished_at: JSON
    exit_code: int


def read_run_meta(path: Path, kind: FileKind = RUN_RECORD) -> JSONObject | None:
    """The JSON object in ``path`` (a ``run.json``, or another run file of ``kind``); None when it cannot be read or holds
    something else.

    Read through :mod:`evalx.common.reading`: one that is not a regular file (a FIFO, ``/dev/zero``) or is past
    ``kind``'s size is named in a warning and read as missing, never read.
    """
    value = stored_json(path, kind)
    return value if isinstance(value, dict) else None
