"""The ``evalx`` command line: parse options, call the library, map errors to exit codes.

Heavy imports happen inside commands so ``evalx --help`` stays fast.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from . import __version__

EXIT_USAGE = 2
EXIT_INCOMPLETE = 3

config_option = click.option(
    "-c", "--config", "config_path", default="evalconfig.yaml", show_default=True, type=click.Path(dir_okay=False, path_type=Path),
    help="The config file.",
)


def _fail(lines: list[str] | str, code: int = EXIT_USAGE) -> NoReturn:
    for line in [lines] if isinstance(lines, str) else lines:
        click.echo(line, err=True)
    sys.exit(code)


def _load(config_path: Path, var: tuple[str, ...] = (), check_imports: bool = True) -> Any:
    from ._config import load_config
    from ._errors import ConfigError

    overrides = {}
    for item in var:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _fail(f"--var {item!r}: expected KEY=VALUE")
        overrides[key] = value
    try:
        config = load_config(config_path, var_overrides=overrides, check_imports=check_imports)
    except ConfigError as exc:
        _fail([str(i) for i in exc.issues])
    for w in config.warnings:
        click.echo(f"warning: {w}", err=True)
    return config


class _Group(click.Group):
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
        except Exception as exc:
            from ._errors import ConfigError, EvalxError

            if isinstance(exc, ConfigError):
                _fail([str(i) for i in exc.issues])
            if isinstance(exc, EvalxError):
                _fail(f"evalx: {exc}")
            if os.environ.get("EVALX_DEBUG"):
                raise
            _fail(f"evalx: internal error: {type(exc).__name__}: {exc} (set EVALX_DEBUG=1 for the traceback)", EXIT_INCOMPLETE)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="evalx")
def main() -> None:
    """evalx: a declarative eval runner for LLM apps and agents.

    Write an evalconfig.yaml, then `evalx validate` and `evalx run`.
    """


@main.command()
@config_option
@click.option("--var", multiple=True, metavar="KEY=VALUE", help="Set a template var.")
def validate(config_path: Path, var: tuple[str, ...]) -> None:
    """Check a config (schema, references, datasets); exit 0 or 2."""
    from ._plan import load_all_datasets

    config = _load(config_path, var)
    config.check_env()
    cases = load_all_datasets(config)
    n_cases = sum(len(c) for c in cases.values())
    warnings = 0
    n_global = len(config.global_asserts)
    for ds_cases in cases.values():
        for case in ds_cases:
            if not case.asserts and not n_global:
                click.echo(f"warning: {case.source} case {case.id!r} has no assertion: it would pass on anything", err=True)
                warnings += 1
    from .assertions import get_assertion

    graded = any(
        (t := get_assertion(a["type"])) is not None and t.model_graded
        for a in [*config.global_asserts, *(a for cs in cases.values() for c in cs for a in c.asserts)]
    )
    if graded and not config.data.get("judge"):
        click.echo("warning: model-graded assertions are used but no judge: is configured; they will be inconclusive (skipped)", err=True)
    click.echo(f"{config.file}: ok — {len(config.targets)} targets, {len(cases)} datasets, {n_cases} cases")


@main.command(name="run")
@config_option
@click.option("--matrix", is_flag=True, help="Expand the matrix: section.")
@click.option("--target", "targets", multiple=True, metavar="ID", help="Run only this target (repeatable).")
@click.option("--dataset", "datasets", multiple=True, metavar="ID", help="Run only this dataset (repeatable).")
@click.option("--case", "cases", multiple=True, metavar="GLOB", help="Run only cases whose id matches (repeatable).")
@click.option("--category", "categories", multiple=True, metavar="NAME", help="Run only this category (repeatable).")
@click.option("--repeat", type=click.IntRange(min=1), help="Samples per case and target.")
@click.option("--concurrency", type=click.IntRange(min=1), help="Cells in flight per target.")
@click.option("--no-cache", is_flag=True, help="Bypass the response cache.")
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), help="Also write JUnit XML here.")
@click.option("--html", type=click.Path(dir_okay=False, path_type=Path), help="Also write the HTML report here.")
@click.option("--json", "json_out", is_flag=True, help="Print the summary as JSON on stdout.")
@click.option("--var", multiple=True, metavar="KEY=VALUE", help="Set a template var.")
@click.option("--dry-run", is_flag=True, help="List the cells that would run, run nothing.")
@click.option("-q", "--quiet", is_flag=True, help="No progress, only the summary.")
def run_cmd(
    config_path: Path, matrix: bool, targets: tuple[str, ...], datasets: tuple[str, ...], cases: tuple[str, ...],
    categories: tuple[str, ...], repeat: int | None, concurrency: int | None, no_cache: bool, junit: Path | None,
    html: Path | None, json_out: bool, var: tuple[str, ...], dry_run: bool, quiet: bool,
) -> None:
    """Run the evals and write runs/<run_id>/."""
    from ._plan import Selection, build_plan
    from ._run import RunOptions, run

    config = _load(config_path, var)
    selection = Selection(list(targets), list(datasets), list(cases), list(categories), repeat, matrix)
    if dry_run:
        plan = build_plan(config, selection)
        _print_plan(plan)
        return
    options = RunOptions(selection, concurrency, not no_cache, junit, html, json_out, quiet)
    outcome = run(config, options)
    if json_out:
        import json

        click.echo(json.dumps(outcome.summary, indent=2, ensure_ascii=False))
    else:
        from .reports import format_summary

        click.echo(format_summary(outcome.summary, color=sys.stdout.isatty()))
    for line in outcome.messages:
        click.secho(line, err=True, fg="red", bold=True)
    click.echo(f"results: {os.path.relpath(outcome.run_dir)}/", err=True)
    sys.exit(outcome.exit_code)


def _print_plan(plan: Any) -> None:
    n_cases = len({(c.dataset, c.case.id) for c in plan.cells})
    targets = [t["id"] for t in plan.target_specs]
    click.echo(f"{len(plan.cells)} cells: {n_cases} cases × {len(targets)} targets ({', '.join(targets)})")
    limit = 500
    for cell in plan.cells[:limit]:
        rep = f" #r{cell.repeat}" if cell.repeat else ""
        click.echo(f"  {cell.target:<20} {cell.dataset}/{cell.case.id}{rep}")
    if len(plan.cells) > limit:
        click.echo(f"  … and {len(plan.cells) - limit} more")


@main.command()
def schema() -> None:
    """Print the config JSON Schema."""
    from ._schema import schema_json

    click.echo(schema_json(), nl=False)


@main.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False, path_type=Path))
def init(directory: Path) -> None:
    """Scaffold an evalconfig.yaml, a dataset and an example agent in DIRECTORY."""
    from ._scaffold import scaffold

    try:
        written = scaffold(directory)
    except FileExistsError as exc:
        _fail(f"evalx init: {exc} already exists; not overwriting")
    for p in written:
        click.echo(f"created {p}")
    click.echo(f"next: cd {directory} && evalx run")


if __name__ == "__main__":  # pragma: no cover
    main()
