"""The endpoint limiter's pieces: reading the providers' reset values, the key, and a deadline paused while a call waits."""

from __future__ import annotations

import asyncio

import pytest

from evalx.common.deadline import Deadline, within
from evalx.targets.definitions import find_provider
from evalx.targets.transport.pacing import EndpointLimiters, endpoint_key, parse_reset


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
