"""The run store: ``runs/<run_id>/`` and its files.

``results.jsonl`` is appended and flushed one line per finished cell, so a
killed run loses nothing that finished. When the run ends, the file is
rewritten in matrix order into a temporary file and atomically renamed over
the original (never edited in place).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from evalx.results.model import CellResult

RESULTS = "results.jsonl"


def new_run_id(now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{stamp}-{secrets.token_hex(3)}"


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return repr(value)


#: one encoder for every line (``json.dumps`` with options builds a new one per call)
_ENCODER = json.JSONEncoder(ensure_ascii=False, default=_json_default, separators=(",", ":"))


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
    return "".join(_MAKE({}, _json_default, _STRINGS, None, ":", ",", False, False, True)(value, 0))


def _encoder() -> Callable[[Any], str]:
    """:func:`_c_encode` where the C encoder exists and gives ``_ENCODER``'s text, else ``_ENCODER.encode``."""
    if _MAKE is None:
        return _ENCODER.encode
    probe = {"a": [1, -2.5, float("nan"), None, True, 'é\u2028"<', ("t",)], "b": {}, "c": b"x"}
    try:
        same = _c_encode(probe) == _ENCODER.encode(probe) and _c_encode("s") == _ENCODER.encode("s")
    except Exception:
        same = False
    return _c_encode if same else _ENCODER.encode


_MAKE: Any = getattr(json.encoder, "c_make_encoder", None)
_STRINGS = json.encoder.encode_basestring
#: the C encoder without the circular-reference check (no state kept between calls)
_UNCHECKED: Any = _MAKE(None, _json_default, _STRINGS, None, ":", ",", False, False, True) if _MAKE is not None else None
_ENCODE = _encoder()


def dumps(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, default=_json_default, separators=(",", ":"))``."""
    return _ENCODE(value)


class ResultWriter:
    """Appends results as they finish; remembers where each line is for the final reorder."""

    def __init__(self, run_dir: Path, *, append: bool = False) -> None:
        self.path = run_dir / RESULTS
        self._file: IO[bytes] = open(self.path, "ab" if append else "wb")
        self._offsets: list[tuple[int, int, int]] = []  # (index, offset, length)
        if append:
            self._index_existing()
        self._file.seek(0, os.SEEK_END)

    def _index_existing(self) -> None:
        good_end = 0
        with open(self.path, "rb") as f:
            offset = 0
            for raw in f:
                if raw.endswith(b"\n"):
                    try:
                        index = int(json.loads(raw)["index"])
                    except (ValueError, KeyError, TypeError):
                        offset += len(raw)
                        continue
                    self._offsets.append((index, offset, len(raw)))
                    good_end = offset + len(raw)
                offset += len(raw)
        # drop a torn last line (the process died mid-write)
        if good_end < self.path.stat().st_size:
            self._file.truncate(good_end)

    def write(self, result: CellResult) -> None:
        text = dumps(result)
        try:
            line = (text + "\n").encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate from a target: keep it, as a JSON \ud800 escape
            line = (json.dumps(result, ensure_ascii=True, default=_json_default, separators=(",", ":")) + "\n").encode("ascii")
        offset = self._file.tell()
        self._file.write(line)
        self._file.flush()
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
        self._file.close()
        if not reorder:
            return
        order = sorted(self._offsets)
        if [o for _, o, _ in order] == sorted(o for _, o, _ in order):
            return  # already in matrix order
        tmp = self.path.with_suffix(".jsonl.tmp")
        with open(self.path, "rb") as src, open(tmp, "wb") as dst:
            for _, offset, length in order:
                src.seek(offset)
                dst.write(src.read(length))
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(tmp, self.path)


def read_results(path: Path) -> Iterator[CellResult]:
    """Yield every complete result line; a torn last line is dropped.

    Lines are parsed, not validated: a line from an older evalx (or edited by
    hand) may lack keys or hold other types, and readers check before use.
    """
    with open(path, "rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break
            try:
                yield json.loads(raw)
            except ValueError:
                continue


def write_json(path: Path, value: Any) -> None:
    """``value`` as indented JSON, replacing ``path`` atomically.

    A lone surrogate (from a target's broken output) cannot be UTF-8; it is
    written as its JSON escape (``\\udc80``), which reads back as the same string.
    """
    tmp = path.with_suffix(path.suffix + ".tmp")
    text = json.dumps(value, ensure_ascii=False, indent=2, default=_json_default) + "\n"
    tmp.write_text(text, encoding="utf-8", errors="backslashreplace")
    os.replace(tmp, path)
