"""One run request: what ``evalx run``, :func:`evalx.run` and the pytest plugin ask of a run, as one object.

The command line, the Python API and the pytest plugin each build a
:class:`RunRequest` (the selection, the settings flags, the outputs, the
executor, a shard, a resume or a rerun) and hand it to
:func:`evalx.execution.runner.run`. :func:`resolve` turns it, once, into
what the run needs: the selection after ``--resume``/``--rerun`` have said
theirs, the run id, the parent of a rerun, and the typed
:class:`~evalx.targets.settings.Overrides` every target, the judge and
simulated users are resolved under. Nothing downstream sees the options as
typed on a command line.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from evalx.errors import RequestError
from evalx.execution.plan import Plan, Selection, build_plan
from evalx.reports.render import ReportOptions, check_outputs
from evalx.reports.writers import Outputs
from evalx.targets.settings import Overrides

if TYPE_CHECKING:
    from evalx.config.loader import Config
    from evalx.execution.rerun import Rerun

__all__ = ["RequestError", "ResolvedRun", "RunRequest", "plan_request", "resolve"]


@dataclass(frozen=True)
class RunRequest:
    """One run, as asked for. Every field is named after the ``evalx run`` option that sets it."""

    #: which targets, datasets, cases, categories and tags; ``--repeat``, ``--matrix``, ``--shard``, the size limits
    selection: Selection = field(default_factory=Selection)
    #: ``--concurrency``: cells in flight per target (or ``auto``), over every config layer
    concurrency: int | str | None = None
    #: not ``--no-cache``
    use_cache: bool = True
    #: the new run's id (default: a fresh one)
    run_id: str | None = None
    #: ``--baseline RUN|latest``: overrides ``gates.baseline``
    baseline: str | None = None
    #: ``--resume RUN``: finish that run (only its cells without a result run)
    resume: str | None = None
    #: ``--rerun failed|errors|failed,errors``, with ``rerun_from``: a new run of that run's plan, running only those cells again
    rerun: str | None = None
    #: ``--from RUN|latest``
    rerun_from: str | None = None
    #: ``--executor local|ray`` (default: the config's ``executor.kind``, else local)
    executor: str | None = None
    #: ``--ray-address auto|local|ADDR``
    ray_address: str | None = None
    #: how junit.xml and report.html are rendered (``--junit-passes``, ``--html-max-cells``)
    reports: ReportOptions = field(default_factory=ReportOptions)
    #: ``--junit``, ``--junit-flavor``, ``--html``, ``--markdown``
    outputs: Outputs = field(default_factory=Outputs)
    #: ``-q``: no progress line
    quiet: bool = False
    #: ``--max-failures N`` (``-x``: 1): start no new cell once N cells failed or errored (the run is resumable)
    max_failures: int | None = None
    #: ``--batch``: provider targets (and a provider judge) whose definition has a batch API use it
    batch: bool = False
    #: ``--otlp-endpoint URL``: send the run's spans there (over ``tracing.export`` and the OTEL_EXPORTER_OTLP_* variables)
    otlp_endpoint: str | None = None

    def overrides(self) -> Overrides:
        """The top layer of every target's settings: what this request sets over the config."""
        shard = self.selection.shard
        return Overrides(
            concurrency=self.concurrency or None,
            cache=None if self.use_cache else False,
            rate_limit_share=shard[1] if shard is not None else None,  # the shards share each provider's rate limit
            batch=True if self.batch else None,
        )


@dataclass(frozen=True)
class ResolvedRun:
    """A request once its run is known: the selection to plan, the run id, whether it continues a stored run."""

    request: RunRequest
    selection: Selection
    run_id: str | None
    #: the stored run this one continues (``--resume``)
    resuming: bool
    #: the run a ``--rerun`` starts from
    parent: Rerun | None
    overrides: Overrides


def resolve(config: Config, request: RunRequest) -> ResolvedRun:
    """Read what ``--resume`` or ``--rerun --from`` refer to, and check the outputs, before anything runs."""
    selection, run_id, parent = request.selection, request.run_id, None
    inputs = config.input_files()
    if request.resume:
        from evalx.execution.resume import load_run_meta, resume_selection

        if request.rerun or request.rerun_from:
            raise RequestError("--rerun and --from go together (and not with --resume)")
        resumed, meta = load_run_meta(request.resume, config.output_dir)
        selection, run_id = resume_selection(meta, selection), str(meta["run_id"])
        if meta.get("batch") is True and not request.batch:  # made with --batch: its batches are polled again, not sent as calls
            request = replace(request, batch=True)
        inputs.append(Path(resumed) / "results.jsonl")
    elif request.rerun or request.rerun_from:
        from evalx.execution.rerun import load_parent, parse_rerun, rerun_selection

        if not (request.rerun and request.rerun_from):
            raise RequestError("--rerun and --from go together (and not with --resume)")
        parent = load_parent(request.rerun_from, config.output_dir, parse_rerun(request.rerun), name=config.name)
        selection = rerun_selection(parent, selection)
        inputs.append(parent.parent_dir / "results.jsonl")
    check_outputs(request.outputs.options(), inputs)
    request.outputs.check()
    return ResolvedRun(request, selection, run_id, bool(request.resume), parent, request.overrides())


def plan_request(config: Config, request: RunRequest) -> Plan:
    """The cells the request would run (``--dry-run``): a rerun's only the failed ones (:class:`NothingToRerun` when none)."""
    resolved = resolve(config, request)
    plan = build_plan(config, resolved.selection)
    if resolved.parent is not None:
        from evalx.execution.rerun import rerun_plan

        plan = rerun_plan(config, plan, resolved.parent)
    return plan
