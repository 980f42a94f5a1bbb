"""Start ``evalx run`` in a process, wait until a target says it is busy (a flag file), then signal it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Interrupted:
    returncode: int
    out: str
    err: str
    seconds: float
    """From the signal to the process's exit (for a message; a loaded machine stretches it, so tests bound it through ``stop_s``)."""


def interrupt_when(
    flag: Path,
    config: Path,
    *,
    sig: signal.Signals = signal.SIGTERM,
    settle_s: float = 0.0,
    wait_s: float = 60,
    stop_s: float = 60,
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> Interrupted:
    """Run ``evalx run -c config [args]`` in ``config``'s folder; once ``flag`` exists (and ``settle_s`` more), send ``sig``.

    Polls for the file (no fixed sleep to wait for a server or a target);
    ``settle_s`` lets work the flag announces get under way first. A run
    still going ``stop_s`` after the signal fails the test: that bound is the
    test of "the signal stops it" (the work it interrupts is set to last far
    longer), and is generous, since a loaded machine stretches any stop.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "evalx", "run", "-c", str(config), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=config.parent,
        env=env,
    )
    try:
        deadline = time.monotonic() + wait_s
        while not flag.exists():
            assert proc.poll() is None, "evalx ended before the target started"
            assert time.monotonic() < deadline, f"{flag.name} never appeared"
            time.sleep(0.05)
        if settle_s:
            time.sleep(settle_s)
        t0 = time.monotonic()
        proc.send_signal(sig)
        try:
            out, err = proc.communicate(timeout=stop_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"evalx still ran {stop_s:g}s after {sig.name}") from None
        return Interrupted(proc.returncode, out, err, time.monotonic() - t0)
    finally:
        proc.kill()
