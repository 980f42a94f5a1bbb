"""Ctrl-C and SIGTERM during a run: the first cancels the run's main task (what finished is kept), a second stops waiting.

Outside the cells (a ``before_run`` hook, loading, the reports), :func:`sigterm_as_ctrl_c` makes SIGTERM a Ctrl-C too.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

__all__ = ["Interrupt", "cancel_on_signals", "sigterm_as_ctrl_c"]


@dataclass
class Interrupt:
    """Whether a signal asked the run to stop."""

    interrupted: bool = False


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """While inside (a command of the CLI): SIGTERM is Ctrl-C, wherever it comes.

    Python's default for SIGTERM ends the process on the spot: a CI cancel, ``timeout`` or ``docker stop``
    during a ``before_run`` hook, the datasets' loading or the pre-flight check would leave ``run.json``
    saying ``running``, skip ``after_run`` and orphan the hook's processes. As a ``KeyboardInterrupt`` it is
    handled as Ctrl-C is; while the cells run, :func:`cancel_on_signals` takes both. Outside the main thread
    nothing is changed.
    """
    try:
        before = signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


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

    installed: list[tuple[signal.Signals, Callable[[int, FrameType | None], Any] | int | None]] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            before = signal.getsignal(sig)
            loop.add_signal_handler(sig, stop)
            installed.append((sig, before))
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    try:
        yield state
    finally:
        for sig, before in installed:
            loop.remove_signal_handler(sig)
            # asyncio leaves the default there (SIGTERM: death on the spot); the handler before it (the CLI's SIGTERM as
            # Ctrl-C, for the summary, the reports and after_run) is put back
            if before is not None:
                signal.signal(sig, before)
