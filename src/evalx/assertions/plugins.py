"""Load plugins: modules that register assertion types with ``@evalx.assertion`` when imported.

Two sources, both imported before the config schema is built, so
``evalx validate``, ``evalx schema``, ``evalx run`` and the reports know
their types:

- ``plugins: [my_checks.py, mypkg.checks]`` at the top of a config: a
  ``.py`` path relative to the config's folder, or a module name importable
  with the config's folder on ``sys.path`` (:mod:`evalx.common.usercode` imports
  both, once);
- the ``evalx.plugins`` entry-point group of installed packages
  (``[project.entry-points."evalx.plugins"] my_checks = "mypkg.checks"``),
  loaded lazily, once per process, by the assertion registry (which
  imports this module; this module imports no subpackage).

A plugin that fails to import is one error naming it (for ``plugins:``,
with the config's ``FILE:LINE``), and the command exits 2.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from evalx.common.documents import Loaded, format_path
from evalx.common.usercode import UserCodeError, import_user_module
from evalx.errors import ConfigError, Issue, described

__all__ = ["ENTRY_POINT_GROUP", "import_config_plugins", "load_entry_points", "plugins_issues"]

ENTRY_POINT_GROUP = "evalx.plugins"

#: the issues of the entry-point plugins, once they were loaded (None: not yet)
_entry_point_issues: list[Issue] | None = None


def load_entry_points() -> list[Issue]:
    """Import every ``evalx.plugins`` entry point, once; the problems found (the registry calls this lazily)."""
    global _entry_point_issues
    if _entry_point_issues is not None:
        return _entry_point_issues
    _entry_point_issues = []  # set first: a plugin that asks the registry while it imports must not start over
    if not _may_declare_entry_points():
        return _entry_point_issues
    from importlib.metadata import entry_points

    issues: list[Issue] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # a broken installed plugin (one that calls sys.exit too): one error naming it
            where = f"entry point {ep.name!r} = {ep.value!r} (group {ENTRY_POINT_GROUP})"
            issues.append(Issue(where, None, "", f"plugin failed to load: {described(exc)}"))
    _entry_point_issues = issues
    return issues


_GROUP_HEADER = re.compile(r"^\[\s*" + re.escape(ENTRY_POINT_GROUP) + r"\s*\]", re.MULTILINE)


def _may_declare_entry_points() -> bool:
    """False only when surely no installed distribution declares the group.

    Importing ``importlib.metadata`` costs ~30 ms at every ``evalx validate``
    and ``run``; reading the few ``entry_points.txt`` files on ``sys.path``
    costs ~1 ms. Whatever this cannot read (a zip on ``sys.path``, a finder
    that provides distributions its own way) means True: ask importlib.metadata.
    """
    from importlib.machinery import PathFinder

    if any(hasattr(f, "find_distributions") and f is not PathFinder for f in sys.meta_path):
        return True
    for entry in sys.path:
        try:
            listing = os.scandir(entry or ".")
        except NotADirectoryError:
            return True  # a zip file
        except OSError:
            continue  # a path that does not exist
        with listing:
            for item in listing:
                if not item.name.endswith((".dist-info", ".egg-info")):
                    continue
                try:
                    with open(os.path.join(item.path, "entry_points.txt"), encoding="utf-8") as f:
                        if _GROUP_HEADER.search(f.read()):
                            return True
                except OSError:
                    continue
    return False


def plugins_issues(loaded: Loaded) -> list[Issue]:
    """What is wrong with the shape of the config's ``plugins:`` key (a list of non-empty strings)."""
    if not isinstance(loaded.data, dict) or "plugins" not in loaded.data:
        return []
    value = loaded.data["plugins"]

    def issue(path: tuple[str | int, ...], message: str) -> Issue:
        return Issue(loaded.file, loaded.line_of(path), format_path(path), message)

    if not isinstance(value, list):
        return [issue(("plugins",), f"must be a list of .py files or module names, not {_kind(value)}")]
    return [
        issue(("plugins", i), f"must be a .py file or a module name (a string), not {_kind(ref)}")
        for i, ref in enumerate(value)
        if not isinstance(ref, str) or not ref.strip()
    ]


def import_config_plugins(loaded: Loaded, base_dir: Path) -> None:
    """Import the config's ``plugins:``; raise :class:`ConfigError` naming each failure.

    Call :func:`evalx.assertions.registry.check_entry_point_plugins` first:
    the built-ins register before any plugin, so a plugin that takes a
    built-in's name is the one reported.
    """
    issues = plugins_issues(loaded)
    if issues:
        raise ConfigError(issues)
    refs = loaded.data.get("plugins") if isinstance(loaded.data, dict) else None
    for i, ref in enumerate(refs or []):
        try:
            import_user_module(ref.strip(), base_dir)
        except UserCodeError as exc:
            issues.append(Issue(loaded.file, loaded.line_of(("plugins", i)), format_path(("plugins", i)), f"plugin failed: {exc}"))
        except Exception as exc:  # e.g. ValueError from @assertion: a name registered twice
            issues.append(
                Issue(
                    loaded.file,
                    loaded.line_of(("plugins", i)),
                    format_path(("plugins", i)),
                    f"plugin {ref!r} failed: {described(exc)}",
                )
            )
    if issues:
        raise ConfigError(issues)


def _kind(value: Any) -> str:
    if isinstance(value, str):
        return repr(value) if value.strip() else "an empty string"
    names = {dict: "a mapping", list: "a list", type(None): "null", bool: "a boolean"}
    return names.get(type(value), repr(value))
