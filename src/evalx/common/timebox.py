"""Stop Python code on the current thread when it runs past a time limit (one shared guard thread raises into it).

Rendering a template is pure Python that never yields, so no event-loop
timer can stop ``{% for i in range(20000) %}{% for j in range(20000) %}``.
:func:`timebox` arms a deadline for the current thread; a single daemon
guard thread, looking every :data:`PERIOD_S`, raises :class:`TimeUp` in a
thread still inside its box (``PyThreadState_SetAsyncExc``: at its next
Python bytecode). Arming and disarming are a dict write under a lock, so a
box costs about a microsecond when nothing runs long; the guard's polls
cost nothing noticeable.

The guard fires only while the box is armed, under the same lock the box
takes to disarm; a :class:`TimeUp` that was sent but not yet raised when the
box closes is cleared, or raised from the ``with`` statement itself, so it
never lands in code after the box. Code stuck inside one C call gets the
exception when that call returns. Boxes do not nest: an inner box on a
thread that has one is a no-op (the outer deadline holds).
"""

from __future__ import annotations

import ctypes
import threading
import time

from evalx.errors import TimeUp

__all__ = ["PERIOD_S", "TimeUp", "timebox"]

#: how often the guard looks at the boxes (a box is stopped at most this long after its deadline)
PERIOD_S = 0.05


class _Box:
    __slots__ = ("deadline", "fired")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.fired = False


class _Guard:
    """The boxes armed, by thread id, and the thread that looks at them every :data:`PERIOD_S`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.boxes: dict[int, _Box] = {}
        self.thread: threading.Thread | None = None

    def arm(self, thread_id: int, box: _Box) -> None:
        self.boxes[thread_id] = box  # one dict write: atomic, and the guard only reads under its lock
        if self.thread is None:
            with self.lock:
                if self.thread is None:
                    self.thread = threading.Thread(target=self._watch, name="evalx-timebox", daemon=True)
                    self.thread.start()

    def disarm(self, thread_id: int) -> bool:
        """Take the thread's box away; True if the guard fired into it."""
        with self.lock:
            box = self.boxes.pop(thread_id, None)
            return box is not None and box.fired

    def _watch(self) -> None:
        while True:
            time.sleep(PERIOD_S)  # a poll, not a timer per box: arming stays a dict write
            if not self.boxes:
                continue
            now = time.monotonic()
            with self.lock:  # a box in this copy stays its thread's until the lock is let go (disarm takes it)
                for thread_id, box in list(self.boxes.items()):
                    if not box.fired and box.deadline <= now:
                        box.fired = True
                        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(TimeUp))


_guard = _Guard()


def _clear_pending(thread_id: int) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), None)


class timebox:
    """Raise :class:`TimeUp` in the ``with`` block if it runs longer than ``seconds``."""

    __slots__ = ("nested", "seconds", "thread_id")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __enter__(self) -> None:
        self.thread_id = thread_id = threading.get_ident()
        self.nested = thread_id in _guard.boxes  # an inner box: the outer one decides
        if not self.nested:
            _guard.arm(thread_id, _Box(time.monotonic() + self.seconds))

    def __exit__(self, *exc_info: object) -> None:
        if self.nested:
            return
        late = False
        while True:  # the guard's exception may arrive at any bytecode here: take the box away whatever happens
            try:
                if _guard.disarm(self.thread_id):
                    _clear_pending(self.thread_id)
                break
            except TimeUp:
                late = True
        if late:
            raise TimeUp
