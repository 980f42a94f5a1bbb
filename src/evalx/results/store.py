"""The run store: ``runs/<run_id>/`` and its files.

``results.jsonl`` is appended and flushed one line per finished cell, so a
killed run loses nothing that finished. When the run ends, the file is
rewritten in matrix order into a temporary file and atomically renamed over
the original (never edited in place).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import secrets
import time

try:
    import fcntl
except ImportError:  # pragma: no cover  (Windows)
    fcntl = None  # type: ignore[assignment]
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any, Protocol

from evalx.common.atomic import atomic_write, write_text
from evalx.common.json_types import JSON, JSONObject, as_object, json_encoder
from evalx.common.reading import RESULTS_LINE, check_regular, lines, open_regular
from evalx.errors import EvalxError, OutputError, writing
from evalx.models import OUT_OF_RANGE, finite_json, json_default, safe_value
from evalx.results.compact import CASE_KEYS, Expansion, LineDefaults, compact_cell, run_record, split_case, t0_of
from evalx.results.model import CellResult, RunSummary
from evalx.results.reviews import apply_marks, load_marks, unreviewed

RESULTS = "results.jsonl"
#: a latency past this (about 31 years) is not one a cell took: its line was edited
MAX_LATENCY_MS = 1e12


def _sound(result: CellResult) -> bool:
    """Whether a cell's fields can be read by every reader, which check what they use but count on three things: a
    ``status`` that is a string (any: an unknown one counts as an error), ``assertions`` that can be walked (a list, as
    written; not a number), a ``latency_ms`` that, if a number, is finite and at most :data:`MAX_LATENCY_MS` (a sum of
    two 1e308 overflows). A line that breaks one (edited, or restored from an artifact) is counted as unreadable."""
    status = result.get("status")
    if status is not None and type(status) is not str:
        return False
    if type(result.get("assertions")) in (int, float, bool):
        return False
    latency = result.get("latency_ms")
    return type(latency) not in (int, float) or -MAX_LATENCY_MS <= latency <= MAX_LATENCY_MS  # (NaN compares false)


def _unstorable(result: Any, exc: BaseException) -> None:
    """Turn ``result`` (in place: the summary gets the same) into an error saying why it could not be written."""
    text = result.get("output", {}).get("text")
    result["status"], result["score"], result["assertions"] = "error", None, []
    result["output"] = {"text": text if isinstance(text, str) else ""}
    result["error"] = f"evalx could not store this cell's output: {type(exc).__name__}: {exc}"
    result["traceback"] = None
    turns = result.get("turns")
    if isinstance(turns, list):  # a conversation: each turn's reply as its text only, as the cell's output
        result["turns"] = [_turn_text(turn) for turn in turns]
    result.update(safe_value(dict(result)))


def _turn_text(turn: Any) -> Any:
    """A conversation turn of a cell that could not be stored, with what can be: its message and its reply's text."""
    if not isinstance(turn, dict):
        return {"input": "", "output": {"text": ""}, "tool_calls": [], "assertions": []}
    text = as_object(turn.get("output")).get("text")
    message = turn.get("input")
    return {
        **{k: v for k, v in turn.items() if k in ("latency_ms", "usage", "cached")},
        "input": message if isinstance(message, str) else "",
        "output": {"text": text if isinstance(text, str) else ""},
        "tool_calls": [],
        "assertions": [],
    }


def _as_is(result: Any) -> Any:
    return result


def encode_storable(result: Any, shape: Callable[[Any], Any] = _as_is) -> str:
    """``shape(result)`` as one JSON line: what a target returned that JSON cannot hold is its ``repr``, and a cell
    that cannot be written at all (a mapping keyed by tuples, a value that contains itself) becomes, in place, an
    error saying why. The one way a cell is made storable, by the writer here and by a Ray actor before a cell
    leaves its process (:func:`storable`)."""
    try:
        return dumps(shape(result))
    except (TypeError, ValueError, RecursionError) as exc:  # e.g. a mapping keyed by tuples: the cell's error, not a lost run
        _unstorable(result, exc)
    try:
        return dumps(shape(result))
    except (TypeError, ValueError, RecursionError) as exc:  # what is left (a simulated user's record...): the error alone
        for key in ("turns", "simulation", "trace"):
            result.pop(key, None)
        result["error"] = f"{result['error']}; and what is left of it cannot be stored either: {type(exc).__name__}"
        return dumps(shape(result))


def storable(result: CellResult) -> CellResult:
    """``result`` as ``results.jsonl`` will hold it (plain JSON values, :func:`encode_storable`): what a Ray actor sends
    back, so whatever a target returned, the driver receives and writes what a local run writes."""
    stored: CellResult = json.loads(encode_storable(result))
    return stored


#: lines the writer holds for one write(2) at most: past it they are written at once
MAX_PENDING_LINES = 256


def new_run_id(now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{stamp}-{secrets.token_hex(3)}"


_json_default = json_default  # what JSON cannot hold: its safe repr (a __repr__ that raises, even SystemExit, is named)


#: one encoder for every line (``json.dumps`` with options builds a new one per call); a value that contains
#: itself raises RecursionError, which :func:`encode_storable` turns into the cell's error as any unstorable value
_ENCODE = json_encoder(default=_json_default, allow_nan=False)


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


class CaseSpans(Protocol):
    """Where each cell's case lies in matrix order (a plan's :class:`~evalx.execution.plan.PlanCells`)."""

    total: int

    def case_span(self, index: int) -> tuple[int, int]:
        """(the index of the case's first cell, how many cells the case has) for cell ``index``."""
        ...


class ResultWriter:
    """Appends results as they finish, in results format v2 (:mod:`evalx.results.compact`); orders the file at the end.

    ``run_id`` and ``target_types`` go in the file's first line (the run
    record). With ``cases`` (the plan's), a case with several cells gets a
    case record before its first cell written, and its cells leave the case
    out; without, every cell carries its case. Appending to a file written by
    an evalx that wrote v1 lines goes on writing v1 lines, so a file is never
    half one format.
    """

    def __init__(
        self,
        run_dir: Path,
        *,
        append: bool = False,
        run_id: str = "",
        target_types: dict[str, str] | None = None,
        cases: CaseSpans | None = None,
        dataset: str | None = None,
    ) -> None:
        self.path = run_dir / RESULTS
        self._types = dict(target_types or {})
        self._record = run_record(run_id, self._types, dataset)
        self._cases = cases
        # a case record written, by the index of the case's first cell (a byte a cell: no set of a million ints)
        self._recorded = bytearray(cases.total) if cases is not None else bytearray()
        # each line's sort key (2 x its cell's index + 1; a case record: 2 x its first cell's index), offset and length
        self._keys, self._starts, self._lengths = array("q"), array("q"), array("q")
        self._pending: list[bytes] = []  # lines not written yet: written before the event loop next waits
        self._scheduled = False
        self._failed: OutputError | None = None  # a write that failed: raised by every later write and close()
        #: called after each write of lines to the file (:meth:`evalx.reports.follow.Follower.wake`), or None
        self.after_write: Callable[[], None] | None = None
        self.v1 = False
        with writing(self.path):
            # a FIFO or a device in the run folder: refused, never opened (its open would wait for a reader); none yet
            # (a resumed run whose before_run hook failed): created
            if append and (self.path.exists() or self.path.is_symlink()):
                check_regular(self.path)
            # unbuffered: one write(2) a line, and a failed one can be cut off without a buffer that still holds it
            if self.path.is_symlink():  # a link planted in the run folder: never written through
                raise OSError(errno.ELOOP, "it is a symbolic link; evalx does not write through links")
            self._file: IO[bytes] = open(self.path, "ab" if append else "wb", buffering=0)
        with writing(self.path):
            if append:
                self._index_existing()
            self._end = self._file.seek(0, os.SEEK_END)  # where the next line goes, kept here: tell() on a raw file is a syscall
            if self._end == 0:
                self._put((dumps(self._record) + "\n").encode("utf-8"), -1)
        defaults = self._record.get("defaults")
        self._defaults: LineDefaults = defaults if isinstance(defaults, dict) else {}
        self._t0 = t0_of(self._defaults)
        # a cell line's shape, with and without its case's fields: made once for the run, not a closure a cell
        self._with_case = partial(compact_cell, target_types=self._types, with_case=True, defaults=self._defaults, t0=self._t0)
        self._without_case = partial(compact_cell, target_types=self._types, with_case=False, defaults=self._defaults, t0=self._t0)

    def _index_existing(self) -> None:
        good_end = 0
        with open_regular(self.path) as f:
            offset = 0
            for number, raw in enumerate(lines(f, RESULTS_LINE)):
                if raw is None:  # a line past the limit: not a cell, kept where it is
                    offset = f.tell()
                    continue
                if raw.endswith(b"\n"):
                    try:
                        value = json.loads(raw)
                        kind = value.get("kind")
                        if number == 0:
                            self.v1 = kind != "run"
                        if kind == "run":
                            key = -1
                            self._record = value
                        elif kind == "case":
                            first = int(value["first_index"])
                            key = 2 * first
                            if 0 <= first < len(self._recorded):
                                self._recorded[first] = 1
                        else:
                            key = 2 * int(value["index"]) + 1
                    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
                        offset += len(raw)
                        continue
                    self._keys.append(key)
                    self._starts.append(offset)
                    self._lengths.append(len(raw))
                    good_end = offset + len(raw)
                offset += len(raw)
        # drop a torn last line (the process died mid-write)
        if good_end < self.path.stat().st_size:
            self._file.truncate(good_end)

    def write(self, result: CellResult) -> None:
        index = int(result["index"])
        if self.v1:
            self._write_line(result, _as_is, 2 * index + 1)
            return
        spans = self._cases
        with_case = True
        if spans is not None and 0 <= index < spans.total:
            first, n = spans.case_span(index)
            if n > 1:
                with_case = False
                if not self._recorded[first]:
                    record = split_case(result, n)
                    record["first_index"] = first
                    self._write_line(record, _as_is, 2 * first)
                    self._recorded[first] = 1
        self._write_line(result, self._with_case if with_case else self._without_case, 2 * index + 1)

    def _write_line(self, value: Any, shape: Callable[[Any], Any], key: int) -> None:
        text = encode_storable(value, shape)
        try:
            line = (text + "\n").encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate the executor did not see (a judge's reply...): made safe here, for every reader
            value.update(safe_value(dict(value)))  # in place: the summary gets the same result
            line = (dumps(shape(value)) + "\n").encode("utf-8")
        self._put(line, key)

    def _put(self, line: bytes, key: int) -> None:
        """Append ``line``: written before the event loop next waits (lines of one loop turn in one write), else now."""
        if self._failed is not None:
            raise self._failed
        self._pending.append(line)
        self._keys.append(key)
        self._starts.append(self._end)
        self._lengths.append(len(line))
        self._end += len(line)
        if len(self._pending) >= MAX_PENDING_LINES:  # cells that end without the loop ever waiting (an async target that never
            self.flush()  # awaits): written now, not held until the loop turns
            return
        if self._scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:
            self.flush()
        else:  # the cells that finish in this turn of the loop (a batch from the thread pool...) share one write(2)
            self._scheduled = True
            loop.call_soon(self._flush_soon)

    def _flush_soon(self) -> None:
        self._scheduled = False
        try:
            self.flush()
        except OutputError:
            pass  # kept in self._failed: the next write, or close(), raises it in the run's own frame

    def flush(self) -> None:
        """Write the lines not written yet; on failure the file keeps whole lines only, and :class:`OutputError` is raised."""
        if self._failed is not None:
            raise self._failed
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        offset = self._end - len(data)
        try:  # (not `with writing(...)`: a context manager costs more than the write on the hot path)
            view = memoryview(data)
            while view:
                view = view[self._file.write(view) or 0 :]
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._file.fileno(), offset)  # never a torn line (best effort: the disk is full)
                self._file.seek(offset)
            n = len(self._pending)  # these lines are not in the file: forget them
            del self._keys[-n:], self._starts[-n:], self._lengths[-n:]
            self._end = offset
            self._pending.clear()
            self._failed = OutputError(self.path, exc)
            raise self._failed from None
        self._pending.clear()
        if self.after_write is not None:
            self.after_write()

    def _order(self) -> Iterable[int]:
        """The lines' positions in matrix order (the run record first, a case record before its case's first cell).

        Sort keys are dense (2 x a cell index, + 1 for the cell itself): each line
        is placed in an array of slots by its key, 8 bytes a slot, rather than
        sorting a million Python ints.
        """
        keys = self._keys
        top = max(keys, default=-1) + 2
        if top > 4 * len(keys) + 16:  # sparse keys (a hand-made file): sort them
            return sorted(range(len(keys)), key=keys.__getitem__)
        slots = array("q", bytes(8 * top))  # line position + 1 by key + 1 (0: no line); the run record's key is -1
        for position, key in enumerate(keys):
            if 0 <= key + 1 < top and not slots[key + 1]:
                slots[key + 1] = position + 1
        return (p - 1 for p in slots if p)

    def finished_indexes(self) -> Iterator[int]:
        """The index of every cell in the file."""
        return (k >> 1 for k in self._keys if k > 0 and k & 1)

    def close(self, *, reorder: bool = True) -> None:
        try:
            self.flush()
        finally:
            with writing(self.path):
                self._file.close()
        if not reorder:
            return
        keys = self._keys
        if all(keys[i] <= keys[i + 1] for i in range(len(keys) - 1)):
            return  # already in matrix order
        order = self._order()
        with writing(self.path), open(self.path, "rb") as src, atomic_write(self.path, binary=True) as dst:
            for i in order:
                src.seek(self._starts[i])
                dst.write(src.read(self._lengths[i]))
            dst.flush()
            os.fsync(dst.fileno())


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

    def record(self, summary: RunSummary) -> None:
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


#: the C scanner ``json.loads`` ends in, called without its Python layers (encoding sniffing, decode, raw_decode)
_SCAN_ONCE: Any = getattr(json.JSONDecoder(), "scan_once")  # noqa: B009  (an attribute typeshed does not list)


def _loads_line(raw: bytes) -> Any:
    """``json.loads(raw)`` for a UTF-8 line ending in a newline, a few hundred ns sooner; the same value, the same errors."""
    try:
        text = raw.decode("utf-8", "surrogatepass")
        value, end = _SCAN_ONCE(text, 0)
    except (StopIteration, UnicodeDecodeError):  # not a value at its first byte (or not UTF-8): json.loads says what
        return json.loads(raw)
    if end != len(text) - 1 and text[end:].strip():  # more after the value: json.loads raises "Extra data"
        return json.loads(raw)
    return value


def by_case(results: Iterable[CellResult]) -> Iterator[list[CellResult]]:
    """The cells a case at a time, for cells in plan order (where a case's cells follow each other)."""
    group: list[CellResult] = []
    key: tuple[Any, Any] | None = None
    for result in results:
        here = (result.get("dataset"), result.get("case_id"))
        if group and here != key:
            yield group
            group = []
        key = here
        group.append(result)
    if group:
        yield group


def read_results(path: Path, problems: ReadProblems | None = None, *, raw: bool = False) -> Iterator[CellResult]:
    """Yield every readable cell, each once (its first line), with every v1 key; the one reader of ``results.jsonl``.

    Review marks (``reviews.jsonl`` beside the file: :mod:`evalx.results.reviews`)
    are applied here, so every report, gate and comparison counts them; ``raw``
    reads the cells as the run wrote them (for code that writes results again:
    a resume, a rerun, a merge).
    """
    cells = _read_stored(path, problems)
    if raw:
        return cells
    marks = load_marks(path.parent)
    return apply_marks(cells, marks) if marks else cells


def _read_stored(path: Path, problems: ReadProblems | None = None) -> Iterator[CellResult]:
    """Every readable cell of ``path`` as stored (:func:`read_results` without review marks): :class:`LineReader`'s cells."""
    reader = LineReader(problems)
    with open_regular(path) as f:  # a FIFO or a device is refused, never read (UnreadableFile)
        for number, raw in enumerate(lines(f, RESULTS_LINE), 1):  # a line at a time, each at most RESULTS_LINE's size
            if raw is None:  # a line past the limit: skipped without being held, counted
                if problems is not None:
                    problems.unreadable_lines.append(number)
                continue
            yield from reader.read(raw, number)  # (one cell, or none: a tuple, not a generator a line)


class LineReader:
    """The cells of a results file's lines, read in the file's order; what every reader of ``results.jsonl`` parses with.

    Reads v1 files (every line a whole cell) and v2 ones (a run record, case
    records, compact cell lines: :mod:`evalx.results.compact`), and yields
    the same full cells for both. A case record is kept until the last of its
    cells is read, so memory stays flat in a file in matrix order.

    What it skips is counted in ``problems`` when given: a line that is not a
    JSON object (torn by a kill, garbage, a block of NUL bytes) by its line
    number, a second line for the same cell ``index`` (two writers) by that
    index. NUL bytes around a line (left by a crash on some file systems)
    are dropped and the line read. Lines are parsed, not validated: a line
    from an older evalx (or edited by hand) may lack keys or hold other types,
    and readers check before use; only a cell no reader could take (a
    ``status`` that is not a string, ``assertions`` that are a number, a
    latency past 10^12 ms: :func:`_sound`) is counted as unreadable too.
    """

    def __init__(self, problems: ReadProblems | None = None) -> None:
        self.problems = problems
        self._seen = bytearray()  # a byte a cell index: no set of a million ints
        self._others: set[int] = set()  # indexes too large for the bytes (a hand-edited line)
        self._run: Expansion | None = None  # the run record's, each cell line is expanded with
        self._default_dataset: JSON = None  # the dataset a v2 cell line leaves out
        self._cases: dict[tuple[Any, Any], list[Any]] = {}  # (dataset, case id) -> [its record, cells still to read]

    def read(self, raw: bytes, number: int = 0) -> Sequence[CellResult]:
        """The cells of line ``number`` (``raw``, with its newline; the last line of a killed run may lack it)."""
        problems = self.problems
        if raw.endswith(b"\n") and b"\0" not in raw:  # the usual whole line: parsed once, no copies
            try:
                value = _loads_line(raw)
            except (ValueError, RecursionError):
                value = None
            if isinstance(value, dict):
                result = self._cell(value)
                if result is not None:
                    if _sound(result):
                        return (result,)
                    if problems is not None:
                        problems.unreadable_lines.append(number)
                return ()
        return list(self._pieces(raw, number))

    def _pieces(self, raw: bytes, number: int) -> Iterator[CellResult]:
        """The cells of a line that is not one whole JSON object: torn, blank, with NUL bytes, or not an object."""
        problems = self.problems
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
            result = self._cell(value)
            if result is not None:
                if _sound(result):
                    yield result
                elif problems is not None and number not in problems.unreadable_lines[-1:]:
                    problems.unreadable_lines.append(number)

    def _first_time(self, value: JSONObject) -> bool:
        """False for a cell already read (counted as a duplicate): each cell is kept once, its first line."""
        index = value.get("index")
        if type(index) is not int:
            return True
        seen = self._seen
        if 0 <= index < 1 << 32:
            if index >= len(seen):
                seen.extend(bytes(max(index + 1 - len(seen), len(seen))))
            if not seen[index]:
                seen[index] = 1
                return True
        elif index not in self._others:
            self._others.add(index)
            return True
        if self.problems is not None:  # read before: a duplicate
            self.problems.duplicate_cells.append(index)
        return False

    def _cell(self, value: JSONObject) -> CellResult | None:
        kind = value.get("kind")
        run = self._run
        if kind is None:
            if run is None or "version" in value:  # a v1 line (a file without a run record is v1): whole as it is
                return value if self._first_time(value) else None  # type: ignore[return-value]
            if not self._first_time(value):
                return None
            record = None
            cases = self._cases
            if cases and not any(k in value for k in CASE_KEYS):
                key = (value.get("dataset", self._default_dataset), value.get("case_id"))
                entry = cases.get(key)
                if entry is not None:
                    record = entry[0]
                    entry[1] -= 1
                    if entry[1] <= 0:
                        del cases[key]
            return run(value, record)
        if kind == "run":
            self._run = Expansion(value)
            self._default_dataset = as_object(value.get("defaults")).get("dataset")
        elif kind == "case":
            n = value.get("cells")
            self._cases[(value.get("dataset"), value.get("case_id"))] = [value, n if type(n) is int else 1 << 62]
        return None


def rewrite_results(path: Path, results: Iterable[CellResult]) -> None:
    """Replace ``path`` atomically with ``results`` (a damaged file, cleaned before a resume appends).

    A v1 file stays v1 (whole lines); a v2 file gets its run record and every
    cell with its case (no case records), so a resume can append to it.
    """
    v1 = _first_line_is_v1(path)
    with atomic_write(path, binary=True) as dst:
        run_written = v1
        for result in results:
            if not run_written:
                types = {str(result.get("target")): str(result.get("target_type"))}
                dst.write((dumps(run_record(str(result.get("run_id") or ""), types)) + "\n").encode("utf-8", "backslashreplace"))
                run_written = True
            if "review" in result:  # a cell read with its review mark: written as the run wrote it (marks stay in reviews.jsonl)
                result = unreviewed(result)
            line = result if v1 else compact_cell(result, {}, with_case=True)
            dst.write((dumps(line) + "\n").encode("utf-8", "backslashreplace"))
        dst.flush()
        os.fsync(dst.fileno())


def _first_line_is_v1(path: Path) -> bool:
    """Whether ``path`` was written in results format v1 (its first readable line is a whole cell, not a run record)."""
    try:
        with open_regular(path) as f:
            for raw in lines(f, RESULTS_LINE):
                if raw is None:
                    continue
                try:
                    value = json.loads(raw.strip(b"\0"))
                except (ValueError, RecursionError):
                    continue
                return not (isinstance(value, dict) and value.get("kind") == "run")
    except OSError:
        pass
    return False


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
    write_text(path, json_text(value) + "\n", errors="backslashreplace")
