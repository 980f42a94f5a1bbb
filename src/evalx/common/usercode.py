"""Import user code named in a config: ``module:attr``, ``file.py:attr``, ``path/to/file.py:Class.method``.

This is the one resolver of user code: python targets, the ``python``
assertion, the judge, ``evalx validate`` and ``plugins:`` all come here.

- A file is imported once, under one module name derived from its resolved
  path (``_evalx_user_<stem>_<sha1 of the path>``, the same in every
  process), and reused; a module named ``pkg.mod`` is imported by Python's
  own machinery and is cached in ``sys.modules`` as usual. ``checks:f`` and
  ``checks.py:g`` name the same module, whichever evalx imports first.
- ``sys.path``: the config's folder is put first on it while user code is
  imported (:func:`user_code_on_path`), and ``evalx run`` holds it there
  while cells run (so a function may import lazily); it is removed
  afterwards unless it was there already. Nothing else is added: a file in a
  subfolder imports its neighbours through the config's folder
  (``from checks import helpers``).
- ``Class.attr`` is looked up on the class: static and class methods work; a
  plain instance method is an error that says so (evalx has no instance to
  call it on).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from evalx.common.documents import display_path
from evalx.common.reading import check_regular
from evalx.errors import UnreadableFile, UserCodeError

__all__ = ["UserCodeError", "import_user_module", "is_file_ref", "provide_callable", "resolve_callable", "user_code_on_path"]


_lock = threading.RLock()
#: resolved callables by (ref, base_dir): the python assertion asks once per cell
_callables: dict[tuple[str, Path], Callable[..., Any]] = {}
#: imported modules by resolved file path, whichever way they were named
_modules_by_file: dict[Path, ModuleType] = {}
#: folders evalx put on sys.path: entry -> [holders, added by evalx]
_path_holds: dict[str, list[int]] = {}

_MISSING = object()


def is_file_ref(module_ref: str) -> bool:
    """True for ``file.py`` / ``path/to/file.py``; False for a dotted module name."""
    return module_ref.endswith(".py") or "/" in module_ref or "\\" in module_ref


@contextlib.contextmanager
def user_code_on_path(folder: Path) -> Iterator[None]:
    """``folder`` first on ``sys.path`` for the duration; removed afterwards unless it was there before.

    Nested and concurrent holders share one entry (counted), so a run that
    holds the config's folder keeps it while validation code inside it
    imports and leaves.
    """
    entry = os.fspath(folder.resolve())
    with _lock:
        hold = _path_holds.get(entry)
        if hold is None:
            added = entry not in sys.path
            if added:
                sys.path.insert(0, entry)
            hold = _path_holds[entry] = [0, int(added)]
        hold[0] += 1
    try:
        yield
    finally:
        with _lock:
            hold[0] -= 1
            if hold[0] == 0:
                del _path_holds[entry]
                if hold[1]:
                    with contextlib.suppress(ValueError):
                        sys.path.remove(entry)


def resolve_callable(ref: str, base_dir: Path) -> Callable[..., Any]:
    """The callable ``ref`` names, relative to ``base_dir`` (the config's folder); raise :class:`UserCodeError`."""
    key = (ref, base_dir)
    found = _callables.get(key)
    if found is not None:
        return found
    module_ref, sep, attr = ref.rpartition(":")
    if not sep or not module_ref or not attr:
        raise UserCodeError(f"{ref!r} must look like module:function or path/to/file.py:function")
    module = import_user_module(module_ref, base_dir)
    obj = _lookup(module, module_ref, attr, ref)
    if not callable(obj):
        raise UserCodeError(f"{ref!r} is not callable (it is {type(obj).__name__})")
    with _lock:
        _callables[key] = obj
    return obj  # type: ignore[no-any-return]


def provide_callable(ref: str, base_dir: Path, fn: Callable[..., Any]) -> None:
    """Make ``ref`` resolve to ``fn`` for configs in ``base_dir``: a callable the Python API was given as an object."""
    with _lock:
        _callables[(ref, base_dir)] = fn


def import_user_module(module_ref: str, base_dir: Path) -> ModuleType:
    """Import ``file.py`` (relative to ``base_dir``) or a dotted module name, once; raise :class:`UserCodeError`.

    What the module prints while it is imported goes to stderr: evalx's stdout is for its own (``--json``) output.
    """
    with _lock, user_code_on_path(base_dir), contextlib.redirect_stdout(sys.stderr):
        try:
            if is_file_ref(module_ref):
                file = (base_dir / module_ref).resolve()
                try:  # a FIFO or a device is refused before Python's import would read it
                    check_regular(file, shown=display_path(file))
                except UnreadableFile as exc:
                    reason = f"no file {display_path(file)}" if exc.missing else str(exc)
                    raise UserCodeError(f"cannot import {module_ref!r}: {reason}") from None
                return _import_file(file)
            module = _imported_as_file(module_ref, base_dir) or importlib.import_module(module_ref)
        except UserCodeError:
            raise
        except ImportError as exc:
            raise UserCodeError(f"cannot import {module_ref!r}: {exc}") from None
        except Exception as exc:  # the module itself raised while importing
            raise UserCodeError(f"importing {module_ref!r} raised {type(exc).__name__}: {exc}") from None
        origin = getattr(module, "__file__", None)
        if origin:
            _modules_by_file.setdefault(Path(origin).resolve(), module)
        return module


def _imported_as_file(module_ref: str, base_dir: Path) -> ModuleType | None:
    """``checks`` when ``checks.py:f`` was imported already (and no other ``checks`` was): the same module."""
    if module_ref in sys.modules or "." in module_ref:
        return None
    for candidate in (base_dir / f"{module_ref}.py", base_dir / module_ref / "__init__.py"):
        known = _modules_by_file.get(candidate.resolve())
        if known is not None:
            return known
    return None


def _module_name(file: Path) -> str:
    """A module name stable across processes: the file's stem and a digest of its resolved path."""
    stem = re.sub(r"\W", "_", file.stem)
    digest = hashlib.sha1(os.fspath(file).encode("utf-8")).hexdigest()[:10]
    return f"_evalx_user_{stem}_{digest}"


def _import_file(file: Path) -> ModuleType:
    known = _modules_by_file.get(file)
    if known is not None:
        return known
    name = _module_name(file)
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, file)
        if spec is None or spec.loader is None:
            raise UserCodeError(f"cannot import {display_path(file)}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before running it: dataclasses and pickling look it up
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    _modules_by_file[file] = module
    return module


def _lookup(module: ModuleType, module_ref: str, attr: str, ref: str) -> Any:
    """Walk ``Class.method`` from the module; an instance method is an error that says so."""
    owner: Any = module
    parts = attr.split(".")
    for n, part in enumerate(parts):
        static = inspect.getattr_static(owner, part, _MISSING)
        value = getattr(owner, part, _MISSING) if static is _MISSING else _MISSING
        if static is _MISSING and value is _MISSING:
            where = f"module {module_ref!r}" if n == 0 else f"{'.'.join(parts[:n])!r} in {module_ref!r}"
            raise UserCodeError(f"{where} has no attribute {part!r}" if n else f"module {module_ref!r} has no attribute {attr!r}")
        if inspect.isclass(owner) and inspect.isfunction(static):
            cls = owner.__name__
            raise UserCodeError(
                f"{ref!r} is an instance method of class {cls}: evalx has no {cls} instance to call it on; "
                "make it a @staticmethod or @classmethod, or a module-level function"
            )
        owner = getattr(owner, part) if value is _MISSING else value
    return owner
