"""Batch mode: cells' requests sent through a provider's batch API, as its definition's ``batch:`` section says.

A provider target with ``batch: true`` (or ``--batch``) gets a :class:`BatchQueue`
from the executor (the judge's target, from the judge). Before a cell's clock
starts, the target renders its request and hands it to the queue
(:meth:`BatchQueue.call`), which waits for the answer: the wait is not the
cell's time (``timeout_s``); ``batch.max_wait_s`` bounds it.

When a batch is sent is decided by the run's :class:`BatchRound`: a queue
sends a batch as soon as it holds ``max_requests`` requests (or the
definition's ``max_bytes``), and sends what it holds once every task that
could still add to it (the executor's workers) is waiting on a batch. So the
target's cells go out in as few batches as the size limits allow, and their
judge calls go out together once the answers came back and were checked.

A batch is created (``upload:`` then ``create:``, or ``create:`` alone), its id
written at once to the run folder's ``batches.json`` (:class:`BatchLedger`,
an atomic write), polled (``status:``) a few seconds after, then less and
less often up to :data:`POLL_CEILING_S`, and its results read line by line
(``result:``) once it ended. A run resumed with ``--resume`` finds the
requests it sent in ``batches.json``: it polls those batches again and never
sends a request twice.

A request's :class:`BatchResult` says what became of it: ``succeeded`` (its
answer is read as a normal call's), ``errored`` (the cell's error when the
definition's ``errors:`` call it fatal, else a normal call), ``expired``,
``canceled``, ``missing`` (no line for it), ``failed`` (the batch could not
be created or failed whole) or ``timeout`` (``max_wait_s`` passed): those are
sent again as a normal call, at the normal price (docs/providers.md#batch-mode).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import os
import re
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from evalx.common.atomic import write_text
from evalx.common.json_types import JSON, JSONObject, as_array, as_object, as_str
from evalx.common.reading import RUN_FILE, read_json
from evalx.errors import DefinitionError, TargetError, UnreadableFile
from evalx.targets.settings import BatchSettings

if TYPE_CHECKING:
    from evalx.targets.definitions import BatchSpec, ExpressionScope, ProviderDefinition
    from evalx.targets.transport.auth import RequestAuth
    from evalx.targets.transport.http import HttpClient, HttpResponse

log = logging.getLogger(__name__)

__all__ = [
    "LEDGER",
    "POLL_CEILING_S",
    "BatchClient",
    "BatchLedger",
    "BatchQueue",
    "BatchResult",
    "BatchRound",
]

#: the run folder's file holding every batch the run created
LEDGER = "batches.json"
#: the longest wait between two polls of a batch, in seconds
POLL_CEILING_S = 60.0
#: how long a round waits, once every worker waits on a batch, for requests still on their way (a judge's samples)
SETTLE_S = 0.05
#: outcomes whose requests are sent again as a normal call
FALL_BACK = frozenset({"expired", "canceled", "missing", "failed", "timeout"})
#: what a result line may hold around its answer (ids, status, usage), past the target's ``max_response_bytes``
LINE_ENVELOPE = 64 * 1024
#: a custom id near the start of a result line too long to read (its answer is past ``max_response_bytes``)
_CUSTOM_ID = re.compile(rb'"custom_id"\s*:\s*"([A-Za-z0-9_\-]{1,64})"')


@dataclass(frozen=True)
class BatchResult:
    """What became of one request of a batch."""

    #: succeeded, errored, expired, canceled, missing, failed, timeout or too_large (its answer is past
    #: ``max_response_bytes``: the cell's error, never sent again)
    outcome: str
    #: a succeeded request's answer (the body a normal call would have had)
    response: JSON = None
    #: an errored request's HTTP status, when the API gives one
    status: int | None = None
    #: why it did not succeed
    error: str | None = None
    batch_id: str | None = None


class BatchState(NamedTuple):
    """What one poll of a batch says."""

    state: str
    #: the state is one of the definition's ``status.ended``
    ended: bool
    #: requests finished so far, when the API says
    done: int | None
    #: where the results are (paths or URLs), once ended
    locations: list[str]
    #: why a batch failed whole, when the API says
    error: str | None


@dataclass
class BatchProgress:
    """What the run's batches are doing, for the progress line."""

    batches: int = 0
    requests: int = 0
    done: int = 0
    ended: int = 0
    started: float = field(default_factory=time.monotonic)

    def line(self) -> str:
        """``batch: 2 submitted (10000 requests), 1 in progress, 4200/10000 done, eta 3m``."""
        in_progress = self.batches - self.ended
        text = f"batch: {self.batches} submitted ({self.requests} requests), {in_progress} in progress, {self.done}/{self.requests} done"
        elapsed = time.monotonic() - self.started
        if 0 < self.done < self.requests and elapsed > 0:
            eta = (self.requests - self.done) / (self.done / elapsed)
            text += f", eta {_duration(eta)}"
        elif self.done < self.requests:
            text += ", eta unknown"
        return text


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


#: set in the executor's workers of batch-mode targets (asyncio tasks they start inherit it)
_BATCH_WORKER: contextvars.ContextVar[bool] = contextvars.ContextVar("evalx_batch_worker", default=False)


class BatchRound:
    """When queued requests are sent: once every worker that could add one is waiting on a batch.

    The executor counts its workers in (:meth:`enter`) and out (:meth:`leave`);
    a queue counts the calls waiting on it. A target's queue sends what it holds
    once every worker of a batch-mode target waits on a batch (only their cells
    add to it); a judge's, once every worker waits (any cell may still ask the
    judge): the judge's calls go out together, after the answers they grade.
    """

    def __init__(self, report: Callable[[str], None] | None = None) -> None:
        #: workers running (all targets'), and those of batch-mode targets
        self.active = 0
        self.active_batch = 0
        #: calls waiting on a queue, and those made from the workers of batch-mode targets
        self.waiting = 0
        self.waiting_batch = 0
        self.queues: list[BatchQueue] = []
        self.progress = BatchProgress()
        self._report = report
        self._check: asyncio.TimerHandle | None = None

    def enter(self, batch_mode: bool) -> None:
        """A worker starts (``batch_mode``: a batch-mode target's); the calls it makes are counted as its."""
        self.active += 1
        if batch_mode:
            self.active_batch += 1
            _BATCH_WORKER.set(True)

    def leave(self, batch_mode: bool) -> None:
        self.active -= 1
        if batch_mode:
            self.active_batch -= 1
        self.changed()

    def wait(self, delta: int) -> None:
        """A call starts (1) or stops (-1) waiting on a queue."""
        self.waiting += delta
        if _BATCH_WORKER.get():
            self.waiting_batch += delta

    def changed(self) -> None:
        """Look again soon (after :data:`SETTLE_S`: requests on their way join this batch, not the next)."""
        if self._check is None and any(q.pending for q in self.queues):
            self._check = asyncio.get_running_loop().call_later(SETTLE_S, self._flush_if_idle)

    def _flush_if_idle(self) -> None:
        self._check = None
        targets_wait = self.waiting_batch >= self.active_batch
        all_wait = self.waiting >= self.active
        for queue in self.queues:
            if all_wait or (targets_wait and not queue.judge):
                queue.flush()

    def report(self) -> None:
        if self._report is not None:
            self._report(self.progress.line())


class BatchLedger:
    """``batches.json`` in the run folder: each batch the run created, written as soon as it is created."""

    def __init__(self, run_dir: Path | None) -> None:
        self.path = run_dir / LEDGER if run_dir is not None else None
        self.records: list[JSONObject] = []
        if self.path is not None:
            try:  # a regular file only, within its size (a FIFO or /dev/zero put there is named, never read)
                data = read_json(self.path, RUN_FILE)
                self.records = [as_object(r) for r in as_array(as_object(data).get("batches"))]
            except UnreadableFile as exc:
                if not exc.missing:
                    log.warning(f"{exc}; the batches the run created are not polled again")
            except (ValueError, OSError) as exc:
                log.warning(f"{self.path}: cannot read the batches of the run ({exc}); batches it created are not polled again")

    def of(self, queue: str) -> list[JSONObject]:
        return [r for r in self.records if r.get("queue") == queue]

    def add(self, queue: str, provider: str, batch_id: str, custom_ids: list[str]) -> JSONObject:
        record: JSONObject = {
            "queue": queue,
            "provider": provider,
            "id": batch_id,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "state": "submitted",
            "requests": len(custom_ids),
            "custom_ids": list(custom_ids),
        }
        self.records.append(record)
        self.save()
        return record

    def save(self) -> None:
        if self.path is not None:
            write_text(self.path, json.dumps({"version": 1, "batches": self.records}, ensure_ascii=False) + "\n")


@dataclass
class _Batch:
    """One batch: its requests' custom ids, who waits for which, and its results once read (a resumed batch keeps them)."""

    queue: BatchQueue
    custom_ids: list[str]
    id: str | None = None
    record: JSONObject | None = None
    waiters: dict[str, list[asyncio.Future[BatchResult]]] = field(default_factory=dict)
    #: once it ended: each request's result, and what a request without one gets
    results: dict[str, BatchResult] | None = None
    otherwise: BatchResult | None = None
    #: found in batches.json (sent by the run this process resumes)
    resumed: bool = False
    task: asyncio.Task[None] | None = None


class BatchClient:
    """A provider's batch API, as its definition's ``batch:`` section describes it, over the target's HTTP setup."""

    def __init__(
        self,
        definition: ProviderDefinition,
        base_url: str,
        headers: dict[str, str],
        auth: RequestAuth | None,
        error_of: Callable[[HttpResponse], TargetError],
        *,
        retries: int,
        backoff_s: float,
        scope: JSONObject,
        max_answer_bytes: int | None = None,
    ) -> None:
        from evalx.targets.transport.http import Backoff, HttpClient

        assert definition.batch is not None
        self.definition, self.spec = definition, definition.batch
        self.base_url, self.headers, self.auth, self.error_of = base_url, headers, auth, error_of
        self.scope = scope  # model and path (the normal call's) for the templates
        #: the target's max_response_bytes: a result line longer than it (and its envelope) is never held whole
        self.max_answer_bytes = max_answer_bytes
        # few, long requests: an upload of up to the provider's limit, results read as a stream
        self.http: HttpClient = HttpClient(
            concurrency=4, retries=retries, backoff=Backoff(base_s=backoff_s), timeout_s=600.0, max_response_bytes=4 << 30
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    def url(self, location: str) -> str:
        """A path appended to base_url, or a URL on base_url's scheme, host and port (credentials go nowhere else)."""
        if "://" not in location:
            return self.base_url + "/" + location.lstrip("/")
        mine, theirs = urllib.parse.urlsplit(self.base_url), urllib.parse.urlsplit(location)
        if (mine.scheme, mine.netloc) != (theirs.scheme, theirs.netloc):
            raise TargetError(f"the batch's results are at {theirs.scheme}://{theirs.netloc}, not on base_url's host: not read")
        return location

    async def _send(self, method: str, url: str, body: bytes | None, content_type: str | None = None) -> HttpResponse:
        headers = dict(self.headers)
        if content_type is not None:
            headers["Content-Type"] = content_type

        async def attempt() -> HttpResponse:
            sent = headers
            if self.auth is not None:
                sent = await self.auth.sign(method, url, headers, body)
            resp = await self.http.request_json(method, url, encoded=body, headers=sent, raise_for_status=False)
            if resp.status >= 400:
                raise self.error_of(resp)
            return resp

        return await self.http.retrying(attempt)

    async def create(self, lines: list[JSON]) -> str:
        """Create a batch of ``lines`` (the rendered requests); its id."""
        spec = self.spec
        scope: dict[str, object] = {**self.scope, "requests": lines, "file_id": None}
        if spec.upload_path is not None:
            data = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode("utf-8")
            body, content_type = _multipart(spec.upload_fields, data)
            resp = await self._send("POST", self.url(spec.upload_path), body, content_type)
            file_id = self.definition.evaluate(("batch", "upload", "file_id"), {"response": resp.json})
            if not isinstance(file_id, str) or not file_id:
                raise TargetError(f"{self.definition.where('batch', 'upload', 'file_id')}: the upload's answer has no file id")
            scope["file_id"] = file_id
        body_json = self.definition.render_json(spec.create_body, scope, "batch", "create", "body")
        resp = await self._send("POST", self.url(spec.create_path), json.dumps(body_json, ensure_ascii=False).encode("utf-8"))
        batch_id = self.definition.evaluate(("batch", "create", "id"), {"response": resp.json})
        if not isinstance(batch_id, (str, int)) or batch_id == "":
            raise TargetError(f"{self.definition.where('batch', 'create', 'id')}: the answer has no batch id")
        return str(batch_id)

    async def status(self, batch_id: str) -> BatchState:
        """What a poll of the batch ``batch_id`` says."""
        d = self.definition
        path = d.render_location(self.spec.status_path, {"batch_id": batch_id}, "batch", "status", "path")
        resp = await self._send("GET", self.url(path), None)
        scope: ExpressionScope = {"response": resp.json}
        state = str(d.evaluate(("batch", "status", "state"), scope))
        done = d.evaluate(("batch", "status", "done"), scope)
        where = d.evaluate(("batch", "status", "results"), scope)
        locations = [w for w in (where if isinstance(where, list) else [where]) if isinstance(w, str) and w]
        error = d.evaluate(("batch", "status", "error"), scope)
        return BatchState(
            state,
            state in self.spec.ended,
            done if isinstance(done, int) and not isinstance(done, bool) else None,
            locations,
            None if error is None else error if isinstance(error, str) else json.dumps(error, ensure_ascii=False),
        )

    async def results(self, location: str, batch_id: str) -> list[tuple[str, BatchResult]]:
        """The results at ``location``: ``(custom_id, result)`` a line."""
        url = self.url(location)
        out: list[tuple[str, BatchResult]] = []

        async def attempt() -> None:
            out.clear()
            headers = dict(self.headers)
            if self.auth is not None:
                headers = await self.auth.sign("GET", url, headers, None)
            from evalx.targets.transport.http import HttpResponse, too_large

            async with self.http.stream("GET", url, headers=headers, idle_timeout_s=600.0) as resp:
                if resp.status >= 400:
                    text = (await resp.read()).decode("utf-8", "replace")
                    raise self.error_of(HttpResponse(resp.status, resp.headers, text, _loads(text), url))
                limit = None if self.max_answer_bytes is None else self.max_answer_bytes + LINE_ENVELOPE
                async for raw, whole in _lines_within(resp.chunks(), limit):
                    if not whole:  # its answer is past max_response_bytes: the request's error, named by its custom id
                        found = _CUSTOM_ID.search(raw)
                        if found is not None:
                            error = str(too_large(url, self.max_answer_bytes or 0, "batch answer"))
                            out.append((found.group(1).decode(), BatchResult("too_large", error=error, batch_id=batch_id)))
                        continue
                    text = raw.decode("utf-8", "replace")
                    if not text.strip():
                        continue
                    line = _loads(text)
                    if not isinstance(line, dict):
                        continue
                    out.append(self._result(line, batch_id))

        await self.http.retrying(attempt)
        return out

    def _result(self, line: JSONObject, batch_id: str) -> tuple[str, BatchResult]:
        d = self.definition
        scope: ExpressionScope = {"line": line}
        custom_id = d.evaluate(("batch", "result", "custom_id"), scope)
        outcome = str(d.evaluate(("batch", "result", "outcome"), scope) or "missing")
        if outcome == "cancelled":
            outcome = "canceled"
        status = d.evaluate(("batch", "result", "status"), scope)
        error = d.evaluate(("batch", "result", "error"), scope)
        response = d.evaluate(("batch", "result", "response"), scope) if outcome == "succeeded" else None
        return str(custom_id), BatchResult(
            outcome,
            response=_json(response),
            status=status if isinstance(status, int) else None,
            error=None if error is None else error if isinstance(error, str) else json.dumps(error, ensure_ascii=False),
            batch_id=batch_id,
        )


async def _lines_within(chunks: AsyncIterator[bytes], limit: int | None) -> AsyncIterator[tuple[bytes, bool]]:
    """The lines of a JSONL body (split on LF, a CR before it dropped), each with whether it is whole.

    A line longer than ``limit`` bytes is not held: its first :data:`LINE_ENVELOPE` bytes stand for it, with
    False (a result line's custom id comes first), and the rest is read past.
    """
    held = bytearray()
    over = False
    async for chunk in chunks:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end == -1 else chunk[start:end]
            if not over:
                held += piece
                if limit is not None and len(held) > limit:
                    del held[LINE_ENVELOPE:]
                    over = True
            if end == -1:
                break
            yield bytes(held.removesuffix(b"\r")), not over
            held.clear()
            over = False
            start = end + 1
    if held or over:
        yield bytes(held.removesuffix(b"\r")), not over


def _json(value: object) -> JSON:
    return value if value is None or isinstance(value, (dict, list, str, int, float, bool)) else str(value)


def _loads(text: str) -> JSON:
    try:
        found: JSON = json.loads(text)
    except ValueError:
        return None
    return found


def _multipart(fields: Iterable[tuple[str, str]], data: bytes) -> tuple[bytes, str]:
    """A multipart/form-data body: ``fields``, then ``data`` as the file ``evalx-batch.jsonl``."""
    boundary = "evalx-" + os.urandom(12).hex()
    parts: list[bytes] = []
    for name, value in fields:
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="evalx-batch.jsonl"\r\n'
        "Content-Type: application/jsonl\r\n\r\n".encode()
    )
    parts.append(data)
    parts.append(f"\r\n--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


class BatchQueue:
    """One target's (or judge target's) requests waiting to go in a batch, and its batches in flight."""

    def __init__(
        self,
        name: str,
        client: BatchClient,
        settings: BatchSettings,
        spec: BatchSpec,
        ledger: BatchLedger,
        batch_round: BatchRound,
    ) -> None:
        self.name, self.client, self.settings, self.ledger, self.round = name, client, settings, ledger, batch_round
        #: a judge's queue: its calls wait for every cell's, not only the batch-mode targets'
        self.judge = name.startswith("judge:")
        limit = spec.max_requests
        self.max_requests = min(settings.max_requests, limit) if settings.max_requests else limit
        self.max_bytes = spec.max_bytes
        self.pending: list[tuple[str, JSON, int]] = []
        self._pending_bytes = 0
        self._pending_futures: dict[str, list[asyncio.Future[BatchResult]]] = {}
        #: custom_id -> the batch holding it (sent by this process, or found in batches.json)
        self._batch_of: dict[str, _Batch] = {}
        self.batches: list[_Batch] = []
        for record in ledger.of(name):  # sent before this process started (a resumed run): polled, never sent again
            ids = [as_str(i) for i in as_array(record.get("custom_ids"))]
            batch = _Batch(self, ids, id=as_str(record.get("id")), record=record, resumed=True)
            self.batches.append(batch)
            for custom_id in ids:
                self._batch_of[custom_id] = batch
        batch_round.queues.append(self)

    @property
    def resumed(self) -> int:
        """Batches found in ``batches.json``."""
        return sum(1 for b in self.batches if b.resumed)

    async def call(self, custom_id: str, line: JSON) -> BatchResult:
        """The result of the request ``line`` (its id ``custom_id``): queued, sent in a batch, waited for."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[BatchResult] = loop.create_future()
        batch = self._batch_of.get(custom_id)
        if batch is not None:  # sent already (by this process, or the run this one resumes)
            if batch.results is not None:  # ended: a cell alike asked before, or a resumed batch read already
                return batch.results.get(custom_id) or batch.otherwise or BatchResult("missing")
            batch.waiters.setdefault(custom_id, []).append(future)
            if batch.task is None:
                batch.task = asyncio.create_task(self._follow(batch))
        elif custom_id in self._pending_futures:  # the same request twice (two cells alike): asked once
            self._pending_futures[custom_id].append(future)
        else:
            size = len(json.dumps(line, ensure_ascii=False).encode("utf-8")) + 1
            if self.pending and (self.max_bytes is not None and self._pending_bytes + size > self.max_bytes):
                self.flush()
            self.pending.append((custom_id, line, size))
            self._pending_bytes += size
            self._pending_futures[custom_id] = [future]
            if len(self.pending) >= self.max_requests:
                self.flush()
        self.round.wait(1)
        self.round.changed()
        try:
            return await future
        finally:
            self.round.wait(-1)

    def flush(self) -> None:
        """Send what is queued, as one batch (the size limits were kept as it filled)."""
        if not self.pending:
            return
        ids = [custom_id for custom_id, _, _ in self.pending]
        lines = [line for _, line, _ in self.pending]
        batch = _Batch(self, ids)
        batch.waiters = self._pending_futures
        self.pending, self._pending_bytes, self._pending_futures = [], 0, {}
        self.batches.append(batch)
        for custom_id in ids:
            self._batch_of[custom_id] = batch
        batch.task = asyncio.create_task(self._submit(batch, lines))

    async def _submit(self, batch: _Batch, lines: list[JSON]) -> None:
        try:
            batch.id = await self.client.create(lines)
        except asyncio.CancelledError:
            self._end(batch, {}, BatchResult("failed", error="the run was interrupted"))
            raise
        except Exception as exc:  # TargetError, a definition's template... : the requests are sent as normal calls
            log.warning(f"{self.name}: the batch of {len(lines)} requests could not be created ({exc}); they are sent as normal calls")
            self._end(batch, {}, BatchResult("failed", error=f"the batch could not be created: {exc}"))
            return
        try:
            batch.record = self.ledger.add(self.name, self.client.definition.name, batch.id, batch.custom_ids)
        except Exception as exc:  # the run folder cannot be written: the batch is still waited for, but not resumable
            log.warning(f"{self.name}: batch {batch.id} could not be recorded in {LEDGER} ({exc}); a resumed run would send it again")
        progress = self.round.progress
        progress.batches += 1
        progress.requests += len(lines)
        self.round.report()
        await self._follow(batch, submitted=True)

    async def _follow(self, batch: _Batch, *, submitted: bool = False) -> None:
        """Poll ``batch`` until it ended (or ``max_wait_s`` passed), then hand each waiter its result."""
        assert batch.id is not None
        progress = self.round.progress
        if not submitted:  # a resumed batch: counted now
            progress.batches += 1
            progress.requests += len(batch.custom_ids)
        settings = self.settings
        delay, started, counted = settings.poll_interval_s, time.monotonic(), 0
        try:
            while True:
                await asyncio.sleep(min(delay, max(0.0, started + settings.max_wait_s - time.monotonic())))
                try:
                    now = await self.client.status(batch.id)
                except (TargetError, DefinitionError) as exc:
                    if time.monotonic() - started >= settings.max_wait_s:
                        raise
                    log.warning(f"{self.name}: polling batch {batch.id}: {exc}")
                    now = BatchState("unknown", False, None, [], None)
                if now.done is not None:
                    progress.done += max(0, min(now.done, len(batch.custom_ids)) - counted)
                    counted = max(counted, min(now.done, len(batch.custom_ids)))
                if batch.record is not None and batch.record.get("state") != now.state:
                    batch.record["state"] = now.state
                    self._save()
                self.round.report()
                if now.ended:
                    break
                if time.monotonic() - started >= settings.max_wait_s:
                    self._end(
                        batch, {}, BatchResult("timeout", error=f"batch {batch.id} did not end within max_wait_s {settings.max_wait_s:g}s")
                    )
                    return
                delay = min(delay * 2, POLL_CEILING_S)
            results: dict[str, BatchResult] = {}
            for location in now.locations:
                for custom_id, result in await self.client.results(location, batch.id):
                    results[custom_id] = result
            progress.done += len(batch.custom_ids) - counted
            progress.ended += 1
            self.round.report()
            why = f"batch {batch.id} ended {now.state}" + (f" ({now.error})" if now.error else "")
            missing = BatchResult("missing", error=f"{why} without a result for it")
            self._end(batch, results, missing)
        except asyncio.CancelledError:
            self._end(batch, {}, BatchResult("failed", error="the run was interrupted"))
            raise
        except Exception as exc:  # polling or reading gave up: its requests are sent as normal calls
            log.warning(f"{self.name}: batch {batch.id}: {exc}; its requests are sent as normal calls")
            self._end(batch, {}, BatchResult("failed", error=f"batch {batch.id}: {exc}"))

    def _save(self) -> None:
        """``batches.json`` again (a batch's state changed); a failed write is a warning: the batch is still waited for."""
        try:
            self.ledger.save()
        except Exception as exc:
            log.warning(f"{self.name}: {LEDGER} could not be written: {exc}")

    def _end(self, batch: _Batch, results: dict[str, BatchResult], otherwise: BatchResult) -> None:
        """Hand every waiter of ``batch`` its result (``otherwise`` for a request without one)."""
        batch.results, batch.otherwise = results, otherwise  # kept: a later cell alike asks again
        for custom_id, futures in batch.waiters.items():
            result = results.get(custom_id, otherwise)
            for future in futures:
                if not future.done():
                    future.set_result(result)
        batch.waiters = {}

    async def aclose(self) -> None:
        tasks = [b.task for b in self.batches if b.task is not None and not b.task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.client.aclose()
