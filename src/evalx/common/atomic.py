"""The one way evalx replaces a file: written beside it under a unique temporary name, then renamed over it.

Every file evalx writes whole (``summary.json``, ``run.json``, the reports,
the viewer's index cache, the history page...) goes through
:func:`atomic_write` (or :func:`write_text` / :func:`write_bytes`):

- the temporary file is made by :func:`tempfile.mkstemp` in the target's own
  folder, so two processes (two viewers rebuilding one run's reports) never
  write or rename each other's half-written copy, and the rename is atomic;
- a reader sees the old file or the new one, never a part;
- the rename replaces a symbolic link at ``path`` by the file: a write never
  follows a link out of its folder;
- a device or a pipe at ``path`` (``/dev/null``, ``/dev/full``, a shell's
  ``>(...)``) is written into, never replaced; a pipe nobody reads (a FIFO
  left in a run folder) is replaced like a file, never waited on;
- an :class:`OSError` becomes :class:`~evalx.errors.OutputError` naming
  ``path`` (through :func:`evalx.errors.writing`), and the temporary file is removed.

Appending (``reviews.jsonl``) is :func:`open_append`: it refuses a link.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal, overload

from evalx.errors import OutputError, writing

__all__ = ["atomic_write", "open_append", "write_bytes", "write_text"]

#: the permissions of a written file (mkstemp makes it private; a report is meant to be read)
FILE_MODE = 0o644


@overload
def atomic_write(
    path: Path, *, binary: Literal[False] = False, encoding: str = "utf-8", errors: str = "strict", newline: str | None = None
) -> contextlib.AbstractContextManager[IO[str]]: ...


@overload
def atomic_write(
    path: Path, *, binary: Literal[True], encoding: str = "utf-8", errors: str = "strict", newline: str | None = None
) -> contextlib.AbstractContextManager[IO[bytes]]: ...


def atomic_write(
    path: Path, *, binary: bool = False, encoding: str = "utf-8", errors: str = "strict", newline: str | None = None
) -> contextlib.AbstractContextManager[IO[str]] | contextlib.AbstractContextManager[IO[bytes]]:
    """A file to write ``path``'s new content to; on a clean exit it replaces ``path`` (creating its folder), else it is removed."""
    if binary:
        return _atomic_bytes(path)
    return _atomic_text(path, encoding, errors, newline)


@contextlib.contextmanager
def _atomic_bytes(path: Path) -> Iterator[IO[bytes]]:
    with _temporary(path) as fd, open(fd, "wb") as f:
        yield f
        f.flush()


@contextlib.contextmanager
def _atomic_text(path: Path, encoding: str, errors: str, newline: str | None) -> Iterator[IO[str]]:
    with _temporary(path) as fd, open(fd, "w", encoding=encoding, errors=errors, newline=newline) as f:
        yield f
        f.flush()


def _is_device(path: Path) -> bool:
    """Whether ``path`` is a device or a pipe (``/dev/null``, ``/dev/full``, a FIFO): written into, never replaced."""
    try:
        mode = os.stat(path, follow_symlinks=False).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode)


def _open_device(path: Path) -> int | None:
    """``path`` (a device or a pipe) opened for writing; None for a pipe nobody reads (it is replaced, never waited on)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO with no reader (one left in a run folder): opening it would block for ever
            return None
        raise
    os.set_blocking(fd, True)  # a reader is there: it takes the bytes at its pace
    return fd


@contextlib.contextmanager
def _temporary(path: Path) -> Iterator[int]:
    path = Path(path)
    tmp: str | None = None
    with writing(path):
        fd = _open_device(path) if _is_device(path) else None
        if fd is not None:  # `--junit /dev/null`: the device gets the bytes (a full one says so), it is not replaced
            yield fd
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            os.fchmod(fd, FILE_MODE)
            yield fd
            os.replace(tmp, path)
            tmp = None
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


def write_text(path: Path, text: str, *, encoding: str = "utf-8", errors: str = "strict", newline: str | None = None) -> None:
    """Replace ``path`` with ``text`` atomically (:func:`atomic_write`)."""
    with atomic_write(path, encoding=encoding, errors=errors, newline=newline) as f:
        f.write(text)


def write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (:func:`atomic_write`)."""
    with atomic_write(path, binary=True) as f:
        f.write(data)


def open_append(path: Path) -> int:
    """A file descriptor appending to ``path`` (created if missing); a symbolic link there is refused with an OutputError.

    ``O_NOFOLLOW``: a link planted at ``path`` (a ``reviews.jsonl`` pointing
    out of the run folder) is never written through.
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    try:
        return os.open(path, flags, FILE_MODE)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno is not None and Path(path).is_symlink()):
            raise OutputError(path, OSError(errno.ELOOP, "it is a symbolic link; evalx does not write through links")) from None
        raise OutputError(path, exc) from None
