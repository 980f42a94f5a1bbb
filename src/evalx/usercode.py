"""Import user code named in a config: ``module:attr``, ``file.py:attr``, ``file.py:Class.method``."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from evalx.documents import display_path


def resolve_callable(ref: str, base_dir: Path) -> Any:
    """Import ``module:function`` or ``path/file.py:function`` relative to ``base_dir``."""
    module_ref, _, attr = ref.rpartition(":")
    if not module_ref or not attr:
        raise ImportError(f"{ref!r} must look like module:function")
    base = str(base_dir)
    if base not in sys.path:
        sys.path.insert(0, base)
    try:
        if module_ref.endswith(".py") or "/" in module_ref:
            file = (base_dir / module_ref).resolve()
            if not file.exists():
                raise ImportError(f"cannot import {ref!r}: no file {display_path(file)}")
            module = _load_file_module(file)
        else:
            module = importlib.import_module(module_ref)
    except ImportError as exc:
        if str(exc).startswith("cannot import"):
            raise
        raise ImportError(f"cannot import {module_ref!r}: {exc}") from None
    except Exception as exc:  # the module itself raised while importing
        raise ImportError(f"importing {module_ref!r} raised {type(exc).__name__}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ImportError(f"module {module_ref!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ImportError(f"{ref!r} is not callable")
    return obj


def _load_file_module(file: Path) -> Any:
    import importlib.util

    name = "evalx_user_" + str(abs(hash(str(file))))
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {display_path(file)}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
