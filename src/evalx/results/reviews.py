"""Review marks: a person's pass/fail override of a cell, kept in ``runs/<id>/reviews.jsonl`` and applied when a run is read.

``reviews.jsonl`` is append-only, one mark a line::

    {"target": "t", "dataset": "d", "case_id": "c", "repeat": 0, "verdict": "fail",
     "comment": "wrong city", "reviewer": "ana", "at": "2026-11-26T17:00:00Z"}

``repeat`` is optional: a mark without one applies to every repeat of the
case on that target. ``score`` (0 to 1) is optional too: the reviewer's
score replaces the cell's where the verdict replaces its status. For a cell, the latest applicable line wins. A marked
cell's ``status`` becomes the verdict and the cell gets a ``review`` record
(verdict, comment, reviewer, at, ``original_status``, and with a score
``score`` and ``original_score``), so summaries,
gates, comparisons, JUnit and the HTML report all count the reviewed verdict
and can still show what the run decided. Marks belong to their run: they
never carry to another run (but to the merge of shards, for each shard's own
cases: :mod:`evalx.execution.merge`). A damaged line is skipped with a warning.
"""

from __future__ import annotations

import datetime as _dt
import getpass
import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from evalx.common.atomic import open_append
from evalx.common.json_types import JSON
from evalx.common.reading import REVIEWS as REVIEWS_FILE
from evalx.common.reading import REVIEWS_LINE, check_regular, lines, open_regular
from evalx.errors import EvalxError, UnreadableFile, writing
from evalx.results.model import CellResult, RunSummary

__all__ = [
    "REVIEWS",
    "VERDICTS",
    "Mark",
    "Marks",
    "add_mark",
    "apply_marks",
    "default_reviewer",
    "load_marks",
    "marks_count",
    "reviews_line",
    "summary_is_current",
    "unreviewed",
]

log = logging.getLogger(__name__)

REVIEWS = "reviews.jsonl"
VERDICTS = ("pass", "fail")


class _MarkKeys(TypedDict):
    target: str
    dataset: str
    case_id: str
    verdict: str
    """``pass`` or ``fail``."""
    comment: str
    reviewer: str
    at: str
    """When (ISO 8601, UTC: ``2026-11-26T17:00:00Z``)."""


class Mark(_MarkKeys, total=False):
    """One line of ``reviews.jsonl``: a reviewer's verdict on a cell (every repeat of it without ``repeat``)."""

    repeat: int | None
    score: float
    """The reviewer's 0-1 score, counted where the cell's own would be."""


def check_score(score: object) -> float | None:
    """A review score as stored (a number from 0 to 1), or None when ``score`` is not one."""
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= 1:
        return None
    return float(score)


#: (target, dataset, case id) -> [(line number, repeat or None, the mark)], in file order
#: (the marks are the viewer's too, which reads them as plain mappings: :class:`Mark` describes their keys)
_ByCase = dict[tuple[str, str, str], list[tuple[int, int | None, dict[str, Any]]]]


@dataclass
class Marks:
    """A run's review marks, read once: the latest applicable mark per cell, and the lines that could not be read."""

    by_case: _ByCase = field(default_factory=dict)
    count: int = 0
    bad_lines: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.by_case)

    def mark_for(self, target: str, dataset: str, case_id: str, repeat: int | None) -> dict[str, Any] | None:
        """The latest mark that applies to this cell (one for its repeat, or one for every repeat), or None."""
        entries = self.by_case.get((target, dataset, case_id))
        if not entries:
            return None
        for _, rep, mark in reversed(entries):  # the latest line first
            if rep is None or rep == repeat:
                return mark
        return None

    def all_marks(self) -> Iterator[dict[str, Any]]:
        """Every readable mark in file order (the viewer's review log)."""
        rows = [(n, m) for entries in self.by_case.values() for n, _, m in entries]
        for _, mark in sorted(rows, key=lambda r: r[0]):
            yield mark


def _check(value: Any) -> dict[str, Any] | None:
    """A mark as stored, or None when the line is not a usable mark."""
    if not isinstance(value, dict):
        return None
    strings = [value.get(k) for k in ("target", "dataset", "case_id")]
    if not all(isinstance(s, str) and s for s in strings):
        return None
    if value.get("verdict") not in VERDICTS:
        return None
    repeat = value.get("repeat")
    if repeat is not None and (type(repeat) is not int or repeat < 0):
        return None
    score = value.get("score")
    if score is not None and check_score(score) is None:
        return None
    return {
        "target": value["target"],
        "dataset": value["dataset"],
        "case_id": value["case_id"],
        "repeat": repeat,
        "verdict": value["verdict"],
        "comment": str(value.get("comment") or ""),
        "reviewer": str(value.get("reviewer") or ""),
        "at": str(value.get("at") or ""),
        "score": check_score(score),
    }


#: run folder -> ((size, mtime_ns) of its reviews.jsonl, the marks read from it)
_CACHE: dict[str, tuple[tuple[int, int], Marks]] = {}
_WARNED: set[tuple[str, int, int]] = set()


def load_marks(run_dir: Path, *, warn: bool = True) -> Marks:
    """The marks in ``run_dir``'s ``reviews.jsonl`` (empty when there is none); read again only when the file changed.

    A line that is not a mark (torn, not JSON, a verdict other than pass/fail)
    is skipped; ``warn`` prints one line to stderr about it, once per state of the file.
    """
    path = run_dir / REVIEWS
    try:
        st = path.stat()
    except OSError:
        return Marks()
    check_regular(path)  # a FIFO or a device is refused (UnreadableFile), never read: reading one would wait for ever
    stamp = (st.st_size, st.st_mtime_ns)
    key = str(path)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] == stamp:
        marks = hit[1]
    else:
        marks = _read(path)
        _CACHE[key] = (stamp, marks)
    if warn and marks.bad_lines and (key, *stamp) not in _WARNED:
        _WARNED.add((key, *stamp))
        shown = ", ".join(str(n) for n in marks.bad_lines[:5]) + (" ..." if len(marks.bad_lines) > 5 else "")
        log.warning(f"{path}: {len(marks.bad_lines)} unreadable review line(s) skipped (line {shown})")
    return marks


def _read(path: Path) -> Marks:
    """The marks of ``path``, read a line at a time (at most REVIEWS' size in all, REVIEWS_LINE's a mark)."""
    marks = Marks()
    try:
        with open_regular(path, REVIEWS_FILE) as f:  # at most REVIEWS' size in all
            for number, raw in enumerate(lines(f, REVIEWS_LINE), 1):
                _add(marks, number, raw)
    except UnreadableFile:
        raise
    except OSError:
        return marks
    return marks


def _add(marks: Marks, number: int, raw: bytes | None) -> None:
    """Line ``number`` of a reviews file into ``marks`` (a line past its limit, or not a mark: a bad line)."""
    if raw is None:
        marks.bad_lines.append(number)
        return
    if raw.strip():
        try:
            mark = _check(json.loads(raw))
        except (ValueError, RecursionError):
            mark = None
        if mark is None:
            marks.bad_lines.append(number)
            return
        marks.count += 1
        key = (mark["target"], mark["dataset"], mark["case_id"])
        marks.by_case.setdefault(key, []).append((number, mark["repeat"], mark))


def marks_count(run_dir: Path) -> int:
    """How many readable marks ``run_dir`` holds (0 without ``reviews.jsonl``)."""
    return load_marks(run_dir, warn=False).count


def apply_marks(results: Iterable[Any], marks: Marks) -> Iterator[Any]:
    """``results`` (cell dicts), each marked cell with its reviewed ``status`` and a ``review`` record."""
    for result in results:
        if isinstance(result, dict):
            repeat = result.get("repeat")
            mark = marks.mark_for(
                str(result.get("target") or ""),
                str(result.get("dataset") or ""),
                str(result.get("case_id") or ""),
                repeat if type(repeat) is int else 0,
            )
            if mark is not None:
                original = result.get("status")
                result["review"] = {
                    "verdict": mark["verdict"],
                    "comment": mark["comment"],
                    "reviewer": mark["reviewer"],
                    "at": mark["at"],
                    "original_status": original,
                }
                if mark.get("score") is not None:
                    result["review"]["score"] = mark["score"]
                    result["review"]["original_score"] = result.get("score")
                    result["score"] = mark["score"]
                result["status"] = mark["verdict"]
        yield result


def unreviewed(result: CellResult) -> CellResult:
    """``result`` as the run wrote it: a reviewed cell's ``review`` dropped and its original status back (before a rewrite)."""
    out = result.copy()
    review = out.pop("review", None)
    if isinstance(review, dict) and "original_status" in review:
        out["status"] = review["original_status"]
        if "original_score" in review:
            out["score"] = review["original_score"]
    return out


def default_reviewer() -> str:
    """The OS user's name (the reviewer when none is given)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):  # no user name here (a container without an /etc/passwd entry; no pwd module)
        return os.environ.get("USER") or "unknown"


def add_mark(
    run_dir: Path,
    *,
    target: str,
    dataset: str,
    case_id: str,
    verdict: str,
    comment: str = "",
    reviewer: str | None = None,
    repeat: int | None = None,
    at: str | None = None,
    score: float | None = None,
) -> Mark:
    """Append one mark to ``run_dir``'s ``reviews.jsonl`` (one write of one line); returns it as stored.

    Raises :class:`EvalxError` for a verdict other than pass/fail, an empty id, or a folder that is not a run.
    """
    if verdict not in VERDICTS:
        raise EvalxError(f"review verdict {verdict!r}: use pass or fail")
    if not (target and dataset and case_id):
        raise EvalxError("a review mark needs a target, a dataset and a case id")
    if repeat is not None and (type(repeat) is not int or repeat < 0):
        raise EvalxError(f"review repeat {repeat!r}: a repeat number (0, 1, ...)")
    if score is not None and check_score(score) is None:
        raise EvalxError(f"review score {score!r}: a number from 0 to 1")
    if not (run_dir / "results.jsonl").is_file():
        raise EvalxError(f"{run_dir}: not a run directory (no results.jsonl)")
    mark: Mark = {
        "target": target,
        "dataset": dataset,
        "case_id": case_id,
        "repeat": repeat,
        "verdict": verdict,
        "comment": comment,
        "reviewer": reviewer or default_reviewer(),
        "at": at or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if repeat is None:
        del mark["repeat"]  # a mark for every repeat of the case
    if score is not None:
        mark["score"] = float(score)
    line = (json.dumps(mark, ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace")
    path = run_dir / REVIEWS
    fd = open_append(path)  # a link at reviews.jsonl is refused: marks never leave the run folder
    with writing(path):
        try:
            os.write(fd, line)  # O_APPEND: one line, never interleaved with another writer's
        finally:
            os.close(fd)
    return mark


def summary_is_current(run_dir: Path, summary: Mapping[str, JSON]) -> bool:
    """Whether a stored ``summary`` already counts every mark of ``run_dir`` (else: rebuild its figures from the results)."""
    count = marks_count(run_dir)
    reviews = summary.get("reviews")
    stored = reviews.get("marks", 0) if isinstance(reviews, dict) else 0
    return bool(stored == count)


def reviews_line(summary: RunSummary) -> str | None:
    """The summary's one line about review marks (text, Markdown and HTML reports), or None when no cell is marked."""
    reviews = summary.get("reviews")
    if not isinstance(reviews, dict) or not reviews.get("reviewed_cells"):
        return None
    n, over = int(reviews.get("reviewed_cells") or 0), int(reviews.get("overridden_cells") or 0)
    return f"{n} cell{'s' if n != 1 else ''} reviewed, {over} overridden by a reviewer's verdict (the reviewed verdicts count; {REVIEWS})"
