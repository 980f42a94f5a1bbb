"""A run's outcome: ``summary.json`` assembled in one place, and the exit status decided in one place.

The exit statuses (DESIGN.md "Exit status"), decided by :func:`decide_exit`
and nowhere else:

- 0 :data:`EXIT_OK`: nothing failed or errored (skipped is fine), gates held;
- 1 :data:`EXIT_FAILED`: a case failed or errored (with repeats: its
  ``repeat_pass_rule`` verdict) — or, when ``gates:`` sets a gate, a gate
  breached (then the gates decide, errors counting against the pass rate);
  or the cost guard stopped the run; or ``--max-failures`` stopped it; or nothing was graded (every cell
  skipped or errored: :func:`nothing_graded`), whatever the gates say;
- 2 :data:`EXIT_USAGE`: a config or usage error, nothing ran (the CLI);
- 3 :data:`EXIT_INCOMPLETE`: the run could not complete (interrupted, or
  every cell of a target errored); neither gates nor anything else change it.

A shard run (``--shard I/N``) has no gates: its cells are judged by
``evalx merge``, so it exits 0 once its cells ran, whatever they scored
(3 when it could not complete, 1 when nothing was graded); an empty shard
exits 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:  # the CLI imports the exit codes at startup: keep this module light
    from evalx.results.gates import Gates
    from evalx.results.model import CostGuardReport, MergeReport, RunSummary, ShardReport, SummaryFigures
    from evalx.tracing.spans import TracingReport

__all__ = [
    "EXIT_FAILED",
    "EXIT_INCOMPLETE",
    "EXIT_OK",
    "EXIT_USAGE",
    "RUN_KEYS",
    "RunFacts",
    "decide_exit",
    "exit_reason",
    "finish_summary",
    "interruption",
    "restore_summary",
    "resume_command",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3

#: the keys of summary.json only a run knows (after the figures), in the order written; the last two are
#: written by the reader of a damaged results.jsonl (`evalx report`, :class:`evalx.results.store.ReadProblems`)
RUN_KEYS = (
    "config",
    "interrupted",
    "cells_planned",
    "stopped_early",
    "cost_guard",
    "tracing",
    "shard",
    "merged",
    "comparison",
    "baseline",
    "gates",
    "unreadable_lines",
    "duplicate_cells",
    "reviews",
)


@dataclass(frozen=True)
class RunFacts:
    """What only the run knows, for ``summary.json``."""

    config: str
    """The config file's path."""
    interrupted: bool
    cells_planned: int
    cost_guard: CostGuardReport | None = None
    """With ``defaults.max_total_cost``: the guard's report."""
    shard: ShardReport | None = None
    """A shard run (``--shard I/N``): no gates and no baseline comparison here, ``evalx merge`` applies them."""
    merged: MergeReport | None = None
    """A run made by ``evalx merge``: the shards it merged."""
    stopped_early: str | None = None
    """Why the run started no more cells before its plan's end (``--max-failures``), or None."""
    tracing: TracingReport | None = None
    """A traced run (``tracing: {receive: true}``): its spans counted."""


def finish_summary(
    figures: SummaryFigures,
    facts: RunFacts,
    *,
    gates: Mapping[str, object] | Gates | None,
    baseline_ref: str | None,
    output_dir: Path,
    run_dir: Path,
) -> tuple[RunSummary, list[str]]:
    """The run's whole ``summary.json`` and its warnings: figures, facts, baseline comparison and gates.

    ``gates`` is the config's ``gates:``; ``baseline_ref`` (``--baseline``)
    overrides its ``baseline``. A baseline that cannot be found is a warning,
    never an error: gates that need one are then n/a.
    """
    from evalx.results import gates as _gates

    spec = _gates.gates_spec(gates)
    ref = baseline_ref or spec.baseline
    comparison, warning = None, None
    if facts.shard is None:  # a shard is compared and gated by `evalx merge`, on the whole plan
        comparison, warning = _gates.prepare_baseline(
            ref, output_dir, name=figures["name"], run_id=figures["run_id"], run_dir=run_dir, summary=figures
        )
    warnings = [warning] if warning else []
    # figures come from SummaryBuilder.finish, which writes none of the run's keys (mypy cannot know it)
    summary: RunSummary = {
        **figures,  # type: ignore[typeddict-item]
        "config": facts.config,
        "interrupted": facts.interrupted,
        "cells_planned": facts.cells_planned,
    }
    if facts.stopped_early is not None:
        summary["stopped_early"] = facts.stopped_early
    if facts.cost_guard is not None:
        summary["cost_guard"] = facts.cost_guard
    if facts.tracing is not None:
        summary["tracing"] = facts.tracing
    if facts.shard is not None:
        summary["shard"] = facts.shard
    if facts.merged is not None:
        summary["merged"] = facts.merged
    if comparison is not None:
        from evalx.results.compare import baseline_view  # only a run with a baseline loads the comparison module

        summary["comparison"] = comparison
        summary["baseline"] = baseline_view(comparison)
    if facts.shard is None and _gates.active_gates(spec):
        summary["gates"] = _gates.evaluate(spec, figures, comparison, baseline_ref=ref, warnings=warnings)
    return summary, warnings


def restore_summary(figures: SummaryFigures, stored: Mapping[str, Any]) -> RunSummary:
    """A rebuilt summary (``evalx report``): fresh figures, and what the run knew from its stored ``summary.json``."""
    kept = {key: stored[key] for key in RUN_KEYS if key in stored}  # as the run wrote them
    return cast("RunSummary", {**figures, **kept})


def nothing_graded(summary: RunSummary) -> str | None:
    """Why a run with cells proves nothing (no cell passed or failed: all skipped or errored), or None."""
    totals = summary["totals"]
    if not totals["cells"] or totals["pass"] or totals["fail"]:
        return None
    # where to look: the skip reasons (a missing judge key...) when any skipped, else the errors
    look = "a missing judge key? see the skip reasons" if totals["skipped"] else "see the cells' errors"
    return (
        f"nothing was graded: of {totals['cells']} cells, {totals['skipped']} were skipped and {totals['error']} errored, "
        f"so no check passed or failed ({look})"
    )


def decide_exit(summary: RunSummary, *, target_failed: bool = False) -> int:
    """The run's exit status (the table in this module's docstring).

    ``target_failed``: every cell of some target errored (the run could not
    complete). The rest is read from the finished ``summary``.
    """
    if summary.get("interrupted") or target_failed:
        return EXIT_INCOMPLETE
    if summary.get("stopped_early"):  # --max-failures: N cells failed or errored, whatever the gates say
        return EXIT_FAILED
    if summary.get("shard") is not None:  # `evalx merge` judges a shard's cells
        return EXIT_FAILED if nothing_graded(summary) else EXIT_OK
    gates = summary.get("gates")
    if gates is not None and gates["active"]:
        code = EXIT_OK if gates["passed"] else EXIT_FAILED
    else:
        # with repeats a case passes or fails by repeat_pass_rule; without, case level == cell level
        cases = summary["totals"]["case_level"]
        code = EXIT_FAILED if cases["fail"] or cases["error"] else EXIT_OK
    guard = summary.get("cost_guard")
    if guard is not None and guard["skipped"]:
        code = EXIT_FAILED
    if code == EXIT_OK and nothing_graded(summary):  # all skipped: a run that checked nothing never passes CI
        code = EXIT_FAILED
    return code


def resume_command(summary: Mapping[str, Any]) -> str:
    """The exact command that finishes this run: ``evalx run [-c CONFIG] --resume RUN_ID`` (from where it was started)."""
    import shlex

    config = str(summary.get("config") or "evalconfig.yaml")
    option = "" if config == "evalconfig.yaml" else f" -c {shlex.quote(config)}"
    return f"evalx run{option} --resume {shlex.quote(str(summary.get('run_id') or 'RUN'))}"


def interruption(summary: Mapping[str, Any]) -> tuple[str, str] | None:
    """An unfinished run's first lines in every report, and how to finish it; else None.

    ``INTERRUPTED: 553 of 5,200 planned cells`` after Ctrl-C, SIGTERM or a CI cancel; ``STOPPED EARLY: 3 of 12
    planned cells`` after ``--max-failures`` (its cells never started are resumed the same way).
    """
    if summary.get("interrupted"):
        word = "INTERRUPTED"
    elif summary.get("stopped_early"):
        word = "STOPPED EARLY"
    else:
        return None
    done = int((summary.get("totals") or {}).get("cells") or 0)
    planned = summary.get("cells_planned")
    shard = summary.get("shard")
    if isinstance(shard, Mapping) and isinstance(shard.get("plan_cells"), int):
        planned = planned if isinstance(planned, int) else shard["plan_cells"]
    headline = f"{word}: {done:,} of {planned:,} planned cells" if isinstance(planned, int) else f"{word} after {done:,} cells"
    merged = summary.get("merged")
    if isinstance(merged, Mapping):  # a merge of shards, some incomplete: each is resumed where it ran, then merged again
        return headline, "resume each incomplete shard with `evalx run --resume RUN` where it ran, then `evalx merge` again"
    return headline, f"resume: {resume_command(summary)}"


def exit_reason(summary: RunSummary, exit_code: int) -> str:
    """Why the run exits as it does, in one line (``--quiet`` prints the headline and this)."""
    totals = summary["totals"]
    stopped = interruption(summary)
    if stopped is not None:
        how = "interrupted" if summary.get("interrupted") else "stopped early"
        return f"exit {exit_code}: {stopped[0].split(': ', 1)[-1]} ran ({how})"
    if exit_code == EXIT_INCOMPLETE:
        return f"exit {exit_code}: the run could not complete (every cell of a target errored)"
    graded = nothing_graded(summary)
    if graded and exit_code == EXIT_FAILED:
        return f"exit {exit_code}: {graded}"
    guard = summary.get("cost_guard")
    if guard is not None and guard["skipped"] and exit_code == EXIT_FAILED:
        return f"exit {exit_code}: the cost guard stopped the run ({guard['skipped']} cells not run)"
    gates = summary.get("gates")
    if gates is not None and gates["active"]:
        if gates["passed"]:
            return f"exit {exit_code}: every gate held"
        broken = list(dict.fromkeys(f"{r['gate']} ({r['scope']})" for r in gates["results"] if r["held"] is False))
        return f"exit {exit_code}: gate{'s' if len(broken) != 1 else ''} breached: {', '.join(broken) or 'see the gate report'}"
    shard = summary.get("shard")
    if shard is not None:
        return f"exit {exit_code}: shard {shard['index']}/{shard['count']} ran; gates and the baseline are applied by `evalx merge` of every shard"
    cases = totals["case_level"]
    if cases["fail"] or cases["error"]:
        parts = [f"{cases['fail']} failed"] if cases["fail"] else []
        parts += [f"{cases['error']} errored"] if cases["error"] else []
        unit = "case" if summary.get("repeats") else "cell"
        return f"exit {exit_code}: {' and '.join(parts)} {unit}{'s' if cases['fail'] + cases['error'] != 1 else ''}"
    return f"exit {exit_code}: every graded cell passed"
