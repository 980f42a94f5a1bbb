"""GitHub Actions workflow annotations: ``::error file=F,line=L,title=T::MESSAGE`` at each failing case's own dataset line.

Written (to stderr, where the runner reads workflow commands as it does on
stdout, so ``--json`` and ``--markdown -`` keep stdout clean) when
``GITHUB_ACTIONS=true``, by ``evalx run``, ``evalx merge`` and ``evalx
report``. GitHub then shows each failure on the pull request's diff of the
dataset. A case is annotated once, whatever its repeats; the newly failing
cases (against the baseline) come first; an interrupted or stopped-early run's
``INTERRUPTED: N of M planned cells`` line and resume command come before them. GitHub shows at most 10 error
annotations a step, so at most :data:`MAX_ANNOTATIONS` are written and one
``::notice::`` counts the rest.

The escaping is the runner's own (``actions/toolkit``'s ``command.ts``): in
the message ``%``, ``\\r`` and ``\\n``; in a property also ``:`` and ``,``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from evalx.common.ansi import strip_ansi
from evalx.results.model import CellResult, RunSummary, failure_reason
from evalx.results.outcome import interruption
from evalx.results.store import read_results

__all__ = ["MAX_ANNOTATIONS", "Annotations", "escape_data", "escape_property", "on_github_actions"]

#: error annotations written: GitHub shows 10 of each kind a step
MAX_ANNOTATIONS = 10
#: characters of a failure's reason kept in its annotation
MAX_MESSAGE = 1000

_CaseKey = tuple[str, str, str]


def on_github_actions() -> bool:
    """True inside a GitHub Actions job (``GITHUB_ACTIONS=true``)."""
    return os.environ.get("GITHUB_ACTIONS") == "true"


def escape_data(text: str) -> str:
    """A workflow command's message, escaped as the runner unescapes it."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (``file=``, ``title=``...), escaped as the runner unescapes it."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


@dataclass
class _Failing:
    target: str
    dataset: str
    case_id: str
    source: str
    status: str
    reason: str
    cells: int = 1


class Annotations:
    """A :class:`~evalx.reports.writers.ReportWriter`: offered every cell, it keeps the first failing cases and counts the rest."""

    def __init__(self, summary: RunSummary, stream: TextIO | None = None, *, limit: int = MAX_ANNOTATIONS) -> None:
        self.summary, self.limit = summary, limit
        self.stream = stream
        comparison = summary.get("comparison")
        self.newly: set[_CaseKey] = (
            {(c["target"], c["dataset"], c["case_id"]) for c in comparison["newly_failing"]} if comparison else set()
        )
        # the cases kept, newly failing ones and the others apart, each up to the limit (the newly failing are written first)
        self.first: dict[_CaseKey, _Failing] = {}
        self.others: dict[_CaseKey, _Failing] = {}
        self.failing_cells = 0
        config = str(summary.get("config") or "")
        self.base = Path(config).parent if config else Path()
        self.workspace = Path(os.environ.get("GITHUB_WORKSPACE") or ".")

    def offer(self, result: CellResult) -> bool:
        status = result.get("status")
        if status not in ("fail", "error"):
            return True
        self.failing_cells += 1
        key = (str(result.get("target") or ""), str(result.get("dataset") or ""), str(result.get("case_id") or ""))
        kept = self.first if key in self.newly else self.others
        seen = kept.get(key)
        if seen is not None:
            seen.cells += 1
        elif len(kept) < self.limit:
            reason = failure_reason(result, str(status))
            kept[key] = _Failing(*key, source=str(result.get("case_source") or ""), status=str(status), reason=reason)
        return True

    def finish(self) -> None:
        out = self.stream or sys.stderr
        stopped = interruption(self.summary)
        if stopped is not None:  # first: the failures below are those of a part of the plan
            out.write(f"::error title={escape_property('evalx: ' + stopped[0])}::{escape_data(f'{stopped[0]}; {stopped[1]}')}\n")
        chosen = [*self.first.values(), *self.others.values()][: self.limit - (stopped is not None)]
        for failing in chosen:
            out.write(self._line(failing) + "\n")
        left = self.failing_cells - sum(f.cells for f in chosen)
        if left > 0:
            out.write(
                "::notice title=evalx::"
                + escape_data(f"{left} more failing cell{'s' if left != 1 else ''} not annotated: see the job summary or the run's report")
                + "\n"
            )
        out.flush()

    def rebuild(self, results: Path) -> None:
        self.first.clear()
        self.others.clear()
        self.failing_cells = 0
        for result in read_results(results):
            self.offer(result)
        self.finish()

    def close(self) -> None:
        pass

    def _line(self, f: _Failing) -> str:
        props = [
            f"title={escape_property(f'evalx: {f.target} {f.dataset}/{f.case_id} ' + ('errored' if f.status == 'error' else 'failed'))}"
        ]
        where = self._where(f.source)
        if where is not None:
            props = [f"file={escape_property(where[0])}", *([f"line={where[1]}"] if where[1] else []), *props]
        reason = strip_ansi(f.reason).strip() or f.status
        if len(reason) > MAX_MESSAGE:
            reason = reason[:MAX_MESSAGE] + "…"
        if f.cells > 1:
            reason += f" ({f.cells} cells of this case)"
        return f"::error {','.join(props)}::{escape_data(reason)}"

    def _where(self, source: str) -> tuple[str, str] | None:
        """The case's file, relative to the workspace as GitHub wants it, and its line (``file.jsonl:12``; ``""``: no line)."""
        if not source or " " in source:  # a captured case's source names a run, not a file
            return None
        file, sep, line = source.rpartition(":")
        if not sep or not line.isdigit():
            file, line = source, ""
        path = self.base / file
        try:
            shown = os.path.relpath(path.resolve(), self.workspace.resolve())
        except (OSError, ValueError):
            shown = str(path)
        return shown.replace(os.sep, "/"), line
