"""Adaptive concurrency and header-aware pacing: one limiter per (provider endpoint, credential).

Every provider target, judge and simulated user that sends to the same base
URL with the same credential shares one :class:`EndpointLimiter` (a run's
:class:`EndpointLimiters` hands it out, keyed by the base URL and a digest
of the credential, never the credential itself). The limiter does three jobs:

- **Pacing from the provider's headers.** A definition's ``rate_limits:``
  section names the headers its provider sends (OpenAI's
  ``x-ratelimit-remaining-requests``..., Anthropic's
  ``anthropic-ratelimit-requests-remaining``...). Each answer updates the
  bucket it describes (limit, remaining, time to reset); before a request
  starts, the limiter counts what the requests sent since then have taken and
  what the bucket refilled meanwhile (``(limit - remaining) / reset`` per
  second), and waits until the request fits. So requests are spaced out as a
  bucket runs low, before the provider has to say 429. Token buckets are
  counted in requests at the mean tokens per request seen so far. Every
  request to the endpoint is paced, whatever the concurrency of its target,
  and one request is in flight until the first answer came: a first burst
  cannot overrun a bucket nobody has seen yet.
- **Backing off.** A 429, a 529 or an "overloaded" answer stops every request
  to the endpoint until its ``retry-after-ms`` / ``retry-after`` has passed
  (without one: 1 s, doubling to 30 s while they keep coming), and halves the
  adaptive concurrency window. The requests that waited take queued slots
  spread over one more pause (a pause ÷ the requests contending apart), so
  they do not all meet the limit again at its end. The provider target waits
  a 429 out without using its ``retries:`` whenever it has a limiter.
- **Adaptive concurrency** (``concurrency: auto`` or ``{min, start, max}``):
  the requests in flight to the endpoint are held to a window that starts at
  ``start``, doubles on answers while no bucket runs low (then grows by one a
  round), and halves on a 429 — AIMD, as TCP does. A target with a fixed
  ``concurrency`` is held by its own workers, not by the window, and is paced
  all the same.

Under ``--shard I/N`` and Ray the limiter of each process takes its share:
the buckets and the window are divided by the number of processes sending to
the endpoint (``share``), as ``rate_limit: {rpm}`` is.

What each cell waited is tallied (:func:`tally`) into its result's
``rate_limits`` when it met the limit (a 429, or a wait): the 429s, the
seconds it waited for a slot, the requests of its target in flight when it
got one.
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import math
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timezone

from evalx.common.deadline import current as current_deadline
from evalx.errors import TargetError

__all__ = [
    "BUCKET_KINDS",
    "DEFAULT_BOUNDS",
    "DEFAULT_MAX_WAIT_S",
    "AdaptiveBounds",
    "BucketHeaders",
    "EndpointLimiter",
    "EndpointLimiters",
    "RateLimitHeaders",
    "Slot",
    "Tally",
    "current_tally",
    "endpoint_key",
    "parse_reset",
    "tally",
]

#: what a bucket counts, one unit per: a request, all tokens, input tokens, output tokens
BUCKET_KINDS = ("requests", "tokens", "input_tokens", "output_tokens")
#: the most seconds one cell's provider calls wait for the rate limit (slots and 429s together) before it gives up
DEFAULT_MAX_WAIT_S = 600.0
#: seconds after a 429 that gave no retry-after: doubled while they keep coming, up to the ceiling
_PAUSE_S, _PAUSE_MAX_S = 1.0, 30.0
#: a bucket with less than this share of its limit left is "running low": the window stops growing
_LOW = 0.1
#: the longest one sleep of a waiting request: new answers may change what it waits for
_STEP_S = 1.0


@dataclass(frozen=True, slots=True)
class AdaptiveBounds:
    """``concurrency: auto`` (the defaults) or ``{min, start, max}``: where the window starts and stays."""

    min: int = 1
    start: int = 8
    max: int = 64

    def shared(self, share: int) -> AdaptiveBounds:
        """These bounds for one of ``share`` processes sending to the endpoint (at least 1 each)."""
        if share <= 1:
            return self
        low, high = max(1, self.min // share), max(1, math.ceil(self.max / share))
        return AdaptiveBounds(low, min(high, max(low, math.ceil(self.start / share))), high)


DEFAULT_BOUNDS = AdaptiveBounds()


@dataclass(frozen=True, slots=True)
class BucketHeaders:
    """The headers of one bucket: its limit, what is left, when it is full again."""

    remaining: str
    limit: str | None = None
    reset: str | None = None


@dataclass(frozen=True, slots=True)
class RateLimitHeaders:
    """A definition's ``rate_limits:`` section: the headers its provider sends (names lower-cased)."""

    #: ``(kind, headers)``, kind one of :data:`BUCKET_KINDS`
    buckets: tuple[tuple[str, BucketHeaders], ...] = ()
    #: the headers giving the wait after a 429, in the order read: ``(name, unit in seconds)``
    retry_after: tuple[tuple[str, float], ...] = (("retry-after-ms", 0.001), ("retry-after", 1.0))

    def wait(self, headers: Mapping[str, str] | None) -> float | None:
        """Seconds the provider asked to wait, from the first header that says (None: no header)."""
        if not headers:
            return None
        for name, unit in self.retry_after:
            value = headers.get(name)
            if value is None:
                continue
            if unit == 1.0:
                seconds = parse_reset(value)  # seconds, or an HTTP date
            else:
                number = _number(value)
                seconds = None if number is None else number * unit
            if seconds is not None:
                return max(0.0, seconds)
        return None


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|us|µs|ns|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def _number(value: str) -> float | None:
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def parse_reset(value: str, *, now: float | None = None) -> float | None:
    """Seconds until ``value``: a number of seconds, a Go duration (``1s``, ``6m0s``, ``20ms``), or an RFC 3339 / HTTP date.

    None when it is none of those. ``now`` is the wall clock (``time.time()``) a date is measured from.
    """
    text = value.strip()
    if not text:
        return None
    number = _number(text)
    if number is not None:
        return max(0.0, number)
    parts = _DURATION.findall(text)
    if parts and "".join(a + b for a, b in parts) == text:
        return sum(float(a) * _UNIT_S[b] for a, b in parts)
    current = time.time() if now is None else now
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        import email.utils

        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, when.timestamp() - current)


def endpoint_key(base_url: str, credential: str | None) -> str:
    """The limiter's key: the base URL and a digest of the credential (the credential itself is never kept)."""
    digest = hashlib.sha256((credential or "").encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{base_url.rstrip('/')}#{digest}"


# ------------------------------------------------------------------ what a cell waited


@dataclass(slots=True)
class Tally:
    """What one cell's provider calls met at the rate limit (its result's ``rate_limits``)."""

    responses_429: int = 0
    wait_s: float = 0.0
    #: the most requests of the cell's target in flight when one of its requests got a slot
    concurrency: int = 0
    #: whether the cell met the rate limit at all: a 429, or a wait
    used: bool = False


_TALLY: ContextVar[Tally | None] = ContextVar("evalx_rate_tally", default=None)


def current_tally() -> Tally | None:
    """The tally of the cell whose calls run here (None outside a cell)."""
    return _TALLY.get()


class _Tallying:
    """:func:`tally`'s block (a class, not a generator: it is entered for every cell)."""

    __slots__ = ("_token",)

    def __enter__(self) -> Tally:
        counted = Tally()
        self._token = _TALLY.set(counted)
        return counted

    def __exit__(self, *exc: object) -> None:
        _TALLY.reset(self._token)


def tally() -> _Tallying:
    """A fresh :class:`Tally` for the calls made inside (a cell's), read when the block ends."""
    return _Tallying()


# ------------------------------------------------------------------ the limiter


@dataclass(slots=True)
class _Bucket:
    """The last answer's word on one bucket, and the request it answered."""

    remaining: float
    limit: float | None
    reset_s: float
    at: float  # when the answer came (the limiter's clock)
    seq: int  # the sequence number of the request it answered: later requests are not counted in it yet
    rate: float | None  # units refilled per second, (limit - remaining) / reset when that is known


@dataclass(slots=True)
class Slot:
    """A request's turn: hand it back with :meth:`EndpointLimiter.finish` when the answer (or the failure) came."""

    seq: int
    owner: str
    adaptive: bool
    waited_s: float
    in_flight: int
    done: bool = False


@dataclass
class EndpointLimiter:
    """The pacing and the concurrency window of one endpoint and credential (see the module docstring)."""

    key: str
    headers: RateLimitHeaders = field(default_factory=RateLimitHeaders)
    share: int = 1
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    def __post_init__(self) -> None:
        self.bounds: AdaptiveBounds | None = None
        self.window = 0.0
        self._threshold = math.inf  # slow start below it: the window doubles per round
        self._decreased_at = 0  # the sequence number when the window last halved: one halving per round
        self.seq = 0
        self.in_flight = 0
        self._owners: dict[str, int] = {}
        self._buckets: dict[str, _Bucket] = {}
        self._cost: dict[str, float] = {}  # mean tokens per request, per token bucket kind
        #: the token bucket kinds the headers report (:meth:`spent` keeps a mean for these only), in BUCKET_KINDS' order
        self._token_kinds = tuple(k for k in BUCKET_KINDS[1:] if any(kind == k for kind, _ in self.headers.buckets))
        self._counted: list[int] = []  # sequence numbers of requests the provider counts (sent, not refused)
        self._open: set[int] = set()  # sequence numbers of the requests in flight
        self.blocked_until = 0.0
        self._pause_s = _PAUSE_S
        #: after a pause, the requests that waited it out start one ``_gap_s`` apart until ``_spread_until``
        #: (queued slots over one more pause), not all at the instant it ends
        self._gap_s = 0.0
        self._spread_until = 0.0
        self._next_start = 0.0
        self._waiting = 0  # requests waiting in acquire()
        #: until an answer came: one request at a time, when the provider's headers are known (so a first burst
        #: cannot overrun a bucket nobody has seen yet)
        self._probing = bool(self.headers.buckets)
        #: nothing limits the endpoint yet: no bucket read from an answer, no 429, no window, the first answer in. A
        #: request then takes its turn without the lock, the pacing sums or a wake-up (:meth:`take_now`, :meth:`finish`);
        #: the first header, 429 or ``adapt()`` ends it for good
        self._calm = not self._probing
        self._lock = asyncio.Lock()
        self._freed = asyncio.Event()

    # -- set up

    def adapt(self, bounds: AdaptiveBounds) -> None:
        """Hold requests sent with ``adaptive`` to a window within ``bounds`` (widened by each target that asks)."""
        mine = bounds.shared(self.share)
        self._calm = False
        if self.bounds is None:
            self.bounds, self.window = mine, float(mine.start)
            return
        low, high = min(self.bounds.min, mine.min), max(self.bounds.max, mine.max)
        self.bounds = AdaptiveBounds(low, min(max(self.bounds.start, low), high), high)

    # -- a request's turn

    def take_now(self, owner: str, adaptive: bool = False) -> Slot | None:
        """A turn at once while nothing limits the endpoint (no bucket, 429 or window yet, nobody waiting), else None.

        What :meth:`acquire` would do in that case, without its wait's machinery: a provider sends through this
        limiter whether or not the endpoint ever sends a rate-limit header, and most never do on a local server.
        """
        if not self._calm or self._waiting:
            return None
        self.seq = seq = self.seq + 1
        self.in_flight += 1
        owners = self._owners
        mine = owners[owner] = owners.get(owner, 0) + 1
        self._open.add(seq)
        counted = _TALLY.get()
        if counted is not None and mine > counted.concurrency:
            counted.concurrency = mine
        return Slot(seq, owner, adaptive, 0.0, self.in_flight)

    async def acquire(self, owner: str, *, adaptive: bool, patience_s: float | None = None) -> Slot:
        """Wait for a turn: no pause after a 429, room in every bucket and (``adaptive``) in the window.

        The wait is not the cell's time: its deadline is paused meanwhile (:meth:`Deadline.paused`).
        ``patience_s``: when the wait would last longer than that, a :class:`TargetError` says so at once.
        """
        quick = self.take_now(owner, adaptive)
        if quick is not None:
            return quick
        started = self.clock()
        if not self._lock.locked() and not self._full(adaptive) and self._pace(started) <= 0:
            return self._take(owner, adaptive, 0.0)  # nobody waits and there is room: no lock, no pause
        deadline = current_deadline()
        self._waiting += 1
        try:
            with deadline.paused() if deadline is not None else _nothing():
                return await self._queued(owner, adaptive, started, patience_s)
        finally:
            self._waiting -= 1

    async def _queued(self, owner: str, adaptive: bool, started: float, patience_s: float | None) -> Slot:
        """:meth:`acquire`'s wait, in arrival order."""
        async with self._lock:  # in arrival order
            while True:
                wait = self._pace(self.clock())
                if wait > 0:
                    waited = self.clock() - started
                    if patience_s is not None and waited + wait > patience_s:
                        raise TargetError(
                            f"the provider's rate limit asks for {waited + wait:.0f}s more of waiting, past rate_limit.max_wait_s"
                        )
                    await self.sleep(min(wait, _STEP_S))
                    continue
                if self._full(adaptive):
                    self._freed.clear()
                    await self._freed.wait()
                    continue
                break
            return self._take(owner, adaptive, self.clock() - started)

    def _full(self, adaptive: bool) -> bool:
        """Whether a request must wait for another to end: the first answer is awaited, or the window is full."""
        if self._probing and self.in_flight > 0:  # the first answer says how much room there is, whatever the concurrency
            return True
        if not adaptive or self.bounds is None:
            return False  # a fixed concurrency: the target's own workers hold it
        return self.in_flight >= max(1, int(self.window))

    def _take(self, owner: str, adaptive: bool, waited: float) -> Slot:
        now = self.clock()
        if now < self._spread_until:
            self._next_start = max(now, self._next_start) + self._gap_s
        self.seq += 1
        self.in_flight += 1
        mine = self._owners[owner] = self._owners.get(owner, 0) + 1
        if self._buckets:  # counted against the buckets until an answer to a later request says what is left
            self._counted.append(self.seq)
        self._open.add(self.seq)
        counted = _TALLY.get()
        if counted is not None:
            counted.wait_s += waited
            counted.concurrency = max(counted.concurrency, mine)
            if waited > 0:
                counted.used = True
        return Slot(self.seq, owner, adaptive, waited, self.in_flight)

    def finish(self, slot: Slot, headers: Mapping[str, str] | None = None, *, limited: bool = False, counted: bool = True) -> float | None:
        """The request of ``slot`` ended: read its answer's headers; ``limited`` (a 429, 529, overloaded) backs off.

        ``counted`` False: the provider did not count it (no answer came). Returns the pause a 429 set, in seconds.
        """
        if slot.done:
            return None
        slot.done = True
        if self._calm and not limited and not self._waiting:  # nothing to back off from, nobody to wake
            self.in_flight -= 1
            self._open.discard(slot.seq)
            self._owners[slot.owner] = self._owners.get(slot.owner, 1) - 1
            if headers:
                self._read(headers, slot.seq, self.clock())
            return None
        busy = self.in_flight >= int(self.window) or self._lock.locked()  # the window was full, or requests wait
        self.in_flight -= 1
        self._open.discard(slot.seq)
        self._owners[slot.owner] = self._owners.get(slot.owner, 1) - 1
        self._freed.set()
        now = self.clock()
        if not counted or limited:  # a refused request took nothing from the buckets
            at = bisect.bisect_left(self._counted, slot.seq)
            if at < len(self._counted) and self._counted[at] == slot.seq:
                del self._counted[at]
        if headers is not None and self._probing:
            self._probing = False
            self._calm = self.bounds is None and not self._buckets and self.blocked_until == 0.0 and not limited
        if headers:
            self._read(headers, slot.seq, now)
        if limited:
            self._calm = False
            pause = self.headers.wait(headers)
            if pause is None:
                pause, self._pause_s = self._pause_s, min(_PAUSE_MAX_S, self._pause_s * 2)
            self.blocked_until = max(self.blocked_until, now + pause)
            # those waiting it out start spread over one more pause, one slot each (the refill of the pause, if the
            # provider says no more): a stampede at its end would meet the limit again at once
            gap = pause / max(1, self.in_flight + 1 + self._waiting)  # the requests contending for the endpoint
            self._gap_s = min(self._gap_s, gap) if now < self._spread_until else gap
            self._spread_until = self.blocked_until + pause
            if self.bounds is not None and slot.seq > self._decreased_at:
                self.window = max(float(self.bounds.min), self.window / 2)
                self._threshold = self.window
                self._decreased_at = self.seq
            tallied = _TALLY.get()
            if tallied is not None:
                tallied.used = True
                tallied.responses_429 += 1
            return pause
        if counted:
            self._pause_s = _PAUSE_S
            if busy:
                self._grow(slot)
        return None

    def spent(self, input_tokens: int, output_tokens: int) -> None:
        """What an answer's usage says one request costs the token buckets (a running mean).

        Only the kinds of token bucket the provider's headers can report are kept (:meth:`_pace` reads no other).
        """
        for kind in self._token_kinds:
            tokens = input_tokens + output_tokens if kind == "tokens" else input_tokens if kind == "input_tokens" else output_tokens
            if tokens <= 0:
                continue
            old = self._cost.get(kind)
            self._cost[kind] = float(tokens) if old is None else old * 0.8 + tokens * 0.2

    # -- what the answers said

    def _read(self, headers: Mapping[str, str], seq: int, now: float) -> None:
        for kind, names in self.headers.buckets:
            raw = headers.get(names.remaining)
            remaining = _number(raw) if raw is not None else None
            if remaining is None:
                continue
            old = self._buckets.get(kind)
            if old is not None and old.seq > seq:
                continue  # an older request's answer, come late
            limit_raw = headers.get(names.limit) if names.limit else None
            limit = _number(limit_raw) if limit_raw is not None else None
            reset_raw = headers.get(names.reset) if names.reset else None
            reset_s = parse_reset(reset_raw) if reset_raw is not None else None
            rate = old.rate if old is not None else None
            if limit is not None and reset_s and limit - remaining >= 2:
                # the refill rate; less one unit: ``remaining`` is rounded down while ``reset`` counts from the exact level
                rate = (limit - remaining - 1) / reset_s
            self._buckets[kind] = _Bucket(max(0.0, remaining), limit, reset_s or 0.0, now, seq, rate)
            self._calm = False
        if self._buckets and self._counted:  # forget requests every bucket has counted
            oldest = min(b.seq for b in self._buckets.values())
            del self._counted[: bisect.bisect_right(self._counted, oldest)]

    def _pace(self, now: float) -> float:
        """Seconds to wait before the next request may start (0: now)."""
        wait = max(self.blocked_until, self._next_start if now < self._spread_until else 0.0) - now
        share = max(1, self.share)
        for kind, bucket in self._buckets.items():
            cost = 1.0 if kind == "requests" else self._cost.get(kind)
            if not cost:
                continue
            # not in the answer's count yet: the requests sent after it, and those sent before it and still unanswered
            # (another connection may have brought them to the provider later)
            later = len(self._counted) - bisect.bisect_right(self._counted, bucket.seq)
            pending = (later + sum(1 for seq in self._open if seq < bucket.seq)) * cost
            elapsed = now - bucket.at
            if bucket.rate is not None:
                level = bucket.remaining + bucket.rate * elapsed
            else:
                level = bucket.remaining if elapsed < bucket.reset_s else math.inf
            if bucket.limit is not None:
                level = min(level, bucket.limit)
            if level / share - pending >= cost:
                continue
            if bucket.rate:
                needed = ((cost + pending) * share - bucket.remaining) / bucket.rate
                if bucket.limit is not None and (cost + pending) * share > bucket.limit:
                    needed = bucket.reset_s  # more in flight than the bucket holds: wait for the answers or the reset
                wait = max(wait, bucket.at + needed - now)
            else:
                wait = max(wait, bucket.at + bucket.reset_s - now)
        return wait

    def low(self) -> bool:
        """Whether a bucket is running low (less than a tenth of its limit left)."""
        return any(b.limit is not None and b.remaining < _LOW * b.limit for b in self._buckets.values())

    def _grow(self, slot: Slot) -> None:
        bounds = self.bounds
        if bounds is None or not slot.adaptive or self.low():
            return  # only a full window that met no limit grows
        step = 1.0 if self.window < self._threshold else 1.0 / self.window
        self.window = min(float(bounds.max), self.window + step)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


class EndpointLimiters:
    """A run's limiters by endpoint and credential (one per process; ``share``: the processes sending to an endpoint)."""

    def __init__(self, share: int = 1) -> None:
        self.share = max(1, share)
        self._by_key: dict[str, EndpointLimiter] = {}

    def get(self, base_url: str, credential: str | None, headers: RateLimitHeaders) -> EndpointLimiter:
        """The limiter of ``base_url`` and ``credential``, made on first use."""
        key = endpoint_key(base_url, credential)
        limiter = self._by_key.get(key)
        if limiter is None:
            limiter = self._by_key[key] = EndpointLimiter(key, headers, self.share)
        return limiter
