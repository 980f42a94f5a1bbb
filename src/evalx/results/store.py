"""The run store: ``runs/<run_id>/`` and its files.

``results.jsonl`` is appended and flushed one line per finished cell, so a
killed run loses nothing that finished. When the run ends, the file is
rewritten in matrix order into a temporary file and atomically renamed over
the original (never edited in place).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time

try:
    import fcntl
except ImportError:  # pragma: no cover  (Windows)
    fcntl = None  # type: ignore[assignment]
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from evalx.errors import EvalxError, OutputError, writing
from evalx.models import OUT_OF_RANGE, finite_json, safe_value
from evalx.results.model import CellResult

RESULTS = "results.jsonl"


def _unstorable(result: CellResult, exc: BaseException) -> None:
    """Turn ``result`` (in place: the summary gets the same) into an error saying why it could not be written."""
    text = result.get("output", {}).get("text")
    result["status"], result["score"], result["assertions"] = "error", None, []
    result["output"] = {"text": text if isinstance(text, str) else ""}
    result["error"] = f"evalx could not store this cell's output: {type(exc).__name__}: {exc}"
    result["traceback"] = None
    result.update(safe_value(dict(result)))


def new_run_id(now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{stamp}-{secrets.token_hex(3)}"


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    try:
        return repr(value)
    except Exception as exc:  # a target's object whose __repr__ raises
        return f"<{type(value).__name__} object: repr failed: {type(exc).__name__}>"


#: one encoder for every line (``json.dumps`` with options builds a new one per call)
_ENCODER = json.JSONEncoder(ensure_ascii=False, default=_json_default, separators=(",", ":"), allow_nan=False)


def _c_encode(value: Any) -> str:
    """``_ENCODER.encode(value)`` without its per-call Python layers: the C encoder it builds, built and called here.

    The line is first encoded without the circular-reference check (a tenth of the work);
    a value that recurses too deep for that — a cycle, or nesting past the recursion
    limit — is encoded again with it, which raises what ``_ENCODER`` raises.
    """
    try:
        return "".join(_UNCHECKED(value, 0))
    except RecursionError:
        pass
    return "".join(_MAKE({}, _json_default, _STRINGS, None, ":", ",", False, False, False)(value, 0))


def _encoder() -> Callable[[Any], str]:
    """:func:`_c_encode` where the C encoder exists and gives ``_ENCODER``'s text, else ``_ENCODER.encode``."""
    if _MAKE is None:
        return _ENCODER.encode
    probe = {"a": [1, -2.5, 1e300, None, True, 'é\u2028"<', ("t",)], "b": {}, "c": b"x"}
    try:
        same = _c_encode(probe) == _ENCODER.encode(probe) and _c_encode("s") == _ENCODER.encode("s")
    except Exception:
        same = False
    return _c_encode if same else _ENCODER.encode


_MAKE: Any = getattr(json.encoder, "c_make_encoder", None)
_STRINGS = json.encoder.encode_basestring
#: the C encoder without the circular-reference check (no state kept between calls)
_UNCHECKED: Any = _MAKE(None, _json_default, _STRINGS, None, ":", ",", False, False, False) if _MAKE is not None else None
_ENCODE = _encoder()


def dumps(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, default=_json_default, separators=(",", ":"), allow_nan=False)``.

    Strict JSON always: a NaN or an infinity (a server's JSON may hold one) is written as ``null``.
    """
    try:
        return _ENCODE(value)
    except ValueError as exc:
        if not str(exc).startswith(OUT_OF_RANGE):
            raise
    return _ENCODE(finite_json(value))


class ResultWriter:
    """Appends results as they finish; remembers where each line is for the final reorder."""

    def __init__(self, run_dir: Path, *, append: bool = False) -> None:
        self.path = run_dir / RESULTS
        with writing(self.path):
            # unbuffered: one write(2) a line, and a failed one can be cut off without a buffer that still holds it
            self._file: IO[bytes] = open(self.path, "ab" if append else "wb", buffering=0)
        self._offsets: list[tuple[int, int, int]] = []  # (index, offset, length)
        with writing(self.path):
            if append:
                self._index_existing()
            self._end = self._file.seek(0, os.SEEK_END)  # where the next line goes, kept here: tell() on a raw file is a syscall

    def _index_existing(self) -> None:
        good_end = 0
        with open(self.path, "rb") as f:
            offset = 0
            for raw in f:
                if raw.endswith(b"\n"):
                    try:
                        index = int(json.loads(raw)["index"])
                    except (ValueError, KeyError, TypeError, RecursionError):
                        offset += len(raw)
                        continue
                    self._offsets.append((index, offset, len(raw)))
                    good_end = offset + len(raw)
                offset += len(raw)
        # drop a torn last line (the process died mid-write)
        if good_end < self.path.stat().st_size:
            self._file.truncate(good_end)

    def write(self, result: CellResult) -> None:
        try:
            text = dumps(result)
        except (TypeError, ValueError, RecursionError) as exc:  # e.g. a mapping keyed by tuples: the cell's error, not a lost run
            _unstorable(result, exc)
            text = dumps(result)
        try:
            line = (text + "\n").encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate the executor did not see (a judge's reply...): made safe here, for every reader
            result.update(safe_value(dict(result)))  # in place: the summary gets the same result
            line = (dumps(result) + "\n").encode("utf-8")
        offset = self._end
        try:  # (not `with writing(...)`: a context manager a line costs more than the write on the hot path)
            view = memoryview(line)
            while view:
                view = view[self._file.write(view) or 0 :]
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._file.fileno(), offset)  # never a torn line (best effort: the disk is full)
                self._file.seek(offset)
            raise OutputError(self.path, exc) from None
        self._end = offset + len(line)
        self._offsets.append((int(result["index"]), offset, len(line)))

    @property
    def lines(self) -> list[tuple[int, int, int]]:
        """(index, offset, length) of every line in the file so far, in file order."""
        return self._offsets

    @property
    def count(self) -> int:
        return len(self._offsets)

    def finished_indexes(self) -> set[int]:
        return {i for i, _, _ in self._offsets}

    def close(self, *, reorder: bool = True) -> None:
        with writing(self.path):
            self._file.close()
        if not reorder:
            return
        order = sorted(self._offsets)
        if [o for _, o, _ in order] == sorted(o for _, o, _ in order):
            return  # already in matrix order
        tmp = self.path.with_suffix(".jsonl.tmp")
        with writing(self.path, tmp=tmp), open(self.path, "rb") as src, open(tmp, "wb") as dst:
            for _, offset, length in order:
                src.seek(offset)
                dst.write(src.read(length))
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(tmp, self.path)


class RunLock:
    """An exclusive lock on a run folder (``flock`` on the folder itself), held while a run writes there.

    A second ``evalx run --resume`` of the same run, or a resume while the run
    still runs, would interleave lines in ``results.jsonl``: it is refused with
    an :class:`~evalx.errors.EvalxError` (exit 2). The lock goes with the
    process, however it ends (even SIGKILL), and leaves no file behind.
    """

    def __init__(self, run_dir: Path) -> None:
        self._fd: int | None = None
        if fcntl is None:  # no flock here (Windows): unguarded, as before
            return
        fd = os.open(run_dir, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise EvalxError(f"run {run_dir.name} is in use by another evalx process: wait for it to finish, then --resume it") from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the folder releases the lock
            self._fd = None


@dataclass
class ReadProblems:
    """What :func:`read_results` skipped: damaged lines (by line number) and repeated cells (by index)."""

    unreadable_lines: list[int] = field(default_factory=list)
    duplicate_cells: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.unreadable_lines or self.duplicate_cells)

    def record(self, summary: dict[str, Any]) -> None:
        """Say in ``summary`` what could not be read (``unreadable_lines``, ``duplicate_cells``), when anything."""
        if self.unreadable_lines:
            summary["unreadable_lines"] = list(self.unreadable_lines)
        if self.duplicate_cells:
            summary["duplicate_cells"] = sorted(set(self.duplicate_cells))

    def warning(self, path: Path) -> str | None:
        """One line naming what was skipped, or None when nothing was."""
        parts = []
        if self.unreadable_lines:
            parts.append(f"{len(self.unreadable_lines)} unreadable line(s) skipped ({_listed(self.unreadable_lines, 'line')})")
        if self.duplicate_cells:
            cells = sorted(set(self.duplicate_cells))
            parts.append(f"{len(self.duplicate_cells)} duplicate line(s) of {len(cells)} cell(s) ignored ({_listed(cells, 'cell')})")
        return f"{path}: " + "; ".join(parts) + ": the figures leave them out" if parts else None


def _listed(numbers: list[int], noun: str, most: int = 5) -> str:
    shown = ", ".join(str(n) for n in numbers[:most])
    more = f" and {len(numbers) - most} more" if len(numbers) > most else ""
    return f"{noun}{'s' if len(numbers) > 1 else ''} {shown}{more}"


def read_results(path: Path, problems: ReadProblems | None = None) -> Iterator[CellResult]:
    """Yield every readable result line, each cell once (its first line); the one reader of ``results.jsonl``.

    What it skips is counted in ``problems`` when given: a line that is not a
    JSON object (torn by a kill, garbage, a block of NUL bytes) by its line
    number, a second line for the same cell ``index`` (two writers) by that
    index. NUL bytes around a line (left by a crash on some file systems)
    are dropped and the line read. Lines are parsed, not validated: a line
    from an older evalx (or edited by hand) may lack keys or hold other types,
    and readers check before use.
    """
    seen: set[int] = set()

    def first_time(value: dict[str, Any]) -> bool:
        """False for a cell already read (counted as a duplicate): each cell is kept once, its first line."""
        index = value.get("index")
        if type(index) is int:
            if index in seen:
                if problems is not None:
                    problems.duplicate_cells.append(index)
                return False
            seen.add(index)
        return True

    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            if raw.endswith(b"\n") and b"\0" not in raw:  # the usual whole line: parsed once, no copies
                try:
                    value = json.loads(raw)
                except (ValueError, RecursionError):
                    value = None
                if isinstance(value, dict):
                    if first_time(value):
                        yield value  # type: ignore[misc]
                    continue
            # anything else (blank, torn, NUL bytes, not an object) as below
            if not raw.endswith(b"\n"):  # the last line, torn by a kill
                pieces = [raw]
            elif b"\0" in raw:  # NUL blocks: the text between them may still be whole lines
                pieces = [p + b"\n" for p in raw[:-1].split(b"\0") if p.strip()]
            else:
                pieces = [raw]
            for piece in pieces:
                if not piece.strip():
                    continue
                try:
                    value = json.loads(piece) if piece.endswith(b"\n") else None
                except (ValueError, RecursionError):
                    value = None
                if not isinstance(value, dict):
                    if problems is not None and number not in problems.unreadable_lines[-1:]:
                        problems.unreadable_lines.append(number)
                    continue
                if first_time(value):
                    yield value  # type: ignore[misc]


def rewrite_results(path: Path, results: list[CellResult]) -> None:
    """Replace ``path`` atomically with ``results``, one line each (a damaged file, cleaned before a resume appends)."""
    tmp = path.with_suffix(".jsonl.tmp")
    with writing(path, tmp=tmp), open(tmp, "wb") as dst:
        for result in results:
            dst.write((dumps(result) + "\n").encode("utf-8", "backslashreplace"))
        dst.flush()
        os.fsync(dst.fileno())
    os.replace(tmp, path)


def json_text(value: Any) -> str:
    """``value`` as indented, strict JSON (``allow_nan=False``): a NaN or an infinity is written as ``null``."""
    try:
        return json.dumps(value, ensure_ascii=False, indent=2, default=_json_default, allow_nan=False)
    except ValueError as exc:
        if not str(exc).startswith(OUT_OF_RANGE):
            raise
    return json.dumps(finite_json(value), ensure_ascii=False, indent=2, default=_json_default, allow_nan=False)


def write_json(path: Path, value: Any) -> None:
    """``value`` as indented JSON, replacing ``path`` atomically.

    A lone surrogate (from a target's broken output) cannot be UTF-8; it is
    written as its JSON escape (``\\udc80``), which reads back as the same string.
    """
    tmp = path.with_suffix(path.suffix + ".tmp")
    text = json_text(value) + "\n"
    with writing(path, tmp=tmp):
        tmp.write_text(text, encoding="utf-8", errors="backslashreplace")
        os.replace(tmp, path)
