"""Where evalx keeps its own page templates compiled, so a run does not recompile them each time.

Compiling report.html.j2 takes 75–90 ms on this project's 2-core machine,
about a fifth of a one-cell run's start-up (bench/RESULTS.md, issue 29);
loading it compiled takes under 2 ms. The cache is jinja2's own
:class:`~jinja2.FileSystemBytecodeCache` (atomic writes; an entry is keyed by
the template's source checksum and the Python version, so an edited template
or another interpreter compiles afresh) in ``$XDG_CACHE_HOME/evalx`` (else
``~/.cache/evalx``), one folder per evalx version. ``EVALX_TEMPLATE_CACHE=0``
turns it off. Nothing the user writes is cached here: prompt templates are
compiled in memory (``evalx.common.templates``).
"""

from __future__ import annotations

import logging
import os
from functools import cache
from pathlib import Path

import jinja2

from evalx.version import __version__

log = logging.getLogger(__name__)


class _QuietCache(jinja2.FileSystemBytecodeCache):
    """A cache that cannot fail a report: a folder that cannot be read or written just means compiling."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception as exc:  # a damaged entry (pickle and marshal raise many kinds): compile instead
            log.debug("template cache: %s", exc)
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError as exc:
            log.debug("template cache: %s", exc)


@cache
def template_cache() -> jinja2.BytecodeCache | None:
    """The compiled-template cache of this evalx version, or None when it is off or has no folder it can use."""
    if os.environ.get("EVALX_TEMPLATE_CACHE", "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = Path(base) / "evalx" / f"templates-{__version__}"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        log.debug("template cache off: %s", exc)
        return None
    if not os.access(folder, os.W_OK | os.X_OK):
        return None
    return _QuietCache(str(folder))
