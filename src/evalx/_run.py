"""One eval run from start to finish: plan, execute, store, report, decide the exit status."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

import yaml

from ._config import Config
from ._executor import Executor, ExecutionStats, TargetPlan
from ._plan import Plan, Selection, build_plan
from ._progress import Progress
from ._store import ResultWriter, new_run_id, read_results, write_json
from .targets import RunContext, build_target

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3


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


@dataclass
class RunOutcome:
    run_id: str
    run_dir: Path
    summary: dict[str, Any]
    exit_code: int
    messages: list[str] = field(default_factory=list)


def config_hash(config: Config) -> str:
    text = json.dumps(config.data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run(config: Config, options: RunOptions, *, out: TextIO | None = None, err: TextIO | None = None) -> RunOutcome:
    out = out or sys.stdout
    err = err or sys.stderr
    plan = build_plan(config, options.selection)
    config.check_env([t["id"] for t in plan.target_specs])
    run_id = options.run_id or new_run_id()
    run_dir = config.output_dir / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    started = datetime.now(timezone.utc)
    meta = {
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
            "repeat": options.selection.repeat,
            "matrix": options.selection.matrix,
        },
        "status": "running",
    }
    write_json(run_dir / "run.json", meta)
    (run_dir / "config.yaml").write_text(
        "# the resolved config of this run; secrets are redacted\n"
        + yaml.safe_dump(config.redactor.obj(config.data), sort_keys=False, allow_unicode=True),
        encoding="utf-8",
    )

    from .reports import SummaryBuilder

    summary_builder = SummaryBuilder(run_id, config.name, meta["started_at"])
    writer = ResultWriter(run_dir)
    progress = Progress(len(plan.cells), stream=err, quiet=options.quiet)

    def on_result(result: dict[str, Any]) -> None:
        writer.write(result)
        summary_builder.add(result)
        progress.update(result["status"])

    t0 = time.monotonic()
    stats = asyncio.run(_execute(config, plan, options, run_id, on_result))
    duration = time.monotonic() - t0
    progress.close()
    writer.close(reorder=True)

    messages = _target_failures(stats)
    summary = summary_builder.finish(
        datetime.now(timezone.utc).isoformat(timespec="seconds"),
        round(duration, 3),
        extra={"config": str(config.path), "interrupted": stats.interrupted, "cells_planned": len(plan.cells)},
    )
    exit_code = decide_exit(summary, stats, messages)
    meta.update(status="interrupted" if stats.interrupted else "complete", finished_at=summary.get("finished_at"), exit_code=exit_code)
    write_reports(run_dir, summary, name=config.name, run_id=run_id)
    write_json(run_dir / "run.json", meta)
    if options.junit:
        _copy(run_dir / "junit.xml", options.junit)
    return RunOutcome(run_id, run_dir, summary, exit_code, messages)


def write_reports(run_dir: Path, summary: dict[str, Any], *, name: str, run_id: str) -> None:
    from .reports import format_summary, write_junit

    write_json(run_dir / "summary.json", summary)
    (run_dir / "summary.txt").write_text(format_summary(summary) + "\n", encoding="utf-8")
    write_junit(read_results(run_dir / "results.jsonl"), run_dir / "junit.xml", name=name, run_id=run_id)


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)


async def _execute(config: Config, plan: Plan, options: RunOptions, run_id: str, on_result: Any) -> ExecutionStats:
    defaults = config.defaults
    if options.concurrency:
        defaults["concurrency"] = options.concurrency
    ctx = RunContext(run_id=run_id, config_dir=config.base_dir, redactor=config.redactor, vars=config.vars, use_cache=options.use_cache)
    plans = []
    for spec in plan.target_specs:
        cells = plan.cells_for(spec["id"])
        if not cells:
            continue
        target = build_target(spec, defaults=defaults)
        concurrency = options.concurrency or int(spec.get("concurrency", defaults["concurrency"]))
        plans.append(TargetPlan(target, cells, concurrency, float(spec.get("timeout_s", defaults["timeout_s"]))))
    for p in plans:
        await p.target.start(ctx)
    executor = Executor(plans, ctx, global_asserts=config.global_asserts, on_result=on_result)
    main = asyncio.current_task()
    loop = asyncio.get_running_loop()
    interrupted = False

    def stop() -> None:
        nonlocal interrupted
        if interrupted:  # a second Ctrl-C: stop waiting for anything
            raise KeyboardInterrupt
        interrupted = True
        if main is not None:
            main.cancel()

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    try:
        stats = await executor.execute()
    except asyncio.CancelledError:
        stats = executor.stats
        stats.interrupted = True
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        for p in plans:
            await p.target.aclose()
    if interrupted:
        stats.interrupted = True
    return stats


def _target_failures(stats: ExecutionStats) -> list[str]:
    """One loud line for a target whose every cell errored, not N identical ones."""
    lines = []
    for target, errors in stats.errors_by_target.items():
        if errors and len(errors) == stats.cells_by_target.get(target, 0):
            distinct = sorted(set(errors), key=errors.index)
            detail = distinct[0] if len(distinct) == 1 else f"{distinct[0]} (and {len(distinct) - 1} other errors)"
            lines.append(f"target {target!r}: every cell failed ({len(errors)}): {detail}")
    return lines


def decide_exit(summary: dict[str, Any], stats: ExecutionStats, target_failures: list[str]) -> int:
    if stats.interrupted or target_failures:
        return EXIT_INCOMPLETE
    totals = summary["totals"]
    if totals["fail"] or totals["error"]:
        return EXIT_FAILED
    return EXIT_OK
