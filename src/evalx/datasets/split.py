"""A big JSONL dataset read in two processes at once: this one reads the first half, a forked child the second.

Reading and validating a case is ~20 µs of Python (a million cases: 20 s on one
core, most of a million-cell run's start). Past :data:`PARALLEL_MIN_LINES`
(and :data:`PARALLEL_MIN_BYTES`), on a machine with a second core, the file is cut at a line boundary near its
middle after a multiple of :data:`~evalx.datasets.table.BLOCK` lines (so the
two packed tables join block to block); a child made with ``fork`` (it has the
config, the loader and the callables already) reads the second half while this
process reads the first, and sends its :class:`~evalx.datasets.table.CaseTable`
back through a pipe.

Only the success case is sped up: the loader reads the whole file again, the
ordinary way, when either half has a problem (so the errors are word for word
those of a one-process read), when an id may be in both halves, or when the
child fails in any way. Nothing else is forked: not without ``fork``, not with
a thread running (a fork copies only the calling thread, and a lock another
thread held stays held in the child), not on one CPU.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalx.common.forking import can_fork
from evalx.common.reading import open_regular
from evalx.datasets.table import BLOCK

__all__ = ["PARALLEL_MIN_BYTES", "PARALLEL_MIN_LINES", "Child", "Part", "halves", "in_child"]

#: a JSONL file of at least this many lines is read in two processes: the fork and the hand-back cost ~10 ms, what
#: ~1,000 cases take to read, small or large (2,000 cases: the same time either way; 3,000 of 130 bytes: 54 -> 35 ms;
#: 10,000: 171 -> 97 ms; 2,000 of 2 KB: 57 -> 39 ms; bench/RESULTS.md, issue 29)
PARALLEL_MIN_LINES = 2048
#: a file smaller than this is never split (it cannot hold PARALLEL_MIN_LINES cases): no read to count its lines
PARALLEL_MIN_BYTES = 64 * 1024
#: bytes read past the middle to find the next lines (a case longer than this: the file is read in one process)
_SLACK = 4 * 1024 * 1024
#: the piece the first half is counted in
_PIECE = 1024 * 1024


@dataclass(frozen=True)
class Part:
    """Lines of a file: from byte ``start`` (a line's first byte) to ``end`` (None: the end of the file).

    ``first_line`` is the number of its first line (1-based); ``first_index``
    the position its first case is shown at (``cases[i]``): the lines before,
    which is exact unless a line before is blank or a comment — and then only
    in messages about a problem, which the one-process read words instead.
    """

    start: int
    end: int | None
    first_line: int
    first_index: int


def halves(path: Path) -> tuple[Part, Part] | None:
    """The file's two halves, the first a multiple of BLOCK lines long; None when it is read in one process.

    Found reading a piece at a time: the first half's lines are counted, never held.
    """
    if not can_fork():
        return None
    try:
        with open_regular(path) as f:  # a FIFO or a device is never split (the reader refuses it)
            size = os.fstat(f.fileno()).st_size
            if size < PARALLEL_MIN_BYTES:
                return None
            middle = size // 2
            lines, cut, pos = 0, 0, 0
            while pos < middle:  # the lines before the middle, and the start of the line the middle is in
                piece = f.read(min(_PIECE, middle - pos))
                if not piece:
                    return None
                lines += piece.count(b"\n")
                last = piece.rfind(b"\n")
                if last >= 0:
                    cut = pos + last + 1
                pos += len(piece)
            f.seek(cut)
            data = f.read(_SLACK)
    except OSError:
        return None
    if 2 * lines < PARALLEL_MIN_LINES:  # (the first half's lines, counted up to the middle)
        return None
    at = 0
    for _ in range(-lines % BLOCK):  # on to the next multiple of BLOCK lines, within _SLACK of that line's start
        end = data.find(b"\n", at)
        if end < 0:
            return None
        at, lines = end + 1, lines + 1
    cut += at
    if lines == 0 or cut >= size:
        return None
    return Part(0, cut, 1, 0), Part(cut, None, lines + 1, lines)


class Child:
    """A forked child computing a value; :meth:`result` waits for it (None if it failed), :meth:`stop` ends it."""

    def __init__(self, pid: int, fd: int) -> None:
        self.pid, self.fd = pid, fd
        self._reaped = False

    def result(self) -> Any:
        """The child's value, or None when it failed, died or sent something unreadable."""
        try:
            with os.fdopen(self.fd, "rb") as pipe:
                self.fd = -1
                data = pipe.read()
        except OSError:
            data = b""
        self._reap()
        try:
            status, value = pickle.loads(data)
        except Exception:  # killed before it wrote everything, or nothing
            return None
        return value if status == "ok" else None

    def stop(self) -> None:
        """End the child if it still runs (the parent is leaving early: an error, Ctrl-C)."""
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
        if not self._reaped:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            self._reap()

    def _reap(self) -> None:
        if not self._reaped:
            self._reaped = True
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(self.pid, 0)


def in_child(work: Callable[[], Any]) -> Child | None:
    """``work()`` in a forked child; None when no child could be made (then do the work here)."""
    try:
        read, write = os.pipe()
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        os.close(read)
        os.close(write)
        return None
    if pid == 0:  # the child: do the work, send it, leave without running the parent's exit handlers or flushing its files
        try:
            os.close(read)
            try:
                payload = pickle.dumps(("ok", work()), protocol=pickle.HIGHEST_PROTOCOL)
            except BaseException as exc:  # the parent reads the half itself
                payload = pickle.dumps(("failed", f"{type(exc).__name__}: {exc}"))
            view = memoryview(payload)
            while view:
                view = view[os.write(write, view) :]
        finally:
            os._exit(0)
    os.close(write)
    return Child(pid, read)
