"""A run's report files (summary.json, summary.txt, junit.xml, report.html), written by one path for `evalx run` and `evalx report`."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from evalx.common.atomic import atomic_write, write_text
from evalx.common.json_types import JSONObject
from evalx.common.reading import RUN_RECORD, SUMMARY, stored_json
from evalx.errors import EvalxError
from evalx.reports.text import format_summary
from evalx.reports.writers import Outputs, ReportWriter, copies, report_writers
from evalx.results.gates import format_outcome
from evalx.results.model import RunSummary
from evalx.results.outcome import restore_summary
from evalx.results.repeats import RULES
from evalx.results.reviews import marks_count
from evalx.results.store import ReadProblems, read_results, write_json
from evalx.results.summary import SummaryBuilder

if TYPE_CHECKING:
    from evalx.reports.follow import Follower

__all__ = [
    "REPORT_FILES",
    "Outputs",
    "ReportOptions",
    "check_outputs",
    "copy_report",
    "rebuild_reports",
    "rebuilt_summary",
    "report_html_text",
    "stored_report_options",
    "write_reports",
]

REPORT_FILES = ("summary.json", "summary.txt", "junit.xml", "report.html")
#: what a run folder holds that no report may overwrite: its record, not a rendering of it
RUN_RECORDS = ("results.jsonl", "summary.json", "config.yaml", "run.json", "reviews.jsonl")


@dataclass(frozen=True)
class ReportOptions:
    """How the report files are rendered (``evalx run`` and ``evalx report`` options); the defaults suit most runs."""

    #: ``all``: a testcase per cell in junit.xml; ``summary``: failures, errors and skips in full, passes summarised
    junit_passes: str = "all"
    #: the most cells report.html embeds in full (None: the built-in cap)
    html_max_cells: int | None = None


def stored_report_options(run_dir: Path) -> ReportOptions:
    """The report options a run recorded in its ``run.json`` (``reports``), else the defaults."""
    stored = _read_json_dict(run_dir / "run.json").get("reports")
    if not isinstance(stored, dict):
        return ReportOptions()
    passes, cap = stored.get("junit_passes"), stored.get("html_max_cells")
    return ReportOptions(
        junit_passes=passes if passes in ("all", "summary") else "all",
        html_max_cells=cap if isinstance(cap, int) and not isinstance(cap, bool) and cap >= 0 else None,
    )


def write_reports(
    run_dir: Path,
    summary: RunSummary,
    options: ReportOptions | None = None,
    outputs: Outputs | None = None,
    follower: Follower | None = None,
) -> None:
    """Write :data:`REPORT_FILES` into ``run_dir`` from its ``results.jsonl`` and the run's ``summary``, and the ``outputs``.

    The run's name, id and repeat rule are read from the summary (the rule the
    run recorded, so a re-render agrees with it). Every format is a
    :class:`~evalx.reports.writers.ReportWriter`, and all of them are fed from
    one stream of ``results.jsonl``: memory does not grow with the number of
    cells. ``outputs`` (``--junit``, ``--html``, ``--markdown``) are written or
    copied last. A run's ``follower`` (:mod:`evalx.reports.follow`) has built ``junit.xml`` and ``report.html``
    as the cells were recorded: those it writes are not written again.
    """
    outputs = outputs or Outputs()
    write_json(run_dir / "summary.json", summary)
    text = format_summary(summary) + "\n" + format_outcome(summary)
    write_text(run_dir / "summary.txt", text, errors="replace")  # a lone surrogate cannot be UTF-8
    options = options or ReportOptions()
    written = follower.finish(summary) if follower is not None else []
    writers = report_writers(
        run_dir, summary, junit_passes=options.junit_passes, html_max_cells=options.html_max_cells, outputs=outputs, written=written
    )
    if writers:
        _feed(run_dir / "results.jsonl", writers)
    for source, destination in copies(run_dir, outputs):
        copy_report(source, destination)


def _feed(results: Path, writers: list[ReportWriter]) -> None:
    """Offer each cell of ``results`` (one read) to the writers still streaming; then finish them, or rebuild those that stopped.

    A writer that cannot take a cell (the file is out of matrix order: a killed
    or resumed run) is rebuilt from the file, exactly as it would have written it alone.
    """
    streaming = [(writer, writer.offer) for writer in writers]  # (each one's offer looked up once, not once a cell)
    stopped: list[ReportWriter] = []
    try:
        if results.exists():
            for result in read_results(results):  # (only mappings)
                for writer, offer in streaming:
                    if not offer(result):
                        stopped.append(writer)
                if len(streaming) + len(stopped) > len(writers):  # some refused this cell: they stop streaming
                    streaming = [(writer, offer) for writer, offer in streaming if writer not in stopped]
                    if not streaming:
                        break
        for writer in writers:
            if writer in stopped:
                writer.rebuild(results)
            else:
                writer.finish()
    finally:
        for writer in writers:
            writer.close()


def rebuild_reports(
    run_dir: Path, problems: ReadProblems | None = None, options: ReportOptions | None = None, outputs: Outputs | None = None
) -> RunSummary:
    """Re-render a stored run's reports from its ``results.jsonl`` (`evalx report`); returns the summary.

    The summary is rebuilt from the results (so it reflects every stored cell);
    what only the run knew (duration, config, baseline...) comes from the
    stored ``summary.json`` and ``run.json``. Lines that could not be read, and
    second lines of a cell, are left out, counted in ``problems`` and named in
    the summary (``unreadable_lines``, ``duplicate_cells``).
    """
    summary = rebuilt_summary(run_dir, problems)
    write_reports(run_dir, summary, options, outputs)
    return summary


def rebuilt_summary(run_dir: Path, problems: ReadProblems | None = None) -> RunSummary:
    """A stored run's summary as :func:`rebuild_reports` makes it from ``results.jsonl`` (with its review marks); nothing written."""
    problems = problems if problems is not None else ReadProblems()
    if not os.path.lexists(run_dir / "results.jsonl"):  # there, if not a regular file: reading it names the problem
        raise EvalxError(f"{run_dir}: no results.jsonl there, not a run directory")
    meta, stored = _read_json_dict(run_dir / "run.json"), _read_json_dict(run_dir / "summary.json")
    rule = stored.get("repeat_pass_rule")
    matrix = stored.get("matrix")
    slowest = stored.get("slowest")
    threshold = slowest.get("threshold_ms") if isinstance(slowest, dict) else None  # the run's defaults.slow_ms
    # one cell a case (one target, no repeats), as the stored summary says: no per-case tallies to keep
    per_target = stored.get("per_target")
    one_cell_a_case = stored.get("repeats", True) is None and isinstance(per_target, dict) and len(per_target) <= 1
    for per_case in (False, True) if one_cell_a_case else (True,):
        builder = SummaryBuilder(
            str(meta.get("run_id") or stored.get("run_id") or run_dir.name),
            str(meta.get("name") or stored.get("name") or ""),
            str(meta.get("started_at") or stored.get("started_at") or ""),
            repeat_pass_rule=rule if rule in RULES else "majority",
            matrix=matrix if isinstance(matrix, dict) else None,
            per_case=per_case,
            slow_ms=threshold if isinstance(threshold, (int, float)) and not isinstance(threshold, bool) and threshold > 0 else None,
        )
        problems.unreadable_lines.clear()
        problems.duplicate_cells.clear()
        for result in read_results(run_dir / "results.jsonl", problems):
            builder.add(result)
        if not builder.needs_per_case:  # the stored summary was right (else: read again, keeping each case's cells)
            break
    duration = stored.get("duration_s")
    finished = str(stored.get("finished_at") or meta.get("finished_at") or "")
    figures = builder.finish(finished, float(duration) if isinstance(duration, (int, float)) else 0.0)
    reviews = builder.review_counts or {"reviewed_cells": 0, "overridden_cells": 0}
    summary = restore_summary(figures, stored)  # what only the run knew: config, interrupted, baseline...
    for key in ("unreadable_lines", "duplicate_cells", "reviews"):  # what this read found, not what an earlier one did
        summary.pop(key, None)  # type: ignore[misc]
    problems.record(summary)
    marks = marks_count(run_dir)
    if marks:  # the summary counts these marks (a later mark makes it stale: evalx.results.reviews.summary_is_current)
        summary["reviews"] = {**reviews, "marks": marks}
    return summary


def report_html_text(run_dir: Path, options: ReportOptions | None = None) -> str:
    """A stored run's ``report.html`` as :func:`rebuild_reports` would write it now, as text: the run folder is not touched."""
    import tempfile

    from evalx.reports.html import write_html

    summary = rebuilt_summary(run_dir)
    options = options or ReportOptions()
    with tempfile.TemporaryDirectory(prefix="evalx-report-") as scratch:
        out = Path(scratch) / "report.html"
        write_html(run_dir / "results.jsonl", summary, out, baseline=summary.get("baseline"), max_cells=options.html_max_cells)
        return out.read_text(encoding="utf-8", errors="replace")


def check_outputs(outputs: dict[str, Path | None], inputs: Iterable[Path] = ()) -> None:
    """Refuse, before anything runs, an output path (``{"--html": path}``) that would destroy what the command reads.

    An output may not be one of ``inputs`` (the config, a dataset, a target's
    code, a run's results), a record of any run folder (:data:`RUN_RECORDS`
    beside a ``results.jsonl``), a directory, or another output of the same
    command. Raises :class:`EvalxError` naming the option and the file.
    """
    protected: dict[Path, Path] = {}
    for source in inputs:
        protected.setdefault(_resolved(source), source)
    claimed: dict[Path, str] = {}
    for option, path in outputs.items():
        if path is None:
            continue
        where = _resolved(path)
        if where.is_dir():
            raise EvalxError(f"{option} {path}: is a directory (give a file name)")
        if where in protected:
            raise EvalxError(f"{option} {path}: that is {protected[where]}, which this command reads; write the report elsewhere")
        if where.name in RUN_RECORDS and (where.parent / "results.jsonl").is_file():
            raise EvalxError(f"{option} {path}: that is a run's {where.name}, which no report may overwrite; write the report elsewhere")
        if where in claimed:
            raise EvalxError(f"{option} and {claimed[where]} both write {path}; give each its own file")
        claimed[where] = option


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a symlink loop: compare it as written
        return path.absolute()


def copy_report(src: Path, dst: Path) -> None:
    """Copy a written report to where ``--junit``/``--html`` asked for it, creating its folder."""
    if _resolved(src) == _resolved(dst):  # `evalx report RUN --html RUN/report.html`: already there
        return
    with open(src, "rb") as source, atomic_write(dst, binary=True) as copy:
        shutil.copyfileobj(source, copy, 1 << 20)


def _read_json_dict(path: Path) -> JSONObject:
    """A run file's object, {} when it is missing or damaged (one that is not a regular file is named in a warning)."""
    value = stored_json(path, SUMMARY if path.name == "summary.json" else RUN_RECORD)
    return value if isinstance(value, dict) else {}
