"""Run hooks: ``hooks: {before_run, after_run}`` — commands or Python callables around a run.

A hook (its record: :class:`evalx.config.model.HookSpec`) is a shell command (a string, run by ``/bin/sh -c``), an argv list, or
``{run: ..., timeout_s: N}`` / ``{callable: module:function, timeout_s: N}``.
It runs in the config's folder with the run in its environment
(``EVALX_RUN_ID``, ``EVALX_RUN_DIR``, ``EVALX_CONFIG``, ``EVALX_HOOK``); a
callable is given the same values as a mapping when it takes an argument.

- ``before_run`` runs once the run folder exists, before any cell; when it
  fails (a non-zero exit, a timeout, an exception) the run stops before any
  cell with exit status 3 (:class:`~evalx.errors.HookFailed`).
- ``after_run`` always runs, after the reports are written, also after a
  failed ``before_run``, Ctrl-C or an error; its failure is reported and
  leaves the verdict alone.

Each hook's output (stdout and stderr, or a callable's exception) is written
to ``hooks/<name>.log`` in the run folder, secrets redacted, at most
:data:`LOG_LIMIT` bytes of it; its problem (an exit status, a timeout, a
callable's exception) is one line of at most :data:`PROBLEM_LIMIT` characters.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalx.common.atomic import write_text
from evalx.config.model import HookSpec
from evalx.errors import HookFailed, described

__all__ = ["HookFailed", "HookResult", "run_hook"]

log = logging.getLogger(__name__)

LOG_LIMIT = 1 << 20  # bytes of a hook's output kept in its log
#: characters of a hook's problem (a callable's exception, from user code) kept: it is shown as one line
PROBLEM_LIMIT = 2000


@dataclass(frozen=True)
class HookResult:
    name: str
    ok: bool
    #: "exit status 1", "timed out after 5s", "ValueError: ..." (redacted); "" when it succeeded
    problem: str
    log_file: Path


def run_hook(
    name: str, hook: object, *, base_dir: Path, run_dir: Path, values: Mapping[str, str], redact: Callable[[str], str]
) -> HookResult:
    """Run one hook to its end or its timeout; never raises for what the hook does."""
    spec = _spec(hook)
    log_file = run_dir / "hooks" / f"{name}.log"
    if log_file.parent.is_symlink():  # a `hooks` link planted in the run folder: logs stay in the run folder
        log_file.parent.unlink()
    env = {**os.environ, **values, "EVALX_HOOK": name}
    if spec.callable is not None:
        output, problem = _call(spec.callable, base_dir, {**values, "EVALX_HOOK": name}, spec.timeout_s)
    else:
        assert spec.run is not None
        raw, problem = _command(spec.run, base_dir, env, spec.timeout_s)
        output = raw.decode("utf-8", errors="replace")
    text = redact(output)
    if problem:
        problem = _one_line(redact(problem))
        text += f"\n[evalx] {name} hook failed: {problem}\n"
    write_text(log_file, text, errors="replace")  # atomic: a link there is replaced, never written through
    return HookResult(name, not problem, problem, log_file)


def _one_line(problem: str) -> str:
    """A hook's problem as the one line it is shown as, at most :data:`PROBLEM_LIMIT` characters (saying so)."""
    line = " ".join(problem.split())
    if len(line) <= PROBLEM_LIMIT:
        return line
    return f"{line[:PROBLEM_LIMIT]} … (clipped: {len(line):,} characters)"


def _spec(hook: object) -> HookSpec:
    if isinstance(hook, HookSpec):
        return hook
    if isinstance(hook, str):
        return HookSpec(run=hook)
    if isinstance(hook, (list, tuple)):
        return HookSpec(run=tuple(str(a) for a in hook))
    raise TypeError(f"not a hook: {hook!r}")


def _command(run: str | tuple[str, ...], cwd: Path, env: Mapping[str, str], timeout_s: float) -> tuple[bytes, str]:
    argv = ["/bin/sh", "-c", run] if isinstance(run, str) else list(run)
    try:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
    except OSError as exc:  # the program is not there, or not executable
        return b"", f"cannot start {argv[0]!r}: {exc.strerror or exc}"
    output = bytearray()

    def read() -> None:  # keep the first LOG_LIMIT bytes, drain the rest (a chatty hook never blocks on a full pipe)
        assert proc.stdout is not None
        for chunk in iter(lambda: proc.stdout.read(65536), b""):  # type: ignore[union-attr]
            if len(output) < LOG_LIMIT:
                output.extend(chunk[: LOG_LIMIT - len(output)])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        status = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        reader.join(5)
        return bytes(output), f"timed out after {timeout_s:g}s"
    except BaseException:  # Ctrl-C while it runs: the hook's whole process group goes too
        _kill_group(proc)
        raise
    reader.join(5)
    if status != 0:
        return bytes(output), f"exit status {status}" if status > 0 else f"killed by signal {-status}"
    return bytes(output), ""


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


def _call(ref: str, base_dir: Path, values: Mapping[str, str], timeout_s: float) -> tuple[str, str]:
    """Call a hook function (awaited if async) in a thread, bounded by ``timeout_s``; (output, problem)."""
    from evalx.common.usercode import resolve_callable, user_code_on_path
    from evalx.errors import UserCodeError

    try:
        with user_code_on_path(base_dir):
            fn = resolve_callable(ref, base_dir)
    except UserCodeError as exc:
        return "", str(exc)
    outcome: list[str] = []

    def call() -> None:
        try:
            args = (dict(values),) if _takes_an_argument(fn) else ()
            result = fn(*args)
            if inspect.isawaitable(result):
                asyncio.run(_awaited(result))
            outcome.append("")
        except BaseException as exc:  # what user code raises is the hook's failure, reported
            outcome.append(described(exc))

    worker = threading.Thread(target=call, name=f"evalx-hook-{ref}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if not outcome:  # a thread cannot be stopped: it is left to end on its own, the run goes on
        return "", f"timed out after {timeout_s:g}s"
    return "", outcome[0]


async def _awaited(result: Any) -> None:
    await result


def _takes_an_argument(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params)
