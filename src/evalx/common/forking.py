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

__all__ = ["can_fork", "cpus", "spare_cpu"]


def cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def can_fork() -> bool:
    """True when a forked child may run beside this process (see the module's docstring)."""
    return hasattr(os, "fork") and threading.active_count() == 1 and cpus() >= 2


def spare_cpu() -> bool:
    """Whether a CPU is idle now, besides this process's: on Linux, the tasks runnable this instant (``/proc/loadavg``).

    For a helper that pays only with a core to spare (work moved beside the run, never off it): on a machine kept
    busy by other work it would take a share of the run's own. True where it cannot be told.
    """
    try:
        with open("/proc/loadavg", "rb") as f:
            runnable = int(f.read().split()[3].split(b"/")[0])  # "0.52 0.58 0.59 2/345 1234": 2 runnable, this one too
    except (OSError, ValueError, IndexError):
        return True
    return runnable - 1 < cpus() - 1
