"""junit.xml and report.html written by a second process while the cells run.

A run is single-threaded and CPU-bound at high cell rates, and the second
core of the machine sits idle; writing the reports after the last cell used
to add ~15% to a 10,000-cell run (bench/RESULTS.md). :class:`ReportFollower`
forks a child before the first cell starts. The parent tells it, through a
pipe, where each result line it appends to ``results.jsonl`` sits (index,
offset, length: 24 bytes a cell, batched); the child reads the lines back
(from the page cache) in matrix order — a small reorder buffer waits for the
next index — and folds each into the streaming JUnit and HTML writers. When
the run is over the parent sends the final summary; the child finishes both
files (headers, counts, charts, and the spooled bodies) and answers one byte.

Nothing depends on the child: if it cannot be started (no ``fork``, other
threads alive), dies, or could not follow (an interrupted run has gaps; a
results file whose cases are not contiguous), the parent writes the reports
itself exactly as without it, from the final ``results.jsonl``. The child's
output is byte for byte what that would give (tests compare the two).
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import struct
import sys
from pathlib import Path
from typing import Any

__all__ = ["ReportFollower"]

_RECORD = struct.Struct("<qqq")  # index, offset, length of one results.jsonl line
_END = -1  # an index of -1 ends the records; a length-prefixed pickle follows
_BATCH = 128  # records sent together (a pipe write per cell is a syscall per cell)


class ReportFollower:
    """The parent's handle on the report-writing child (see the module docstring)."""

    def __init__(self, pid: int, records: int, reply: int) -> None:
        self.pid = pid
        self._records = records  # write end: records, then the end message
        self._reply = reply  # read end: b"1" when both files were written
        self._pending = bytearray()
        self.alive = True
        self.lines = 0  # lines reported

    @classmethod
    def start(cls) -> ReportFollower | None:
        """Fork the child (before the cases are loaded: it shares no more memory than it needs); None where it cannot be."""
        from evalx.reports.parallel import can_fork

        if not can_fork():
            return None
        records_r, records_w = os.pipe()
        reply_r, reply_w = os.pipe()
        for stream in (sys.stdout, sys.stderr):  # nothing buffered may be written twice
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        try:
            pid = os.fork()
        except OSError:
            for fd in (records_r, records_w, reply_r, reply_w):
                os.close(fd)
            return None
        if pid == 0:  # the child
            code = 1
            try:
                os.close(records_w)
                os.close(reply_r)
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what an interrupt means
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                try:
                    os.nice(10)  # the cells come first: the child only uses what the run leaves idle
                except OSError:
                    pass
                code = _child(records_r, reply_w)
            except BaseException:  # noqa: BLE001 -- the parent sees no b"1" and writes the reports itself
                code = 1
            finally:
                os._exit(code)
        os.close(records_r)
        os.close(reply_w)
        os.set_blocking(records_w, False)  # a slow child must never hold a cell up: the parent keeps a backlog
        return cls(pid, records_w, reply_r)

    def begin(self, run_dir: Path, *, cells: int, name: str, run_id: str, repeat_pass_rule: str) -> None:
        """What the child follows: the run's directory, its cells (indexes 0..cells-1), its name, id and repeat rule."""
        self._message({"run_dir": str(run_dir), "cells": cells, "name": name, "run_id": run_id, "rule": repeat_pass_rule})
        # Wait until the child has opened results.jsonl: the parent renames a reordered copy
        # over it at the end, and a child that opened the file only after that (a loaded
        # machine) would read the new file at the old offsets.
        self._send(block=True)
        if not self.alive:
            self.abort()
            return
        os.set_blocking(self._records, False)
        try:
            opened = os.read(self._reply, 1) == b"o"
        except OSError:
            opened = False
        if not opened:
            self.abort()

    def _message(self, value: dict[str, Any]) -> None:
        if not self.alive:
            return
        payload = pickle.dumps(value)
        self._pending += _RECORD.pack(_END, len(payload), 0) + payload
        self._send(block=False)

    def line(self, index: int, offset: int, length: int) -> None:
        """Tell the child where result ``index`` was written."""
        if not self.alive:
            return
        self.lines += 1
        self._pending += _RECORD.pack(index, offset, length)
        if len(self._pending) >= _BATCH * _RECORD.size:
            self._send(block=False)

    def _send(self, *, block: bool) -> None:
        if not self.alive:
            return
        if block:
            os.set_blocking(self._records, True)
        try:
            while self._pending:
                try:
                    sent = os.write(self._records, self._pending)
                except BlockingIOError:
                    return  # the pipe is full: try again with the next batch
                del self._pending[:sent]
        except OSError:  # the child is gone
            self.alive = False

    def end(self, summary: dict[str, Any], *, repeat_pass_rule: str, baseline: dict[str, Any] | None) -> None:
        """Tell the child the run is over (every line was reported) and send what the reports need from it."""
        self._message({"summary": summary, "lines": self.lines, "rule": repeat_pass_rule, "baseline": baseline})
        self._send(block=True)

    def wait(self) -> bool:
        """True once the child has written junit.xml and report.html; False means: write them here."""
        ok = False
        if self.alive:
            try:
                ok = os.read(self._reply, 1) == b"1"
            except OSError:
                ok = False
        self._close()
        return ok

    def abort(self) -> None:
        """Stop the child (the run failed, or was interrupted before the reports)."""
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        self._close()

    def _close(self) -> None:
        # each fd is closed once: a number closed twice may by then be another open file's
        for fd in (self._records, self._reply):
            if fd < 0:
                continue
            try:
                os.close(fd)
            except OSError:
                pass
        self._records = self._reply = -1
        if self.pid:
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            self.pid = 0
        self.alive = False


class _Pipe:
    """The child's end of the records pipe: records, and messages (an _END record, then a pickle)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""

    def _fill(self) -> None:
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            raise EOFError  # the parent went away
        self.buffer += chunk

    def next(self) -> tuple[list[tuple[int, int, int]], dict[str, Any] | None]:
        """The records that arrived (at least one, or a message), and the message that ends them, if any."""
        while len(self.buffer) < _RECORD.size:
            self._fill()
        records: list[tuple[int, int, int]] = []
        at, usable = 0, len(self.buffer) - len(self.buffer) % _RECORD.size
        while at < usable:
            index, size, length = _RECORD.unpack_from(self.buffer, at)
            at += _RECORD.size
            if index == _END:
                while len(self.buffer) < at + size:
                    self._fill()
                message = pickle.loads(self.buffer[at : at + size])
                self.buffer = self.buffer[at + size :]
                return records, message
            records.append((index, size, length))
        self.buffer = self.buffer[at:]
        return records, None


def _child(records_fd: int, reply: int) -> int:
    """Follow the records; on the end message, finish both files if every line was followed. Exit status 0 = written."""
    from evalx.reports.html import _CasesNotContiguous, _ReportData, _write_page, clean_text
    from evalx.reports.junit import JUnitStream, _Disorder, _SuiteWriter

    pipe = _Pipe(records_fd)
    try:
        records, begin = pipe.next()
        while begin is None:  # nothing can come before the beginning; be safe anyway
            records, begin = pipe.next()
    except EOFError:
        return 1  # the run stopped before it began
    run_dir, cells, name, run_id, rule = Path(begin["run_dir"]), int(begin["cells"]), begin["name"], begin["run_id"], begin["rule"]
    # the inode the parent appends to (even after its final rename), read with pread: no
    # buffer of ours can hold bytes from before the parent's latest append
    results = os.open(run_dir / "results.jsonl", os.O_RDONLY)
    os.write(reply, b"o")  # opened: from now on the parent may rename a new file over this one
    junit_writer = _SuiteWriter(rule, run_dir)
    junit = JUnitStream(junit_writer)
    html = _ReportData((), spool_dir=run_dir, index_cases=False)
    following = True  # False once a result broke matrix order: the parent will write the files
    followed = 0
    due = 0  # the next index, in matrix order
    waiting: dict[int, tuple[int, int]] = {}
    try:
        while True:
            try:
                records, end = pipe.next()
            except EOFError:
                return 1  # the parent went away without an end
            if following:
                for index, offset, length in records:
                    waiting[index] = (offset, length)
            while following and due in waiting:
                offset, length = waiting.pop(due)
                due += 1
                try:
                    result = json.loads(os.pread(results, length, offset))
                    if not isinstance(result, dict):
                        raise ValueError("not a result")
                    junit.add(result)
                    html.add(result)
                    followed += 1
                except (_Disorder, _CasesNotContiguous, ValueError):
                    following = False
                    waiting.clear()
            if end is not None:
                break
        summary = end["summary"]
        complete = following and due == cells and not waiting and followed == end["lines"] and end["rule"] == rule
        expected_targets = list(dict.fromkeys(clean_text(t) for t in (summary.get("per_target") or {})))
        if not complete or list(html.targets) != expected_targets:
            os.write(reply, b"0")
            return 1
        junit.finish(run_dir / "junit.xml", name=name, run_id=run_id, repeat_pass_rule=rule)
        _write_page(html, summary, run_dir / "report.html", end["baseline"])
        os.write(reply, b"1")
        return 0
    finally:
        os.close(results)
        junit_writer.close()
        html.close()
