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
child only finishes the reports, with the run's summary, while this process
writes the rest. The child offers the same cells in the same order as the
file would, so the reports are the same bytes.

Whenever that cannot be vouched for, nothing the child made is used and the
reports are written from the file as before:

- cells that come too far out of order (:data:`MAX_WAITING`);
- a line the child cannot read;
- a summary other than the one the child assumed (repeat rule, order of targets);
- a child that fails, is killed, or takes longer than :data:`ANSWER_S` to answer.

The child is never made for a run whose stored cells change after they are
written (a resume or rerun; pairwise judging stops it), for fewer than
:data:`MIN_CELLS` cells, for more than report.html embeds (its page is then
sampled from the run's totals, and read from the file), or where a fork is
not safe. A child waiting for
lines costs nothing: it sleeps on a pipe this process writes a byte to after
each write of the file.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import struct
from pathlib import Path

from evalx.common.forking import can_fork
from evalx.reports.html import Sampling
from evalx.reports.writers import Followed
from evalx.results.model import CellResult, RunSummary
from evalx.results.reviews import REVIEWS
from evalx.results.store import RESULTS, LineReader

__all__ = ["ANSWER_S", "MAX_WAITING", "MIN_CELLS", "Follower"]

#: a run of fewer cells writes its reports after it (the fork costs ~10 ms; the reports ~36 µs a cell)
MIN_CELLS = 2048
#: cells the child holds while an earlier one is still running; past this it gives up (the reports come from the file)
MAX_WAITING = 4096
#: seconds the run waits for the child's answer once it has told it the run ended
ANSWER_S = 60.0
#: a line longer than this (bytes) makes the child give up rather than hold it
_LONGEST_LINE = 64 * 1024 * 1024


class Follower:
    """This process's side: wake the child after each write (:meth:`wake`), then :meth:`finish` or :meth:`stop` it."""

    def __init__(self, pid: int, wake: int, end: int, answer: int) -> None:
        self.pid, self._wake, self._end, self._answer = pid, wake, end, answer
        self._reaped = False

    @classmethod
    def start(
        cls, run_dir: Path, cells: int, *, rule: str, junit_passes: str = "all", html_max_cells: int | None = None
    ) -> Follower | None:
        """Fork the child for a run of ``cells`` planned cells, indexes 0 to ``cells - 1``, whose ``results.jsonl`` is
        being written in ``run_dir``; None when it is not worth it or not safe (the reports then come from the file)."""
        if cells < MIN_CELLS or not can_fork():
            return None
        if Sampling.plan({"totals": {"cells": cells}}, html_max_cells) is not None:  # type: ignore[typeddict-item]
            return None  # a page sampled from the run's totals: this process reads the file for it anyway
        pipes: list[int] = []
        try:
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
                written = _follow(
                    run_dir,
                    cells,
                    wake_r,
                    end_r,
                    Followed(run_dir, rule=rule, junit_passes=junit_passes, html_max_cells=html_max_cells),
                )
                _send(answer_w, pickle.dumps(written))
            finally:
                os._exit(0)
        for fd in (wake_r, end_r, answer_w):
            os.close(fd)
        os.set_blocking(wake_w, False)
        return cls(pid, wake_w, end_w, answer_r)

    def wake(self) -> None:
        """Lines were written: one byte to the child, never waited for (a full pipe means it has one waiting already)."""
        with contextlib.suppress(OSError):
            os.write(self._wake, b"w")

    def finish(self, summary: RunSummary) -> list[str]:
        """Tell the child the run ended (every line written) and wait for it: the reports it wrote (``junit.xml``,
        ``report.html``), or none. Then it is gone."""
        try:
            os.close(self._wake)  # no more lines: the child reads the file's last ones, then the summary
            self._wake = -1
            _send(self._end, pickle.dumps(summary), ANSWER_S)
            os.close(self._end)
            self._end = -1
            data = _receive(self._answer, ANSWER_S)
            written = pickle.loads(data) if data else []
        except Exception:  # a child that died, hung or answered nonsense: the reports are written from the file
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
        if not self._reaped:
            self._reaped = True
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)  # (it exits by itself once the pipes close; this ends a stuck one)
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(self.pid, 0)


class _GiveUp(Exception):
    """The child's reports cannot be vouched for: the run's end writes them from the file."""


def _follow(run_dir: Path, cells: int, wake: int, end: int, reports: Followed) -> list[str]:
    """The child's work: offer the cells in matrix order as their lines appear; at the end, write the reports."""
    try:
        order = _Order(cells, reports)
        results = os.open(run_dir / RESULTS, os.O_RDONLY)  # the file the run appends to (reordered at its end: a new one)
        try:
            tail = b""
            while os.read(wake, 65536):  # lines were written (b"": the pipe closed, the run ended or died)
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

    def __init__(self, cells: int, reports: Followed) -> None:
        self.reader = LineReader()
        self.cells, self.offers = cells, reports.offers
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
