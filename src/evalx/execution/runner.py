"""One eval run from start to finish: plan, execute, store, report, decide the exit status."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from evalx.common import written
from evalx.common.atomic import write_text
from evalx.common.documents import relative_path
from evalx.common.json_types import JSONObject, as_array, as_str
from evalx.common.usercode import user_code_on_path
from evalx.config.loader import Config
from evalx.errors import HookFailed, writing
from evalx.execution.executor import ExecutionStats
from evalx.execution.executors import execute_cells
from evalx.execution.plan import Plan, build_plan
from evalx.execution.progress import Progress
from evalx.execution.request import ResolvedRun, RunRequest, resolve
from evalx.execution.resume import config_hash
from evalx.execution.run_record import RunMeta
from evalx.execution.stop_early import FailureLimit
from evalx.reports.follow import Follower
from evalx.reports.render import ReportOptions, write_reports
from evalx.reports.writers import Outputs
from evalx.results.model import CellResult, CostGuardReport, RunSummary
from evalx.results.outcome import RunFacts, decide_exit, finish_summary, nothing_graded, resume_command
from evalx.results.store import RESULTS, ReadProblems, ResultWriter, RunLock, new_run_id, read_results, rewrite_results, write_json
from evalx.targets.preflight import ConnectWatch, chained
from evalx.targets.spec import EngineTargetSpec, ProviderTargetSpec
from evalx.tracing.spans import TracingReport

if TYPE_CHECKING:
    from evalx.execution.budget import CostGuard
    from evalx.execution.hooks import HookResult
    from evalx.results.summary import SummaryBuilder
    from evalx.tracing.export import Endpoint, RunExporter

log = logging.getLogger(__name__)


@dataclass
class RunOutcome:
    run_id: str
    run_dir: Path
    summary: RunSummary
    exit_code: int
    messages: list[str] = field(default_factory=list)


def run(config: Config, request: RunRequest) -> RunOutcome:
    """The one entry point of a run (``evalx run``, :func:`evalx.run`, the pytest plugin): plan, execute, store, report.

    Raises :class:`~evalx.execution.request.RequestError` for options that do not go together,
    :class:`~evalx.execution.rerun.NothingToRerun` when a rerun has nothing to run.
    """
    resolved = resolve(config, request)
    _check_tracing(config, request)
    export = _export_endpoint(config, request)
    with _quiet_collector():  # the plan, the cells, their pairwise judging and the reports
        return _planned_run(config, resolved, export)


def _planned_run(config: Config, resolved: ResolvedRun, export: Endpoint | None) -> RunOutcome:
    """:func:`run` once its request is resolved: the plan, the run folder (locked) and the run in it."""
    plan = build_plan(config, resolved.selection)
    config.check_env(plan.base_target_ids)  # matrix variants need their target's variables
    _check_template_references(config, plan)
    run_id = resolved.run_id or new_run_id()
    run_dir = config.output_dir / run_id
    resuming = resolved.resuming
    if resolved.parent is not None:  # the new run's folder holds the parent's cells to keep: finished as a resume is
        from evalx.execution.rerun import prepare_rerun

        prepare_rerun(config, plan, resolved.parent, run_id, run_dir, config_hash=config_hash(config))
        resuming = True
    run_dir, previous, fingerprint = _stored_run(config, plan, run_id, run_dir, resuming)
    with writing(run_dir):
        run_dir.mkdir(parents=True, exist_ok=True)
    lock = RunLock(run_dir)  # one writer per run folder: a second run or --resume of it is refused (exit 2)
    try:
        return _run_locked(config, resolved, plan, _Run(run_id, run_dir, fingerprint, previous, resuming, export))
    finally:
        lock.release()


def _check_tracing(config: Config, request: RunRequest) -> None:
    """A traced run needs the OpenTelemetry packages and the local executor: one line saying so, before anything runs."""
    if not config.typed.tracing.receive:
        return
    from evalx.errors import EvalxError
    from evalx.tracing import otel_missing

    missing = otel_missing()
    if missing:
        raise EvalxError(missing)
    if (request.executor or config.typed.executor.kind) == "ray":
        raise EvalxError("tracing receives spans on this machine: it runs with the local executor only, not --executor ray")


def _export_endpoint(config: Config, request: RunRequest) -> Endpoint | None:
    """Where the run's spans go (``--otlp-endpoint``, ``tracing.export``, the OTEL_EXPORTER_OTLP_* variables), or None.

    Asked for by the run without the OpenTelemetry SDK: one line, before anything runs (exit 2); inherited from
    the environment: a warning, and the run goes on without export.
    """
    import os

    from evalx.tracing.export import EXPORT_INSTALL_HINT, find_endpoint, otel_sdk_missing

    endpoint = find_endpoint(request.otlp_endpoint, config.typed.tracing.export, os.environ)
    if endpoint is None:
        return None
    config.redactor.add_url(endpoint.url)  # credentials in the URL are never printed
    if otel_sdk_missing():
        if endpoint.explicit:
            from evalx.errors import RequestError

            raise RequestError(f"{endpoint.source}: {EXPORT_INSTALL_HINT}")
        log.warning(f"{endpoint.source} is set: {EXPORT_INSTALL_HINT}")
        return None
    return endpoint


def _check_template_references(config: Config, plan: Plan) -> None:
    """A template that reads a name or field no case has fails every cell: refuse the run (as ``evalx validate`` would)."""
    from evalx.config.references import reference_issues
    from evalx.errors import ConfigError

    issues = reference_issues(config, plan.cases, plan.base_target_ids, matrix=bool(plan.variants))
    for issue in issues:
        if issue.warning:
            log.warning(str(issue))
    errors = [i for i in issues if not i.warning]
    if errors:
        raise ConfigError(errors)


@dataclass
class _Run:
    """The run being made: its id and folder, its plan's fingerprint, and the stored run it continues (a resume)."""

    run_id: str
    run_dir: Path
    fingerprint: str
    #: the stored ``run.json`` of the run this one continues (a resume), read back as JSON
    previous: JSONObject | None
    resuming: bool
    #: where the run's spans are exported (docs/tracing.md#export), or None
    export: Endpoint | None = None


def _stored_run(config: Config, plan: Plan, run_id: str, run_dir: Path, resuming: bool) -> tuple[Path, JSONObject | None, str]:
    """The run's folder, the stored ``run.json`` it continues (a resume), and its plan's fingerprint."""
    from evalx.execution import resume as _resume

    if not resuming:
        return run_dir, None, _resume.plan_fingerprint(config, plan)
    run_dir, previous = _resume.load_run_meta(run_id, config.output_dir)
    fingerprint = _resume.plan_fingerprint(config, plan, _resume.stored_fingerprint_version(previous))
    for note in _resume.check_plan(previous, config, plan, fingerprint):
        log.info(note)
    return run_dir, previous, fingerprint


def _run_locked(config: Config, resolved: ResolvedRun, plan: Plan, made: _Run) -> RunOutcome:
    """The run, its folder locked by :func:`run`: record it, its hooks around the rest (execution/hooks.py)."""
    meta = _record_run(config, resolved, plan, made)
    hooks = config.typed.hooks
    exporter = _start_export(config, plan, made, meta) if made.export is not None else None
    try:
        if hooks.before_run is not None:
            _before_run(config, made, meta, hooks.before_run)
        outcome = _execute(config, resolved, plan, made, meta, exporter)
        if exporter is not None:
            exporter.finish(outcome.summary, status=meta["status"], exit_code=outcome.exit_code)
        return outcome
    finally:
        if exporter is not None:  # a run that failed or was stopped: what it made is still sent (bounded)
            exporter.finish(status="failed")
        if hooks.after_run is not None:  # always: after the reports, after Ctrl-C, after a failed before_run
            result = _hook("after_run", hooks.after_run, config, made)
            if not result.ok:
                log.warning(f"the after_run hook failed ({result.problem}); the verdict stands: see {relative_path(result.log_file)}")


def _start_export(config: Config, plan: Plan, made: _Run, meta: RunMeta) -> RunExporter | None:
    """The run's span exporter (docs/tracing.md#export): each target's kind and model, the run's start."""
    from evalx.tracing.export import TargetFacts, start_export

    assert made.export is not None
    facts: dict[str, TargetFacts] = {}
    specs = list(plan.targets)
    judge = config.typed.judge.target
    if judge is not None and not isinstance(judge, str):  # an inline judge target
        specs.append(judge)
    for spec in specs:
        if isinstance(spec, ProviderTargetSpec):
            facts[spec.id] = TargetFacts(spec.type, spec.model, spec.provider)
        else:
            facts[spec.id] = TargetFacts(spec.type)
    if isinstance(judge, str) and judge not in facts:
        try:
            spec = config.typed.target(judge)
            facts[judge] = TargetFacts(spec.type, getattr(spec, "model", None), getattr(spec, "provider", None))
        except KeyError:
            pass
    started = meta.get("started_unix")
    return start_export(
        made.export,
        run_id=made.run_id,
        name=config.name,
        redact=config.redactor.text,
        targets=facts,
        started_ns=int(float(started) * 1e9) if isinstance(started, int | float) else None,
    )


def _hook(name: str, hook: object, config: Config, made: _Run) -> HookResult:
    from evalx.execution.hooks import run_hook

    values = {"EVALX_RUN_ID": made.run_id, "EVALX_RUN_DIR": str(made.run_dir.resolve()), "EVALX_CONFIG": str(config.path)}
    return run_hook(name, hook, base_dir=config.base_dir, run_dir=made.run_dir, values=values, redact=config.redactor.text)


def _before_run(config: Config, made: _Run, meta: RunMeta, hook: object) -> None:
    """Run the ``before_run`` hook; when it fails, record the run as failed and raise :class:`HookFailed` (no cell runs).

    Ctrl-C or SIGTERM while it runs (its processes are stopped): the run is recorded as interrupted, and the
    same error says how to resume it.
    """
    resume = resume_command({"config": relative_path(config.path), "run_id": made.run_id})
    try:
        result = _hook("before_run", hook, config, made)
    except KeyboardInterrupt:
        meta["status"] = "interrupted"
        write_json(made.run_dir / "run.json", meta)
        raise HookFailed(f"interrupted during the before_run hook; no cell ran: resume with {resume}") from None
    if result.ok:
        return
    meta["status"] = "failed"
    write_json(made.run_dir / "run.json", meta)
    raise HookFailed(
        f"the before_run hook failed ({result.problem}); no cell ran: see {relative_path(result.log_file)}; once it is fixed: {resume}"
    )


def _execute(
    config: Config, resolved: ResolvedRun, plan: Plan, made: _Run, meta: RunMeta, exporter: RunExporter | None = None
) -> RunOutcome:
    """Execute the cells, then summarise, judge and report (``exporter``: each recorded cell's spans are sent too)."""
    request = resolved.request
    shard = resolved.selection.shard
    from evalx.results.summary import SummaryBuilder

    summary_builder = SummaryBuilder(
        made.run_id,
        config.name,
        meta["started_at"],
        repeat_pass_rule=config.typed.defaults.repeat_pass_rule or "majority",
        matrix=plan.matrix_summary(),
        per_case=plan.cells.total > plan.cells.case_count,  # one cell a case: no per-case tallies to keep
        slow_ms=config.typed.defaults.slow_ms,
    )
    guard = _cost_guard(config, shard)
    if made.resuming:
        _take_stored_results(made.run_dir, plan, summary_builder, guard)
    types = plan.target_types()
    # append: a torn last line is dropped
    writer = ResultWriter(
        made.run_dir, append=made.resuming, run_id=made.run_id, target_types=types, cases=plan.cells, dataset=next(iter(plan.cases), None)
    )
    todo = plan
    if made.resuming:
        todo = Plan(plan.target_specs, plan.cases, plan.cells.without(writer.finished_indexes()), plan.variants)
        _say_what_resumes(made, len(todo.cells), len(plan.cells))
    follower = None
    if not made.resuming:  # junit.xml and report.html built as the cells are recorded, by a child (a run of many cells)
        follower = Follower.start(
            made.run_dir,
            plan.cells.total,
            rule=config.typed.defaults.repeat_pass_rule or "majority",
            junit_passes=request.reports.junit_passes,
            html_max_cells=request.reports.html_max_cells,
        )
        if follower is not None:
            writer.after_write = follower.wake
    try:
        return _cells_and_reports(config, resolved, plan, todo, made, meta, summary_builder, writer, guard, follower, exporter)
    finally:
        if follower is not None:
            follower.stop()


def _cells_and_reports(
    config: Config,
    resolved: ResolvedRun,
    plan: Plan,
    todo: Plan,
    made: _Run,
    meta: RunMeta,
    summary_builder: SummaryBuilder,
    writer: ResultWriter,
    guard: CostGuard | None,
    follower: Follower | None,
    exporter: RunExporter | None,
) -> RunOutcome:
    """:func:`_execute` once the results file is open: the cells, their pairwise judging, the summary and the reports."""
    request = resolved.request
    progress = Progress(len(todo.cells), quiet=request.quiet)
    limit = FailureLimit(request.max_failures) if request.max_failures else None
    remote = [t for t in plan.targets if isinstance(t, (EngineTargetSpec, ProviderTargetSpec))]
    # a target that is down: its other cells skipped
    watch = ConnectWatch({t.id: len(todo.cells_for(t.id)) for t in remote}, {t.id: t.start for t in remote})
    recorded = 0
    from evalx.tracing.collector import TracedTally

    traced = TracedTally()

    def on_result(result: CellResult) -> None:
        nonlocal recorded
        writer.write(result)
        trace = result.get("trace")
        if trace is not None:
            traced.add(trace)
        summary_builder.add(result)
        if guard is not None:
            guard.record(result)
        if limit is not None:
            limit.record(result["status"])
        if remote:
            watch.record(result["target"], result["status"], result.get("error"))
        recorded += 1
        progress.update(result["status"])
        if exporter is not None:
            exporter.cell(result)

    t0 = time.monotonic()
    try:
        with user_code_on_path(config.base_dir):  # user code may import lazily while it runs
            stats = asyncio.run(
                execute_cells(
                    config,
                    todo,
                    run_id=made.run_id,
                    overrides=resolved.overrides,
                    on_result=on_result,
                    admit=chained(guard.admit if guard is not None else None, watch.admit if remote else None),
                    executor=request.executor,
                    ray_address=request.ray_address,
                    quiet=request.quiet,
                    stop=limit.stopped if limit is not None else None,
                    on_batch=progress.note,
                )
            )
    except BaseException:  # a target could not start (no API key...): say so in run.json, keep results
        writer.close(reorder=False)
        progress.close()
        meta["status"] = "failed"
        write_json(made.run_dir / "run.json", meta)
        raise
    duration = time.monotonic() - t0
    progress.close()
    writer.close(reorder=True)
    not_run = len(todo.cells) - recorded
    stopped = None
    if limit is not None and limit.reached and not_run > 0:
        stopped = limit.message(not_run, resume_command({"config": relative_path(config.path), "run_id": made.run_id}))
    if not stats.interrupted and stopped is None:  # pairwise: judged once every cell of a case exists, recorded on both cells
        from evalx.execution.pairwise_pass import judge_stored_pairs

        pairs = judge_stored_pairs(config, plan, made.run_dir, run_id=made.run_id, overrides=resolved.overrides, guard=guard)
        if pairs is not None:
            if follower is not None:  # the judged pairs are recorded in the cells' lines: the reports come from the file
                follower.stop()
                follower = None
            for line in pairs.messages:
                log.info(line)
            summary_builder.add_pairwise(pairs.records)
    tracing = None
    if config.typed.tracing.receive:
        traced.finish(stats.trace_counts)
        tracing = traced.report
    return _finish(config, request, plan, made, meta, summary_builder, stats, guard, duration, stopped, watch, tracing, follower)


def _record_run(config: Config, resolved: ResolvedRun, plan: Plan, made: _Run) -> RunMeta:
    """The run's ``run.json`` (status ``running``) and its redacted ``config.yaml``, written before any cell runs."""
    from evalx.execution import resume as _resume

    request, selection, previous = resolved.request, resolved.selection, made.previous
    started = datetime.now(timezone.utc)
    meta: RunMeta = {
        "run_id": made.run_id,
        "name": config.name,
        "config": relative_path(config.path),
        "config_hash": config_hash(config),
        "started_at": started.isoformat(timespec="seconds"),
        "targets": plan.target_ids,
        "cells": len(plan.cells),
        "selection": {
            "targets": selection.targets,
            "datasets": selection.datasets,
            "cases": selection.case_globs,
            "categories": selection.categories,
            "tags": selection.tags,
            "repeat": selection.repeat,
            "matrix": selection.matrix,
        },
        "selection_args": _resume.selection_args(selection),
        "plan_digest": made.fingerprint,
        # a resumed run keeps the version it was fingerprinted with (a run of an older evalx: 1)
        "plan_digest_version": _resume.stored_fingerprint_version(previous) if previous is not None else _resume.FINGERPRINT_VERSION,
        # how the reports were rendered: `evalx report` keeps it unless told otherwise
        "reports": {"junit_passes": request.reports.junit_passes, "html_max_cells": request.reports.html_max_cells},
        "started_unix": started.timestamp(),  # orders runs started within the same second
        "status": "running",
    }
    shard = selection.shard
    if shard is not None:  # what `evalx merge` checks: the shards of one plan, all of them
        meta["shard"] = {
            "index": shard[0],
            "count": shard[1],
            "plan_digest": made.fingerprint,  # the whole plan's: a shard keeps every cell's index in it
            "plan_cells": plan.cells.total,
            "plan_cases": plan.cells.case_count,
            # what the merged results.jsonl's run record says (each target's kind, the first dataset)
            "target_types": plan.target_types(),
            "dataset": next(iter(plan.cases), None),
        }
    if request.batch or (previous is not None and previous.get("batch") is True):
        meta["batch"] = True  # --resume keeps --batch
    if previous is not None:  # a resume keeps the run's identity and start
        meta["started_at"] = as_str(previous.get("started_at"), meta["started_at"])
        meta["started_unix"] = previous.get("started_unix", meta["started_unix"])
        from evalx.execution.rerun import PREPARED, carried

        meta.update(carried(previous))  # a rerun's parent
        if previous.get("status") != PREPARED:
            meta["resumed_at"] = [*as_array(previous.get("resumed_at")), started.isoformat(timespec="seconds")]
    write_json(made.run_dir / "run.json", meta)
    write_text(
        made.run_dir / "config.yaml",
        "# the resolved config of this run; secrets are redacted\n"
        + yaml.safe_dump(config.redactor.obj(written.document(config)), sort_keys=False, allow_unicode=True),
    )
    return meta


def _cost_guard(config: Config, shard: tuple[int, int] | None) -> CostGuard | None:
    """The run's cost guard (``defaults.max_total_cost``; a shard spends its share), or None."""
    limit = config.typed.defaults.max_total_cost
    if limit is None:
        return None
    from evalx.execution.budget import CostGuard

    return CostGuard(limit / shard[1] if shard is not None else limit)


def _take_stored_results(run_dir: Path, plan: Plan, summary_builder: SummaryBuilder, guard: CostGuard | None) -> None:
    """A resumed run's stored cells, counted as if just run (damaged lines and cells lost with a Ray actor are dropped)."""
    from evalx.execution import resume as _resume
    from evalx.execution.ray_executor import is_worker_lost

    if not (run_dir / RESULTS).exists() and not (run_dir / RESULTS).is_symlink():  # no cell ran (a failed before_run hook)
        return
    problems = ReadProblems()
    lost = 0
    for result in read_results(run_dir / RESULTS, problems):  # streamed: a million stored cells are never all in memory
        _resume.check_result(result, plan)
        if is_worker_lost(result):  # lost with its Ray actor: it runs again
            lost += 1
            continue
        summary_builder.add(result)
        if guard is not None:
            guard.record(result)  # a resumed run has already spent this
    if problems:  # damaged or duplicate lines: the file is rewritten with the readable ones, each cell once
        log.warning(f"{problems.warning(run_dir / RESULTS)}; resuming from the readable lines (a cell without one runs again)")
    if problems or lost:
        rewrite_results(run_dir / RESULTS, (r for r in read_results(run_dir / RESULTS) if not is_worker_lost(r)))


def _say_what_resumes(made: _Run, todo: int, total: int) -> None:
    if made.previous is not None and made.previous.get("status") == "prepared":
        from evalx.execution.rerun import rerun_note

        log.info(rerun_note(made.previous, todo, total))
    else:
        log.info(f"resuming {made.run_id}: {total - todo} of {total} cells have results, running {todo}")


def _finish(
    config: Config,
    request: RunRequest,
    plan: Plan,
    made: _Run,
    meta: RunMeta,
    summary_builder: SummaryBuilder,
    stats: ExecutionStats,
    guard: CostGuard | None,
    duration: float,
    stopped: str | None = None,
    watch: ConnectWatch | None = None,
    tracing: TracingReport | None = None,
    follower: Follower | None = None,
) -> RunOutcome:
    """The run's summary, gates and exit status; then its reports (``follower``'s, those it built) and final ``run.json``.

    ``stopped``: why the run stopped before its last cells (``--max-failures``), or None;
    ``watch``: the targets whose first cells got no answer (the rest skipped): each is a line, and the run is incomplete.
    """
    shard = meta.get("shard")
    # a target said "stopped early" (it skipped cells); one stopped with every cell already in flight is said below
    stopped_targets = {t for t in watch.down if watch.skipped.get(t)} if watch is not None else set()
    messages = [*(watch.lines() if watch is not None else []), *_target_failures(stats, skip=stopped_targets)]
    cost_guard: CostGuardReport | None = None
    if guard is not None:
        cost_guard = {
            "limit_usd": guard.limit,
            "spent_usd": round(guard.spent, 8),
            "skipped": guard.skipped,
            "message": guard.message() if guard.tripped else None,
        }
    figures = summary_builder.finish(datetime.now(timezone.utc).isoformat(timespec="seconds"), round(duration, 3))
    summary, warnings = finish_summary(
        figures,
        RunFacts(
            config=relative_path(config.path),
            interrupted=stats.interrupted,
            cells_planned=len(plan.cells),
            stopped_early=stopped,
            cost_guard=cost_guard,
            tracing=tracing,
            shard={"index": shard["index"], "count": shard["count"], "plan_cells": plan.cells.total} if shard is not None else None,
        ),
        gates=config.typed.gates,
        baseline_ref=request.baseline,
        output_dir=config.output_dir,
        run_dir=made.run_dir,
    )
    for warning in warnings:
        log.warning(warning)
    exit_code = decide_exit(summary, target_failed=bool(messages))
    why_nothing = nothing_graded(summary)
    if why_nothing and not messages:
        messages.append(why_nothing)
    if guard is not None and guard.tripped:
        messages.append(guard.message())
    if stopped is not None and not stats.interrupted:
        messages.append(stopped)
    if shard is not None and not len(plan.cells):
        messages.append(
            f"shard {shard['index']}/{shard['count']} is empty: the plan's {plan.cells.case_count} cases went to the other shards"
        )
    meta["status"] = "interrupted" if stats.interrupted else "stopped" if stopped is not None else "complete"
    meta["finished_at"], meta["exit_code"] = summary.get("finished_at"), exit_code
    publish(made.run_dir, summary, meta, request.reports, request.outputs, follower)
    return RunOutcome(made.run_id, made.run_dir, summary, exit_code, messages)


def publish(
    run_dir: Path, summary: RunSummary, meta: RunMeta, reports: ReportOptions, outputs: Outputs, follower: Follower | None = None
) -> None:
    """The end of a run (and of a merge): every report writer, then its final ``run.json``."""
    write_reports(run_dir, summary, reports, outputs, follower)
    write_json(run_dir / "run.json", meta)


@contextlib.contextmanager
def _quiet_collector() -> Iterator[None]:
    """Keep the cyclic garbage collector off a run's hot path: its plan, cells and reports.

    The modules, the config, cases and plan are alive for the whole run, yet
    every full collection walked them all again (~10% of a 10,000-cell
    provider run, bench/RESULTS.md): what exists when the run starts is frozen
    out of the collector's view, and young collections run every 10,000
    allocations instead of 700. Both are undone afterwards; reference counting
    frees everything as before. (From the plan to the reports: one full
    collection before the cells, and one among the reports, each walked every
    imported object, ~20 ms each of a 10,000-cell run, issue 29.)
    """
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(threshold[0], 10_000), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def _target_failures(stats: ExecutionStats, skip: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """One loud line for a target whose every cell errored, not N identical ones (``skip``: targets said otherwise)."""
    lines = []
    for target, errors in stats.errors_by_target.items():
        if target in skip:
            continue
        if errors and len(errors) == stats.cells_by_target.get(target, 0):
            distinct = sorted(set(errors), key=errors.index)
            detail = distinct[0] if len(distinct) == 1 else f"{distinct[0]} (and {len(distinct) - 1} other errors)"
            lines.append(f"target {target!r}: every cell failed ({len(errors)}): {detail}")
    return lines
