"""What Python targets print through ``sys.stdout``/``sys.stderr``: kept with the cell being run, never on evalx's stdout.

While a run has Python targets, :func:`install` replaces ``sys.stdout`` and
``sys.stderr`` with routers. A write goes to the :class:`Printed` buffer of
the cell whose call is running (the :data:`SINK` context variable, set by
the target for its call: in the task for an async callable — tasks it
starts inherit it — and in the worker thread for a sync one). Any other
write made while the routers are in place — a module's top-level
``print`` when it is imported, a thread the target started, a Python
assertion — goes to evalx's stderr, so the machine-readable output evalx
writes to stdout (``--json``) stays valid whatever targets print. evalx
writes its own output to the streams it held before (never through the
routers). The routers are made once per stream and never freed: CPython 3.11's
``print`` holds ``sys.stdout`` without a reference of its own, so a router
freed when :func:`uninstall` puts the old stream back would crash a thread
the target left printing at that moment (CPython gh-130163). Writes to file
descriptor 1 by C code or subprocesses are not
seen by the routers: :func:`stdout_for_evalx` points that descriptor and
``sys.stdout`` at stderr for the rest of an ``evalx run`` process, and gives
evalx a duplicate of the real stdout for its own output.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, TextIO

__all__ = ["MAX_PRINTED", "SINK", "Printed", "install", "stdout_for_evalx", "uninstall"]

#: characters of printed text kept per cell; the rest is counted, not kept
MAX_PRINTED = 64 * 1024

#: where a write goes: the running cell's buffer, or None (evalx's stderr)
SINK: ContextVar[Printed | None] = ContextVar("evalx_printed", default=None)


class Printed:
    """One cell's printed text, bounded to :data:`MAX_PRINTED` characters."""

    __slots__ = ("dropped", "parts", "size")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0
        self.dropped = 0

    def write(self, text: str) -> int:
        room = MAX_PRINTED - self.size
        if len(text) > room:
            self.dropped += len(text) - max(room, 0)
            text = text[: max(room, 0)]
        if text:
            self.parts.append(text)
            self.size += len(text)
        return self.size

    def text(self) -> str | None:
        """What was printed (lone surrogates replaced, so it can be written as UTF-8); None when nothing was."""
        if not self.parts:
            return None
        text = "".join(self.parts)
        if not text.isascii():
            text = text.encode("utf-8", "replace").decode("utf-8")
        if self.dropped:
            text += f"\n… [{self.dropped} more characters printed, not kept]"
        return text


class _BytesSink:
    """``sys.stdout.buffer`` while a cell prints: bytes decoded (UTF-8, replaced) into its buffer."""

    def __init__(self, printed: Printed) -> None:
        self._printed = printed

    def write(self, data: bytes) -> int:
        self._printed.write(bytes(data).decode("utf-8", "replace"))
        return len(data)

    def flush(self) -> None:
        pass


class _Router:
    """A stand-in for ``sys.stdout`` or ``sys.stderr``: writes go to the running cell's buffer, else to evalx's stderr."""

    def __init__(self, fallback: TextIO) -> None:
        self._fallback = fallback

    def write(self, text: str) -> int:
        sink = SINK.get()
        if sink is None:
            return self._fallback.write(text)
        sink.write(str(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if SINK.get() is None:
            self._fallback.flush()

    @property
    def buffer(self) -> Any:
        sink = SINK.get()
        return self._fallback.buffer if sink is None else _BytesSink(sink)

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:  # encoding, errors, fileno...: evalx's stderr's
        return getattr(self._fallback, name)


_installed: list[Any] = []  # [count, previous stdout, previous stderr] while installed
#: the routers made for each stream evalx's stderr has been, by id (each holds its stream: the ids stay theirs), kept
#: for the life of the process: a thread may still be inside ``print`` with one after it is taken out (gh-130163)
_ROUTERS: dict[int, tuple[_Router, _Router]] = {}


def install() -> None:
    """Put the routers in place (counted: one :func:`uninstall` for each call)."""
    if _installed:
        _installed[0] += 1
        return
    stdout, stderr = sys.stdout, sys.stderr
    _installed[:] = [1, stdout, stderr]
    routers = _ROUTERS.get(id(stderr))
    if routers is None or routers[0]._fallback is not stderr:
        routers = _ROUTERS[id(stderr)] = (_Router(stderr), _Router(stderr))
    sys.stdout, sys.stderr = routers


def uninstall() -> None:
    """Undo one :func:`install`; the last one puts back the streams found then (unless someone replaced the routers since)."""
    if not _installed:
        return
    _installed[0] -= 1
    if _installed[0] > 0:
        return
    _, stdout, stderr = _installed
    _installed.clear()
    if isinstance(sys.stdout, _Router):
        sys.stdout = stdout
    if isinstance(sys.stderr, _Router):
        sys.stderr = stderr


@contextlib.contextmanager
def stdout_for_evalx() -> Iterator[TextIO]:
    """For ``evalx run``: yields the stream evalx writes its own output to (the real stdout), and keeps everything else off it.

    From the block's start to the process's end, file descriptor 1 and
    ``sys.stdout`` are stderr's, so nothing a target prints — in its call, from
    a thread it left running (even after the run), by C code or a subprocess
    — reaches the stdout a CI job parses (``--json``). evalx writes there
    through a duplicate of the old descriptor 1, which the block closes.
    Nothing moves when stdout is not descriptor 1 (a test runner's capture).
    """
    try:
        sys.stdout.flush()
        out_fd, err_fd = sys.stdout.fileno(), sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        out_fd = err_fd = -1
    if out_fd != 1 or err_fd == 1:
        yield sys.stdout
        return
    previous = sys.stdout
    ours = open(os.dup(1), "w", buffering=1 if previous.line_buffering else -1, encoding=previous.encoding, errors=previous.errors)
    os.dup2(err_fd, 1)
    sys.stdout = sys.stderr
    try:
        yield ours
    finally:
        _flush_c_stdio()  # what C code left in its stdout buffer goes where it was written: stderr
        with contextlib.suppress(OSError, ValueError):
            ours.close()


def _flush_c_stdio() -> None:
    """``fflush(NULL)`` in the C library, where there is one to ask (best effort)."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (ImportError, OSError, AttributeError, TypeError):
        pass
