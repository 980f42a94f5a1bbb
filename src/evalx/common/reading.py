"""The one way evalx opens a file to read it: regular files only, size-capped, never a hang, one line when it cannot.

Everything evalx reads from disk goes through here: configs and ``.env``
files, datasets (whole files, and JSONL a line at a time) and the images and
documents their cases name, provider definitions, prompt, system, tools and
``{% include %}`` files, context files, traces, run files (``run.json``,
``results.jsonl``, ``summary.json``, ``reviews.jsonl``, ``batches.json``,
the stored ``config.yaml``), the CI system's event file, a Python target's
source (for its cache key) and caches. A path that is, or links to, something
other than a regular file — a FIFO, a device such as ``/dev/zero``, a
directory, a socket — is refused before it is opened (``FILE: not a regular
file (a FIFO)``): reading a FIFO waits for a writer for ever, and a device
never ends. The check is made again on the open descriptor (``fstat``), and
the open itself is non-blocking, so a file swapped for a FIFO between the
two cannot hang the reader either.

A file read whole is read against its kind's limit (:class:`FileKind`: a
config file 32 MiB, a dataset file 1 GiB, a summary 256 MiB...), named in
the error; a file read a line at a time (:func:`lines`) holds one line at a
time, each at most the kind's line limit, so a line that never ends costs
its limit, not the machine's memory. Every refusal is an
:class:`~evalx.errors.UnreadableFile` (an ``OSError`` too), whose message is
``FILE: reason``.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from evalx.common.json_types import JSON
from evalx.errors import UnreadableFile

__all__ = [
    "ATTACHMENT",
    "CACHE",
    "CI_EVENT",
    "CONFIG",
    "CONFIG_COPY",
    "DATASET",
    "DATASET_LINE",
    "PROVIDER",
    "REPORT",
    "RESULTS_LINE",
    "REVIEWS",
    "REVIEWS_LINE",
    "RUN_FILE",
    "RUN_RECORD",
    "SOURCE",
    "SUMMARY",
    "TEMPLATE",
    "TRACE",
    "FileKind",
    "check_regular",
    "is_regular",
    "lines",
    "open_regular",
    "read_bytes",
    "read_json",
    "read_text",
    "size_text",
    "stored_json",
]

log = logging.getLogger(__name__)

MiB = 1024 * 1024
GiB = 1024 * MiB


@dataclass(frozen=True)
class FileKind:
    """A kind of file evalx reads: its name in messages and the most bytes one may hold (a line, for a line kind)."""

    name: str
    limit: int
    #: what to do about a file past the limit, appended to the message
    hint: str = ""


CONFIG = FileKind("a config file", 32 * MiB)
#: a run's stored copy of its config (``runs/<id>/config.yaml``)
CONFIG_COPY = FileKind("a run's config.yaml", 32 * MiB)
#: a dataset file read whole (.json, .yaml, .csv, a case file of a directory)
DATASET = FileKind("a dataset file read whole", GiB, "; a .jsonl dataset is read a line at a time")
#: one line of a .jsonl dataset
DATASET_LINE = FileKind("a dataset line", 64 * MiB)
PROVIDER = FileKind("a provider definition", 4 * MiB)
#: a prompt, system, tools, context or ``{% include %}`` file (templates hold at most 8,000,000 characters)
TEMPLATE = FileKind("a template file", 32 * MiB)
#: an image or a document a case's input parts name (``{type: image, path}``)
ATTACHMENT = FileKind("an attachment (image or document)", 20 * MiB)
#: a production trace read by ``evalx capture``
TRACE = FileKind("a trace file", GiB)
RUN_RECORD = FileKind("a run record", 16 * MiB)
SUMMARY = FileKind("a run summary", 256 * MiB)
#: one line of ``results.jsonl`` (a cell; a cell's output is bounded by max_response_bytes, 64 MiB by default)
RESULTS_LINE = FileKind("a results line", 512 * MiB)
REVIEWS = FileKind("a reviews file", 256 * MiB)
#: one review mark
REVIEWS_LINE = FileKind("a review mark", MiB)
#: a cache file evalx wrote (the viewer's index of a run)
CACHE = FileKind("a cache file", 256 * MiB)
#: a run's report.html, served by the viewer
REPORT = FileKind("a report", GiB)
#: what a CI system says about the job (GitHub's ``GITHUB_EVENT_PATH``; its webhooks are at most 25 MB)
CI_EVENT = FileKind("a CI event file", 64 * MiB)
#: a Python target's source file, read for its cache key's digest
SOURCE = FileKind("a source file", 64 * MiB)
#: what evalx keeps in a run folder of its own (``batches.json``)
RUN_FILE = FileKind("a run file", 64 * MiB)

#: what each kind of file that is not a regular one is called in a message
_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISSOCK, "a socket"),
)
_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
#: the piece a line that went past its limit is skipped in
_SKIP = MiB


def size_text(n: int) -> str:
    """``n`` bytes as a person reads a limit: ``32 MiB``, ``1 GiB``, ``500 bytes``."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= size and n % size == 0:
            return f"{n // size:,} {unit}"
    return f"{n:,} bytes"


def _shown(path: str | os.PathLike[str], shown: str | None) -> str:
    """How a message names ``path``: ``shown``, else the path, relative when it is below the working folder."""
    if shown is not None:
        return shown
    text = os.fspath(path)
    if os.path.isabs(text):
        try:
            rel = os.path.relpath(text)
        except ValueError:  # another drive
            return text
        return text if rel.startswith("..") else rel
    return text


def _not_regular(mode: int) -> str | None:
    """The reason a file of ``mode`` is refused, or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    what = next((name for test, name in _KINDS if test(mode)), "not a file")
    return f"not a regular file ({what})"


def _failed(where: str, exc: OSError) -> UnreadableFile:
    code = exc.errno or 0
    missing = code in (errno.ENOENT, errno.ENOTDIR)
    reason = "no such file" if missing else (exc.strerror or str(exc)).lower().rstrip(".") or "cannot read it"
    if code == errno.ELOOP:
        reason = "a symlink loop"
    return UnreadableFile(where, reason, err=code, missing=missing)


def check_regular(path: str | os.PathLike[str], *, shown: str | None = None) -> os.stat_result:
    """The stat of ``path`` (links followed) when it is a regular file; :class:`UnreadableFile` when not, or missing.

    For a file another library opens (SQLite): the check, without the open.
    """
    where = _shown(path, shown)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _failed(where, exc) from None
    except ValueError:  # a NUL in the name
        raise UnreadableFile(where, "not a valid file name") from None
    reason = _not_regular(st.st_mode)
    if reason is not None:
        raise UnreadableFile(where, reason, err=errno.EISDIR if stat.S_ISDIR(st.st_mode) else 0)
    return st


def open_regular(path: str | os.PathLike[str], kind: FileKind | None = None, *, shown: str | None = None) -> BinaryIO:
    """``path`` opened for reading in binary, when it is (or links to) a regular file; else :class:`UnreadableFile`.

    The path is checked before it is opened (a device is never opened), opened
    without blocking (a FIFO put in its place meanwhile cannot hang the open)
    and checked again on the descriptor (nor the reads after it). With
    ``kind``, a file larger than ``kind.limit`` is refused too (a file read a
    line at a time whose whole is bounded). ``shown``: how messages name the
    file (the path, relative below the working folder, by default).
    """
    where = _shown(path, shown)
    check_regular(path, shown=where)
    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        raise _failed(where, exc) from None
    try:
        st = os.fstat(fd)
        reason = _not_regular(st.st_mode)
        if reason is not None:
            raise UnreadableFile(where, reason)
        if kind is not None and st.st_size > kind.limit:
            raise _too_large(where, kind)
        if _FLAGS & getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)  # a regular file's reads never wait; as a plain file object expects
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike[str], kind: FileKind, *, shown: str | None = None) -> bytes:
    """The whole of the regular file ``path``, at most ``kind.limit`` bytes; :class:`UnreadableFile` says why not."""
    where = _shown(path, shown)
    with open_regular(path, kind, shown=where) as f:
        try:
            want = min(os.fstat(f.fileno()).st_size, kind.limit) + 1  # its size (a read of n bytes sets n aside first)
            data = f.read(want)
            if len(data) == want:  # it grew since: the rest a piece at a time, up to the limit
                parts, total = [data], len(data)
                while total <= kind.limit and (piece := f.read(min(_SKIP, kind.limit + 1 - total))):
                    parts.append(piece)
                    total += len(piece)
                data = b"".join(parts)
        except OSError as exc:
            raise _failed(where, exc) from None
    if len(data) > kind.limit:
        raise _too_large(where, kind)
    return data


def read_text(path: str | os.PathLike[str], kind: FileKind, *, shown: str | None = None, encoding: str = "utf-8") -> str:
    """:func:`read_bytes` decoded (``utf-8-sig``: a leading byte-order mark dropped); text that is not UTF-8 is refused."""
    where = _shown(path, shown)
    data = read_bytes(path, kind, shown=where)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UnreadableFile(where, f"not UTF-8 text (line {line}, byte {exc.start})") from None


def lines(f: BinaryIO, kind: FileKind, *, stop: bool = False) -> Iterator[bytes | None]:
    """The lines of ``f`` (with their ``\\n``; the last one may lack it), each at most ``kind.limit`` bytes before it.

    A longer line is skipped to its end without being held, and stands as None
    in its place, so the caller counts it (a line number stays a line number);
    with ``stop``, the None is the last item (a caller for whom it is an error
    does not wait for the rest of a line that may never end).
    """
    limit = kind.limit
    read = f.readline
    while True:
        line = read(limit + 1)
        if not line:
            return
        if line.endswith(b"\n") or len(line) <= limit:  # a whole line (its text at most the limit), or the last one
            yield line
            continue
        if stop:
            yield None
            return
        while not line.endswith(b"\n"):  # the rest of the long line, a piece at a time
            line = read(_SKIP)
            if not line:
                break
        yield None


def read_json(path: str | os.PathLike[str], kind: FileKind, *, shown: str | None = None) -> JSON:
    """The JSON value of the regular file ``path`` (at most ``kind.limit`` bytes); :class:`UnreadableFile` or ``ValueError``."""
    data = read_bytes(path, kind, shown=shown)
    try:
        value: JSON = json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    return value


#: (file, reason) already warned about: a file read again and again (the viewer) is named once
_WARNED: set[tuple[str, str]] = set()


def stored_json(path: str | os.PathLike[str], kind: FileKind, *, shown: str | None = None) -> JSON:
    """For a file a run folder may lack, or hold damaged (``run.json``, ``summary.json``, a cache): its JSON value, or None.

    None when it is missing or not JSON, as before; one that is there but is
    not a regular file or is past ``kind``'s limit is named in a warning
    (once a process) and read as missing, never read.
    """
    try:
        return read_json(path, kind, shown=shown)
    except UnreadableFile as exc:
        if not exc.missing and (exc.file, exc.reason) not in _WARNED:
            _WARNED.add((exc.file, exc.reason))
            log.warning(f"{exc}; read as missing")
        return None
    except (OSError, ValueError):
        return None


def _too_large(where: str, kind: FileKind) -> UnreadableFile:
    return UnreadableFile(where, f"larger than the {size_text(kind.limit)} limit for {kind.name}{kind.hint}", err=errno.EFBIG)


def is_regular(path: Path) -> bool:
    """Whether ``path`` is (or links to) a regular file, without opening it (never blocks)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False
