"""The ``evalx`` command line: parse options, call the library, map errors to exit codes.

Heavy imports happen inside commands so ``evalx --help`` stays fast.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from evalx.results.outcome import EXIT_INCOMPLETE, EXIT_USAGE
from evalx.version import __version__

if TYPE_CHECKING:
    from evalx.config.loader import Config


def _discover_config(ctx: click.Context, param: click.Parameter, value: Path) -> Path:
    """``-c`` not given and no ``./evalconfig.yaml``: the nearest one above, up to the repository root (config/discovery.py)."""
    if ctx.get_parameter_source(param.name or "") != click.core.ParameterSource.DEFAULT or value.is_file():
        return value
    from evalx.config.discovery import discover_config

    found = discover_config()
    if found is None:
        return value
    shown = Path(os.path.relpath(found))
    click.echo(f"evalx: using {shown} (the nearest evalconfig.yaml above this folder)", err=True)
    return shown


config_option = click.option(
    "-c",
    "--config",
    "config_path",
    default="evalconfig.yaml",
    show_default=True,
    type=click.Path(dir_okay=False, path_type=Path),
    callback=_discover_config,
    help="The config file (default: ./evalconfig.yaml, else the nearest one in a folder above, up to the repository root).",
)


def _fail(lines: list[str] | str, code: int = EXIT_USAGE) -> NoReturn:
    for line in [lines] if isinstance(lines, str) else lines:
        click.echo(line, err=True)
    sys.exit(code)


env_file_option = click.option(
    "--env-file",
    "env_files",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="PATH",
    help="Load a .env file before ${VAR} is resolved, after the config's env_file: (repeatable); set variables win.",
)
env_override_option = click.option("--env-override", is_flag=True, help="Values from .env files replace variables already set.")


def _load(
    config_path: Path,
    var: tuple[str, ...] = (),
    check_imports: bool = True,
    raise_errors: bool = True,
    env_files: tuple[Path, ...] = (),
    env_override: bool = False,
    trace: bool = False,
) -> Any:
    from evalx.config.loader import load_config
    from evalx.errors import ConfigError

    overrides = {}
    for item in var:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _fail(f"--var {item!r}: expected KEY=VALUE")
        overrides[key] = value
    try:
        config = load_config(
            config_path,
            var_overrides=overrides,
            check_imports=check_imports,
            raise_errors=raise_errors,
            env_files=env_files,
            env_override=env_override,
            trace=trace,
        )
    except ConfigError as exc:
        _fail([str(i) for i in exc.issues])
    for w in config.warnings:
        click.echo(f"warning: {w}", err=True)
    return config


def _color(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--color auto|always|never`` (on the group or a command): recorded for every writer, and for click's own echo."""
    from evalx.common.terminal import color_setting, set_color

    if value is not None:
        set_color(value)
        ctx.color = color_setting()  # False: click strips colour codes; True: it keeps them on a pipe too
    return value


color_option = click.option(
    "--color",
    type=click.Choice(["auto", "always", "never"]),
    default=None,
    expose_value=False,
    is_eager=True,
    callback=_color,
    help="Colour the output: auto (a terminal, unless NO_COLOR is set; FORCE_COLOR forces it), always or never.",
)


def _no_collection_at_exit() -> None:
    """Freeze the heap when the process exits (once per process), so interpreter shutdown skips its full collections.

    Shutdown otherwise walks every object the command left (the imported
    modules' alone are hundreds of thousands): ~0.1 s of a one-cell run
    (0.57 -> 0.47 s) and ~0.13 s of a 10,000-cell provider run (bench/RESULTS.md,
    issue 29). Exit handlers still run, reference counting still frees what it
    frees, and the files evalx writes are closed before exit: only objects kept
    alive by a reference cycle are left to the operating system, as Python allows
    for whatever exists at exit.
    """
    global _FREEZE_AT_EXIT
    if not _FREEZE_AT_EXIT:
        import atexit
        import gc

        atexit.register(gc.freeze)
        _FREEZE_AT_EXIT = True


_FREEZE_AT_EXIT = False


class _Group(click.Group):
    group_class = type  # a subgroup (`evalx ci`, `evalx providers`) is one too: its commands get --color as well

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        # every command takes --color, as the group does: `evalx report RUN --color never` reads as `evalx --color never report RUN`
        if not any(p.name == "color" for p in cmd.params):
            color_option(cmd)
        super().add_command(cmd, name)

    def main(self, *args: Any, **kwargs: Any) -> Any:
        # stderr quotes servers, targets and datasets: nothing it writes may drive the terminal
        # (titles, links, cursor moves, hidden text); evalx's own colours and progress line still work
        from evalx.common.terminal import prepare_streams, set_color
        from evalx.execution.interrupt import sigterm_as_ctrl_c
        from evalx.logs import printing
        from evalx.results.display import terminal_safe_stderr

        # the one place evalx's streams are set up: a stdout or stderr that cannot encode `·`, `─`, `…` (LC_ALL=C,
        # a Windows redirect) gets ASCII stand-ins, so a finished run never becomes an error because of the terminal
        prepare_streams(sys.stdout, sys.stderr)
        _no_collection_at_exit()
        set_color("auto")  # until --color says otherwise (a process may run several commands: tests, the API)
        with terminal_safe_stderr(), printing(), sigterm_as_ctrl_c():  # evalx's warnings and notes, as `evalx: warning: ...` lines
            return super().main(*args, **kwargs)

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any) -> click.Context:
        from evalx.common.terminal import color_setting

        extra.setdefault("color", color_setting())  # NO_COLOR / FORCE_COLOR for click's own echo; --color overrides
        return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
            raise
        except BrokenPipeError:  # `evalx ... | head`: the reader left; leave quietly
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(0)
        except KeyboardInterrupt:
            click.echo("evalx: interrupted", err=True)
            sys.exit(EXIT_INCOMPLETE)
        except Exception as exc:  # anything else a command raised: one line and an exit code, never a traceback
            from evalx.errors import ConfigError, EvalxError, HookFailed, OutputError, TargetUnreachable

            if isinstance(exc, ConfigError):
                _fail([str(i) for i in exc.issues])
            if isinstance(exc, TargetUnreachable):  # before any cell ran: the run could not be made
                _fail([f"evalx: {line}" for line in exc.lines], EXIT_INCOMPLETE)
            if isinstance(exc, HookFailed):  # before_run failed: no cell ran
                _fail(f"evalx: {exc}", EXIT_INCOMPLETE)
            if isinstance(exc, OutputError):  # a full disk, a read-only folder: the run or its reports are incomplete
                _fail(f"evalx: {exc}", EXIT_INCOMPLETE)
            if isinstance(exc, EvalxError):
                _fail(f"evalx: {exc}")
            if os.environ.get("EVALX_DEBUG"):
                raise
            _fail(f"evalx: internal error: {type(exc).__name__}: {exc} (set EVALX_DEBUG=1 for the traceback)", EXIT_INCOMPLETE)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="evalx")
@color_option
def main() -> None:
    """evalx: a declarative eval runner for LLM apps and agents.

    Write an evalconfig.yaml, then `evalx validate` and `evalx run`.
    """


max_cells_option = click.option(
    "--max-cells",
    type=click.IntRange(min=1),
    metavar="N",
    help="Refuse a plan of more cells (default: defaults.max_cells, else 10,000,000).",
)
max_variants_option = click.option(
    "--max-variants",
    type=click.IntRange(min=1),
    metavar="N",
    help="Refuse a --matrix run of more variants (default: defaults.max_variants, else 10,000).",
)


@main.command()
@config_option
@click.option("--var", multiple=True, metavar="KEY=VALUE", help="Set a template var.")
@env_file_option
@env_override_option
@max_cells_option
@max_variants_option
def validate(
    config_path: Path,
    var: tuple[str, ...],
    env_files: tuple[Path, ...],
    env_override: bool,
    max_cells: int | None,
    max_variants: int | None,
) -> None:
    """Check a config (schema, references, datasets, the size of its runs); exit 0 or 2."""
    from evalx.errors import ConfigError
    from evalx.execution.plan import load_all_datasets, measure_runs

    config = _load(config_path, var, raise_errors=False, env_files=env_files, env_override=env_override)
    errors = [str(i) for i in config.errors]
    try:
        config.check_env()
    except ConfigError as exc:
        errors += [str(i) for i in exc.issues if str(i) not in errors]
    cases = {}
    if not any(i.path.startswith("datasets") for i in config.errors):  # the dataset specs are sound: read them
        try:
            cases = load_all_datasets(config)
        except ConfigError as exc:
            errors += [str(i) for i in exc.issues]
    if cases and not errors:  # the templates' names and fields, against the cases they will render with
        from evalx.config.references import reference_issues

        for issue in reference_issues(config, cases):
            if issue.warning:
                click.echo(f"warning: {issue}", err=True)
            else:
                errors.append(str(issue))
    sizes = ""
    if not errors:  # counted, never built: a matrix of 10**8 variants is refused at once
        sizes, too_big = measure_runs(config, cases, max_cells, max_variants)
        errors += too_big
    if errors:
        _fail(errors)
    n_cases = sum(len(c) for c in cases.values())
    warnings = 0
    n_global = len(config.typed.asserts)
    for ds_cases in cases.values():
        for case in ds_cases:
            if not case.asserts and not n_global and not any(t.get("assert") for t in case.turns or ()):
                click.echo(f"warning: {case.source} case {case.id!r} has no assertion: it would pass on anything", err=True)
                warnings += 1
    from evalx.judge import check_judge_refs

    unjudged = check_judge_refs(config, cases)  # raises ConfigError for an unknown per-assertion judge target
    if unjudged:
        click.echo(
            f"warning: {unjudged} model-graded assertion{'s are' if unjudged != 1 else ' is'} used but no judge: is configured; "
            "they will be inconclusive (skipped)",
            err=True,
        )
    from evalx.execution.pairwise_pass import pairwise_warnings

    for line in [*_hidden_id_warnings(config, cases), *pairwise_warnings(config, cases)]:
        click.echo(f"warning: {line}", err=True)
    click.echo(f"{config.file}: ok — {len(config.typed.targets)} targets, {len(cases)} datasets, {n_cases} cases; {sizes}")


def _hidden_id_warnings(config: Config, cases: Mapping[str, Sequence[Any]]) -> list[str]:
    """One line (file:line key path) for each target, dataset or case id with characters that do not show."""
    from evalx.results.display import describe_hidden, has_hidden, show_id

    def why(what: str, value: Any) -> str:
        return (
            f"{what} {show_id(value)} has characters that do not show or reorder text ({describe_hidden(value)}); reports show them escaped"
        )

    lines = []
    ids = (
        ("targets", "target id", [t.id for t in config.typed.targets]),
        ("datasets", "dataset id", [d.id for d in config.typed.datasets]),
    )
    for section, what, section_ids in ids:
        for i, entry_id in enumerate(section_ids):
            if has_hidden(entry_id):
                lines.append(str(config.issue((section, i, "id"), why(what, entry_id), warning=True)))
    for ds_cases in cases.values():
        lines += [f"{case.source} id: {why('case id', case.id)}" for case in ds_cases if has_hidden(case.id)]
    return lines


def _html_max_cells(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """``--html-max-cells N``: a whole number, 0 or more; anything else is one line and exit 2."""
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        _fail(f"evalx: --html-max-cells {value}: give a whole number of cells, 0 (no cap) or more")
    return number


#: the default is evalx.reports.html.MAX_CELLS (tests/reports/test_html_scale.py checks this text against it)
html_max_cells_option = click.option(
    "--html-max-cells",
    metavar="N",
    callback=_html_max_cells,
    help="report.html embeds every cell of a run of up to N cells (default 10,000); past N, failures and errors first "
    "and an evenly spread sample of the passes, N in all, and the page says so. 0: no cap.",
)

junit_passes_option = click.option(
    "--junit-passes",
    type=click.Choice(["all", "summary"]),
    default=None,
    help="summary: junit.xml has failures, errors and skips in full and, per target and dataset, one testcase "
    "for the passing cases (their ids in its system-out): for huge suites. Default: all (evalx report: what the run used).",
)

junit_flavor_option = click.option(
    "--junit-flavor",
    type=click.Choice(["standard", "extended"]),
    default="standard",
    show_default=True,
    help="extended: the --junit file also has file/line attributes on each testcase (for tools that link them; not valid against junit-10.xsd).",
)


def _shard(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, int] | None:
    """``--shard I/N``: 1-based, ``1 <= I <= N``; anything else is one line and exit 2."""
    if value is None:
        return None
    from evalx.execution.shards import ShardError, parse_shard

    try:
        return parse_shard(value)
    except ShardError as exc:
        _fail(f"evalx: {exc}")


class ConcurrencyType(click.ParamType):  # type: ignore[type-arg]
    """``--concurrency``: a number of at least 1, or ``auto``."""

    name = "N|auto"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
        text = str(value).strip().lower()
        if text == "auto":
            return "auto"
        if text.isdigit() and int(text) >= 1:
            return int(text)
        self.fail(f"{value!r} is neither a number of at least 1 nor auto", param, ctx)


@main.command(name="run")
@config_option
@color_option
@click.option("--matrix", is_flag=True, help="Expand the matrix: section.")
@click.option("--target", "targets", multiple=True, metavar="ID", help="Run only this target (repeatable).")
@click.option("--dataset", "datasets", multiple=True, metavar="ID", help="Run only this dataset (repeatable).")
@click.option("--case", "cases", multiple=True, metavar="GLOB", help="Run only cases whose id matches (repeatable).")
@click.option("--category", "categories", multiple=True, metavar="NAME", help="Run only this category (repeatable).")
@click.option(
    "--tag", "tags", multiple=True, metavar="NAME", help="Run only cases with this tag (repeatable: any of them); '!NAME' leaves them out."
)
@click.option("--repeat", type=click.IntRange(min=1), help="Samples per case and target.")
@click.option(
    "--concurrency",
    type=ConcurrencyType(),
    metavar="N|auto",
    help="Cells in flight per target; auto: a provider target's requests in flight adapt to its rate limit.",
)
@click.option("--no-cache", is_flag=True, help="Bypass the response cache.")
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), help="Also write JUnit XML here.")
@junit_flavor_option
@junit_passes_option
@click.option("--html", type=click.Path(dir_okay=False, path_type=Path), help="Also write the HTML report here.")
@click.option("--json", "json_out", is_flag=True, help="Print the summary as JSON on stdout.")
@click.option("--var", multiple=True, metavar="KEY=VALUE", help="Set a template var.")
@env_file_option
@env_override_option
@click.option("--dry-run", is_flag=True, help="List the cells that would run and estimate their tokens, cost and time; run nothing.")
@click.option(
    "--batch",
    is_flag=True,
    help="Send provider targets' (and a provider judge's) requests through their provider's batch API, at its batch price.",
)
@click.option(
    "--max-failures",
    type=click.IntRange(min=1),
    metavar="N",
    help="Start no new cell once N cells failed or errored (those in flight finish); the run is resumable with --resume and exits 1.",
)
@click.option("-x", "exit_first", is_flag=True, help="Stop at the first failed or errored cell (--max-failures 1).")
@click.option("-q", "--quiet", is_flag=True, help="No progress; print only the headline (each target's pass rate) and the exit reason.")
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Print the full summary (summary.txt: breakdowns, latency, tokens, pairwise) instead of the compact one.",
)
@click.option("--baseline", metavar="RUN|latest", help="Compare with this run (overrides gates.baseline).")
@click.option("--resume", metavar="RUN", help="Finish a killed or interrupted run: run only its cells without a result.")
@click.option(
    "--rerun",
    metavar="failed|errors|failed,errors",
    help="With --from RUN: a new run of RUN's plan that runs again only its failed and/or errored cells (all their repeats) "
    "and copies the rest.",
)
@click.option("--from", "rerun_from", metavar="RUN|latest", help="The run --rerun starts from (a run id, a path or latest).")
@click.option(
    "--shard",
    metavar="I/N",
    callback=_shard,
    help="Run only shard I of N (1-based): whole cases, split the same way on every machine; gates are applied by `evalx merge`.",
)
@click.option(
    "--markdown",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    help="Write a Markdown summary here (CI); '-': on stdout (the terminal summary goes to stderr).",
)
@click.option("--executor", type=click.Choice(["local", "ray"]), help="Where cells run (default: the config's executor.kind, else local).")
@click.option(
    "--ray-address",
    metavar="auto|local|ADDR",
    help="With --executor ray: auto (a running cluster, the default), local (start one), or an address.",
)
@click.option(
    "--trace",
    is_flag=True,
    help="Receive the targets' OpenTelemetry spans (as tracing: {receive: true}; docs/tracing.md).",
)
@click.option(
    "--otlp-endpoint",
    metavar="URL",
    callback=lambda ctx, param, value: _otlp_endpoint(value),
    help="Send the run's spans (run, cells, target calls, checks) to this OTLP/HTTP traces URL (default: tracing.export, "
    "then OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT; a URL without a path gets /v1/traces).",
)
@max_cells_option
@max_variants_option
@html_max_cells_option
def run_cmd(
    config_path: Path,
    matrix: bool,
    targets: tuple[str, ...],
    datasets: tuple[str, ...],
    cases: tuple[str, ...],
    categories: tuple[str, ...],
    tags: tuple[str, ...],
    repeat: int | None,
    concurrency: int | str | None,
    no_cache: bool,
    junit: Path | None,
    junit_flavor: str,
    junit_passes: str | None,
    html: Path | None,
    json_out: bool,
    var: tuple[str, ...],
    env_files: tuple[Path, ...],
    env_override: bool,
    dry_run: bool,
    batch: bool,
    max_failures: int | None,
    exit_first: bool,
    quiet: bool,
    verbose: bool,
    baseline: str | None,
    resume: str | None,
    rerun: str | None,
    rerun_from: str | None,
    shard: tuple[int, int] | None,
    markdown: Path | None,
    executor: str | None,
    ray_address: str | None,
    otlp_endpoint: str | None,
    max_cells: int | None,
    max_variants: int | None,
    html_max_cells: int | None,
    trace: bool,
) -> None:
    """Run the evals and write runs/<run_id>/."""
    from evalx.execution.plan import Selection
    from evalx.execution.request import RunRequest
    from evalx.reports.render import Outputs, ReportOptions

    to_stdout = _markdown_to_stdout(markdown, json_out)
    config = _load(config_path, var, env_files=env_files, env_override=env_override, trace=trace)
    request = RunRequest(
        selection=Selection(
            list(targets),
            list(datasets),
            list(cases),
            list(categories),
            repeat,
            matrix,
            max_cells=max_cells,
            max_variants=max_variants,
            shard=shard,
            tags=list(tags),
        ),
        concurrency=concurrency,
        use_cache=not no_cache,
        baseline=baseline,
        resume=resume,
        rerun=rerun,
        rerun_from=rerun_from,
        executor=executor,
        ray_address=ray_address,
        reports=ReportOptions(html_max_cells=html_max_cells, junit_passes=junit_passes or "all"),
        outputs=Outputs(junit=junit, junit_flavor=junit_flavor, html=html, markdown=None if to_stdout else markdown),
        quiet=quiet,
        max_failures=_max_failures(max_failures, exit_first),
        batch=batch,
        otlp_endpoint=otlp_endpoint,
    )
    if dry_run:
        from evalx.execution.request import plan_request

        try:
            plan = plan_request(config, request)
        except _nothing_to_rerun() as exc:
            _fail(f"evalx: {exc}", 0)
        _print_plan(plan, config, request.overrides())
        return
    from evalx.execution.runner import run
    from evalx.targets.printed import stdout_for_evalx

    # what a target prints (a late thread, C code, a subprocess) goes to stderr; only evalx writes to `out`
    with stdout_for_evalx() as out:
        try:
            outcome = run(config, request)
        except _nothing_to_rerun() as exc:
            click.echo(f"evalx: {exc}", err=True)
            sys.exit(0)
        _report_run(outcome, request.selection.matrix, json_out, sys.stderr if to_stdout else out, quiet=quiet, verbose=verbose)
        if to_stdout:
            _print_markdown(outcome.summary, out)
    for line in outcome.messages:
        click.secho(line, err=True, fg="red", bold=True)
    click.echo(f"results: {os.path.relpath(outcome.run_dir)}/", err=True)
    _step_outputs(outcome)
    sys.exit(outcome.exit_code)


def _otlp_endpoint(value: str | None) -> str | None:
    """``--otlp-endpoint``: an http(s) URL, or a usage error (exit 2)."""
    if value is None:
        return None
    from evalx.tracing.export import check_url

    problem = check_url(value)
    if problem is not None:
        raise click.BadParameter(problem, param_hint="'--otlp-endpoint'")
    return value


def _markdown_to_stdout(markdown: Path | None, json_out: bool) -> bool:
    """``--markdown -``: the Markdown summary on stdout (refused with ``--json``, which prints there too)."""
    if markdown is None or str(markdown) != "-":
        return False
    if json_out:
        _fail("evalx: --markdown - and --json both print on stdout; give one of them")
    return True


def _print_markdown(summary: Any, out: Any) -> None:
    from evalx.reports.markdown import markdown_summary

    click.echo(markdown_summary(summary), file=out, nl=False)


def _step_outputs(outcome: Any) -> None:
    """Under GitHub Actions: the step's outputs ``run-dir``, ``run-id`` and ``exit-code`` (the action uploads and comments on them)."""
    from evalx.ci.actions import set_step_outputs

    run_dir = Path(outcome.run_dir).resolve()
    set_step_outputs({"run-dir": str(run_dir), "run-id": run_dir.name, "exit-code": str(outcome.exit_code)})


def _max_failures(max_failures: int | None, exit_first: bool) -> int | None:
    """``--max-failures N`` or ``-x`` (1); both given must agree."""
    if exit_first and max_failures not in (None, 1):
        _fail(f"evalx: -x is --max-failures 1; give one of -x and --max-failures {max_failures}")
    return 1 if exit_first else max_failures


def _nothing_to_rerun() -> type[Exception]:
    from evalx.execution.rerun import NothingToRerun

    return NothingToRerun


def _report_run(outcome: Any, matrix: bool, json_out: bool, out: Any, *, quiet: bool = False, verbose: bool = False) -> None:
    """The run's summary on ``out``: JSON; or the headline and exit reason (``--quiet``); or the compact summary (the
    full one with ``-v``, and the matrix view of a ``--matrix`` run) and the gate report, then the exit reason."""
    if json_out:
        from evalx.common.terminal import json_for

        click.echo(json_for(out, outcome.summary), file=out)
        return
    from evalx.common.terminal import color_for
    from evalx.reports.text import format_compact, format_headline, format_summary
    from evalx.results.gates import format_outcome
    from evalx.results.outcome import exit_reason

    color = color_for(out)
    reason_line = exit_reason(outcome.summary, outcome.exit_code)  # the run's messages follow on stderr
    if quiet:
        click.echo(format_headline(outcome.summary, color=color) + reason_line, file=out, color=color)
        return
    where = os.path.relpath(outcome.run_dir)
    if verbose:
        text = format_summary(outcome.summary, color=color, flaky_list=not matrix, pairwise=not matrix)
    else:
        text = format_compact(outcome.summary, color=color, where=where)
    click.echo(text, file=out, nl=False, color=color)
    if matrix:
        from evalx.reports.matrix_view import format_matrix
        from evalx.results.store import read_results

        results = read_results(outcome.run_dir / "results.jsonl")
        click.echo("\n" + format_matrix(outcome.summary, results, color=color), file=out, color=color)
    gate_report = format_outcome(outcome.summary)
    if gate_report:
        click.echo("\n" + gate_report, nl=False, file=out, color=color)
    click.echo(("\n" if verbose else "") + reason_line, file=out, color=color)


def _print_plan(plan: Any, config: Any = None, overrides: Any = None) -> None:
    n_cases = len({(c.dataset, c.case.id) for c in plan.cells})
    targets = [t["id"] for t in plan.target_specs]
    from evalx.results.display import show_id

    targets = [show_id(t) for t in targets]
    click.echo(f"{len(plan.cells)} cells: {n_cases} cases × {len(targets)} targets ({', '.join(targets)})")
    if plan.variants:
        bases = plan.base_target_ids
        click.echo(f"matrix: {len(bases)} targets → {len(plan.variants)} variants")
        for variant in plan.variants.values():
            as_is = not variant.values and variant.spec.get("type") != "provider"
            click.echo(f"  {show_id(variant.id)}" + ("  (takes no params: runs once, as is)" if as_is else ""))
    limit = 500
    for cell in plan.cells[:limit]:
        rep = f" #r{cell.repeat}" if cell.repeat else ""
        click.echo(f"  {show_id(cell.target):<20} {show_id(cell.dataset)}/{show_id(cell.case.id)}{rep}")
    if len(plan.cells) > limit:
        click.echo(f"  … and {len(plan.cells) - limit} more")
    if config is not None:
        from evalx.execution.budget import estimate_cost, format_estimate

        for line in format_estimate(estimate_cost(config, plan, overrides)):
            click.echo(line)


@main.command()
@click.argument("run_ref", metavar="RUN", required=False)
@config_option
@click.option("--html", type=click.Path(dir_okay=False, path_type=Path), help="Also write the HTML report here.")
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), help="Also write JUnit XML here.")
@junit_flavor_option
@junit_passes_option
@html_max_cells_option
@click.option(
    "--history",
    "history_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Instead of one run: a static page of every run in this folder (trends, case histories); with -o.",
)
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False, path_type=Path), help="Where --history writes its page.")
def report(
    run_ref: str | None,
    config_path: Path,
    html: Path | None,
    junit: Path | None,
    junit_flavor: str,
    junit_passes: str | None,
    html_max_cells: int | None,
    history_dir: Path | None,
    output: Path | None,
) -> None:
    """Re-render a stored run's summary, junit.xml and report.html (or, with --history, a page of every run).

    RUN is a run id under the config's output dir, `latest`, or the path of a
    run directory (which needs no config).
    """
    if history_dir is not None or output is not None:
        _history_page(run_ref, history_dir, output)
        return
    if run_ref is None:
        _fail("evalx report: give a RUN (or --history RUNS_DIR -o FILE)")
    from evalx.reports.render import REPORT_FILES, Outputs, ReportOptions, check_outputs, rebuild_reports, stored_report_options
    from evalx.results.store import RESULTS, ReadProblems

    run_dir = _find_run(run_ref, config_path)
    outputs = Outputs(junit=junit, junit_flavor=junit_flavor, html=html)
    check_outputs(outputs.options(), [run_dir / RESULTS, run_dir / "summary.json", run_dir / "config.yaml"])
    outputs.check(run_dir)
    problems = ReadProblems()
    used = stored_report_options(run_dir)  # what the run was rendered with: an option not given keeps it
    options = ReportOptions(
        html_max_cells=html_max_cells if html_max_cells is not None else used.html_max_cells,
        junit_passes=junit_passes or used.junit_passes,
    )
    rebuild_reports(run_dir, problems, options, outputs)
    if problems:
        click.echo(f"evalx: warning: {problems.warning(run_dir / RESULTS)}", err=True)
    written = [run_dir / name for name in REPORT_FILES]
    written += [path for path in (html, junit) if path is not None and path.resolve() not in {w.resolve() for w in written}]
    for path in written:
        click.echo(f"wrote {os.path.relpath(path)}")
    _say_unfinished(run_dir)


def _say_unfinished(run_dir: Path) -> None:
    """An interrupted or stopped-early run's headline and resume command, on stderr: re-rendering it does not finish it."""
    from evalx.common.reading import SUMMARY, stored_json
    from evalx.results.outcome import interruption

    summary = stored_json(run_dir / "summary.json", SUMMARY)
    stopped = interruption(summary) if isinstance(summary, dict) else None
    if stopped is not None:
        click.echo(f"evalx: {stopped[0]}; {stopped[1]}", err=True)


def _history_page(run_ref: str | None, history_dir: Path | None, output: Path | None) -> None:
    """`evalx report --history RUNS_DIR -o FILE`."""
    from evalx.errors import EvalxError
    from evalx.viewer.static import write_history_page

    if run_ref is not None or history_dir is None or output is None:
        _fail("evalx report: --history RUNS_DIR -o FILE, without a RUN")
    try:
        runs = write_history_page(history_dir, output)
    except EvalxError as exc:
        _fail(f"evalx report: {exc}")
    click.echo(f"wrote {os.path.relpath(output)} ({runs} run{'s' if runs != 1 else ''})")


@main.command()
@click.argument("run_dirs", metavar="RUN_DIR...", nargs=-1, required=True)
@config_option
@click.option(
    "-o",
    "--output",
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="The merged run's folder (default: a new run under output.dir). --out: the same.",
)
@color_option
@click.option("--allow-partial", is_flag=True, help="Merge even when shards are missing; the summary says which.")
@click.option("--baseline", metavar="RUN|latest", help="Compare with this run (overrides gates.baseline).")
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), help="Also write JUnit XML here.")
@click.option("--html", type=click.Path(dir_okay=False, path_type=Path), help="Also write the HTML report here.")
@click.option(
    "--markdown",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    help="Write a Markdown summary here (CI); '-': on stdout (the terminal summary goes to stderr).",
)
@click.option("--json", "json_out", is_flag=True, help="Print the summary as JSON on stdout.")
@click.option("-v", "--verbose", is_flag=True, help="Print the full summary instead of the compact one.")
@junit_passes_option
@html_max_cells_option
def merge(
    run_dirs: tuple[str, ...],
    config_path: Path,
    out_dir: Path | None,
    allow_partial: bool,
    baseline: str | None,
    junit: Path | None,
    html: Path | None,
    markdown: Path | None,
    json_out: bool,
    verbose: bool,
    junit_passes: str | None,
    html_max_cells: int | None,
) -> None:
    """Merge shard runs (`evalx run --shard I/N`) into one run: results, summary, reports, gates and exit status.

    RUN_DIR is a shard's run folder (or its run id under the config's output dir).
    """
    from evalx.execution.merge import MergeOptions
    from evalx.execution.merge import merge as merge_runs
    from evalx.reports.render import Outputs, ReportOptions, check_outputs, stored_report_options
    from evalx.results.history import RunNotFound, resolve_run

    to_stdout = _markdown_to_stdout(markdown, json_out)
    markdown = None if to_stdout else markdown
    config = _load(config_path, check_imports=False)
    folders = []
    for ref in run_dirs:
        if Path(ref).is_dir():  # named as given, in messages
            folders.append(Path(ref))
            continue
        try:
            folders.append(resolve_run(ref, config.output_dir))
        except RunNotFound as exc:
            _fail(f"evalx merge: {exc}")
    outputs = Outputs(junit=junit, html=html, markdown=markdown)
    check_outputs(outputs.options(), [f / name for f in folders for name in ("results.jsonl", "run.json")])
    used = stored_report_options(folders[0])  # an option not given: as the shards were rendered
    options = MergeOptions(
        out_dir=out_dir,
        allow_partial=allow_partial,
        baseline=baseline,
        outputs=outputs,
        reports=ReportOptions(
            html_max_cells=html_max_cells if html_max_cells is not None else used.html_max_cells,
            junit_passes=junit_passes or used.junit_passes,
        ),
    )
    outcome = merge_runs(config, folders, options)
    _report_run(outcome, bool(outcome.summary.get("matrix")), json_out, sys.stderr if to_stdout else sys.stdout, verbose=verbose)
    if to_stdout:
        _print_markdown(outcome.summary, sys.stdout)
    for line in outcome.messages:
        click.secho(line, err=True, fg="red", bold=True)
    click.echo(f"merged: {os.path.relpath(outcome.run_dir)}/", err=True)
    _step_outputs(outcome)
    sys.exit(outcome.exit_code)


def _find_run(run_ref: str, config_path: Path) -> Path:
    direct = Path(run_ref)
    if os.path.lexists(direct / "results.jsonl"):  # there, if not a regular file: reading it names the problem
        return direct
    _no_cell_ran(direct)
    if not config_path.is_file():
        _fail(
            f"evalx report: {run_ref!r} is not a run directory, and there is no {config_path} to find runs in (pass -c FILE or a run's path)"
        )
    output_dir: Path = _load(config_path, check_imports=False).output_dir
    if run_ref == "latest":
        runs = sorted(p for p in output_dir.glob("*/results.jsonl") if p.is_file())
        if not runs:
            _fail(f"evalx report: no stored run in {os.path.relpath(output_dir)}/")
        return runs[-1].parent
    run_dir = output_dir / run_ref
    if not os.path.lexists(run_dir / "results.jsonl"):
        _no_cell_ran(run_dir)
        _fail(f"evalx report: no run {run_ref!r} in {os.path.relpath(output_dir)}/ (no results.jsonl there)")
    return run_dir


def _no_cell_ran(run_dir: Path) -> None:
    """A run folder with a ``run.json`` but no results (its before_run hook failed or was interrupted): say so, and how to
    run its cells (exit 2); anything else: nothing."""
    from evalx.common.reading import RUN_RECORD, stored_json
    from evalx.results.outcome import resume_command

    meta = stored_json(run_dir / "run.json", RUN_RECORD) if os.path.isdir(run_dir) else None
    if not isinstance(meta, dict):
        return
    status = meta.get("status")
    resume = resume_command({"config": meta.get("config"), "run_id": run_dir.name})
    _fail(f"evalx: {os.path.relpath(run_dir)}: no cell ran in this run (run.json: {status}), nothing to report: {resume} runs them")


@main.command()
@click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Include the assertion types this config's plugins: register.",
)
@click.option("--provider", "provider_schema", is_flag=True, help="Print the provider definition schema instead.")
@click.option(
    "-o",
    "--output",
    "--write",
    "write_path",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[PATH]",
    help="Write it to PATH (default: evalconfig.schema.json beside the -c config, else in this folder) instead of printing it. "
    "--write: the same.",
)
def schema(config_path: Path | None, provider_schema: bool, write_path: str | None) -> None:
    """Print the config JSON Schema (or, with --provider, the providers/*.yaml one).

    It knows the built-in assertion types, those of installed plugins (the
    evalx.plugins entry points) and, with -c, those of the config's plugins:.
    --write refreshes the file a config's `$schema` line points at.
    """
    if provider_schema:
        from evalx.targets.definitions import schema_json as provider_schema_json

        if write_path:
            _write_output(Path(write_path), provider_schema_json(), "evalx schema")
            return
        click.echo(provider_schema_json(), nl=False)
        return
    from evalx.assertions.registry import check_entry_point_plugins
    from evalx.config.loader import load_plugins
    from evalx.config.schema import schema_json

    check_entry_point_plugins()  # a broken installed plugin is an error here too (exit 2)
    if config_path is not None:
        load_plugins(config_path)
    if write_path is not None:
        from evalx.common.documents import display_path
        from evalx.config.scaffold import schema_path, write_schema
        from evalx.errors import OutputError

        try:
            written = write_schema(schema_path(write_path, config_path))
        except OutputError as exc:
            _fail(f"evalx schema: {exc}")
        except OSError as exc:
            _fail(f"evalx schema: cannot write {write_path or 'the schema'}: {exc.strerror or exc}")
        click.echo(f"wrote {display_path(written)}")
        return

    click.echo(schema_json(), nl=False)


def _providers_dir(config_path: Path) -> Path | None:
    """The config's providers_dir: when a config is found (or named), else None: shipped definitions only."""
    from evalx.common.documents import display_path
    from evalx.targets.definitions import providers_dir_of

    source = click.get_current_context().get_parameter_source("config_path")
    if not config_path.exists() and source == click.core.ParameterSource.DEFAULT:
        return None
    user_dir = providers_dir_of(_load(config_path, check_imports=False))
    if user_dir is not None and not user_dir.is_dir():
        click.echo(f"warning: providers_dir {display_path(user_dir)} is not a directory", err=True)
    return user_dir


@main.group(invoke_without_command=True)
@config_option
@click.pass_context
def providers(ctx: click.Context, config_path: Path) -> None:
    """List provider definitions, one a line: shipped ones plus the config's providers_dir:."""
    if ctx.invoked_subcommand is not None:
        return
    from tabulate import tabulate

    from evalx.targets.catalog import catalog

    rows, problems = catalog(_providers_dir(config_path))
    table = [[r.name, r.description, r.capabilities, r.extends, r.base_url, r.origin, r.file] for r in rows]
    click.echo(
        tabulate(table, headers=["provider", "description", "capabilities", "extends", "base_url", "from", "file"], tablefmt="simple")
    )
    for line in problems:
        click.echo(line, err=True)
    if problems:
        sys.exit(EXIT_USAGE)


@providers.command("show")
@click.argument("name")
@config_option
def providers_show(name: str, config_path: Path) -> None:
    """Print one provider definition as YAML, resolved through extends:."""
    from evalx.errors import ConfigError
    from evalx.targets.catalog import show

    try:
        text = show(name, _providers_dir(config_path))
    except ConfigError as exc:
        _fail([str(i) for i in exc.issues])
    click.echo(text, nl=False)


class _ListsProviders(click.Option):
    """``evalx init --provider``: its help lists the shipped providers, read when the help is shown (not at every start)."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        record = super().get_help_record(ctx)
        if record is None:
            return None
        from evalx.config.provider_starter import shipped_names

        return record[0], f"{record[1]} One of: {', '.join(shipped_names())}."


def _complete_providers(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    from evalx.config.provider_starter import shipped_names

    return [name for name in shipped_names() if name.startswith(incomplete)]


@main.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--template",
    "template",
    default="python",
    show_default=True,
    metavar="python|provider|engine|judge|matrix",
    help="The starter: a Python agent, a model behind an API, an agent engine, a judge, a matrix of variants.",
)
@click.option(
    "--provider",
    "provider",
    metavar="NAME",
    cls=_ListsProviders,
    shell_complete=_complete_providers,
    help="The provider starter for this provider (implies --template provider): its config names the model, the key "
    "variable and the region; without it the starter talks to a bundled demo server.",
)
def init(directory: Path, template: str, provider: str | None) -> None:
    """Scaffold a starter in DIRECTORY: evalconfig.yaml, its schema, a dataset and what it runs (offline, but with --provider)."""
    from evalx.config.scaffold import PROVIDER_TEMPLATE, UnknownTemplate, ignore_run_folders, next_steps, scaffold
    from evalx.errors import ConfigError, OutputError, UnknownProvider

    if provider is not None and click.get_current_context().get_parameter_source("template") == click.core.ParameterSource.DEFAULT:
        template = PROVIDER_TEMPLATE
    try:
        written = scaffold(directory, template, provider)
    except UnknownTemplate as exc:
        _fail(f"evalx init: {exc}")
    except UnknownProvider as exc:
        _fail(f"evalx init: {exc.reason}")
    except ConfigError as exc:  # a shipped definition that does not load: its FILE:LINE lines
        _fail([str(i) for i in exc.issues])
    except FileExistsError as exc:
        _fail(f"evalx init: {exc} already exists; not overwriting (nothing written)")
    except OSError as exc:
        _fail(f"evalx init: cannot write in {directory}: {exc.strerror or exc}")
    for p in written:
        click.echo(f"created {p}")
    try:
        added = ignore_run_folders(directory)
    except OutputError as exc:  # the starter is written; only the .gitignore could not be changed
        click.echo(f"evalx init: warning: {exc}", err=True)
        added = []
    if added:
        click.echo(f"added {', '.join(added)} to {directory / '.gitignore'}")
    click.echo("next:")
    for step in next_steps(template, provider):
        click.echo("  " + step.replace("{dir}", str(directory)))


def _output_dir(config_path: Path) -> Path:
    """The config's runs directory (``./runs`` when there is no config here)."""
    source = click.get_current_context().get_parameter_source("config_path")
    if not config_path.exists() and source == click.core.ParameterSource.DEFAULT:
        return Path("runs").resolve()
    return Path(_load(config_path, check_imports=False).output_dir)


@main.command(name="runs")
@config_option
@click.option("--json", "json_out", is_flag=True, help="Print the runs as JSON.")
def runs_cmd(config_path: Path, json_out: bool) -> None:
    """List stored runs under the config's output dir, newest first."""
    from evalx.results.history import format_runs, list_runs

    found = list_runs(_output_dir(config_path))
    if json_out:
        from evalx.common.terminal import json_for

        click.echo(json_for(sys.stdout, [r.as_dict() for r in found]))
    elif not found:
        click.echo("no runs yet (evalx run writes them)", err=True)
    else:
        click.echo(format_runs(found))


@main.command()
@config_option
@click.argument("run_ref", metavar="RUN")
@click.option("--baseline", "baseline_ref", metavar="RUN", help="Compare with this run (default: the comparison the run stored).")
@click.option(
    "--post",
    type=click.Choice(["github", "gitlab"]),
    help="Post it on the job's pull request (GITHUB_TOKEN) or merge request (EVALX_GITLAB_TOKEN), or update evalx's comment there.",
)
@click.option("--artifact-url", envvar="EVALX_ARTIFACT_URL", metavar="URL", help="Link to the run's files [env: EVALX_ARTIFACT_URL].")
@click.option("--id", "comment_id", default="", metavar="NAME", help="Keep one comment per NAME (two configs, two comments).")
@click.option("--number", type=click.IntRange(min=1), help="The pull/merge request (default: the CI job's).")
@click.option(
    "-o",
    "--output",
    "output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the comment's Markdown to this file instead of printing it.",
)
def comment(
    config_path: Path,
    run_ref: str,
    baseline_ref: str | None,
    post: str | None,
    artifact_url: str | None,
    comment_id: str,
    number: int | None,
    output: Path | None,
) -> None:
    """The pull-request comment for RUN (Markdown): headline per target, gates, newly failing and passing cases, cost.

    RUN is a run folder, a run id or `latest`. Without --post (or without a token) it is printed, or written to -o FILE.
    """
    from evalx.errors import ForgeError
    from evalx.reports.comment import marker

    try:
        marker(comment_id)
    except ValueError as exc:
        _fail(f"evalx comment: --id: {exc}")
    run_dir = _find_run(run_ref, config_path)
    baseline = _find_run(baseline_ref, config_path) if baseline_ref else None
    if post is None:
        from evalx.ci.publish import comment_for_run

        text = comment_for_run(run_dir, baseline=baseline, artifact_url=artifact_url, comment_id=comment_id)
        if output is not None:
            _write_output(output, text, "evalx comment")
        else:
            click.echo(text, nl=False)
        return
    from evalx.ci.publish import publish

    try:
        done = publish(run_dir, post, baseline=baseline, artifact_url=artifact_url, comment_id=comment_id, number=number)
    except ForgeError as exc:
        _fail(f"evalx comment: {exc}", 1)
    if done.posted.note:
        click.echo(f"evalx: {done.posted.note}", err=True)
    if done.markdown is not None:
        if output is not None:
            _write_output(output, done.markdown, "evalx comment")
        else:
            click.echo(done.markdown, nl=False)
    if done.posted.action in ("created", "updated"):
        where = f": {done.posted.url}" if done.posted.url else ""
        click.echo(f"evalx: {done.posted.action} the comment{where}", err=True)


@main.group()
def ci() -> None:
    """What the GitHub Action and the GitLab template run (docs/ci.md)."""


@ci.command("fetch-baseline")
@click.option("--from", "forge", type=click.Choice(["github", "gitlab"]), help="Default: the CI the job runs on.")
@click.option("--branch", metavar="BRANCH", help="The base branch (default: the pull/merge request's target, else the default branch).")
@click.option("--artifact", default="evalx-run", show_default=True, help="GitHub: the artifact the base branch's runs uploaded.")
@click.option("--job", "job_name", metavar="NAME", help="GitLab: the job whose artifacts hold the run (default: this job's name).")
@click.option("--dest", required=True, type=click.Path(file_okay=False, path_type=Path), help="The folder the run is restored into.")
def fetch_baseline_cmd(forge: str | None, branch: str | None, artifact: str, job_name: str | None, dest: Path) -> None:
    """Restore the base branch's last run into DEST and print its path; none (or an API failure) is a warning, exit 0."""
    import asyncio

    from evalx.ci.baseline import fetch_baseline
    from evalx.ci.github import GitHubJob
    from evalx.ci.gitlab import GitLabJob

    if forge is None:
        forge = "github" if os.environ.get("GITHUB_ACTIONS") == "true" else "gitlab" if os.environ.get("GITLAB_CI") else None
        if forge is None:
            _fail("evalx ci fetch-baseline: not on GitHub Actions nor GitLab CI: give --from github|gitlab")
    if forge == "github":
        gh = GitHubJob.from_env()
        branch, name = branch or gh.base_ref or gh.default_branch, artifact
    else:
        gl = GitLabJob.from_env()
        branch, name = branch or gl.target_branch or gl.default_branch, job_name or gl.job_name or ""
        if not name:
            _fail("evalx ci fetch-baseline: give --job NAME (CI_JOB_NAME is not set)")
    if not branch:
        _fail("evalx ci fetch-baseline: give --branch (the job's environment names no base branch)")
    run = asyncio.run(fetch_baseline(forge, dest, branch=branch, name=name))
    if run is not None:
        click.echo(str(run))


@main.command()
@config_option
@click.argument("run_a", metavar="RUN_A")
@click.argument("run_b", metavar="RUN_B")
@click.option("--json", "json_out", is_flag=True, help="Print the comparison as JSON.")
@click.option("--markdown", "markdown_out", is_flag=True, help="Print the comparison as Markdown.")
@click.option(
    "-o",
    "--output",
    "output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the comparison to this file instead of printing it.",
)
def compare(config_path: Path, run_a: str, run_b: str, json_out: bool, markdown_out: bool, output: Path | None) -> None:
    """Compare RUN_A (the baseline) with RUN_B: deltas and case-level changes.

    Each RUN is a run id, a run directory, or `latest`.
    """
    from evalx.results.compare import compare_runs, format_comparison, markdown_comparison
    from evalx.results.history import resolve_run

    out_dir = _output_dir(config_path)
    name = None
    if "latest" in (run_a, run_b) and config_path.exists():
        name = _load(config_path, check_imports=False).name
    a, b = resolve_run(run_a, out_dir, name=name), resolve_run(run_b, out_dir, name=name)
    _warn_damaged(a, b)
    result = compare_runs(a, b)
    if json_out:
        from evalx.common.terminal import json_for

        text = json_for(sys.stdout if output is None else None, result) + "\n"  # None: -o's file, UTF-8
    elif markdown_out:
        text = markdown_comparison(result) + "\n"
    else:
        text = format_comparison(result)
    if output is not None:
        _write_output(output, text, "evalx compare")
        return
    click.echo(text, nl=False)


def _write_output(path: Path, text: str, command: str) -> None:
    """``-o FILE``: ``text`` written to ``path`` (its folder made), and one line saying so; a failure is one line and exit 2."""
    from evalx.common.atomic import write_text
    from evalx.errors import OutputError

    try:
        write_text(path, text)  # atomic, under a unique name: a link there is replaced, never written through
    except OutputError as exc:
        _fail(f"{command}: {exc}")
    click.echo(f"wrote {os.path.relpath(path)}")


def _warn_damaged(*run_dirs: Path) -> None:
    """A warning (stderr) for each run whose results.jsonl has lines that cannot be read or repeat a cell."""
    from evalx.results.store import RESULTS, ReadProblems, read_results

    for run_dir in run_dirs:
        path = run_dir / RESULTS
        if not path.is_file():
            continue
        problems = ReadProblems()
        for _ in read_results(path, problems):
            pass
        if problems:
            click.echo(f"evalx: warning: {problems.warning(path)}", err=True)


@main.command()
@click.argument("traces", metavar="TRACE...", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "-o",
    "--output",
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for the case files. --out: the same.",
)
@click.option("--case", "case_ids", multiple=True, metavar="CASE", help="With a run directory: the case to capture (repeatable).")
@click.option("--target", "target_id", metavar="ID", help="With a run directory: the target's cell to capture.")
@click.option("--input", "input_text", metavar="TEXT", help="The user message, for an SSE transcript that does not carry it.")
@click.option("--force", is_flag=True, help="Overwrite earlier captures of the same traces.")
@click.option("--reviewed", is_flag=True, help="With a run directory: capture the cell a reviewer marked failing (reviews.jsonl).")
def capture(
    traces: tuple[Path, ...],
    out_dir: Path,
    case_ids: tuple[str, ...],
    target_id: str | None,
    input_text: str | None,
    force: bool,
    reviewed: bool,
) -> None:
    """Turn failing production traces into eval case files (one YAML case a file).

    TRACE is a trace summary JSON, an Engine SSE transcript, a run directory
    (with --case), or an OpenTelemetry export (OTLP/JSON, a collector's file
    exporter's lines, Phoenix or Jaeger JSON): one case a trace.
    """
    from evalx.datasets.capture import capture_all

    for path, warnings in capture_all(
        list(traces), out_dir, cases=list(case_ids), target=target_id, input_text=input_text, force=force, reviewed=reviewed
    ):
        for w in warnings:
            click.echo(f"warning: {w}", err=True)
        click.echo(f"wrote {os.path.relpath(path)}")


@main.command()
@click.argument("runs_dir", metavar="[RUNS_DIR]", default="runs", type=click.Path(file_okay=False, path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to serve on; anything but loopback needs the printed token.")
@click.option("--port", default=8742, show_default=True, type=click.IntRange(0, 65535), help="Port (0: any free port).")
@click.option("--token", help="The token every request must carry (default: none on loopback, a new one elsewhere).")
@click.option("--reviewer", metavar="NAME", help="Who sets review marks (default: the OS user).")
def view(runs_dir: Path, host: str, port: int, token: str | None, reviewer: str | None) -> None:
    """A local web app over a runs folder: runs and trends, case histories, comparisons, review marks."""
    from evalx.viewer.app import serve

    if not runs_dir.is_dir():
        _fail(f"evalx view: {runs_dir}: no such folder (give the runs folder, e.g. runs/)")
    try:
        serve(runs_dir, host=host, port=port, token=token, reviewer=reviewer, echo=click.echo)
    except OSError as exc:
        _fail(f"evalx view: cannot serve on {host}:{port}: {exc.strerror or exc}")


if __name__ == "__main__":  # pragma: no cover
    main()
