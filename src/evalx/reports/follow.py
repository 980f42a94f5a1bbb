"""A run's ``junit.xml`` and ``report.html`` built beside it: a forked child follows ``results.jsonl`` as cells are recorded.

The reports are written from the results in matrix order. After the last
cell, reading the file again and offering every cell to the writers was ~10 %
of a run of many quick cells (0.36 s of a 10,000-cell provider run's 3.4 s on
2 cores, bench/RESULTS.md, issue 29). On a machine with a second core
(:func:`~evalx.common.forking.can_fork`), :class:`Follower` forks a child as the
cells start. The child reads each line as it is written, with the
:class:`~evalx.results.store.LineReader` every reader of the file parses
with. It puts the cells back in matrix order and offers them to the same
writers (:class:`~evalx.reports.writers.Followed`). When the run ends, the
child only finishes the reports, with the run's summary. It offers the same
cells in the same order as the file would, so the reports are the same bytes.

It only ever takes what the run leaves of the machine: it runs at the lowest
priority (``nice 19``), and it never holds the run up. The run writes the
file as always and wakes the child with a byte it does not wait for; at its
end it waits for the child only as long as the cells the child has still to
offer would take (:data:`WAIT_S` and :data:`WAIT_CELL_S` a cell; not at all with more
than :data:`WAIT_AT_MOST_LEFT` of the run left), then writes the reports itself. An earlier follower
(removed for issue 12) ran at ``nice 10`` and the run waited for it
whatever it had left: with the second core busy it made runs slower; this
one measured the same as none then, and ~9 % faster with a core to spare.

Whenever what the child made cannot be vouched for, it is not used and the
reports are written from the file as before:

- cells that come too far out of order (:data:`MAX_WAITING`);
- a line the child cannot read;
- a summary other than the one the child assumed (repeat rule, order of targets);
- a child that fails, is killed, or is late.

The child is never made for a run whose stored cells change after they are
written (a resume or rerun; pairwise judging stops it), for fewer than
:data:`MIN_CELLS` cells, for more than report.html embeds (its page is then
sampled from the run's totals, and read from the file), or where a fork is
not safe, nor when no CPU is idle as the cells start
(:func:`~evalx.common.forking.spare_cpu`).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import pickle
import select
import signal
import struct
import time
from pathlib import Path

from evalx.common.forking import can_fork, spare_cpu
from evalx.reports.html import Sampling
from evalx.reports.writers import Followed
from evalx.results.model import CellResult, RunSummary
from evalx.results.reviews import REVIEWS
from evalx.results.store import RESULTS, LineReader

__all__ = ["MAX_WAITING", "MIN_CELLS", "WAIT_AT_MOST_LEFT", "WAIT_CELL_S", "WAIT_S", "Follower"]

#: a run of fewer cells writes its reports after it (the fork costs ~10 ms; the reports ~36 µs a cell)
MIN_CELLS = 2048
#: cells the child holds while an earlier one is still running; past this it gives up (the reports come from the file)
MAX_WAITING = 4096
#: the run's end waits for the child this long, plus WAIT_CELL_S for each cell it has still to offer, then writes the
#: reports itself (the child's finishing touches take ~20 ms; offering a cell ~36 µs: bench/RESULTS.md, issue 29)
WAIT_S = 0.25
WAIT_CELL_S = 50e-6
#: with more than this share of the run's cells still to offer, the child had no core to spare: not waited for at all
WAIT_AT_MOST_LEFT = 0.5
#: a line longer than this (bytes) makes the child give up rather than hold it
_LONGEST_LINE = 64 * 1024 * 1024


class Follower:
    """This process's side: wake the child after each write (:meth:`wake`), then :meth:`finish` or :meth:`stop` it."""

    def __init__(self, run_dir: Path, pid: int, wake: int, end: int, answer: int, progress: mmap.mmap) -> None:
        self.run_dir, self.pid, self._wake, self._end, self._answer = run_dir, pid, wake, end, answer
        self._progress = progress  # the cells the child has offered, as it counts them (shared memory)
        self._reaped = False

    @classmethod
    def start(
        cls, run_dir: Path, cells: int, *, rule: str, junit_passes: str = "all", html_max_cells: int | None = None
    ) -> Follower | None:
        """Fork the child for a run of ``cells`` planned cells, indexes 0 to ``cells - 1``, whose ``results.jsonl`` is
        being written in ``run_dir``; None when it is not worth it or not safe (the reports then come from the file)."""
        if cells < MIN_CELLS or not can_fork() or not spare_cpu():
            return None
        if Sampling.plan({"totals": {"cells": cells}}, html_max_cells) is not None:  # type: ignore[typeddict-item]
            return None  # a page sampled from the run's totals: this process reads the file for it anyway
        pipes: list[int] = []
        try:
            progress = mmap.mmap(-1, 8)  # shared with the child: it counts its offers there
            for _ in range(3):
                pipes.extend(os.pipe())
            pid = os.fork()
        except OSError:
            for fd in pipes:
                os.close(fd)
            return None
        wake_r, wake_w, end_r, end_w, answer_r, answer_w = pipes
        if pid == 0:  # the child: follow, answer, leave without the parent's exit handlers or buffered files
            try:
                for fd in (wake_w, end_w, answer_r):
                    os.close(fd)
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the run's to handle; its end (or its death) ends this
                with contextlib.suppress(OSError):
                    os.nice(19)  # what the run leaves of the machine, never a share of the run's own
                reports = Followed(run_dir, rule=rule, junit_passes=junit_passes, html_max_cells=html_max_cells)
                written = _follow(run_dir, _Order(cells, reports, progress), wake_r, end_r, reports)
                _send(answer_w, pickle.dumps(written))
            finally:
                os._exit(0)
        for fd in (wake_r, end_r, answer_w):
            os.close(fd)
        os.set_blocking(wake_w, False)
        return cls(run_dir, pid, wake_w, end_w, answer_r, progress)

    def wake(self) -> None:
        """Lines were written: one byte to the child, never waited for (a full pipe means it has one waiting already)."""
        with contextlib.suppress(OSError):
            os.write(self._wake, b"w")

    def finish(self, summary: RunSummary) -> list[str]:
        """Tell the child the run ended (every line written) and wait for it, as long as what it has left would take:
        the reports it wrote (``junit.xml``, ``report.html``), or none. Then it is gone."""
        cells = (summary.get("totals") or {}).get("cells")
        left = max(0, (cells if isinstance(cells, int) else 0) - struct.unpack("<Q", self._progress[:8])[0])
        written: object = []
        if not isinstance(cells, int) or left <= cells * WAIT_AT_MOST_LEFT:
            wait = WAIT_S + left * WAIT_CELL_S
            deadline = time.monotonic() + wait
            try:
                _send(self._end, pickle.dumps(summary), wait)  # every line is written: the child reads the last ones, then this
                os.close(self._end)
                self._end = -1
                data = _receive(self._answer, max(0.0, deadline - time.monotonic()))
                written = pickle.loads(data) if data else []
            except Exception:  # a child that died, is late or answered nonsense: the reports are written from the file
                written = []
        self.stop()
        return [w for w in written if w in ("junit.xml", "report.html")] if isinstance(written, list) else []

    def stop(self) -> None:
        """End the child, whatever it is doing (the run failed, or its cells changed after they were written)."""
        for fd in (self._wake, self._end, self._answer):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._wake = self._end = self._answer = -1
        with contextlib.suppress(BufferError, ValueError):
            self._progress.close()
        if not self._reaped:
            self._reaped = True
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)  # (it exits by itself once the pipes close; this ends a late one)
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(self.pid, 0)
            for name in ("junit.xml", "report.html"):  # a report a late child was writing when it was ended
                for left in self.run_dir.glob(f".{name}.*.tmp"):
                    with contextlib.suppress(OSError):
                        left.unlink()


class _GiveUp(Exception):
    """The child's reports cannot be vouched for: the run's end writes them from the file."""


def _follow(run_dir: Path, order: _Order, wake: int, end: int, reports: Followed) -> list[str]:
    """The child's work: offer the cells in matrix order as their lines appear; at the end, write the reports."""
    try:
        results = os.open(run_dir / RESULTS, os.O_RDONLY)  # the file the run appends to (reordered at its end: a new one)
        try:
            tail = b""
            # lines were written (a byte on `wake`), until the run's end says it ended (its summary on `end`) or the run
            # is gone (`end` closed); `wake` closing is not waited for: a process the run forks (a target's) may hold it
            while end not in select.select([wake, end], [], [])[0]:
                if not os.read(wake, 65536):
                    break
                tail = _read_lines(results, tail, order)
            tail = _read_lines(results, tail, order)  # what the last writes added
        finally:
            os.close(results)
        if tail:
            raise _GiveUp
        data = _receive(end, None)
        if not data:
            return []  # the run failed or stopped this child: nothing to write
        summary: RunSummary = pickle.loads(data)
        order.last()
        if order.offered != (summary.get("totals") or {}).get("cells") or (run_dir / REVIEWS).exists():
            return []  # a cell it could not read; or marks a reviewer left, which the file's readers apply
        return reports.finish(summary)
    except _GiveUp:
        return []
    finally:
        reports.close()


class _Order:
    """Cells back in matrix order: each offered once every cell before it was (or at :meth:`last`, those that never came)."""

    def __init__(self, cells: int, reports: Followed, progress: mmap.mmap) -> None:
        self.reader = LineReader()
        self.cells, self.offers, self.progress = cells, reports.offers, progress
        self.next = 0
        self.waiting: dict[int, CellResult] = {}
        self.offered = 0

    def line(self, raw: bytes) -> None:
        for result in self.reader.read(raw):
            index = result.get("index")
            if type(index) is not int or not 0 <= index < self.cells or index < self.next or index in self.waiting:
                raise _GiveUp
            if index != self.next:
                self.waiting[index] = result
                if len(self.waiting) > MAX_WAITING:
                    raise _GiveUp
                continue
            self._offer(result)
            waiting = self.waiting
            while waiting and self.next in waiting:
                self._offer(waiting.pop(self.next))

    def last(self) -> None:
        """The run ended: the cells still waiting (those before them were never run), in order."""
        for index in sorted(self.waiting):
            self.next = index
            self._offer(self.waiting.pop(index))

    def _offer(self, result: CellResult) -> None:
        for offer in self.offers:
            if not offer(result):
                raise _GiveUp
        self.offered += 1
        self.next += 1
        if not self.offered & 63:  # the count the run's end reads (a cell at a time would cost more than it tells)
            struct.pack_into("<Q", self.progress, 0, self.offered)


def _read_lines(fd: int, tail: bytes, order: _Order) -> bytes:
    """Read what the file ``fd`` has gained and hand ``order`` each whole line; what is left of a line being written."""
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return tail
        data = tail + chunk if tail else chunk
        last = data.rfind(b"\n")
        if last < 0:
            tail = data
        else:
            start = 0
            while start <= last:
                stop = data.index(b"\n", start) + 1
                order.line(data[start:stop])
                start = stop
            tail = data[last + 1 :]
        if len(tail) > _LONGEST_LINE:
            raise _GiveUp


def _send(fd: int, data: bytes, timeout: float | None = None) -> None:
    """``data`` on the pipe ``fd``, its length first (the reader knows a whole message from a cut one); ``TimeoutError``
    when the reader takes none of it for ``timeout`` s."""
    view = memoryview(struct.pack("<Q", len(data)) + data)
    if timeout is not None:
        os.set_blocking(fd, False)
    while view:
        if timeout is not None and not select.select([], [fd], [], timeout)[1]:
            raise TimeoutError
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            continue


def _receive(fd: int, timeout: float | None) -> bytes:
    """A message :func:`_send` wrote on ``fd``; b"" when the pipe closed first, or nothing came within ``timeout`` s."""
    chunks: list[bytes] = []
    size: int | None = None
    got = 0
    while size is None or got < size + 8:
        if timeout is not None and not select.select([fd], [], [], timeout)[0]:
            return b""
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b""
        chunks.append(chunk)
        got += len(chunk)
        if size is None and got >= 8:
            size = struct.unpack("<Q", b"".join(chunks)[:8])[0]
    return b"".join(chunks)[8 : 8 + size]
