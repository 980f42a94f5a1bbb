"""Python-callable targets: ``module:function`` or ``path/file.py:function``.

Called as ``fn(input)``, plus ``case=`` (the case as a plain mapping) when the
function declares a parameter named ``case``. Sync functions run in a
bounded thread pool (:class:`._threads.SyncRunner`: quick calls stay on one
thread), async ones are awaited on the loop.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from evalx.errors import TargetProtocolError
from evalx.models import Cell, Trajectory
from evalx.targets.base import RunContext
from evalx.targets.settings import TargetSettings
from evalx.targets.threads import Raised, SyncRunner
from evalx.usercode import resolve_callable


class PythonTarget:
    type = "python"

    def __init__(self, spec: dict[str, Any], settings: TargetSettings) -> None:
        self.id = spec["id"]
        self.spec = spec
        self.settings = settings
        self._fn: Any = None
        self._is_async = False
        self._wants_case = False
        self._pool: SyncRunner | None = None

    async def start(self, run: RunContext) -> None:
        self._fn = resolve_callable(self.spec["callable"], run.config_dir)
        target = inspect.unwrap(self._fn)
        self._is_async = inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(getattr(target, "__call__", None))  # noqa: B004  (an instance with an async __call__)
        try:
            params = inspect.signature(self._fn).parameters
        except (TypeError, ValueError):
            params = {}  # type: ignore[assignment]
        self._wants_case = "case" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
        if not self._is_async:
            # as many threads as the executor has workers for this target: a started call never queues
            self._pool = SyncRunner(self.settings.concurrency, name=f"evalx-{self.id}")

    async def invoke(self, cell: Cell, run: RunContext) -> Trajectory:
        kwargs = {"case": cell.case.to_dict()} if self._wants_case else {}
        if self._is_async:
            value = await self._fn(cell.case.input, **kwargs)
        else:
            assert self._pool is not None, "start() first"
            try:
                value = await self._pool.run(lambda: self._fn(cell.case.input, **kwargs))
            except Raised as exc:
                raise exc.exc from None  # raised here, in the cell's own frame: the cell's error, like any other
        return to_trajectory(value, self.spec["callable"])

    async def aclose(self) -> None:
        if self._pool is not None:
            self._pool.close()


def to_trajectory(value: Any, where: str) -> Trajectory:
    if isinstance(value, Trajectory):
        return value
    if isinstance(value, str):
        return Trajectory(text=value)
    if isinstance(value, Mapping):
        data = dict(value)
        if "text" in data and not isinstance(data["text"], str):
            data["text"] = "" if data["text"] is None else str(data["text"])
        unknown = set(data) - set(Trajectory.__dataclass_fields__)
        extra = {k: data.pop(k) for k in unknown}
        try:
            traj = Trajectory.from_dict(data)
        except (TypeError, ValueError) as exc:
            raise TargetProtocolError(f"{where} returned a mapping evalx cannot read: {exc}") from None
        if extra:
            traj.raw = extra
        return traj
    raise TargetProtocolError(f"{where} returned {type(value).__name__}; expected a string or a mapping of trajectory fields")
