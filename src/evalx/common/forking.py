"""Whether this process may fork a helper child: the one test every forked helper (a dataset half, the reports) passes.

A child made with ``fork`` starts with a copy of this process: it has the
config, the loader and the plan already. It is made only where that is safe
and pays: ``fork`` exists, no other thread runs (a fork copies only the
calling thread, and a lock another thread held stays held in the child: a
Python API user's threads, a notebook's), and a second CPU can run it.
"""

from __future__ import annotations

import os
import threading

__all__ = ["can_fork", "cpus"]


def cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def can_fork() -> bool:
    """True when a forked child may run beside this process (see the module's docstring)."""
    return hasattr(os, "fork") and threading.active_count() == 1 and cpus() >= 2
