"""One owner for a cell's time (evalx.common.deadline): every layer reads the cell's deadline and words a timeout the same way.

Outcomes only: which timer fires first is never asserted, so a busy machine cannot fail these.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiohttp import web

from evalx.common import regexes
from evalx.common.deadline import Deadline, HeldTheLoop, current, within
from evalx.common.templates import render
from evalx.errors import TargetTimeout
from evalx.execution.watchdog import Watchdog
from evalx.targets.transport.http import HttpClient, retrying


async def _hanging_server() -> tuple[web.AppRunner, str, asyncio.Event]:
    release = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="{}")

    app = web.Application()
    app.router.add_get("/", hang)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}/", release


def test_within_publishes_the_deadline_times_out_and_lets_an_outer_cancel_through() -> None:
    async def slow() -> str:
        assert current() is deadline
        await asyncio.sleep(30)
        return "late"

    async def main() -> None:
        with pytest.raises(TimeoutError):
            await within(deadline, slow())
        assert current() is None  # the deadline is the call's only
        task = asyncio.ensure_future(within(Deadline(30), asyncio.sleep(30)))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    deadline = Deadline(0.01)
    asyncio.run(main())
    assert deadline.message() == "timed out after 0.01s"
    assert deadline.message("the regex /x/") == "timed out after 0.01s (the regex /x/)"


def test_a_request_keeps_its_own_timer_unless_the_cells_deadline_comes_first() -> None:
    async def main() -> None:
        runner, url, release = await _hanging_server()
        client = HttpClient(timeout_s=0.2)
        try:
            # no cell deadline (a bare call), or one later than the request's bound: the request's own timer ends it
            with pytest.raises(TargetTimeout, match=r"no response from .* within 0\.2s"):
                await client.request_json("GET", url)
            with pytest.raises(TargetTimeout, match=r"no response from .* within 0\.2s"):
                await within(Deadline(60), client.request_json("GET", url))
            # the cell's deadline comes first: the request sets no total timer of its own
            sent: list[Any] = []
            session = client._get_session()
            original = session.request

            def spy(*args: Any, **kwargs: Any) -> Any:
                sent.append(kwargs["timeout"])
                return original(*args, **kwargs)

            session.request = spy  # type: ignore[method-assign]
            with pytest.raises(TimeoutError):
                await within(Deadline(0.1), client.request_json("GET", url))
            assert sent[0].total is None and sent[0].sock_connect == client.connect_timeout_s
        finally:
            release.set()
            await client.aclose()
            await runner.cleanup()

    asyncio.run(main())


def test_a_timeout_the_http_layer_notices_at_the_deadline_reads_as_the_cells_and_is_not_retried() -> None:
    """The HTTP layer's own bound equal to the cell's (an idle timeout defaulting to timeout_s): same words, whoever fires."""

    async def main() -> None:
        runner, url, release = await _hanging_server()
        client = HttpClient(timeout_s=0.3, retries=3)
        calls = 0

        async def call() -> Any:
            nonlocal calls
            calls += 1
            return await client.request_json("GET", url)

        try:
            # the request's own 0.3 s timer is set (the deadline is a little later) and fires when the cell's time is up
            with pytest.raises(TargetTimeout) as caught:
                await _under(Deadline(0.32), lambda: client.retrying(call))
            assert str(caught.value).startswith("timed out after 0.32s (no response from http://127.0.0.1:")
            assert calls == 1  # the cell's time is up: never retried
            # a stream whose idle bound is the cell's timeout sets no idle timer: the deadline ends it, in the same words
            with pytest.raises(TimeoutError):
                await within(Deadline(0.2), _stream(client, url, idle_timeout_s=0.2))
        finally:
            release.set()
            await client.aclose()
            await runner.cleanup()

    asyncio.run(main())


async def _under(deadline: Deadline, call: Any) -> Any:
    """``call()`` with ``deadline`` published but no timer of its own (only the layers below can notice it)."""
    from evalx.common.deadline import _CURRENT

    token = _CURRENT.set(deadline)
    try:
        return await call()
    finally:
        _CURRENT.reset(token)


async def _stream(client: HttpClient, url: str, idle_timeout_s: float) -> None:
    async with client.stream("GET", url, idle_timeout_s=idle_timeout_s) as resp:
        async for _ in resp.lines():
            pass


def test_retries_stop_before_the_cells_deadline() -> None:
    from evalx.errors import TargetError

    async def main() -> None:
        calls = 0

        async def flaky() -> None:
            nonlocal calls
            calls += 1
            raise TargetError("HTTP 503", retryable=True, retry_after=5)

        with pytest.raises(TargetError, match="the next would pass the timeout"):
            await within(Deadline(2), retrying(flaky, retries=5))
        assert calls == 1

    asyncio.run(main())


def test_a_regex_and_a_template_stopped_by_the_deadline_say_so_as_every_layer_does() -> None:
    evil = "a" * 40 + "!"
    deadline = Deadline(0.2)
    with regexes.budget_until(deadline), pytest.raises(regexes.RegexTimeout) as caught:
        regexes.search(regexes.compile_user("(a|a)+$"), evil)
    assert str(caught.value).startswith("timed out after 0.2s (the regex /(a|a)+$/ on 41 characters")

    async def main() -> str:
        return render("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}", {}, field="prompt")

    from evalx.common.templates import TemplateRenderError

    with pytest.raises(TemplateRenderError, match=r"^prompt: timed out after 0\.3s \(rendering the template: a loop too large\?\)$"):
        asyncio.run(within(Deadline(0.3), main()))


def test_the_watchdog_stops_only_a_cell_that_holds_the_loop_past_its_deadline() -> None:
    """A cell far past its deadline that keeps awaiting is left alone (the loop is free: its timer or its judge will end it);
    one that never awaits gets HeldTheLoop at its next bytecode."""

    async def main() -> tuple[bool, bool]:
        live: dict[Deadline, None] = {}
        deadline = Deadline(0.0)
        deadline.task = asyncio.current_task()
        live[deadline] = None
        # a period long enough that a busy machine never stalls a runnable loop that long (a stall of a period
        # while the cell's step runs would read as holding the loop)
        with Watchdog(live, grace_s=0.0, period_s=0.5):
            stopped_while_awaiting = False
            try:
                for _ in range(300):  # about three periods of turns, each giving the loop back
                    await asyncio.sleep(0.005)
            except HeldTheLoop:
                stopped_while_awaiting = True
            stopped_while_spinning = False
            give_up = time.monotonic() + 120  # never awaits; the watchdog's exception ends it (else the test fails, not hangs)
            try:
                while time.monotonic() < give_up:  # plain bytecode: the exception lands here, not inside a lock's internals
                    pass
            except HeldTheLoop:
                stopped_while_spinning = True
        return stopped_while_awaiting, stopped_while_spinning

    assert asyncio.run(main()) == (False, True)
