"""Ctrl-C and SIGTERM during a run: the first cancels the run's main task (what finished is kept), a second stops waiting."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Interrupt", "cancel_on_signals"]


@dataclass
class Interrupt:
    """Whether a signal asked the run to stop."""

    interrupted: bool = False


@contextlib.contextmanager
def cancel_on_signals() -> Iterator[Interrupt]:
    """While inside: SIGINT/SIGTERM cancel the current task once, then raise KeyboardInterrupt; handlers removed on exit.

    Call it from the task to cancel, inside a running loop. Where signal
    handlers cannot be installed (not the main thread, Windows), nothing is
    installed and the run simply cannot be interrupted this way.
    """
    main = asyncio.current_task()
    loop = asyncio.get_running_loop()
    state = Interrupt()

    def stop() -> None:
        if state.interrupted:  # a second Ctrl-C: stop waiting for anything
            raise KeyboardInterrupt
        state.interrupted = True
        if main is not None:
            main.cancel()

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    try:
        yield state
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
