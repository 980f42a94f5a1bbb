"""The pytest plugin: ``pytest --evalx evalconfig.yaml`` makes each (target, case) of a config a test item.

Installed with evalx (entry point ``pytest11``), it does nothing unless
``--evalx CONFIG`` (repeatable) or ``evalx_configs`` in the pytest ini names
a config. Items are marked ``eval``, ``evalx_category(NAME)`` and
``evalx_tag(NAME)`` (registered marks), so ``-m``, ``-k``, ``-x``, ``--lf``
and ``--co`` work as usual. The cells of the items pytest will run (after
``-k``/``-m``/``--lf`` deselection) run once per session and config,
concurrently, through :func:`evalx.run`, when the first of them runs; each
item then reports its case's verdict (repeats aggregated by the config's
``repeat_pass_rule``), the assertion reasons as its failure text.

Under pytest-xdist (``-n N``) every worker collects the same items (xdist
checks it) and makes the same selection, so the cells still run once per
session: the first worker that needs a config's run makes it, holding a
lock file in a folder named for this session, and writes where the run
went; the others wait on the lock and read that run's results. The session's
name is made by the controller for each session and handed to its workers
(never xdist's ``testrunuid``, which ``--testrunuid`` sets to the same value
in every session); the controller removes the folder at the end.
"""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalx.errors import EvalxFailed  # the package is imported with the plugin anyway (evalx/__init__.py)

__all__ = ["EvalxCaseItem", "EvalxFailed"]

_CONFIGS = pytest.StashKey[dict[Path, "_ConfigRun"]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("evalx", "evalx: LLM evals as test items")
    group.addoption(
        "--evalx",
        action="append",
        default=[],
        metavar="CONFIG",
        dest="evalx_configs",
        help="Make each (target, case) of this evalx config a test item (repeatable).",
    )
    parser.addini("evalx_configs", "evalx configs whose (target, case) pairs are test items (as --evalx).", type="paths", default=[])


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "eval: an evalx eval case (one target, one case)")
    config.addinivalue_line("markers", "evalx_category(name): the evalx case's category")
    config.addinivalue_line("markers", "evalx_tag(name): one of the evalx case's tags")
    config.stash[_CONFIGS] = {}


def _config_paths(config: pytest.Config) -> list[Path]:
    given = [Path(p) for p in config.getoption("evalx_configs") or []]
    given = [p if p.is_absolute() else Path(config.invocation_params.dir) / p for p in given]
    paths = [*given, *(Path(p) for p in config.getini("evalx_configs") or [])]
    return list(dict.fromkeys(p.resolve() for p in paths))


class _ConfigFile(pytest.File):
    """An evalx config, the parent of its items (node ids read ``evalconfig.yaml::CASE[TARGET]``)."""

    def collect(self) -> Iterator[pytest.Item]:  # the items are made by pytest_collection_modifyitems
        return iter(())


class EvalxCaseItem(pytest.Item):
    """One (target, case) of a config: its repeats' verdict, from the session's one run of the config."""

    def __init__(self, *, run: _ConfigRun, target: str, dataset: str, case_id: str, source: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.evalx_run = run
        self.target, self.dataset, self.case_id, self.source = target, dataset, case_id, source

    def runtest(self) -> None:
        verdict, lines = self.evalx_run.verdict(self.session, self.target, self.dataset, self.case_id)
        if verdict == "pass":
            return
        if verdict == "skipped":
            pytest.skip("; ".join(lines) or "inconclusive")
        raise EvalxFailed("\n".join([f"{verdict}: {self.target} on {self.dataset}/{self.case_id}", *lines]))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, EvalxFailed):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style=style))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        file, _, line = self.source.rpartition(":")
        if file and line.isdigit():
            return Path(file), int(line) - 1, f"{self.dataset}/{self.case_id} [{self.target}]"
        return self.path, None, f"{self.dataset}/{self.case_id} [{self.target}]"


class _ConfigRun:
    """One config's items and, once the first of them runs, the session's one run of the items pytest kept."""

    def __init__(self, path: Path, config: Any) -> None:
        self.path, self.config = path, config
        self.outcome: dict[tuple[str, str, str], tuple[str, list[str]]] | None = None
        self.problem: str | None = None
        self.note: str | None = None  # where the run went, for the terminal summary

    def verdict(self, session: pytest.Session, target: str, dataset: str, case_id: str) -> tuple[str, list[str]]:
        if self.outcome is None and self.problem is None:
            items = [i for i in session.items if isinstance(i, EvalxCaseItem) and i.evalx_run is self]
            shared = _shared_record(session.config, self.path)
            if shared is None:
                self._run(items)
            else:
                self._run_once_per_session(items, shared)
        if self.problem is not None:
            return "error", [self.problem]
        assert self.outcome is not None
        return self.outcome.get((target, dataset, case_id), ("error", ["evalx did not run this case"]))

    def _run_once_per_session(self, items: list[EvalxCaseItem], record: Path) -> None:
        """Under xdist: the run is made by the first worker that gets here; the others read it (or its problem)."""
        import evalx
        from evalx.common.reading import RUN_RECORD, SUMMARY, read_json
        from evalx.results.store import write_json

        with _locked(record.with_name(record.name + ".lock")):
            made: Any = None
            if record.is_file():
                made = read_json(record, RUN_RECORD)
            if made is None:
                result = self._run(items)
                write_json(record, {"run_dir": str(result.run_dir) if result else None, "problem": self.problem})
                return
        if made.get("problem"):
            self.problem = str(made["problem"])
            return
        run_dir = Path(made["run_dir"])
        summary: Any = read_json(run_dir / "summary.json", SUMMARY)
        self._read(evalx.RunResult(run_dir.name, run_dir, summary, int(summary.get("exit_code") or 0)))
        self.note = None  # the worker that made the run says where it went

    def _run(self, items: list[EvalxCaseItem]) -> Any:
        import evalx

        chosen = {(i.target, i.dataset, i.case_id) for i in items}
        try:
            result = evalx.run(
                self.config,
                targets=sorted({t for t, _, _ in chosen}),
                datasets=sorted({d for _, d, _ in chosen}),
                cases=sorted({glob.escape(c) for _, _, c in chosen}),  # exact ids, not globs
            )
        except evalx.EvalxError as exc:
            self.problem = f"evalx could not run {self.path.name}: {exc}"
            return None
        self._read(result)
        return result

    def _read(self, result: Any) -> None:
        """Each (target, case)'s verdict and reasons, from the run's cells."""
        from evalx.results.repeats import Tally, case_status

        rule = str(result.summary.get("repeat_pass_rule") or "majority")
        tallies: dict[tuple[str, str, str], Tally] = {}
        reasons: dict[tuple[str, str, str], list[str]] = {}
        for cell in result.results():
            key = (cell.target, cell.dataset, cell.case_id)
            tallies.setdefault(key, Tally()).add(cell.status)
            if cell.status != "pass":
                lines = reasons.setdefault(key, [])
                where = f"repeat {cell.repeat}: " if cell.repeat or tallies[key].runs > 1 else ""
                if cell.status == "error":
                    lines.append(f"{where}error: {cell.reason}")
                    continue
                for a in cell.assertions:
                    if a.passed is False or (cell.status == "skipped" and a.passed is None):
                        lines.append(f"{where}{a.name or a.type}: {a.reason}" if a.reason else f"{where}{a.name or a.type} did not hold")
        self.outcome = {key: (case_status(tally, rule), reasons.get(key, [])) for key, tally in tallies.items()}
        self.note = f"evalx: {self.path.name}: {result.summary['totals']['cells']} cells, results in {result.run_dir}"


#: the key, in what xdist's controller hands each worker (``workerinput``), of the session's own name
_SESSION_KEY = "evalx_session"
_SESSION = pytest.StashKey[str]()


def _session_folder(session: str) -> Path:
    """Where one pytest session's workers record and lock their runs: a folder no other session names."""
    import tempfile

    return Path(tempfile.gettempdir()) / f"evalx-xdist-{session}"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist's controller, for each worker it starts (a restarted one too): the session's name, made once here.

    Not xdist's ``testrunuid``: ``--testrunuid X`` gives every session the same one, and a later session would read
    an earlier session's results instead of running its cells."""
    config = node.config
    if not _config_paths(config):
        return
    if _SESSION not in config.stash:
        import secrets

        config.stash[_SESSION] = f"{os.getpid()}-{secrets.token_hex(8)}"
    node.workerinput[_SESSION_KEY] = config.stash[_SESSION]


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller, at the end of its session: its workers' records and locks go."""
    session = config.stash.get(_SESSION, None)
    if session is not None:
        import shutil

        shutil.rmtree(_session_folder(session), ignore_errors=True)


def _shared_record(config: pytest.Config, path: Path) -> Path | None:
    """Under pytest-xdist, the file where this session's run of the config at ``path`` is recorded; None otherwise."""
    workerinput = getattr(config, "workerinput", None)
    if not isinstance(workerinput, dict):
        return None
    session = workerinput.get(_SESSION_KEY)
    if not isinstance(session, str) or not session:  # a controller without this plugin's hook: no name to share a run by
        raise pytest.UsageError(
            "--evalx with pytest -n: this worker's controller gave it no evalx session; load evalx's plugin in the controller"
        )
    import hashlib

    folder = _session_folder(session)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{hashlib.sha256(str(path).encode()).hexdigest()[:16]}.json"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (created) between the workers of one session."""
    import fcntl

    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _refuse_without_locks(config: pytest.Config) -> None:
    """xdist where file locks do not exist (Windows): one line, instead of each worker running every cell."""
    try:
        import fcntl  # noqa: F401
    except ImportError:
        if getattr(config, "workerinput", None) is not None or (config.getoption("numprocesses", None) or 0):
            raise pytest.UsageError(
                "--evalx with pytest -n: the workers share one run through a file lock, which this platform lacks; run without -n"
            ) from None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Add each config's (target, case) items before -k, -m and --lf select among them."""
    paths = _config_paths(config)
    if not paths:
        return
    _refuse_without_locks(config)
    for path in paths:
        parent, made = _items(session, config, path)
        collected: list[pytest.Item | pytest.Collector] = list(made)
        config.hook.pytest_collectreport(report=pytest.CollectReport(parent.nodeid, "passed", None, collected))  # counted (--co)
        items.extend(made)


def _items(session: pytest.Session, config: pytest.Config, path: Path) -> tuple[pytest.File, list[pytest.Item]]:
    import evalx
    from evalx.execution.plan import Selection, build_plan

    try:
        loaded = evalx.load_config(path)
        plan = build_plan(loaded, Selection())
    except evalx.EvalxError as exc:
        raise pytest.UsageError(f"--evalx {path}: {exc}") from None
    parent = _ConfigFile.from_parent(session, path=path)
    run = _ConfigRun(path, loaded)
    config.stash[_CONFIGS][path] = run
    out: list[pytest.Item] = []
    for dataset, table, pos, targets, _ in plan.cells.cases():
        case = table.case(pos)
        for target in targets:
            name = f"{dataset}/{case.id}[{target}]"
            item = EvalxCaseItem.from_parent(
                parent,
                name=name,
                nodeid=f"{parent.nodeid}::{name}",  # [target] read as pytest reads a parametrized id (--lf matches it)
                run=run,
                target=target,
                dataset=dataset,
                case_id=case.id,
                source=str(case.source or ""),
            )
            item.add_marker(pytest.mark.eval)
            if case.category:  # -m "evalx_category(name='billing')"
                item.add_marker(pytest.mark.evalx_category(name=case.category))
            for tag in case.tags or ():  # -m "evalx_tag(name='quick')"; never a tag as a mark of its own
                item.add_marker(pytest.mark.evalx_tag(name=str(tag)))
            out.append(item)
    return parent, out


_NOTES = pytest.StashKey[list[str]]()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Under xdist, a worker hands the controller where the run it made went (the controller prints it)."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if isinstance(workeroutput, dict):
        workeroutput["evalx_notes"] = [run.note for run in session.config.stash.get(_CONFIGS, {}).values() if run.note]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist's controller: the notes of the worker that made a run."""
    notes = (getattr(node, "workeroutput", None) or {}).get("evalx_notes") or []
    node.config.stash.setdefault(_NOTES, []).extend(str(n) for n in notes)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    for run in config.stash.get(_CONFIGS, {}).values():
        if run.note:
            terminalreporter.write_line(run.note)
    for note in config.stash.get(_NOTES, []):
        terminalreporter.write_line(note)
