"""A small async token bucket: ``rate_limit: {rpm: N}`` on a target.

The bucket holds one token and refills at ``rpm / 60`` per second, so
requests are spaced evenly and no 60-second window ever sees more than
``rpm + 1`` of them — a run stays under a provider's quota instead of
bursting into 429s. Every HTTP attempt (retries included) takes a token.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class RateLimiter:
    def __init__(
        self,
        rpm: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if rpm <= 0:
            raise ValueError("rpm must be positive")
        self.interval = 60.0 / rpm
        self._clock = clock
        self._sleep = sleep
        self._next = clock()  # the earliest moment the next request may start
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        """Wait for this caller's slot. Callers are served in arrival order."""
        async with self._lock:
            now = self._clock()
            start = max(now, self._next)
            self._next = start + self.interval
            wait = start - now
            # sleeping under the lock keeps arrival order and holds later callers back too
            if wait > 0:
                await self._sleep(wait)
