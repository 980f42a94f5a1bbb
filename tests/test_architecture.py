"""The package layout is the architecture: no import cycle (the package root counted, and none inside a subpackage),
no private name imported from another module, every public exception under ``EvalxError``.

Imports inside functions count: a loop held open by a function-level import is still a loop (the two modules
cannot be understood, or moved, apart). Imports under ``if TYPE_CHECKING:`` do not: they are never executed.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import pkgutil
import re
from collections import defaultdict
from pathlib import Path

import evalx
from evalx import errors

SRC = Path(__file__).resolve().parents[1] / "src" / "evalx"

#: loops inside a subpackage and private names imported across modules that are allowed: none (a list can only shrink)
KNOWN_LOOPS: set[tuple[str, ...]] = set()
KNOWN_PRIVATE: set[str] = set()
#: exceptions outside the tree (drawn in errors.py's docstring): none
OUTSIDE_THE_TREE: set[str] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _unit(module: str) -> str:
    """The architectural unit of a module: its subpackage, the module itself at the top level, ``evalx`` for the root."""
    parts = module.split(".")
    if len(parts) >= 2 and (SRC / parts[1]).is_dir():
        return parts[1]
    return parts[1] if len(parts) > 1 else "evalx"


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the nodes under ``if TYPE_CHECKING:``."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


@functools.cache  # parsed once for the module's tests
def _imports(path: Path, module: str) -> list[tuple[str, str | None, bool]]:
    """``(module imported, name taken from it or None, executed)`` for each evalx import of ``module`` (do not change the list)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = _type_checking_only(tree)
    found: list[tuple[str, str | None, bool]] = []
    for node in ast.walk(tree):
        runs = id(node) not in typing_only
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([node.module] if node.module else []))
            if base == "evalx" or base.startswith("evalx."):
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    found.append((submodule, None, runs) if submodule in MODULES else (base, alias.name, runs))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "evalx" or alias.name.startswith("evalx."):
                    found.append((alias.name, None, runs))
    return found


def _module_graph() -> dict[str, set[str]]:
    """module -> the evalx modules it imports when it runs (``from evalx.a import b`` names module ``evalx.a.b`` when it is one)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for module, path in MODULES.items():
        for target, _name, runs in _imports(path, module):
            while target not in MODULES:
                target = target.rsplit(".", 1)[0]
            if runs and target != module:
                edges[module].add(target)
    return edges


def _loops(edges: dict[str, set[str]], nodes: set[str]) -> set[tuple[str, ...]]:
    """The import loops among ``nodes``: each set of nodes that all reach one another (a strongly connected component), sorted."""
    reach: dict[str, set[str]] = {}
    for start in nodes:
        seen, todo = set(), [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt in nodes and nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        reach[start] = seen
    return {tuple(sorted(n for n in nodes if n in reach[start] and start in reach[n])) for start in nodes if start in reach[start]}


def test_no_import_cycle_between_subpackages_counting_the_package_root() -> None:
    units: dict[str, set[str]] = defaultdict(set)
    for module, targets in _module_graph().items():
        units[_unit(module)].update(_unit(t) for t in targets if _unit(t) != _unit(module))
    loops = _loops(units, set(units) | {u for t in units.values() for u in t})
    assert not loops, "\n".join(" <-> ".join(loop) for loop in sorted(loops))


def test_no_import_loop_inside_a_subpackage() -> None:
    edges = _module_graph()
    by_package: dict[str, set[str]] = defaultdict(set)
    for module in MODULES:
        by_package[_unit(module)].add(module)
    loops: set[tuple[str, ...]] = set()
    for unit, modules in by_package.items():
        if unit != "evalx" and len(modules) > 1:
            loops |= _loops(edges, modules)
    assert loops - KNOWN_LOOPS == set(), "\n".join(" <-> ".join(loop) for loop in sorted(loops - KNOWN_LOOPS))
    assert KNOWN_LOOPS - loops == set(), f"fixed, take them off KNOWN_LOOPS: {sorted(KNOWN_LOOPS - loops)}"


def test_no_private_name_imported_from_another_module() -> None:
    private = set()
    for module, path in MODULES.items():
        for target, name, _runs in _imports(path, module):
            owner = target
            while owner not in MODULES:
                owner = owner.rsplit(".", 1)[0]
            if owner == module:
                continue
            if name is not None and name.startswith("_") and not name.startswith("__"):
                private.add(f"{module} imports {name} from {target}")
            if any(part.startswith("_") and not part.startswith("__") for part in target.split(".")[1:]):
                private.add(f"{module} imports private module {target}")
    assert private - KNOWN_PRIVATE == set(), "\n".join(sorted(private - KNOWN_PRIVATE))
    assert KNOWN_PRIVATE - private == set(), f"fixed, take them off KNOWN_PRIVATE: {sorted(KNOWN_PRIVATE - private)}"


def test_the_version_is_written_in_one_place() -> None:
    pyproject = (SRC.parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    assert 'dynamic = ["version"]' in pyproject and 'path = "src/evalx/version.py"' in pyproject
    assert not re.search(r"(?m)^version\s*=", pyproject)
    written = [p for p in SRC.rglob("*.py") if re.search(r"(?m)^__version__\s*=", p.read_text(encoding="utf-8"))]
    assert written == [SRC / "version.py"]


def _exception_classes() -> dict[str, type[BaseException]]:
    out: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(evalx.__path__, "evalx."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                out[f"{info.name}.{name}"] = obj
    return out


def test_every_public_exception_is_under_evalx_error_and_drawn_in_the_tree() -> None:
    public = {name: cls for name, cls in _exception_classes().items() if not name.rsplit(".", 1)[1].startswith("_")}
    outside = {name for name, cls in public.items() if not issubclass(cls, errors.EvalxError)}
    assert outside == OUTSIDE_THE_TREE
    tree = errors.__doc__ or ""
    undrawn = [name for name in public if not re.search(rf"\b{re.escape(name.rsplit('.', 1)[1])}\b", tree)]
    assert not undrawn, undrawn


def test_exceptions_that_moved_are_importable_where_they_were() -> None:
    from evalx.assertions.text_metrics import MissingExtra
    from evalx.assertions.user_schema import RefusedRef, UnsupportedSchema
    from evalx.common.usercode import UserCodeError
    from evalx.config.scaffold import UnknownTemplate
    from evalx.datasets.capture import CaptureError
    from evalx.datasets.context import ContextFileError
    from evalx.execution.merge import MergeError
    from evalx.execution.rerun import NothingToRerun, RerunError
    from evalx.execution.resume import ResumeError
    from evalx.execution.shards import ShardError
    from evalx.pytest_plugin import EvalxFailed
    from evalx.results.history import RunNotFound
    from evalx.targets.definitions import DefinitionError, UnknownProvider
    from evalx.targets.engine import EngineRateLimited
    from evalx.targets.provider_stream import StreamErrorEvent

    moved = [MissingExtra, RefusedRef, UnsupportedSchema, UnknownTemplate, CaptureError, ContextFileError, MergeError]
    moved += [NothingToRerun, RerunError, ResumeError, ShardError, EvalxFailed, RunNotFound, DefinitionError, UnknownProvider]
    moved += [EngineRateLimited, StreamErrorEvent, UserCodeError]
    assert all(getattr(errors, cls.__name__) is cls for cls in moved)
    # a builtin base kept: an `except` written before the tree still catches them
    assert issubclass(UserCodeError, ImportError) and issubclass(DefinitionError, ValueError) and issubclass(MissingExtra, RuntimeError)
    assert issubclass(UnknownTemplate, ValueError) and issubclass(RefusedRef, ValueError) and issubclass(UnsupportedSchema, ValueError)
    assert issubclass(ContextFileError, errors.DatasetError) and issubclass(UnknownProvider, errors.ConfigError)


def test_the_package_root_holds_the_entry_points_and_a_few_shared_leaves() -> None:
    """Everything else belongs to the room that uses it, or to evalx/common/ (docs/architecture.md)."""
    root = {path.stem for path in SRC.glob("*.py")}
    entry_points = {"__init__", "__main__", "api", "cli", "pytest_plugin"}
    shared_leaves = {"errors", "models", "logs", "version"}
    assert root == entry_points | shared_leaves
    common = {path.stem for path in (SRC / "common").glob("*.py")} - {"__init__"}
    for name in common:  # the shared room depends on nothing but itself and the shared leaves
        for target, _, _ in _imports(SRC / "common" / f"{name}.py", f"evalx.common.{name}"):
            if target.startswith("evalx."):
                assert target.split(".")[1] in {"common", *shared_leaves}, f"evalx.common.{name} imports {target}"


def test_a_python_target_run_loads_no_http_client(tmp_path: Path) -> None:
    """Start-up (issue 29): a run of a Python target imports only what its config uses; aiohttp (~150 ms) is a remote
    target's. A module-level import of the HTTP layer in a module every run loads shows up here."""
    import subprocess
    import sys

    (tmp_path / "bot.py").write_text("def answer(q):\n    return 'ok ' + q\n", encoding="utf-8")
    (tmp_path / "evalconfig.yaml").write_text(
        "version: 1\nname: startup\ntargets:\n  - {id: bot, type: python, callable: bot.py:answer}\n"
        "datasets:\n  - id: d\n    cases:\n      - {id: one, input: one, assert: [{type: contains, value: ok}]}\n",
        encoding="utf-8",
    )
    probe = (
        "import sys, runpy\n"
        "sys.argv = ['evalx', 'run', '-q']\n"
        "try:\n    runpy.run_module('evalx', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('aiohttp', 'ray')), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.stderr.strip().splitlines()[-1] == "[]", done.stderr
