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
- A function given as an object (the Python API) is named for the config
  (:func:`name_given`) and the name resolves to that very object in this
  process: a name is never rebound to another live object (two lambdas of two
  concurrent runs get two names), and a name made for an object that no
  longer exists, or a lambda's or nested function's name with no object
  behind it, is refused, never looked up as if it were importable.
- :func:`code_digest` identifies a callable by its code (its code objects,
  defaults and simple captured values, and its source file's content): what
  a Python target's cache key holds, so changed code never replays an old answer.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
import sysconfig
import threading
import types
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from evalx.common.documents import display_path
from evalx.common.reading import SOURCE, check_regular, read_bytes
from evalx.errors import UnreadableFile, UserCodeError, described

__all__ = [
    "UserCodeError",
    "code_digest",
    "import_user_module",
    "is_file_ref",
    "name_given",
    "resolve_callable",
    "user_code_on_path",
]


_lock = threading.RLock()
#: resolved callables by (ref, base_dir): the python assertion asks once per cell
_callables: dict[tuple[str, Path], Callable[..., Any]] = {}
#: imported modules by resolved file path, whichever way they were named
_modules_by_file: dict[Path, ModuleType] = {}
#: callables given as objects, by (name, base_dir): a weak reference where the object takes one (a closure may hold a model)
_given: dict[tuple[str, Path], Callable[[], Any]] = {}
#: what a lambda's or a nested function's name is made of (``<lambda>``, ``<locals>`` with ``<>`` replaced by ``_``)
_MADE_UP = re.compile(r"(^|\.)_(lambda|locals|genexpr|listcomp|dictcomp|setcomp)_(\.|$|_\d+$)")
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
    held = _given.get(key)
    if held is not None:
        obj = held()
        if obj is not None:
            return obj  # type: ignore[no-any-return]
        raise UserCodeError(f"{ref!r} named a function given as an object, which no longer exists in this process: give the function again")
    found = _callables.get(key)
    if found is not None:
        return found
    module_ref, sep, attr = ref.rpartition(":")
    if not sep or not module_ref or not attr:
        raise UserCodeError(f"{ref!r} must look like module:function or path/to/file.py:function")
    if _MADE_UP.search(attr):
        raise UserCodeError(
            f"{ref!r} is the name evalx gave a lambda or a nested function, and no such function is at hand in this "
            "process: give the function itself (the Python API), or name an importable module:function"
        )
    module = import_user_module(module_ref, base_dir)
    obj = _lookup(module, module_ref, attr, ref)
    if not callable(obj):
        raise UserCodeError(f"{ref!r} is not callable (it is {type(obj).__name__})")
    with _lock:
        _callables[key] = obj
    return obj  # type: ignore[no-any-return]


def name_given(ref: str, base_dir: Path, fn: Callable[..., Any]) -> str:
    """The name ``fn``, a callable the Python API was given as an object, goes by in configs of ``base_dir``.

    ``ref`` (``module:qualname``) when it is free or ``fn``'s already, else ``ref_2``, ``ref_3``...: a name is never
    rebound to another object while that one lives, so two runs in one process never call each other's function.
    The name resolves to ``fn`` itself (:func:`resolve_callable`), never to whatever an import would find under it.
    """
    with _lock:
        n = 1
        while True:
            name = ref if n == 1 else f"{ref}_{n}"
            held = _given.get((name, base_dir))
            current = held() if held is not None else None
            if (current is None or current is fn) and not _names_another(name, fn, first=n == 1):
                break
            n += 1
        _given[(name, base_dir)] = _reference(fn)
        _callables.pop((name, base_dir), None)
        return name


def _names_another(ref: str, fn: Callable[..., Any], *, first: bool) -> bool:
    """Whether ``ref`` may name something else than ``fn`` for a config that gives it as a string (``agent:answer``).

    The plain name is ``fn``'s only when its module, imported already, holds ``fn`` under it (or it is a lambda's
    or nested function's made-up name, which nothing imports); a redefined function, an object of another name or
    one of a module not imported gets ``ref_2``..., each free of the imported module's own attributes.
    """
    module_ref, _, attr = ref.rpartition(":")
    if _MADE_UP.search(attr):
        return False
    module = sys.modules.get(module_ref)
    if module is None:
        return first  # nothing to compare with: the plain name is left to the module, if it is imported one day
    owner: Any = module
    for part in attr.split("."):
        try:
            owner = getattr(owner, part, _MISSING)
        except Exception:  # a property or __getattr__ of the user's that raises: not fn's name
            return True
        if owner is _MISSING:
            return first  # a name the module does not hold (yet): only the suffixed ones are free of it
    return not (owner is fn or (inspect.ismethod(fn) and owner == fn))  # a class method is bound anew on each access


def _reference(fn: Callable[..., Any]) -> Callable[[], Any]:
    """A weak reference to ``fn`` when it takes one (a bound method's is a WeakMethod), else ``fn`` held."""
    try:
        return weakref.WeakMethod(fn) if inspect.ismethod(fn) else weakref.ref(fn)
    except TypeError:
        return lambda: fn


def code_digest(fn: Any) -> str:
    """A digest of what ``fn`` runs: its code objects (nested ones too), defaults, simple captured values, the simple
    state of the object it is bound to (``self.model``), the functions it wraps, what it reads from its module's
    globals (a constant's value; the project's functions, classes and modules it names, followed the same way), and
    the content of the files all these come from. Equal for the same code in any process; different for a redefined
    function, another lambda, an edited file or an edited helper module of the project.

    Library code (the standard library, site-packages) is named, not followed: an upgrade of a package does not
    change the digest. A module the project's code reaches only through another module's attribute
    (``helpers.build()`` calling ``deeper.part()``) counts by ``helpers.py``'s content alone.
    """
    digest = hashlib.sha256()
    files: set[str] = set()
    seen: set[int] = set()

    def literal(value: Any, depth: int = 0) -> str:
        if isinstance(value, (frozenset, set, tuple, list, dict)) and (depth > 8 or len(value) > 10_000):
            return f"<{type(value).__name__} of {len(value)}>"  # captured data, not code: its shape is enough
        if isinstance(value, (frozenset, set)):  # set order changes from one process to the next
            return "{" + ",".join(sorted(literal(v, depth + 1) for v in value)) + "}"
        if isinstance(value, (tuple, list)):
            return "(" + ",".join(literal(v, depth + 1) for v in value) + ")"
        if isinstance(value, dict):
            return "{" + ",".join(sorted(f"{literal(k, depth + 1)}:{literal(v, depth + 1)}" for k, v in value.items())) + "}"
        if value is None or isinstance(value, (str, bytes, int, float, complex, bool)):
            return repr(value)
        if isinstance(value, types.CodeType):
            add_code(value, None)
            return "<code>"
        if isinstance(value, types.ModuleType):
            module_file(value)
            return f"<module {value.__name__}>"
        if callable(value):
            if _from_library(value):
                return f"<{getattr(value, '__module__', None)}.{getattr(value, '__qualname__', type(value).__qualname__)}>"
            add(value)
            return "<callable>"
        kind = f"<{type(value).__module__}.{type(value).__qualname__}>"  # an object: its type (its repr may hold an address)
        return kind + state(value) if depth == 0 else kind

    def settled(value: Any) -> str:
        """A value read from a module or an object, in the digest only when it cannot change in place (a string, a
        number, a tuple of them): a list or dict there is often a counter or a memo, which would change the digest on
        every run; functions, classes and modules are followed as code."""
        if isinstance(value, (list, dict, set, bytearray)):
            return f"<{type(value).__name__}>"
        if isinstance(value, (tuple, frozenset)) and not all(
            v is None or isinstance(v, (str, bytes, int, float, complex, bool, tuple, frozenset)) for v in value
        ):
            return f"<{type(value).__name__} of {len(value)}>"
        return literal(value, 1)

    def state(obj: Any) -> str:
        """An object's own settled attributes (``self.model = "gpt-4"``): what a bound method or a captured object reads."""
        attrs = getattr(obj, "__dict__", None)
        if not isinstance(attrs, dict) or isinstance(obj, type) or len(attrs) > 1000:
            return ""
        return "{" + ",".join(sorted(f"{k}={settled(v)}" for k, v in attrs.items() if isinstance(k, str))) + "}"

    def module_file(module: types.ModuleType) -> None:
        origin = getattr(module, "__file__", None)
        if isinstance(origin, str) and not _is_library(origin):
            files.add(origin)

    def add_code(code: types.CodeType, scope: dict[str, Any] | None) -> None:
        files.add(code.co_filename)
        digest.update(code.co_code)
        digest.update(repr((code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)).encode())
        digest.update(literal(code.co_consts).encode("utf-8", "surrogatepass"))
        for const in code.co_consts:  # nested functions and comprehensions read the same globals
            if isinstance(const, types.CodeType):
                add_code(const, scope)
        if scope is not None:
            for name in code.co_names:  # globals it reads (attribute names too: looked up, absent ones skipped)
                value = scope.get(name, _MISSING)
                if value is not _MISSING and id(value) not in seen and not _from_library(value):
                    digest.update(f"{name}=".encode() + settled(value).encode("utf-8", "surrogatepass"))

    def add(obj: Any) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, functools.partial):
            add(obj.func)
            digest.update(literal((obj.args, obj.keywords)).encode("utf-8", "surrogatepass"))
            return
        if inspect.ismethod(obj):
            add(obj.__func__)
            if not isinstance(obj.__self__, type):  # an instance's method: what it was built with counts
                digest.update(literal(obj.__self__).encode("utf-8", "surrogatepass"))
            return
        code = getattr(obj, "__code__", None)
        if isinstance(code, types.CodeType):
            scope = getattr(obj, "__globals__", None)
            add_code(code, scope if isinstance(scope, dict) else None)
            digest.update(literal((getattr(obj, "__defaults__", None), getattr(obj, "__kwdefaults__", None))).encode())
            for cell in getattr(obj, "__closure__", None) or ():
                try:
                    digest.update(literal(cell.cell_contents).encode("utf-8", "surrogatepass"))
                except ValueError:  # an empty cell
                    pass
        elif inspect.isclass(obj):
            module = sys.modules.get(obj.__module__)
            if module is not None:
                module_file(module)  # a class of the project: the file it is written in
            init = inspect.getattr_static(obj, "__init__", None)
            if init is not None and init is not object.__init__:
                add(init)
        elif not inspect.isroutine(obj) and callable(obj):  # an instance with __call__
            call = inspect.getattr_static(type(obj), "__call__", None)
            if call is not None:
                add(call)
            digest.update(state(obj).encode("utf-8", "surrogatepass"))
        wrapped = getattr(obj, "__wrapped__", None)
        if wrapped is not None:
            add(wrapped)

    try:
        add(fn)
    except RecursionError:  # a chain of the project's functions deeper than the stack: what was gathered, marked
        digest.update(b"<deeper than the stack>")
    for name in sorted(files):
        digest.update(name.encode("utf-8", "surrogatepass"))
        digest.update(_file_digest(name))
    return digest.hexdigest()


#: where the interpreter's own and installed packages live: code there is named in a digest, never followed
_LIBRARY_PATHS = tuple(
    {
        os.path.join(os.path.realpath(p), "")
        for key in ("stdlib", "platstdlib", "purelib", "platlib")
        if (p := sysconfig.get_paths().get(key))
    }
)


def _is_library(file: str) -> bool:
    """Whether ``file`` is the standard library's or an installed package's (an editable install of the project is not)."""
    return os.path.realpath(file).startswith(_LIBRARY_PATHS)


def _from_library(value: Any) -> bool:
    """A module, function or class of the standard library or an installed package (``json``, ``openai.OpenAI``)."""
    if isinstance(value, types.ModuleType):
        origin = getattr(value, "__file__", None)
        return not isinstance(origin, str) or _is_library(origin)  # a built-in module has no file
    if isinstance(value, type) or inspect.isroutine(value):
        module = sys.modules.get(getattr(value, "__module__", None) or "")
        origin = getattr(module, "__file__", None) if module is not None else None
        if module is None or not isinstance(origin, str):
            return module is not None and module.__name__ in sys.builtin_module_names
        return _is_library(origin)
    return False


def _file_digest(name: str) -> bytes:
    """The digest of a source file's content (b"" for code with no file: a notebook cell, ``<string>``).

    Read through :mod:`evalx.common.reading`: a code object's file name may name anything (``compile(src,
    "/dev/zero", "exec")``, a FIFO), which is never read; a file past :data:`~evalx.common.reading.SOURCE`'s size
    stands for its size and modification time.
    """
    try:
        return hashlib.sha256(read_bytes(name, SOURCE)).digest()
    except UnreadableFile as exc:
        if exc.errno == errno.EFBIG:
            st = os.stat(name)
            return hashlib.sha256(f"{st.st_size}:{st.st_mtime_ns}".encode()).digest()
        return b""
    except (OSError, ValueError):
        return b""


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
            module = _imported_as_file(module_ref, base_dir)
            if module is None:
                _check_not_shadowed(module_ref, base_dir)
                module = importlib.import_module(module_ref)
        except UserCodeError:
            raise
        except ImportError as exc:
            raise UserCodeError(f"cannot import {module_ref!r}: {exc}") from None
        except KeyboardInterrupt:
            raise  # Ctrl-C while a slow module imports: the command stops, as anywhere else
        except BaseException as exc:  # the module itself raised while importing (sys.exit() too: it ended evalx silently)
            raise UserCodeError(f"importing {module_ref!r} raised {described(exc)}") from None
        origin = getattr(module, "__file__", None)
        if origin:
            _modules_by_file.setdefault(Path(origin).resolve(), module)
        return module


def _check_not_shadowed(module_ref: str, base_dir: Path) -> None:
    """Refuse ``agent:answer`` when this config's folder has its own ``agent`` but another ``agent`` is imported
    already (another project's, in this process: two configs run by the Python API or by pytest): Python would hand
    back that one, and the run would call another project's function."""
    top = module_ref.partition(".")[0]
    loaded = sys.modules.get(top)
    origin = getattr(loaded, "__file__", None) if loaded is not None else None
    if not isinstance(origin, str):
        return
    for own in (base_dir / f"{top}.py", base_dir / top / "__init__.py"):
        if own.is_file():
            if Path(origin).resolve() != own.resolve():
                file = module_ref.replace(".", "/") + (".py" if own.name != "__init__.py" or "." in module_ref else "/__init__.py")
                raise UserCodeError(
                    f"cannot import {module_ref!r} from {display_path(base_dir)}: a module {top!r} is imported already in "
                    f"this process from {display_path(Path(origin))}, not this config's {display_path(own)}; "
                    f"name it by its file instead ({file}:...)"
                )
            return


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
