"""Which config a command uses when none is named: ``./evalconfig.yaml``, else the nearest one in a folder above.

The walk up stops at the root of the repository the working directory is in
(the first folder holding ``.git``, ``.hg``, ``.svn`` or ``.jj``, which is
still searched) or, outside one, at the filesystem root: a config of another
project above the repository is never picked up by accident. Paths in the
config found resolve relative to its own folder, as for ``-c``. The nearest
*name* wins, whatever it is: an ``evalconfig.yaml`` that is a FIFO, a folder
or a dangling link is returned, so the loader names it ("not a regular
file") instead of the walk passing it by to a config further up.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CONFIG_NAME", "VCS_MARKERS", "discover_config"]

#: the file a command looks for when no ``-c`` is given
CONFIG_NAME = "evalconfig.yaml"
#: a folder holding one of these is a repository's root: the walk up stops there
VCS_MARKERS = (".git", ".hg", ".svn", ".jj")


def discover_config(start: Path | None = None) -> Path | None:
    """The nearest ``evalconfig.yaml`` from ``start`` (default: the working directory) up to the repository root, or None."""
    here = (start or Path.cwd()).absolute()
    for folder in (here, *here.parents):
        candidate = folder / CONFIG_NAME
        if candidate.is_symlink() or candidate.exists():
            return candidate
        if any((folder / marker).exists() for marker in VCS_MARKERS):
            return None
    return None
