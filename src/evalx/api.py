"""The Python API: load a config (a file or a dict), run it as ``evalx run`` does, read the results as objects.

Everything goes through the command line's own loader and runner
(:func:`evalx.config.loader.load_config`, :func:`evalx.execution.runner.run`),
so a config behaves the same from Python, from pytest and from the shell.
Heavy imports happen inside the functions: ``import evalx`` stays fast.
"""

from __future__ import annotations

import contextvars
import dataclasses
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalx.common.json_types import JSON, JSONObject, as_object
from evalx.errors import ConfigError, Issue

if TYPE_CHECKING:
    from evalx.config.loader import Config
    from evalx.execution.request import RunRequest

__all__ = ["AssertionResult", "CellResult", "RunResult", "arun", "load_config", "run"]

#: how an in-memory config is named in messages (it has no file and no line numbers)
MAPPING_FILE = "<config>"
_UNNAMEABLE = re.compile(r"[^A-Za-z0-9_.]")


@dataclass(frozen=True)
class AssertionResult:
    """What one assertion concluded about a cell."""

    type: str
    passed: bool | None  # None: inconclusive (e.g. no judge)
    score: float | None
    reason: str
    name: str | None = None


@dataclass(frozen=True)
class CellResult:
    """One cell of a run (a case on a target, one repeat), read from ``results.jsonl``.

    ``record`` is the whole stored line (docs/results-format.md) for anything not named here.
    """

    run_id: str
    target: str
    dataset: str
    case_id: str
    repeat: int
    status: str  # pass | fail | error | skipped
    score: float | None
    text: str | None  # the target's final answer
    error: str | None
    reason: str  # why it failed or errored, in one line ("" when it passed)
    assertions: tuple[AssertionResult, ...]
    latency_ms: float | None
    cost_usd: float | None
    cached: bool
    category: str | None
    tags: tuple[str, ...]
    input: Any
    expected: Any
    record: Mapping[str, Any] = dataclasses.field(repr=False, compare=False)

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> CellResult:
        from evalx.results.model import failure_reason

        output = record.get("output") if isinstance(record.get("output"), dict) else {}
        status = str(record.get("status"))
        return cls(
            run_id=str(record.get("run_id") or ""),
            target=str(record.get("target")),
            dataset=str(record.get("dataset")),
            case_id=str(record.get("case_id")),
            repeat=int(record.get("repeat") or 0),
            status=status,
            score=record.get("score"),
            text=output.get("text") if isinstance(output, dict) else None,
            error=record.get("error"),
            reason=failure_reason(record, status) if status in ("fail", "error") else "",  # type: ignore[arg-type]
            assertions=tuple(
                AssertionResult(str(a.get("type")), a.get("passed"), a.get("score"), str(a.get("reason") or ""), a.get("name"))
                for a in record.get("assertions") or []
                if isinstance(a, dict)
            ),
            latency_ms=record.get("latency_ms"),
            cost_usd=record.get("cost_usd"),
            cached=bool(record.get("cached")),
            category=record.get("category"),
            tags=tuple(str(t) for t in record.get("tags") or ()),
            input=record.get("input"),
            expected=record.get("expected"),
            record=record,
        )


#: the columns of :meth:`RunResult.to_pandas`, in order
COLUMNS = (
    "run_id", "target", "dataset", "case_id", "repeat", "status", "score", "reason", "text", "error",
    "latency_ms", "cost_usd", "cached", "category", "tags",
)  # fmt: skip


@dataclass(frozen=True)
class RunResult:
    """A finished run: its folder, its summary (``summary.json``), its exit status as ``evalx run`` would exit."""

    run_id: str
    run_dir: Path
    summary: Mapping[str, Any]
    exit_code: int  # 0 passed (gates held) · 1 a cell failed or errored, or a gate breached · 3 incomplete
    messages: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    def results(self) -> Iterator[CellResult]:
        """Each cell, in matrix order, read from the run's ``results.jsonl`` as it is iterated."""
        from evalx.results.store import RESULTS, read_results

        for record in read_results(self.run_dir / RESULTS):
            yield CellResult.from_record(record)

    def _repr_html_(self) -> str:
        """How a notebook shows the run: its headline and exit reason, a row per target, and a link to its report.html."""
        from evalx.common.documents import relative_path
        from evalx.reports.notebook import run_html

        report = self.run_dir / "report.html"
        return run_html(self.summary, self.exit_code, relative_path(report) if report.is_file() else None)

    def to_pandas(self) -> Any:
        """The cells as a ``pandas.DataFrame``, a row a cell (:data:`COLUMNS`); needs pandas (``pip install 'evalx-runner[pandas]'``)."""
        try:
            import pandas  # type: ignore[import-untyped,unused-ignore]
        except ImportError:
            raise ImportError("to_pandas() needs pandas: pip install pandas (or evalx-runner[pandas])") from None
        rows = [[getattr(cell, name) for name in COLUMNS] for cell in self.results()]
        return pandas.DataFrame(rows, columns=list(COLUMNS))


# ------------------------------------------------------------------------------------------ loading


def load_config(
    source: str | os.PathLike[str] | Mapping[str, Any] | Config,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    vars: Mapping[str, Any] | None = None,
    env_files: Sequence[str | os.PathLike[str]] = (),
    env_override: bool = False,
) -> Config:
    """A validated config, or :class:`evalx.ConfigError` (``.errors``; ``.file``, ``.line``, ``.key_path`` of the first).

    ``source``: a config file's path, or a mapping (a dict as the YAML would be). In a mapping, paths are relative
    to ``base_dir`` (default: the current directory), and a target's (or a ``python`` assertion's) ``callable``
    may be a Python function itself: it runs as given, and the stored ``config.yaml`` names it ``module:qualname``.
    ``vars`` set template vars, as ``--var`` does; ``env_files`` load ``.env`` files after the config's ``env_file:``,
    as ``--env-file`` does (``env_override``: as ``--env-override``).
    """
    from evalx.config.loader import Config, env_from_files, mapping_document
    from evalx.config.loader import load_config as load_file

    if isinstance(source, Config):
        return _with(source, vars=vars) if vars else source
    overrides = {str(k): v for k, v in (vars or {}).items()}
    if isinstance(source, Mapping):
        folder = Path(base_dir if base_dir is not None else os.getcwd()).resolve()
        data, given = _plain(source, folder)
        loaded_env, _ = env_from_files(data, {}, MAPPING_FILE, folder, os.environ, env_files, env_override)  # before ${VAR}
        document = mapping_document(data, MAPPING_FILE)
        config = load_file(folder / MAPPING_FILE, var_overrides=overrides, document=document, env_file_values=loaded_env)
        config.in_memory = given  # type: ignore[attr-defined]
        return config
    path = Path(source)
    if base_dir is not None and not path.is_absolute():
        path = Path(base_dir) / path
    return load_file(path, var_overrides=overrides, env_files=env_files, env_override=env_override)


def _plain(source: Mapping[str, object], folder: Path) -> tuple[JSONObject, dict[str, Callable[..., Any]]]:
    """``source`` as plain YAML values: each callable object under a ``callable:`` key becomes ``module:qualname``
    (made to resolve to that very object); anything else YAML cannot hold is a :class:`ConfigError` naming its key path."""
    from evalx.common.documents import format_path
    from evalx.common.usercode import name_given

    given: dict[str, Callable[..., Any]] = {}

    def name_of(fn: Callable[..., Any]) -> str:
        module = getattr(fn, "__module__", None) or "__main__"
        qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
        # what a name cannot hold (<locals>, <lambda>) becomes _: the config schema's module:attr
        ref = f"{module}:{_UNNAMEABLE.sub('_', qualname).lstrip('._0123456789') or 'fn'}"
        return name_given(ref, folder, fn)  # two lambdas, here or in another config of this process: _lambda_, _lambda__2

    def plain(value: object, path: tuple[str | int, ...]) -> JSON:
        if isinstance(value, Mapping):
            return {str(k): plain(v, (*path, str(k))) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v, (*path, i)) for i, v in enumerate(value)]
        if isinstance(value, os.PathLike):
            return os.fsdecode(value)
        if value is None or isinstance(value, (str, int, float, bool)):
            return value
        if callable(value) and path and path[-1] == "callable":
            ref = name_of(value)
            given[ref] = value  # held as long as the config: its names resolve to these objects
            return ref
        raise ConfigError(Issue(MAPPING_FILE, None, format_path(path), f"a {type(value).__name__} cannot be written in a config"))

    return {str(k): plain(v, (str(k),)) for k, v in source.items()}, given


def _with(config: Config, *, vars: Mapping[str, object] | None = None, output_dir: str | os.PathLike[str] | None = None) -> Config:
    """A copy of ``config`` with template vars set (as ``--var``) or another output folder; ``config`` is unchanged.

    The copy is of the document the config was read from (what it was validated as, what ``config.yaml`` records).
    """
    from evalx.common import written

    data: dict[str, object] = dict(written.document(config))
    if vars:
        data["vars"] = {**as_object(data.get("vars")), **{str(k): v for k, v in vars.items()}}
    if output_dir is not None:
        data["output"] = {**as_object(data.get("output")), "dir": os.fspath(Path(output_dir).resolve())}
    copy = dataclasses.replace(config, loaded=dataclasses.replace(config.loaded, data=data))
    if hasattr(config, "in_memory"):
        copy.in_memory = config.in_memory  # type: ignore[attr-defined]
    return copy


# ------------------------------------------------------------------------------------------ running


def run(
    config: str | os.PathLike[str] | Mapping[str, Any] | Config,
    *,
    targets: Iterable[str] | None = None,
    datasets: Iterable[str] | None = None,
    cases: Iterable[str] | None = None,
    categories: Iterable[str] | None = None,
    tags: Iterable[str] | None = None,
    repeat: int | None = None,
    concurrency: int | str | None = None,
    matrix: bool = False,
    no_cache: bool = False,
    baseline: str | None = None,
    vars: Mapping[str, Any] | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    quiet: bool = True,
    shard: str | tuple[int, int] | None = None,
    resume: str | None = None,
    rerun: str | None = None,
    rerun_from: str | None = None,
    executor: str | None = None,
    ray_address: str | None = None,
    junit: str | os.PathLike[str] | None = None,
    junit_flavor: str = "standard",
    junit_passes: str | None = None,
    html: str | os.PathLike[str] | None = None,
    html_max_cells: int | None = None,
    markdown: str | os.PathLike[str] | None = None,
    max_cells: int | None = None,
    max_variants: int | None = None,
    max_failures: int | None = None,
    batch: bool = False,
    otlp_endpoint: str | None = None,
) -> RunResult:
    """Run ``config`` as ``evalx run`` would (the same options, by their Python names) and return its :class:`RunResult`.

    Every ``evalx run`` option is a keyword argument named after it: ``shard="2/3"``, ``resume="RUN_ID"``,
    ``rerun="failed", rerun_from="latest"``, ``executor="ray"``, ``junit="out/junit.xml"``... Both build the same
    :class:`~evalx.execution.request.RunRequest` and run it through the same entry point.
    It writes ``runs/<run_id>/`` as the command line does (``output_dir`` overrides ``output.dir``). A config
    error raises :class:`evalx.ConfigError`, options that do not go together :class:`evalx.EvalxError`;
    failing cells do not raise (see ``exit_code``). Inside a running event loop (Jupyter) the run goes on a
    worker thread and this call waits for it; :func:`arun` awaits it.
    """
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    call = _prepared(config, locals())
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return call()
    context = contextvars.copy_context()
    with ThreadPoolExecutor(1, thread_name_prefix="evalx-run") as pool:
        return pool.submit(context.run, call).result()


async def arun(
    config: str | os.PathLike[str] | Mapping[str, Any] | Config,
    *,
    targets: Iterable[str] | None = None,
    datasets: Iterable[str] | None = None,
    cases: Iterable[str] | None = None,
    categories: Iterable[str] | None = None,
    tags: Iterable[str] | None = None,
    repeat: int | None = None,
    concurrency: int | str | None = None,
    matrix: bool = False,
    no_cache: bool = False,
    baseline: str | None = None,
    vars: Mapping[str, Any] | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    quiet: bool = True,
    shard: str | tuple[int, int] | None = None,
    resume: str | None = None,
    rerun: str | None = None,
    rerun_from: str | None = None,
    executor: str | None = None,
    ray_address: str | None = None,
    junit: str | os.PathLike[str] | None = None,
    junit_flavor: str = "standard",
    junit_passes: str | None = None,
    html: str | os.PathLike[str] | None = None,
    html_max_cells: int | None = None,
    markdown: str | os.PathLike[str] | None = None,
    max_cells: int | None = None,
    max_variants: int | None = None,
    max_failures: int | None = None,
    batch: bool = False,
    otlp_endpoint: str | None = None,
) -> RunResult:
    """:func:`run`, awaitable: the run goes on a worker thread (it has its own event loop), this coroutine awaits it."""
    import asyncio

    call = _prepared(config, locals())
    return await asyncio.to_thread(call)


def _prepared(config: Any, given: dict[str, Any]) -> Callable[[], RunResult]:
    """Load the config and make the run request here (errors raise in the caller's thread); return the run to make."""
    loaded = _with(load_config(config, vars=given["vars"]), output_dir=given["output_dir"])
    request = _request(given)
    _check_in_memory(loaded, request.executor)
    return lambda: _execute(loaded, request)


def _request(given: dict[str, Any]) -> RunRequest:
    """The :class:`RunRequest` the keyword arguments of :func:`run` make, as ``evalx run``'s options make it."""
    from evalx.execution.plan import Selection
    from evalx.execution.request import RunRequest
    from evalx.execution.shards import parse_shard
    from evalx.reports.render import Outputs, ReportOptions

    max_failures = given["max_failures"]
    if max_failures is not None and (isinstance(max_failures, bool) or not isinstance(max_failures, int) or max_failures < 1):
        raise TypeError("evalx.run(max_failures=...): give a whole number of cells, 1 or more")
    shard = given["shard"]
    if isinstance(shard, str):
        shard = parse_shard(shard)
    selection = Selection(
        _strings(given["targets"], "targets"),
        _strings(given["datasets"], "datasets"),
        _strings(given["cases"], "cases"),
        _strings(given["categories"], "categories"),
        given["repeat"],
        bool(given["matrix"]),
        max_cells=given["max_cells"],
        max_variants=given["max_variants"],
        shard=shard,
        tags=_strings(given["tags"], "tags"),
    )
    return RunRequest(
        selection=selection,
        concurrency=given["concurrency"],
        use_cache=not given["no_cache"],
        baseline=given["baseline"],
        resume=given["resume"],
        rerun=given["rerun"],
        rerun_from=given["rerun_from"],
        executor=given["executor"],
        ray_address=given["ray_address"],
        reports=ReportOptions(html_max_cells=given["html_max_cells"], junit_passes=given["junit_passes"] or "all"),
        outputs=Outputs(
            junit=_path(given["junit"]), junit_flavor=given["junit_flavor"], html=_path(given["html"]), markdown=_path(given["markdown"])
        ),
        quiet=bool(given["quiet"]),
        max_failures=max_failures,
        batch=bool(given["batch"]),
        otlp_endpoint=given["otlp_endpoint"],
    )


def _path(value: str | os.PathLike[str] | None) -> Path | None:
    return Path(value) if value is not None else None


def _strings(value: Iterable[str] | None, name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):  # run(tags="quick") means one tag, not five letters
        return [value]
    items = list(value)
    if not all(isinstance(v, str) for v in items):
        raise TypeError(f"evalx.run({name}=...): give strings")
    return items


def _check_in_memory(config: Config, executor: str | None = None) -> None:
    """Callables given as objects run in this process only: the Ray executor needs importable ones, and says so."""
    given: dict[str, Callable[..., Any]] = getattr(config, "in_memory", {})
    kind = executor or config.typed.executor.kind
    if not given or kind != "ray":
        return
    ref = next(iter(given))
    raise ConfigError(
        Issue(
            MAPPING_FILE,
            None,
            "executor.kind",
            f"ray workers cannot receive {ref}, a callable given in memory; name an importable module:function",
        )
    )


def _execute(config: Config, request: RunRequest) -> RunResult:
    from evalx.common.templates import folder_scope
    from evalx.execution.runner import run as run_config
    from evalx.logs import printing

    # warnings and notes on stderr as the CLI prints them, unless the program configured logging (then to its handlers)
    with folder_scope(config.base_dir), printing(unless_configured=True):  # this config's includes, whichever config was loaded last
        outcome = run_config(config, request)
    return RunResult(outcome.run_id, outcome.run_dir, outcome.summary, outcome.exit_code, tuple(outcome.messages))
