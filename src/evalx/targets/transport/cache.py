"""The response cache: ``.evalx/cache.sqlite`` beside the config.

A cell whose target allows caching is looked up by a key (sha256 of what
determines the answer or how it is read: for a provider, provider + model +
base URL + a digest of its definition's request and response mapping + a
digest of the headers sent + the rendered request body + the repeat index;
never the API key, and no header in clear). A hit replays the stored
trajectory with ``cached: true``; errors are never stored — and a 2xx answer
that carries an error, or no answer, is an error. Values are stored as strict
JSON (no NaN).

Two evalx processes may share the file: SQLite in WAL mode with a busy
timeout serialises their writers without corrupting anything. All SQLite
work happens on one worker thread, so the event loop never waits on disk;
writes queue up and are committed in batches (one transaction per batch).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from evalx.common.atomic import write_text
from evalx.common.json_types import JSONObject
from evalx.common.reading import check_regular
from evalx.errors import OutputError, UnreadableFile
from evalx.models import OUT_OF_RANGE, finite_json, json_default

CACHE_DIR = ".evalx"
CACHE_FILE = "cache.sqlite"
SCHEMA_VERSION = 1
#: how long an operation refused at once as "locked" is tried again
_LOCKED_RETRY_S = 10.0
_BUSY_TIMEOUT_MS = 30_000


def cache_path(config_dir: Path) -> Path:
    return config_dir / CACHE_DIR / CACHE_FILE


def _strict_json(value: Any) -> str:
    """``value`` as strict JSON (``allow_nan=False``; a NaN or an infinity becomes ``null``); what JSON cannot hold as
    results store it (:func:`evalx.models.json_default`), so a replayed answer reads as the fresh one was written."""
    try:
        return json.dumps(value, ensure_ascii=False, default=json_default, allow_nan=False)
    except ValueError as exc:
        if not str(exc).startswith(OUT_OF_RANGE):
            raise
    return json.dumps(finite_json(value), ensure_ascii=False, default=json_default, allow_nan=False)


def _cacheable(value: JSONObject) -> str | None:
    """``value``'s cache text; None for an answer JSON cannot hold (a mapping keyed by tuples, one that contains
    itself): it is not cached, and its cell says why as it would without a cache (:func:`evalx.results.store.encode_storable`)."""
    try:
        return _strict_json(value)
    except (TypeError, ValueError, RecursionError):
        return None


def make_key(*parts: Any) -> str:
    """sha256 over a canonical JSON encoding of ``parts``."""
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ResponseCache:
    """Trajectories by key, in SQLite. Safe to share between processes."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.hits = 0
        self.misses = 0
        self.writes = 0
        self.problem: str | None = None  # set (and the cache disabled) if the file cannot be used
        self._conn: sqlite3.Connection | None = None
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evalx-cache")
        self._pending: dict[str, str] = {}
        self._lock = threading.Lock()
        self._flush_future: Future[None] | None = None

    # -- on the worker thread ---------------------------------------------------

    def _connection(self) -> sqlite3.Connection | None:
        if self._conn is not None or self.problem is not None:
            return self._conn
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            ignore = self.path.parent / ".gitignore"
            if self.path.parent.name == CACHE_DIR and not ignore.is_file():  # (a link to nothing there is replaced, not written through)
                write_text(ignore, "# evalx's local cache; not for version control\n*\n")
            for name in (self.path, *(self.path.with_name(self.path.name + end) for end in ("-wal", "-shm", "-journal"))):
                if os.path.lexists(name):  # a FIFO or a device where SQLite reads would hang it: refused, never opened
                    check_regular(name)
            conn = sqlite3.connect(str(self.path), timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            self._retry_locked(lambda: conn.execute("PRAGMA journal_mode=WAL"))
            conn.execute("PRAGMA synchronous=NORMAL")
            self._retry_locked(
                lambda: conn.execute(
                    "CREATE TABLE IF NOT EXISTS responses ("
                    " key TEXT PRIMARY KEY, value TEXT NOT NULL, created_at REAL NOT NULL, version INTEGER NOT NULL)"
                )
            )
        except UnreadableFile as exc:
            self.problem = f"cannot use {exc}"
            return None
        except OutputError as exc:  # the .gitignore beside it could not be written (a read-only folder)
            self.problem = str(exc)
            return None
        except (sqlite3.Error, OSError) as exc:
            self.problem = f"cannot use {self.path}: {exc}"
            return None
        self._conn = conn
        return conn

    @staticmethod
    def _retry_locked(op: Any, budget_s: float = _LOCKED_RETRY_S) -> Any:
        # the busy handler covers most contention; a WAL switch racing another process can still report "locked" at
        # once, so try again for a while: by the clock, not a count of tries, which a loaded machine used up (a write lost)
        give_up = time.monotonic() + budget_s
        while True:
            try:
                return op()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= give_up:
                    raise
                time.sleep(0.02)

    # get() gives an untyped dict, not a JSONObject, while its callers (execution/, judge/) read the entry unnarrowed
    def get_sync(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            pending = self._pending.get(key)
        if pending is not None:
            return json.loads(pending)  # type: ignore[no-any-return]
        conn = self._connection()
        if conn is None:
            return None
        try:
            row = conn.execute("SELECT value FROM responses WHERE key = ? AND version = ?", (key, SCHEMA_VERSION)).fetchone()
        except sqlite3.Error as exc:
            self.problem = f"cannot read {self.path}: {exc}"
            return None
        if row is None:
            return None
        try:
            value = json.loads(row[0])
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def flush_sync(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, {}
            self._flush_future = None
        if not batch:
            return
        conn = self._connection()
        if conn is None:
            return
        now = time.time()
        rows = [(k, v, now, SCHEMA_VERSION) for k, v in batch.items()]

        def write() -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany("INSERT OR REPLACE INTO responses (key, value, created_at, version) VALUES (?, ?, ?, ?)", rows)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

        try:
            self._retry_locked(write)
            self.writes += len(rows)
        except sqlite3.Error as exc:
            self.problem = f"cannot write {self.path}: {exc}"

    def put_sync(self, key: str, value: JSONObject) -> None:
        text = _cacheable(value)
        if text is None:
            return
        with self._lock:
            self._pending[key] = text
        self.flush_sync()

    def _close_sync(self) -> None:
        self.flush_sync()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- from the event loop ------------------------------------------------------

    async def contains(self, key: str) -> bool:
        """Whether ``key`` has a response (not counted as a hit or a miss)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._worker, self.get_sync, key) is not None

    async def get(self, key: str) -> dict[str, Any] | None:
        loop = asyncio.get_running_loop()
        value = await loop.run_in_executor(self._worker, self.get_sync, key)
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value

    def put(self, key: str, value: JSONObject) -> None:
        """Queue a write; it is committed on the worker thread with whatever else is queued (an answer JSON cannot hold: none)."""
        text = _cacheable(value)
        if text is None:
            return
        with self._lock:
            self._pending[key] = text
            if self._flush_future is None:
                self._flush_future = self._worker.submit(self.flush_sync)

    async def aclose(self) -> None:
        """Commit what is queued and close the file."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._worker, self._close_sync)
        self._worker.shutdown(wait=True)

    def close(self) -> None:
        self._worker.submit(self._close_sync).result()
        self._worker.shutdown(wait=True)
