"""Run a command and measure its own CPU time and peak RSS, not pytest's.

Linux carries a process's memory high-water mark across ``execve``: a child
forked (or vforked) from pytest reports at least pytest's resident size at the
fork in ``ru_maxrss``, so late in a long suite a 100 MB evalx run "peaks" at
700 MB. A small launcher (a fresh interpreter, a few MB resident) starts the
command instead and reports the command's ``wait4`` usage on its own last
stderr line, so the figure is the command's alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

_LAUNCHER = """\
import os, subprocess, sys
child = subprocess.Popen(sys.argv[1:])
_, status, usage = os.wait4(child.pid, 0)
sys.stderr.write(f"\\n@@measured {usage.ru_maxrss} {usage.ru_utime + usage.ru_stime}\\n")
sys.exit(os.waitstatus_to_exitcode(status) % 256)
"""


@dataclass(frozen=True)
class Measured:
    returncode: int
    stdout: str
    stderr: str
    peak_kib: int  # the command's own peak resident set size
    cpu_s: float  # its user + system CPU seconds (and its reaped children's)

    @property
    def peak_mb(self) -> float:
        return self.peak_kib / 1024


def run_measured(
    cmd: list[str],
    cwd: Path,
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> Measured:
    """Run ``cmd`` under the launcher; a hang past ``timeout_s`` kills it (the test fails, the suite goes on)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, *cmd],
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            preexec_fn=preexec_fn,  # limits set here are inherited by the command
            start_new_session=True,
        )
        killer = threading.Timer(timeout_s, lambda: os.killpg(proc.pid, 9))
        killer.start()
        try:
            returncode = proc.wait()
        finally:
            killer.cancel()
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    head, sep, tail = stderr.rpartition("\n@@measured ")
    if not sep:  # killed before the command ended
        return Measured(returncode, stdout, stderr, 0, 0.0)
    peak, cpu = tail.split()
    return Measured(returncode, stdout, head, int(peak), float(cpu))
