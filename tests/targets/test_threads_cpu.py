"""Quick sync calls share a CPU with the event loop's thread (Linux); a slow call gives every CPU back."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from evalx.targets import threads
from evalx.targets.threads import QUICK_CALLS, SyncRunner

pytestmark = pytest.mark.skipif(not threads._PIN or len(os.sched_getaffinity(0)) < 2, reason="needs Linux thread affinity and two CPUs")


def _cpus_of(tid: int) -> set[int]:
    return os.sched_getaffinity(tid)


async def _calls(runner: SyncRunner, fn, n: int) -> list[object]:  # type: ignore[no-untyped-def]
    return [await runner.run(fn) for _ in range(n)]


def test_quick_calls_share_one_cpu_with_the_loop_and_give_it_back_on_close() -> None:
    everything = os.sched_getaffinity(0)
    seen: list[set[int]] = []

    async def main() -> None:
        runner = SyncRunner(8)
        loop_tid = threading.get_native_id()
        await asyncio.gather(*(_calls(runner, lambda: 1, QUICK_CALLS) for _ in range(4)))
        seen.append(_cpus_of(loop_tid))
        worker_cpus = await runner.run(lambda: os.sched_getaffinity(0))
        seen.append(worker_cpus)
        runner.close()
        seen.append(_cpus_of(loop_tid))

    asyncio.run(main())
    shared, worker, after = seen
    assert len(shared) == 1 and worker == shared  # the loop's thread and the worker on one CPU
    assert after == everything  # given back when the runner closes


def test_a_slow_call_gives_every_cpu_back_and_stays_spread() -> None:
    everything = os.sched_getaffinity(0)
    seen: list[set[int]] = []

    async def main() -> None:
        runner = SyncRunner(2)
        loop_tid = threading.get_native_id()
        await _calls(runner, lambda: 1, QUICK_CALLS + 5)
        seen.append(_cpus_of(loop_tid))
        await runner.run(lambda: time.sleep(threads.SLOW_S * 2))  # a call that blocks or computes
        seen.append(_cpus_of(loop_tid))
        seen.append(await runner.run(lambda: os.sched_getaffinity(0)))
        await _calls(runner, lambda: 1, QUICK_CALLS + 5)  # quick again: stays spread (the target is not always quick)
        seen.append(_cpus_of(loop_tid))
        runner.close()

    asyncio.run(main())
    shared, after_slow, worker, later = seen
    assert len(shared) == 1
    assert after_slow == everything and worker == everything and later == everything


def test_a_process_held_to_one_cpu_is_left_alone() -> None:
    everything = os.sched_getaffinity(0)
    one = {min(everything)}
    os.sched_setaffinity(0, one)
    try:

        async def main() -> set[int]:
            runner = SyncRunner(4)
            await _calls(runner, lambda: 1, QUICK_CALLS + 5)
            runner.close()
            return os.sched_getaffinity(0)

        assert asyncio.run(main()) == one
    finally:
        os.sched_setaffinity(0, everything)
