"""Text a report writes in pieces and copies out once: gathered in batches, kept in memory up to a size, then in a temporary file."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import IO


class Spool:
    """Text appended piece by piece, written to a ``SpooledTemporaryFile`` ``batch`` characters at a time.

    Each write to a spool checks its size (~1 µs), so pieces are joined first; past
    ``max_size`` bytes the spool moves to a file in ``dir``, so memory stays flat.
    """

    __slots__ = ("_file", "_pending", "_pending_chars", "batch")

    def __init__(self, *, max_size: int, batch: int, dir: Path | None = None, errors: str = "strict") -> None:
        self.batch = batch
        self._pending: list[str] = []
        self._pending_chars = 0
        self._file: IO[str] = tempfile.SpooledTemporaryFile(
            max_size=max_size, mode="w+", encoding="utf-8", errors=errors, newline="\n", dir=None if dir is None else str(dir)
        )

    def write(self, text: str) -> None:
        self._pending.append(text)
        self._pending_chars += len(text)
        if self._pending_chars >= self.batch:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            self._file.write("".join(self._pending))
            self._pending.clear()
            self._pending_chars = 0

    def copy_to(self, out: IO[str]) -> None:
        """Everything written so far, onto ``out``."""
        self.flush()
        self._file.seek(0)
        shutil.copyfileobj(self._file, out, 1 << 20)

    def close(self) -> None:
        self._file.close()
