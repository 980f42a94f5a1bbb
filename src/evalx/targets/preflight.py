"""A remote target that is down, said once: the pre-flight check before a run's cells, and the early stop after them.

- :func:`unreachable`: one TCP connect to each remote target's host:port
  (never a request, never a model call), all at once, before the first cell;
  a target that takes no connection is one line naming its URL and how the
  config says to start it (``start:``), and the run stops before any cell
  retries (:class:`~evalx.errors.TargetUnreachable`, exit 3). The executor
  skips it for a target whose cells are all in the response cache, and for a
  request that goes through a proxy (the proxy is what would be reached).
- :class:`ConnectWatch`: should the server go down after the check (or
  accept connections and reset them, or the check be skipped), a target whose
  first :data:`FIRST_CELLS` results are all connection failures (no
  connection, or one dropped before an answer) runs no further cell: the rest
  are ``skipped`` with one reason, and the run says so in one line (a target
  of no more cells than that runs them all).
- The judge: its target is checked with the run's targets when a cell is
  model-graded; one that takes no connection is a warning (its answers may be
  in the response cache), and once its first :data:`FIRST_CELLS` calls got
  no connection, no further call is made (each is that error at once).
"""

from __future__ import annotations

import asyncio
import os
import socket
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from evalx.common.redaction import redact_url
from evalx.models import Cell

__all__ = [
    "CONNECT_TIMEOUT_S",
    "FIRST_CELLS",
    "ConnectWatch",
    "Endpoint",
    "chained",
    "endpoint_of",
    "preflight_disabled",
    "start_hint",
    "unreachable",
]

#: how long the pre-flight connect may take (a reachable server accepts in milliseconds)
CONNECT_TIMEOUT_S = 5.0
#: a target whose first this many results all failed to connect runs no more cells
FIRST_CELLS = 5


@dataclass(frozen=True)
class Endpoint:
    """Where a remote target is reached: its id, its URL (credentials masked), host and port, and how to start it."""

    target_id: str
    url: str
    host: str
    port: int
    start: str | None
    #: what the line calls it: ``target``, or ``judge target`` (whose failure is a warning: its calls may be cached)
    kind: str = "target"


def start_hint(start: str | None) -> str:
    """What a person should do about a target that takes no connection: the config's ``start:``, else a question."""
    return f"is the server running? start it with: {start}" if isinstance(start, str) and start.strip() else "is the server running?"


def endpoint_of(target: Any) -> Endpoint | None:
    """A started remote target's endpoint (its ``url``), or None: a Python target, a URL that is not http(s), a proxied one."""
    url = getattr(target, "url", None)
    if getattr(target, "type", None) == "python" or not isinstance(url, str):
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a bad port: the request's own error says so
        return None
    if _proxied(parts.scheme, parts.hostname):
        return None
    spec = getattr(target, "spec", None) or {}
    start = spec.get("start") if isinstance(spec.get("start"), str) else None
    return Endpoint(str(target.id), redact_url(url), parts.hostname, port, start)


def _proxied(scheme: str, host: str) -> bool:
    proxies = urllib.request.getproxies()
    if scheme not in proxies:
        return False
    return not urllib.request.proxy_bypass(host)


async def _connect(host: str, port: int, timeout_s: float) -> str | None:
    """None when ``host:port`` takes a TCP connection, else why not (in the HTTP layer's words)."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except (asyncio.TimeoutError, TimeoutError):
        return f"no connection within {timeout_s:g}s"
    except ConnectionRefusedError:
        return "connection refused"
    except (ConnectionResetError, ConnectionAbortedError):  # something listens there (it accepted): what it answers is the cells' to say
        return None
    except OSError as exc:
        if isinstance(exc, socket.gaierror):
            return "host name not found"
        return str(exc.strerror or exc).strip().lower() or "connection failed"
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass
    return None


async def unreachable(endpoints: Iterable[Endpoint], timeout_s: float = CONNECT_TIMEOUT_S) -> list[str]:
    """One line for each endpoint that takes no TCP connection (each host:port tried once, all at once)."""
    wanted = list(endpoints)
    addresses = list(dict.fromkeys((e.host, e.port) for e in wanted))
    reasons = dict(zip(addresses, await asyncio.gather(*(_connect(h, p, timeout_s) for h, p in addresses)), strict=True))
    lines = []
    for e in wanted:
        reason = reasons[(e.host, e.port)]
        if reason is not None:
            hint = start_hint(e.start)
            lines.append(f"{e.kind} {e.target_id!r}: cannot connect to {e.url} ({reason}): {hint}")
    return lines


@dataclass
class ConnectWatch:
    """Watches each target's first results; once its first :data:`FIRST_CELLS` all failed to connect, admits none of its cells."""

    #: each target's cell count in this run
    cells: dict[str, int]
    #: each target's ``start:`` (how the config says to start its server), when it has one
    starts: dict[str, str | None]
    first: int = FIRST_CELLS
    _seen: dict[str, int] = field(default_factory=dict)
    _failed: dict[str, int] = field(default_factory=dict)
    _first_error: dict[str, str] = field(default_factory=dict)
    #: the targets stopped, with the reason their remaining cells are skipped with
    down: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)

    def record(self, target: str, status: str, error: str | None) -> None:
        """A result of ``target``'s (in the order they come)."""
        seen = self._seen.get(target, 0)
        if seen >= self.first or target in self.down or target not in self.cells:  # watched: remote targets only
            return
        self._seen[target] = seen + 1
        from evalx.targets.transport.http import is_connect_failure  # aiohttp: a Python target's run never loads it

        if status == "error" and error and is_connect_failure(error):
            self._failed[target] = self._failed.get(target, 0) + 1
            self._first_error.setdefault(target, error)
        needed = min(self.first, self.cells.get(target, 0))
        if self._seen[target] >= needed and self._failed.get(target, 0) >= needed and self.cells.get(target, 0) > needed:
            hint = start_hint(self.starts.get(target))
            self.down[target] = (
                f"not run: the first {needed} cells of target {target!r} got no answer ({self._first_error[target]}); {hint}"
            )

    def admit(self, cell: Cell) -> str | None:
        """None to run ``cell``, else why it is skipped (its target is down)."""
        reason = self.down.get(cell.target)
        if reason is not None:
            self.skipped[cell.target] = self.skipped.get(cell.target, 0) + 1
        return reason

    def lines(self) -> list[str]:
        """One line per target stopped early."""
        return [
            f"target {target!r}: stopped early, {_cells(self.skipped.get(target, 0))} not run — {reason.removeprefix('not run: ')}"
            for target, reason in self.down.items()
            if self.skipped.get(target)  # its last cells were in flight already: each has its error, said as usual
        ]


def _cells(n: int) -> str:
    return f"{n} cell{'s' if n != 1 else ''}"


def chained(*admits: Callable[[Cell], str | None] | None) -> Callable[[Cell], str | None] | None:
    """One ``admit`` asking each of ``admits`` in turn (the first reason wins); None when there are none."""
    present = [a for a in admits if a is not None]
    if not present:
        return None
    if len(present) == 1:
        return present[0]

    def admit(cell: Cell) -> str | None:
        for one in present:
            reason = one(cell)
            if reason is not None:
                return reason
        return None

    return admit


def preflight_disabled() -> bool:
    """``EVALX_NO_PREFLIGHT=1`` turns the pre-flight connect off (a firewall that drops probes, a server started lazily)."""
    return os.environ.get("EVALX_NO_PREFLIGHT", "") not in ("", "0")
