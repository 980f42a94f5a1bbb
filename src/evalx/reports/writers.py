"""The report formats behind one interface: a :class:`ReportWriter` is offered each cell, then finished.

:func:`evalx.reports.render.write_reports` (used by ``evalx run``,
``evalx report`` and ``evalx merge`` alike) reads a run's ``results.jsonl``
once and offers each cell, in file order, to every writer of
:func:`report_writers` that still streams; a writer that cannot take a cell
(the file is out of matrix order: a killed or resumed run) says so and is
rebuilt from the file afterwards, exactly as it would have been written
alone. Then each writer finishes. The list:

- ``junit.xml`` in the run folder (standard JUnit, always);
- ``report.html`` in the run folder;
- ``--junit FILE`` in a ``--junit-flavor`` other than ``standard`` (a
  standard one is a copy of the run folder's);
- ``--markdown FILE`` and ``$GITHUB_STEP_SUMMARY`` (from the summary alone);
- GitHub workflow annotations at the failing cases' lines, under GitHub Actions
  (:mod:`evalx.reports.annotations`).

A new format is a class with these four methods, added to
:func:`report_writers`: every command that writes reports then writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from evalx.errors import EvalxError
from evalx.reports.annotations import Annotations, on_github_actions
from evalx.reports.html import HtmlStream, write_html
from evalx.reports.junit import JUnitStream, run_notes, write_junit
from evalx.results.model import BaselineView, CellResult, RunSummary

__all__ = ["Followed", "Outputs", "ReportWriter", "copies", "report_writers"]


@dataclass(frozen=True)
class Outputs:
    """Report files a command writes besides the run folder's own: ``--junit`` (in ``junit_flavor``), ``--html``, ``--markdown``."""

    junit: Path | None = None
    junit_flavor: str = "standard"
    html: Path | None = None
    markdown: Path | None = None

    def options(self) -> dict[str, Path | None]:
        """The outputs by the option that names them (for :func:`evalx.reports.render.check_outputs`)."""
        return {"--junit": self.junit, "--html": self.html, "--markdown": self.markdown}

    def check(self, run_dir: Path | None = None) -> None:
        """Refuse a flavour without ``--junit``, or a flavoured file over the run folder's standard ``junit.xml``."""
        flavor = self.junit_flavor
        if flavor == "standard":
            return
        if self.junit is None:
            raise EvalxError(
                f"--junit-flavor {flavor} applies to the file --junit writes (runs/<id>/junit.xml stays standard): give --junit"
            )
        if run_dir is not None and _same(self.junit, run_dir / "junit.xml"):
            raise EvalxError(f"--junit {self.junit}: the run's own junit.xml stays standard; write the {flavor} file elsewhere")


class ReportWriter(Protocol):
    """One report format: offered the run's cells in file order, then finished (or rebuilt from ``results.jsonl``)."""

    def offer(self, result: CellResult) -> bool:
        """Take one cell; False when it cannot stream (out of matrix order): it will be rebuilt from the file."""
        ...

    def finish(self) -> None:
        """Write the report from what was offered."""
        ...

    def rebuild(self, results: Path) -> None:
        """Write the report from the results file (after it refused a cell)."""
        ...

    def close(self) -> None:
        """Release what it holds (spool files), written or not."""
        ...


@dataclass
class _Context:
    run_dir: Path
    summary: RunSummary
    name: str
    run_id: str
    rule: str
    baseline: BaselineView | None
    junit_passes: str
    html_max_cells: int | None


class _JUnit:
    """A JUnit file from the cells: streamed when the standard flavour allows, else written from the results file."""

    def __init__(self, ctx: _Context, path: Path, flavor: str = "standard") -> None:
        self.ctx, self.path, self.flavor = ctx, path, flavor
        # an unknown rule raises write_junit's ValueError; a flavour is always written from the file
        self.stream: JUnitStream | None = (
            JUnitStream.start(ctx.rule, ctx.run_dir, passes=ctx.junit_passes) if flavor == "standard" else None
        )
        #: the stream's own offer (no layer a cell); a flavour takes none: it is written from the file
        self.offer: Callable[[CellResult], bool] = self.stream.offer if self.stream is not None else _refuse

    def finish(self) -> None:
        c = self.ctx
        if self.stream is None:  # a flavour, never offered a cell (an empty run): written from the file all the same
            self.rebuild(c.run_dir / "results.jsonl")
            return
        self.stream.finish(self.path, name=c.name, run_id=c.run_id, repeat_pass_rule=c.rule, notes=run_notes(c.summary))

    def rebuild(self, results: Path) -> None:
        c = self.ctx
        write_junit(
            results,
            self.path,
            name=c.name,
            run_id=c.run_id,
            repeat_pass_rule=c.rule,
            flavor=self.flavor,
            passes=c.junit_passes,
            notes=run_notes(c.summary),
        )

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()


class _Html:
    """``report.html``: the cells embedded as they are offered (up to the cap), written with the summary."""

    def __init__(self, ctx: _Context) -> None:
        self.ctx = ctx
        self.stream = HtmlStream(ctx.summary, ctx.run_dir, max_cells=ctx.html_max_cells)
        self.offer: Callable[[CellResult], bool] = self.stream.offer  # (no layer a cell)

    def finish(self) -> None:
        self.stream.write(self.ctx.run_dir / "report.html", baseline=self.ctx.baseline)

    def rebuild(self, results: Path) -> None:
        c = self.ctx
        write_html(results, c.summary, c.run_dir / "report.html", baseline=c.baseline, max_cells=c.html_max_cells)

    def close(self) -> None:
        self.stream.close()


class _Markdown:
    """``--markdown FILE`` and the GitHub step summary: from the run's summary, no cell needed."""

    def __init__(self, ctx: _Context, path: Path | None) -> None:
        self.ctx, self.path = ctx, path

    def offer(self, result: CellResult) -> bool:
        return False  # nothing to take: written from the summary

    def finish(self) -> None:
        from evalx.reports.markdown import publish_markdown

        publish_markdown(self.ctx.summary, self.path)

    def rebuild(self, results: Path) -> None:
        self.finish()

    def close(self) -> None:
        pass


def _context(run_dir: Path, summary: RunSummary, junit_passes: str, html_max_cells: int | None) -> _Context:
    return _Context(
        run_dir=run_dir,
        summary=summary,
        name=str(summary.get("name") or ""),
        run_id=str(summary.get("run_id") or run_dir.name),
        rule=str(summary.get("repeat_pass_rule") or "majority"),  # the run's own (an unknown one: JUnit's ValueError)
        baseline=summary.get("baseline"),
        junit_passes=junit_passes,
        html_max_cells=html_max_cells,
    )


def report_writers(
    run_dir: Path,
    summary: RunSummary,
    *,
    junit_passes: str = "all",
    html_max_cells: int | None = None,
    outputs: Outputs | None = None,
    written: Collection[str] = (),
) -> list[ReportWriter]:
    """The writers of a run's reports: its folder's ``junit.xml`` and ``report.html`` (but those already ``written``:
    :class:`Followed`), and the ``outputs`` that are not copies."""
    ctx = _context(run_dir, summary, junit_passes, html_max_cells)
    writers: list[ReportWriter] = []
    if "junit.xml" not in written:
        writers.append(_JUnit(ctx, run_dir / "junit.xml"))
    if "report.html" not in written:
        writers.append(_Html(ctx))
    outputs = outputs or Outputs()
    if outputs.junit is not None and outputs.junit_flavor != "standard":
        writers.append(_JUnit(ctx, outputs.junit, outputs.junit_flavor))
    if outputs.markdown is not None or _step_summary():
        writers.append(_Markdown(ctx, outputs.markdown))
    if on_github_actions():
        writers.append(Annotations(summary))
    return writers


class Followed:
    """The run folder's ``junit.xml`` and ``report.html``, offered each cell as the run records it, before the run's
    summary exists (:mod:`evalx.reports.follow`); :meth:`finish` writes them once it does.

    The writers are the ones :func:`report_writers` makes; only their context
    (name, run id, notes, baseline, the page's figures) waits for the summary.
    """

    def __init__(self, run_dir: Path, *, rule: str, junit_passes: str = "all", html_max_cells: int | None = None) -> None:
        self.run_dir, self.rule = run_dir, rule
        self.junit_passes, self.html_max_cells = junit_passes, html_max_cells
        ctx = _context(run_dir, {"repeat_pass_rule": rule}, junit_passes, html_max_cells)  # type: ignore[typeddict-item]
        self.junit, self.html = _JUnit(ctx, run_dir / "junit.xml"), _Html(ctx)
        #: each writer's offer: True when it took the cell
        self.offers: list[Callable[[CellResult], bool]] = [self.junit.offer, self.html.offer]

    def finish(self, summary: RunSummary) -> list[str]:
        """Write the reports with the run's ``summary``: the names of those written (none when the summary is not the
        one the cells were offered under: another repeat rule, a sampled page, another order of targets)."""
        ctx = _context(self.run_dir, summary, self.junit_passes, self.html_max_cells)
        if ctx.rule != self.rule:
            return []
        written = []
        if self.html.stream.made_for(summary, self.html_max_cells):
            self.html.ctx = ctx
            self.html.finish()
            written.append("report.html")
        self.junit.ctx = ctx
        self.junit.finish()
        written.append("junit.xml")
        return written

    def close(self) -> None:
        self.junit.close()
        self.html.close()


def copies(run_dir: Path, outputs: Outputs) -> Iterable[tuple[Path, Path]]:
    """``(source in the run folder, destination)`` for the outputs that are copies of the run folder's reports."""
    if outputs.junit is not None and outputs.junit_flavor == "standard":
        yield run_dir / "junit.xml", outputs.junit
    if outputs.html is not None:
        yield run_dir / "report.html", outputs.html


def _refuse(result: CellResult) -> bool:
    return False


def _step_summary() -> bool:
    import os

    return bool(os.environ.get("GITHUB_STEP_SUMMARY"))


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):
        return a.absolute() == b.absolute()
