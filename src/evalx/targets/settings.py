"""A target's run settings, resolved once per run: command line > target > ``defaults:`` > built-in.

Every setting a target runs under — how many cells at once, the per-cell
timeout, retries and their backoff, the stream idle timeout, the response
cache, the rate limit, the response size limit — is read here and nowhere else.
:func:`resolve_settings` looks each one up in three layers, the first that
sets it (to anything but null) wins:

1. the run request's :class:`Overrides` (``evalx run --concurrency N``,
   ``evalx.run(concurrency=N)``; ``--no-cache`` sets ``cache`` off), typed
   and resolved once per run (:meth:`evalx.execution.request.RunRequest.overrides`);
2. the target's own entry under ``targets:`` (for the judge: the judge
   target's entry, or the inline ``judge.target`` mapping);
3. the config's ``defaults:`` section;

and falls back to the built-in value (:class:`TargetSettings`' field
defaults; ``backoff_s`` reads ``EVALX_BACKOFF_BASE_S`` first, ``idle_timeout_s``
falls back to the resolved ``timeout_s``, ``cache`` is on for provider targets
and off otherwise). The runner resolves each target once and hands the
:class:`TargetSettings` to the target and to the executor; the judge resolves
its targets with the same function and the same overrides.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from evalx.targets.spec import AdaptiveConcurrency, DefaultSettings, RateLimit, TargetSpec
from evalx.targets.transport.pacing import DEFAULT_BOUNDS, DEFAULT_MAX_WAIT_S, AdaptiveBounds

__all__ = ["BACKOFF_ENV", "MAX_RESPONSE_BYTES", "SETTING_KEYS", "BatchSettings", "Overrides", "TargetSettings", "resolve_settings"]

#: environment variable overriding the built-in backoff base (seconds); tests set it small
BACKOFF_ENV = "EVALX_BACKOFF_BASE_S"
#: the built-in ``max_response_bytes``: 64 MiB, far above any real answer, far below a machine's memory
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class BatchSettings:
    """A provider target's ``batch:`` resolved (``batch: true`` is these defaults): see docs/providers.md#batch-mode."""

    #: the first wait before a batch is polled; each poll doubles it, up to :data:`evalx.targets.batch.POLL_CEILING_S`
    poll_interval_s: float = 5.0
    #: the most requests in one batch; None: the provider definition's limit (a larger number is cut to it)
    max_requests: int | None = None
    #: how long a batch is waited for before its cells fall back to normal calls (the providers' window is 24 h)
    max_wait_s: float = 86_400.0


@dataclass(frozen=True, slots=True)
class TargetSettings:
    """How one target's cells run. Built by :func:`resolve_settings`; the defaults here are the built-in values."""

    #: cells of this target in flight at once: the executor's workers, and the size of the target's
    #: HTTP connection pool and thread pool (so a started cell never waits in another queue);
    #: with adaptive concurrency, its ``max``
    concurrency: int = 8
    #: ``concurrency: auto`` or ``{min, start, max}``: the adaptive window's bounds (None: a fixed concurrency)
    adaptive: AdaptiveBounds | None = None
    #: seconds a cell may take, counted from the moment it starts (a worker took it and the rate limit let it go)
    timeout_s: float = 120.0
    #: retries of one cell's retryable failures (transport errors, 408, 429, 5xx)
    retries: int = 3
    #: base of the jittered exponential backoff between retries, in seconds
    backoff_s: float = 0.5
    #: engine targets: fail when the stream sends nothing for this long (seconds); defaults to ``timeout_s``
    idle_timeout_s: float = 120.0
    #: look cells up in (and store them to) the response cache
    cache: bool = False
    #: provider targets' ``rate_limit: {rpm: N}``: requests per minute, None for no limit
    rate_limit_rpm: float | None = None
    #: ``rate_limit: {max_wait_s}``: with adaptive concurrency, the most seconds a cell's calls wait for the rate limit
    rate_limit_max_wait_s: float = DEFAULT_MAX_WAIT_S
    #: the most bytes one response may have (decoded: after gzip/deflate/br), a whole body or a stream;
    #: past it the cell ends with an error (a hostile or broken server cannot exhaust memory or time)
    max_response_bytes: int = MAX_RESPONSE_BYTES
    #: provider targets' ``batch:`` (or ``--batch``): requests go through the provider's batch API; None: normal calls
    batch: BatchSettings | None = None


#: the keys a layer may set (``rate_limit`` is the ``{rpm: N}`` mapping)
SETTING_KEYS = frozenset(
    {"concurrency", "timeout_s", "retries", "backoff_s", "idle_timeout_s", "cache", "rate_limit", "max_response_bytes"}
)


@dataclass(frozen=True, slots=True)
class Overrides:
    """The top layer of every target's settings: what a run request sets over the config (None: not set).

    The keys are a target's; ``rate_limit_share`` N divides every ``rate_limit``
    by N (a shard of N shares the provider's limit with the other shards).
    """

    #: a number, ``"auto"`` or ``{min, start, max}`` (``--concurrency auto``)
    concurrency: int | str | AdaptiveConcurrency | Mapping[str, int] | None = None
    timeout_s: float | None = None
    retries: int | None = None
    backoff_s: float | None = None
    idle_timeout_s: float | None = None
    cache: bool | None = None
    #: ``{rpm: N}``, as the record or its mapping
    rate_limit: RateLimit | Mapping[str, float] | None = None
    max_response_bytes: int | None = None
    rate_limit_share: int | None = None
    #: ``--batch``: every provider target whose definition has a batch API uses it
    batch: bool | None = None


def resolve_settings(
    spec: TargetSpec | Mapping[str, object],
    defaults: DefaultSettings | Mapping[str, object] | None = None,
    overrides: Overrides | None = None,
) -> TargetSettings:
    """The settings of the target ``spec`` (its ``targets:`` entry) under ``defaults:`` and the run's ``overrides``.

    ``spec`` and ``defaults`` are the typed records (:class:`TargetSpec`,
    :class:`DefaultSettings`); a mapping with the same keys is read the same
    way (the runner still hands over the config's mappings).
    """
    layers = (_reader(overrides or _NO_OVERRIDES), _reader(spec), _reader(defaults or _NO_DEFAULTS))

    def pick(key: str) -> object:
        for read in layers:
            value = read(key)
            if value is not None:
                return value
        return None

    built_in = _BUILT_IN
    concurrency = pick("concurrency")
    timeout_s = pick("timeout_s")
    retries = pick("retries")
    backoff_s = pick("backoff_s")
    idle = pick("idle_timeout_s")
    cache = pick("cache")
    max_bytes = pick("max_response_bytes")
    rpm = next((r for r in (_rpm(read("rate_limit")) for read in layers) if r is not None), None)
    max_wait = next((w for w in (_max_wait(read("rate_limit")) for read in layers) if w is not None), None)
    workers, adaptive = _concurrency(concurrency, built_in.concurrency)
    if adaptive is not None and layers[1]("type") != "provider":  # only a provider's answers say how it keeps up
        workers, adaptive = adaptive.start, None
    share = overrides.rate_limit_share if overrides is not None else None
    if rpm is not None and share:
        rpm = float(rpm) / float(share)
    timeout = float(_number(timeout_s)) if timeout_s is not None else built_in.timeout_s
    return TargetSettings(
        concurrency=workers,
        adaptive=adaptive,
        timeout_s=timeout,
        retries=max(0, int(_number(retries))) if retries is not None else built_in.retries,
        backoff_s=max(0.0, float(_number(backoff_s))) if backoff_s is not None else _backoff_from_env(built_in.backoff_s),
        idle_timeout_s=float(_number(idle)) if idle is not None else timeout,
        cache=bool(cache) if cache is not None else layers[1]("type") == "provider",
        rate_limit_rpm=float(rpm) if rpm is not None and rpm > 0 else None,
        rate_limit_max_wait_s=float(max_wait) if max_wait is not None and max_wait > 0 else DEFAULT_MAX_WAIT_S,
        max_response_bytes=max(1, int(_number(max_bytes))) if max_bytes is not None else built_in.max_response_bytes,
        batch=_batch(layers[1]("type"), layers[1]("batch"), overrides.batch if overrides is not None else None),
    )


def _batch(kind: object, written: object, override: bool | None) -> BatchSettings | None:
    """A provider target's batch settings: its ``batch:`` (true or the options), or ``--batch``'s defaults; None: no batch."""
    if kind != "provider":
        return None
    if written is None or written is False:
        return BatchSettings() if override else None
    if written is True:
        return BatchSettings()
    read = _reader(written) if isinstance(written, Mapping) else lambda key: getattr(written, key, None)
    poll, most, wait = read("poll_interval_s"), read("max_requests"), read("max_wait_s")
    default = BatchSettings()
    return BatchSettings(
        poll_interval_s=float(_number(poll)) if poll is not None else default.poll_interval_s,
        max_requests=int(_number(most)) if most is not None else None,
        max_wait_s=float(_number(wait)) if wait is not None else default.max_wait_s,
    )


def _number(value: object) -> int | float | str:
    """A setting's value as ``int()`` and ``float()`` take it (the schema said it is a number; ``${VAR}`` may make it text)."""
    if isinstance(value, (int, float, str)):
        return value
    raise TypeError(f"expected a number, got {type(value).__name__}")


def _reader(layer: Overrides | TargetSpec | DefaultSettings | Mapping[str, object]) -> Callable[[str], object]:
    """A layer's value of a key (None when it sets none): a record's field, or a mapping's key (the runner's, until it hands records)."""
    if isinstance(layer, Mapping):
        return layer.get
    return lambda key: getattr(layer, key, None)


def _concurrency(value: object, built_in: int) -> tuple[int, AdaptiveBounds | None]:
    """``concurrency`` as (workers, adaptive bounds): a number is fixed; ``auto`` and ``{min, start, max}`` adapt, ``max`` workers.

    Bounds out of order are put in order: ``start`` within ``[min, max]``, ``max`` at least ``min``.
    """
    if value is None:
        return built_in, None
    if value == "auto":
        return DEFAULT_BOUNDS.max, DEFAULT_BOUNDS
    if isinstance(value, (Mapping, AdaptiveConcurrency)):
        fields: Mapping[str, object] = value if isinstance(value, Mapping) else vars(value)
        read = fields.get
        low = int(_number(read("min") or DEFAULT_BOUNDS.min))
        high = read("max")
        start = read("start")
        high_n = max(low, int(_number(high)) if high is not None else max(DEFAULT_BOUNDS.max, int(_number(start or 0))))
        start_n = min(high_n, max(low, int(_number(start)) if start is not None else DEFAULT_BOUNDS.start))
        return high_n, AdaptiveBounds(max(1, low), start_n, high_n)
    return max(1, int(_number(value))), None


def _max_wait(rate_limit: object) -> float | None:
    """A layer's ``rate_limit: {max_wait_s: N}``, if it sets one."""
    wait = rate_limit.get("max_wait_s") if isinstance(rate_limit, Mapping) else getattr(rate_limit, "max_wait_s", None)
    return None if wait is None else float(wait)


def _rpm(rate_limit: object) -> float | None:
    """A layer's ``rate_limit: {rpm: N}``, if it sets one."""
    rpm = rate_limit.get("rpm") if isinstance(rate_limit, Mapping) else getattr(rate_limit, "rpm", None)
    return None if rpm is None else float(rpm)


_BUILT_IN = TargetSettings()
_NO_OVERRIDES = Overrides()
_NO_DEFAULTS = DefaultSettings()


def _backoff_from_env(fallback: float) -> float:
    env = os.environ.get(BACKOFF_ENV)
    if env:
        try:
            return max(0.0, float(env))
        except ValueError:
            pass
    return fallback
