"""One eval run from start to finish: plan, execute, store, report, decide the exit status."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from evalx.config.loader import Config
from evalx.errors import writing
from evalx.execution.executor import ExecutionStats, Executor, TargetPlan
from evalx.execution.interrupt import Interrupt, cancel_on_signals
from evalx.execution.plan import Plan, Selection, build_plan
from evalx.execution.progress import Progress
from evalx.execution.resume import config_hash
from evalx.execution.watchdog import Watchdog
from evalx.reports.render import ReportOptions, copy_report, write_reports
from evalx.results.model import CellResult, CostGuardReport, RunSummary
from evalx.results.outcome import RunFacts, decide_exit, finish_summary, nothing_graded
from evalx.results.store import RESULTS, ReadProblems, ResultWriter, RunLock, new_run_id, read_results, rewrite_results, write_json
from evalx.targets import RunContext, build_target, close_all, resolve_settings
from evalx.usercode import user_code_on_path

log = logging.getLogger(__name__)


@dataclass
class RunOptions:
    selection: Selection = field(default_factory=Selection)
    concurrency: int | None = None
    use_cache: bool = True
    junit: Path | None = None
    html: Path | None = None
    json_out: bool = False
    quiet: bool = False
    run_id: str | None = None
    baseline: str | None = None  # a run id, a path or `latest`; overrides gates.baseline
    resume: bool = False  # run_id names a stored run: run only its cells without a result
    reports: ReportOptions = field(default_factory=ReportOptions)  # how junit.xml and report.html are rendered
    executor: str | None = None  # local or ray; None: the config's executor.kind, else local
    ray_address: str | None = None  # with the ray executor: auto (a running cluster), local (start one) or an address
    rerun: Any = None  # an evalx.execution.rerun.Rerun: a new run starting with its parent's cells but the failed ones


@dataclass
class RunOutcome:
    run_id: str
    run_dir: Path
    summary: RunSummary
    exit_code: int
    messages: list[str] = field(default_factory=list)


def run(config: Config, options: RunOptions) -> RunOutcome:
    plan = build_plan(config, options.selection)
    config.check_env(plan.base_target_ids)  # matrix variants need their target's variables
    run_id = options.run_id or new_run_id()
    run_dir = config.output_dir / run_id
    from evalx.execution import resume as _resume

    if options.rerun is not None:  # the new run's folder holds the parent's cells to keep: finished as a resume is
        from evalx.execution.rerun import prepare_rerun

        prepare_rerun(config, plan, options.rerun, run_id, run_dir, config_hash=config_hash(config))
        options = dataclasses.replace(options, resume=True, run_id=run_id, rerun=None)
    previous: dict[str, Any] | None = None
    if options.resume:
        run_dir, previous = _resume.load_run_meta(run_id, config.output_dir)
        fingerprint = _resume.plan_fingerprint(config, plan, _resume.stored_fingerprint_version(previous))
        for note in _resume.check_plan(previous, config, plan, fingerprint):
            log.info(note)
    else:
        fingerprint = _resume.plan_fingerprint(config, plan)
    with writing(run_dir):
        run_dir.mkdir(parents=True, exist_ok=True)
    lock = RunLock(run_dir)  # one writer per run folder: a second run or --resume of it is refused (exit 2)
    try:
        return _run_locked(config, options, plan, run_id, run_dir, fingerprint, previous)
    finally:
        lock.release()


def _run_locked(
    config: Config,
    options: RunOptions,
    plan: Plan,
    run_id: str,
    run_dir: Path,
    fingerprint: str,
    previous: dict[str, Any] | None,
) -> RunOutcome:
    """The run, its folder locked by :func:`run`: execute the cells, write results, summary and reports."""
    from evalx.execution import resume as _resume

    started = datetime.now(timezone.utc)
    meta: dict[str, Any] = {
        "run_id": run_id,
        "name": config.name,
        "config": str(config.path),
        "config_hash": config_hash(config),
        "started_at": started.isoformat(timespec="seconds"),
        "targets": [t["id"] for t in plan.target_specs],
        "cells": len(plan.cells),
        "selection": {
            "targets": options.selection.targets,
            "datasets": options.selection.datasets,
            "cases": options.selection.case_globs,
            "categories": options.selection.categories,
            "tags": options.selection.tags,
            "repeat": options.selection.repeat,
            "matrix": options.selection.matrix,
        },
        "selection_args": _resume.selection_args(options.selection),
        "plan_digest": fingerprint,
        # a resumed run keeps the version it was fingerprinted with (a run of an older evalx: 1)
        "plan_digest_version": _resume.stored_fingerprint_version(previous) if previous is not None else _resume.FINGERPRINT_VERSION,
        # how the reports were rendered: `evalx report` keeps it unless told otherwise
        "reports": {"junit_passes": options.reports.junit_passes, "html_max_cells": options.reports.html_max_cells},
        "started_unix": started.timestamp(),  # orders runs started within the same second
        "status": "running",
    }
    shard = options.selection.shard
    if shard is not None:  # what `evalx merge` checks: the shards of one plan, all of them
        meta["shard"] = {
            "index": shard[0],
            "count": shard[1],
            "plan_digest": fingerprint,  # the whole plan's: a shard keeps every cell's index in it
            "plan_cells": plan.cells.total,
            "plan_cases": plan.cells.case_count,
            # what the merged results.jsonl's run record says (each target's kind, the first dataset)
            "target_types": {str(t["id"]): str(t.get("type") or "") for t in plan.target_specs},
            "dataset": next(iter(plan.cases), None),
        }
    if previous is not None:  # a resume keeps the run's identity and start
        meta["started_at"] = previous.get("started_at", meta["started_at"])
        meta["started_unix"] = previous.get("started_unix", meta["started_unix"])
        from evalx.execution.rerun import PREPARED, carried

        meta.update(carried(previous))  # a rerun's parent
        if previous.get("status") != PREPARED:
            meta["resumed_at"] = [*previous.get("resumed_at", []), started.isoformat(timespec="seconds")]
    write_json(run_dir / "run.json", meta)
    with writing(run_dir / "config.yaml"):
        (run_dir / "config.yaml").write_text(
            "# the resolved config of this run; secrets are redacted\n"
            + yaml.safe_dump(config.redactor.obj(config.data), sort_keys=False, allow_unicode=True),
            encoding="utf-8",
        )

    from evalx.results.summary import SummaryBuilder

    summary_builder = SummaryBuilder(
        run_id,
        config.name,
        meta["started_at"],
        repeat_pass_rule=str(config.defaults.get("repeat_pass_rule", "majority")),
        matrix=plan.matrix_summary(),
        per_case=plan.cells.total > plan.cells.case_count,  # one cell a case: no per-case tallies to keep
    )
    todo = plan
    from evalx.execution.budget import CostGuard

    limit = config.defaults.get("max_total_cost")
    if limit is not None and shard is not None:
        limit = limit / shard[1]  # each shard spends its share
    guard = CostGuard(limit) if limit is not None else None
    if options.resume:
        problems = ReadProblems()
        from evalx.execution.ray_executor import is_worker_lost

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
    types = {str(t["id"]): str(t.get("type") or "") for t in plan.target_specs}
    # append: a torn last line is dropped
    writer = ResultWriter(
        run_dir, append=options.resume, run_id=run_id, target_types=types, cases=plan.cells, dataset=next(iter(plan.cases), None)
    )
    if options.resume:
        todo = Plan(plan.target_specs, plan.cases, plan.cells.without(writer.finished_indexes()), plan.variants)
        finished = len(plan.cells) - len(todo.cells)
        if previous is not None and previous.get("status") == "prepared":
            from evalx.execution.rerun import rerun_note

            log.info(rerun_note(previous, len(todo.cells), len(plan.cells)))
        else:
            log.info(f"resuming {run_id}: {finished} of {len(plan.cells)} cells have results, running {len(todo.cells)}")
    progress = Progress(len(todo.cells), quiet=options.quiet)

    def on_result(result: CellResult) -> None:
        writer.write(result)
        summary_builder.add(result)
        if guard is not None:
            guard.record(result)
        progress.update(result["status"])

    t0 = time.monotonic()
    admit = guard.admit if guard is not None else None
    try:
        with _quiet_collector(), user_code_on_path(config.base_dir):  # user code may import lazily while it runs
            stats = asyncio.run(_execute(config, todo, options, run_id, on_result, admit=admit))
    except BaseException:  # a target could not start (no API key...): say so in run.json, keep results
        writer.close(reorder=False)
        progress.close()
        meta.update(status="failed")
        write_json(run_dir / "run.json", meta)
        raise
    duration = time.monotonic() - t0
    progress.close()
    writer.close(reorder=True)
    if not stats.interrupted:  # pairwise: judged once every cell of a case exists, recorded on both cells
        from evalx.execution.pairwise_pass import judge_stored_pairs

        pairs = judge_stored_pairs(config, plan, run_dir, run_id=run_id, command_line=_command_line(options), guard=guard)
        if pairs is not None:
            for line in pairs.messages:
                log.info(line)
            summary_builder.add_pairwise(pairs.records)

    messages = _target_failures(stats)
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
            config=str(config.path),
            interrupted=stats.interrupted,
            cells_planned=len(plan.cells),
            cost_guard=cost_guard,
            shard={"index": shard[0], "count": shard[1], "plan_cells": plan.cells.total} if shard is not None else None,
        ),
        gates=config.data.get("gates"),
        baseline_ref=options.baseline,
        output_dir=config.output_dir,
        run_dir=run_dir,
    )
    for warning in warnings:
        log.warning(warning)
    exit_code = decide_exit(summary, target_failed=bool(messages))
    why_nothing = nothing_graded(summary)
    if why_nothing and not messages:
        messages.append(why_nothing)
    if guard is not None and guard.tripped:
        messages.append(guard.message())
    if shard is not None and not len(plan.cells):
        messages.append(f"shard {shard[0]}/{shard[1]} is empty: the plan's {plan.cells.case_count} cases went to the other shards")
    meta.update(status="interrupted" if stats.interrupted else "complete", finished_at=summary.get("finished_at"), exit_code=exit_code)
    publish(run_dir, summary, meta, options.reports, junit=options.junit, html=options.html)
    return RunOutcome(run_id, run_dir, summary, exit_code, messages)


def publish(
    run_dir: Path, summary: RunSummary, meta: dict[str, Any], reports: ReportOptions, *, junit: Path | None, html: Path | None
) -> None:
    """The end of a run (and of a merge): its reports, its final ``run.json``, and copies of JUnit and HTML where asked."""
    write_reports(run_dir, summary, reports)
    write_json(run_dir / "run.json", meta)
    if junit:
        copy_report(run_dir / "junit.xml", junit)
    if html:
        copy_report(run_dir / "report.html", html)


@contextlib.contextmanager
def _quiet_collector() -> Iterator[None]:
    """Keep the cyclic garbage collector off the run's hot path while cells execute.

    The config, cases and plan are alive for the whole run, yet every full
    collection walked them all again (~10% of a 10,000-cell provider run,
    bench/RESULTS.md): they are frozen out of the collector's view, and young
    collections run every 10,000 allocations instead of 700. Both are undone
    afterwards; reference counting frees everything as before.
    """
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(threshold[0], 10_000), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


async def _execute(config: Config, plan: Plan, options: RunOptions, run_id: str, on_result: Any, *, admit: Any = None) -> ExecutionStats:
    defaults, command_line = config.defaults, _command_line(options)
    from evalx.execution.ray_executor import choose_executor

    choice = choose_executor(config.data, options.executor, options.ray_address)
    if choice.kind == "ray":  # cells run on Ray actors; plan, guard, results and reports stay here
        from evalx.execution.ray_executor import execute_on_ray

        return await execute_on_ray(config, plan, choice, run_id, on_result, command_line=command_line, admit=admit, quiet=options.quiet)
    ctx = RunContext(run_id=run_id, config_dir=config.base_dir, redactor=config.redactor, vars=config.vars)
    from evalx.targets.definitions import providers_dir_of

    ctx.providers_dir = providers_dir_of(config)
    plans = []
    for spec in plan.target_specs:
        cells = plan.cells_for(spec["id"])
        if not cells:
            continue
        settings = resolve_settings(spec, defaults, command_line)  # once per target and run
        plans.append(TargetPlan(build_target(spec, settings), cells, settings))
    _check_open_files(plans)
    if any(p.settings.cache for p in plans):
        from evalx.targets.transport.cache import ResponseCache, cache_path

        ctx.cache = ResponseCache(cache_path(config.base_dir))
    try:
        for p in plans:
            await p.target.start(ctx)
    except BaseException:  # e.g. a provider with no API key: release what the others opened
        await close_all(p.target for p in plans)
        if ctx.cache is not None:
            await ctx.cache.aclose()
        raise
    from evalx.judge import run_judge

    judge = run_judge(config, plan, ctx, command_line, [p.target.id for p in plans])
    executor = Executor(plans, ctx, global_asserts=config.global_asserts, on_result=on_result, judge=judge, judge_settings=judge.settings)
    executor.admit = admit  # the cost guard: asked before each cell starts
    from evalx.execution.simulate import UserTargets

    executor.users = UserTargets(ctx, {t["id"]: t for t in config.targets}, defaults, command_line)  # started on first use
    signals = Interrupt()
    try:
        with cancel_on_signals() as signals, Watchdog(plans):  # Watchdog: an async target that never yields ends after its timeout
            stats = await executor.execute()
    except asyncio.CancelledError:
        stats = executor.stats
        stats.interrupted = True
    finally:
        for p in plans:
            await p.target.aclose()
        await judge.aclose()
        await executor.users.aclose()
        if ctx.cache is not None:
            await ctx.cache.aclose()
            if ctx.cache.problem:
                log.warning(f"response cache not used: {ctx.cache.problem}")
    if signals.interrupted:
        stats.interrupted = True
    return stats


def _check_open_files(plans: list[TargetPlan]) -> None:
    """Raise the open-files limit for the sockets the HTTP targets will hold at once, or warn before any cell runs."""
    from evalx.execution.fdlimit import ensure_open_files, needed_descriptors

    remote = [p for p in plans if p.target.type != "python"]
    if not remote:
        return
    in_flight = [min(p.settings.concurrency, len(p.cells)) for p in remote]
    ids = ", ".join(p.target.id for p in remote[:3]) + (", …" if len(remote) > 3 else "")
    what = f"up to {sum(in_flight)} requests at once ({ids})"
    warning = ensure_open_files(needed_descriptors(in_flight), what)
    if warning:
        log.warning(warning)


def _command_line(options: RunOptions) -> dict[str, Any]:
    """The target settings ``evalx run``'s flags set: the top layer of :func:`evalx.targets.resolve_settings`."""
    out: dict[str, Any] = {}
    if options.concurrency:
        out["concurrency"] = options.concurrency
    if not options.use_cache:
        out["cache"] = False
    if options.selection.shard is not None:
        out["rate_limit_share"] = options.selection.shard[1]  # the shards share each provider's rate limit
    return out


def _target_failures(stats: ExecutionStats) -> list[str]:
    """One loud line for a target whose every cell errored, not N identical ones."""
    lines = []
    for target, errors in stats.errors_by_target.items():
        if errors and len(errors) == stats.cells_by_target.get(target, 0):
            distinct = sorted(set(errors), key=errors.index)
            detail = distinct[0] if len(distinct) == 1 else f"{distinct[0]} (and {len(distinct) - 1} other errors)"
            lines.append(f"target {target!r}: every cell failed ({len(errors)}): {detail}")
    return lines
