"""Run two independent jobs at once on a second core, when that is safe.

A run is single-threaded and CPU-bound while it writes its reports (JUnit and
HTML each read ``results.jsonl`` again), and the machines evalx runs on have
a second core idle by then. :func:`run_both` forks a child (Linux ``fork``:
no interpreter start-up, the parent's modules and data are shared
copy-on-write) to run ``background`` while the parent runs ``foreground``.

It falls back to running both in this process, one after the other, when
forking is not available or not safe (not Linux, other threads alive — a
fork copies only the calling thread, and a lock another thread holds stays
locked in the child) or when ``EVALX_NO_FORK`` is set. If the child fails
for any reason (an exception, a signal), its job is run again here, so
errors surface exactly as they would without the child, never as a
traceback from another process.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
from collections.abc import Callable

__all__ = ["can_fork", "run_both"]


def can_fork() -> bool:
    """Whether :func:`run_both` would fork right now."""
    return (
        sys.platform.startswith("linux")
        and hasattr(os, "fork")
        and not os.environ.get("EVALX_NO_FORK")
        and threading.active_count() == 1
    )


def run_both(foreground: Callable[[], None], background: Callable[[], None], *, parallel: bool | None = None) -> None:
    """Run ``background`` in a forked child and ``foreground`` here; return when both are done.

    ``parallel=False`` runs them one after the other here (``background``
    second); ``None`` decides with :func:`can_fork`.
    """
    if parallel is None:
        parallel = can_fork()
    if not parallel:
        foreground()
        background()
        return
    for stream in (sys.stdout, sys.stderr):  # nothing buffered may be written twice
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    gc.freeze()  # the child's collections must not touch (and so copy) every inherited object
    try:
        pid = os.fork()
    except OSError:  # no memory or process slot for a child: one after the other, here
        gc.unfreeze()
        foreground()
        background()
        return
    if pid == 0:  # the child: run the job, say how it went by the exit status, never return
        code = 1
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends the child; the parent decides
            background()
            code = 0
        except BaseException:  # noqa: BLE001 -- reported by the status; the parent runs the job again
            code = 1
        finally:
            os._exit(code)
    gc.unfreeze()
    try:
        foreground()
    except BaseException:
        _stop(pid)
        raise
    child_ok = _wait(pid)
    if not child_ok:
        background()  # again, here: its error (if it has one) is raised as usual


def _wait(pid: int) -> bool:
    while True:
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            return False
        except InterruptedError:
            continue
        return os.waitstatus_to_exitcode(status) == 0


def _stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
