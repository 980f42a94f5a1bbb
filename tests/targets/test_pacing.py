"""The endpoint limiter's pieces: reading the providers' reset values, the key, and a deadline paused while a call waits."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable

import pytest

from evalx.common.deadline import Deadline, within
from evalx.targets.definitions import find_provider
from evalx.targets.transport.pacing import EndpointLimiters, endpoint_key, parse_reset


def fake_time() -> tuple[list[float], list[float], Callable[[float], Awaitable[None]]]:
    """A clock (``now[0]``) and a sleep that only moves it, recording each wait: the limiter's waits, never waited."""
    now = [100.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    return now, slept, sleep


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("1s", 1.0), ("6m0s", 360.0), ("20ms", 0.02), ("1m30.5s", 90.5), ("0s", 0.0), ("2", 2.0), ("1.5", 1.5), ("1h2m", 3720.0)],
)
def test_reset_values_as_openai_writes_them(value: str, seconds: float) -> None:
    assert parse_reset(value) == pytest.approx(seconds)


def test_reset_values_as_anthropic_writes_them() -> None:
    assert parse_reset("2026-01-01T00:00:30Z", now=1767225600.0) == pytest.approx(30.0)  # RFC 3339
    assert parse_reset("Thu, 01 Jan 2026 00:00:10 GMT", now=1767225600.0) == pytest.approx(10.0)  # an HTTP date
    assert parse_reset("soon") is None


def test_the_key_holds_a_digest_of_the_credential_never_the_credential() -> None:
    key = endpoint_key("https://api.openai.com/v1/", "sk-secret-123")
    assert "sk-secret-123" not in key and key.startswith("https://api.openai.com/v1#")
    assert key != endpoint_key("https://api.openai.com/v1", "sk-other")
    assert key == endpoint_key("https://api.openai.com/v1", "sk-secret-123")


def test_one_limiter_per_endpoint_and_credential() -> None:
    names = find_provider("openai").rate_limits
    assert names is not None
    limiters = EndpointLimiters()
    a = limiters.get("http://x/v1", "k1", names)
    assert limiters.get("http://x/v1", "k1", names) is a
    assert limiters.get("http://x/v1", "k2", names) is not a
    assert limiters.get("http://y/v1", "k1", names) is not a


def test_hosts_that_extend_openai_inherit_its_rate_limits() -> None:
    assert find_provider("groq").rate_limits == find_provider("openai").rate_limits
    anthropic = find_provider("anthropic")
    assert anthropic.rate_limits is not None
    assert {kind for kind, _ in anthropic.rate_limits.buckets} == {"requests", "tokens", "input_tokens", "output_tokens"}
    assert anthropic.overloaded.matches(529, "")


def test_a_paused_deadline_does_not_time_out_while_its_call_waits() -> None:
    async def main() -> str:
        deadline = Deadline(0.2)

        async def call() -> str:
            with deadline.paused():
                await asyncio.sleep(0.4)  # twice the timeout, waiting for a rate limit
            return "answered"

        return await within(deadline, call())

    assert asyncio.run(main()) == "answered"


def test_a_paused_deadline_still_times_out_on_the_calls_own_time() -> None:
    async def main() -> None:
        deadline = Deadline(0.2)

        async def call() -> None:
            with deadline.paused():
                await asyncio.sleep(0.01)
            await asyncio.sleep(5)

        await within(deadline, call())

    with pytest.raises((TimeoutError, asyncio.TimeoutError)):  # the 5 s of its own time pass the 0.2 s timeout
        asyncio.run(main())


def test_a_shard_or_an_actor_takes_its_share_of_the_window() -> None:
    from evalx.targets.transport.pacing import AdaptiveBounds

    assert AdaptiveBounds(1, 8, 64).shared(1) == AdaptiveBounds(1, 8, 64)
    assert AdaptiveBounds(1, 8, 64).shared(4) == AdaptiveBounds(1, 2, 16)
    assert AdaptiveBounds(2, 8, 3).shared(10) == AdaptiveBounds(1, 1, 1)  # at least one each
    names = find_provider("openai").rate_limits
    assert names is not None
    limiter = EndpointLimiters(share=4).get("http://x/v1", "k", names)
    limiter.adapt(AdaptiveBounds(1, 8, 64))
    assert limiter.bounds == AdaptiveBounds(1, 2, 16) and limiter.window == 2


def test_a_low_bucket_spaces_the_next_requests_before_any_429() -> None:
    """A bucket of 10 a second answered with 0 left: the next request waits for one to refill, not for a 429."""
    from evalx.targets.transport.pacing import EndpointLimiter

    names = find_provider("openai").rate_limits
    assert names is not None
    now, slept, sleep = fake_time()

    async def main() -> None:
        limiter = EndpointLimiter("k", names, clock=lambda: now[0], sleep=sleep)
        first = await limiter.acquire("t", adaptive=False)
        assert slept == []  # nothing known yet: at once
        headers = {"x-ratelimit-limit-requests": "10", "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1s"}
        limiter.finish(first, headers)
        await limiter.acquire("t", adaptive=False)
        assert 0.1 <= sum(slept) <= 0.15, slept  # one request's refill at (10 - 0 - 1) a second
        plenty = {"x-ratelimit-limit-requests": "10", "x-ratelimit-remaining-requests": "9", "x-ratelimit-reset-requests": "100ms"}
        third = await limiter.acquire("t", adaptive=False)
        limiter.finish(third, plenty)
        slept.clear()
        await limiter.acquire("t", adaptive=False)
        assert slept == []  # room left: no wait

    asyncio.run(main())


def test_a_429_pauses_the_endpoint_and_halves_the_window() -> None:
    from evalx.targets.transport.pacing import AdaptiveBounds, EndpointLimiter

    names = find_provider("openai").rate_limits
    assert names is not None
    now = [0.0]

    async def sleep(seconds: float) -> None:
        now[0] += seconds

    async def main() -> None:
        limiter = EndpointLimiter("k", names, clock=lambda: now[0], sleep=sleep)
        limiter.adapt(AdaptiveBounds(1, 8, 64))
        slot = await limiter.acquire("t", adaptive=True)
        assert limiter.finish(slot, {"retry-after-ms": "1500", "retry-after": "2"}, limited=True) == 1.5  # ms first
        assert limiter.window == 4
        await limiter.acquire("t", adaptive=True)
        assert now[0] >= 1.5  # nobody sends before the pause is over

    asyncio.run(main())


def test_the_requests_that_wait_out_a_pause_start_spread_over_the_next_one() -> None:
    """Four requests refused with ``retry-after: 1`` start a quarter second apart after the pause, not all at its end."""
    from evalx.targets.transport.pacing import EndpointLimiter, RateLimitHeaders

    now = [0.0]

    async def sleep(seconds: float) -> None:
        now[0] += seconds

    async def main() -> None:
        limiter = EndpointLimiter("k", RateLimitHeaders(), clock=lambda: now[0], sleep=sleep)
        slots = [await limiter.acquire("t", adaptive=False) for _ in range(4)]  # a fixed concurrency of 4
        for slot in slots:
            limiter.finish(slot, {"retry-after": "1"}, limited=True)
        starts = []
        for _ in range(4):
            await limiter.acquire("t", adaptive=False)
            starts.append(now[0])
        assert starts[0] >= 1.0  # nobody before the pause is over
        assert all(b - a >= 0.24 for a, b in itertools.pairwise(starts)), starts  # one slot each, spread over the next second

    asyncio.run(main())


def test_a_fixed_concurrency_waits_for_the_first_answer_when_the_headers_are_known() -> None:
    """With a ``rate_limits:`` section, the first request is answered before any other starts, whatever the concurrency."""
    from evalx.targets.transport.pacing import EndpointLimiter

    names = find_provider("openai").rate_limits
    assert names is not None

    async def main() -> None:
        limiter = EndpointLimiter("k", names)
        first = await limiter.acquire("t", adaptive=False)
        second = asyncio.ensure_future(limiter.acquire("t", adaptive=False))
        await asyncio.sleep(0)
        assert not second.done()  # the burst waits for the first answer
        limiter.finish(first, {"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "99"})
        await asyncio.wait_for(second, timeout=30)

    asyncio.run(main())


def test_answers_without_rate_limit_headers_leave_requests_unpaced_until_a_header_comes() -> None:
    """After a first answer with no rate-limit header, requests start at once, however many are in flight; the
    first answer that does carry a header is read, and the next request is paced by it."""
    from evalx.targets.transport.pacing import EndpointLimiter, tally

    names = find_provider("openai").rate_limits
    assert names is not None
    now, slept, sleep = fake_time()

    async def main() -> None:
        limiter = EndpointLimiter("k", names, clock=lambda: now[0], sleep=sleep)
        first = await limiter.acquire("t", adaptive=False)
        limiter.finish(first, {"content-type": "application/json"})  # an answer, no rate-limit header
        with tally() as counted:
            slots = [await limiter.acquire("t", adaptive=False) for _ in range(50)]
        assert slept == [] and limiter.in_flight == 50
        assert counted.concurrency == 50 and counted.wait_s == 0.0 and not counted.used
        for slot in slots[:-1]:
            limiter.finish(slot, {"content-type": "application/json"})
        assert limiter.in_flight == 1
        low = {"x-ratelimit-limit-requests": "10", "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1s"}
        limiter.finish(slots[-1], low)
        assert limiter.in_flight == 0
        await limiter.acquire("t", adaptive=False)
        assert 0.1 <= sum(slept) <= 0.15, slept  # one request's refill at (10 - 0 - 1) a second

    asyncio.run(main())
