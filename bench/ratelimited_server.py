"""bench/fake_server.py with OpenAI-style rate limits: requests and tokens per minute, per API key.

    python bench/ratelimited_server.py --rpm 600 --tpm 200000 [--window-s 60] [--burst-s W] [--start empty|full]
        [--no-headers] [--latency-ms 0] [--latency-max-ms MS] [--port 8124]

The chat endpoint (``POST /v1/chat/completions``, answering like
``fake_server.py --echo``: the answer ends with ``Reference: <the request's
last (...)>.``) sits behind two buckets per API key (``Authorization: Bearer
KEY``, else ``api-key`` / ``x-api-key``, else ``anonymous``):

- requests: ``--rpm`` per ``--window-s`` seconds (60: a minute);
- tokens: ``--tpm`` per window. A request costs its prompt tokens (the
  characters of its messages' text ÷ 4, rounded up, plus 3 a message) plus
  the answer's tokens (the same estimate); ``max_tokens`` is not reserved,
  so every client is charged alike. ``usage`` in the answer carries these
  counts.

Each bucket holds at most ``limit × burst_s ÷ window_s`` (``--burst-s``
defaults to the window: OpenAI's documented model, a bucket of a minute's
worth refilled continuously) and refills at ``limit ÷ window_s`` a second. A
request is admitted when both buckets have room for it; otherwise it is
answered at once with **429** and an OpenAI-shaped error body
(``code: rate_limit_exceeded``) and a ``retry-after`` header (whole seconds,
rounded up, at least 1) saying when it would fit.

``--start empty`` (what bench/peers uses) starts every key's buckets empty,
as if the key had been used at its limit for a while: a run can then never
beat N ÷ RPM minutes for N requests (the floor), which a full bucket of a
minute's worth would let it do for N ≤ RPM. ``--start full`` is a fresh key.

With headers (the default) every answer, 200 and 429, also carries what
OpenAI sends::

    x-ratelimit-limit-requests: 600        x-ratelimit-limit-tokens: 200000
    x-ratelimit-remaining-requests: 3      x-ratelimit-remaining-tokens: 1187
    x-ratelimit-reset-requests: 59.7s      x-ratelimit-reset-tokens: 59.64s

(remaining: what the bucket holds after this request; reset: the time until
it is full again, in OpenAI's Go-duration style ``20ms``, ``1.5s``,
``6m0s``), and a 429 also ``retry-after-ms``. ``--no-headers``: a 429 carries
``retry-after`` alone, and a 200 no rate-limit header at all.

``GET /stats`` adds, under ``"limits"``, the limits and per key: requests
received, admitted (``ok``), answered 429, tokens admitted, the first and last
request times (server clock, seconds) and the most requests and tokens
admitted in any window of ``window_s`` (sliding) — the server's own proof
that it held the limit.

``RateLimitedServer(rpm=..., tpm=...)`` runs it in a subprocess like
``FakeServer``; ``RateLimiter`` is the model itself (tested without HTTP).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_server import FakeServer, echo_response, serve


@dataclass(frozen=True)
class Limits:
    """What the server enforces (per API key)."""

    rpm: int  # requests per window
    tpm: int  # tokens per window
    window_s: float = 60.0
    burst_s: float | None = None  # the buckets' size in seconds of refill; None: the window
    start_empty: bool = False
    headers: bool = True  # x-ratelimit-* and retry-after-ms besides retry-after


def go_duration(seconds: float) -> str:
    """OpenAI's reset style (Go's ``time.Duration``): ``20ms``, ``1.5s``, ``59.64s``, ``6m0s``, ``1h2m3s``."""
    if seconds < 1.0:
        return f"{max(0, round(seconds * 1000))}ms"
    if seconds < 60.0:
        return f"{round(seconds, 3):g}s"
    hours, rest = divmod(seconds, 3600.0)
    minutes, secs = divmod(rest, 60.0)
    text = f"{int(minutes)}m{round(secs, 3):g}s"
    return f"{int(hours)}h{text}" if hours else text


class Bucket:
    """A token bucket refilled continuously: ``capacity`` at most, ``rate`` a second."""

    def __init__(self, capacity: float, rate: float, now: float, *, empty: bool) -> None:
        self.capacity, self.rate = capacity, rate
        self.level = 0.0 if empty else capacity
        self.t = now

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.t) * self.rate)
        self.t = now

    def wait_s(self, amount: float) -> float:
        """Seconds until ``amount`` fits (an amount above the capacity fits a full bucket)."""
        need = min(amount, self.capacity) - self.level
        return max(0.0, need / self.rate)

    def reset_s(self) -> float:
        """Seconds until the bucket is full again."""
        return (self.capacity - self.level) / self.rate


@dataclass
class KeyStats:
    requests: int = 0
    ok: int = 0
    limited: int = 0
    tokens: int = 0
    first_t: float | None = None
    last_t: float | None = None
    admitted: list[tuple[float, int]] = field(default_factory=list)  # (time, tokens) of each admitted request


def _max_in_window(admitted: list[tuple[float, int]], window_s: float) -> tuple[int, int]:
    """The most requests and the most tokens admitted in any ``window_s`` (sliding, two pointers)."""
    most_requests = most_tokens = tokens = 0
    start = 0
    for end, (t, n) in enumerate(admitted):
        tokens += n
        while admitted[start][0] <= t - window_s:
            tokens -= admitted[start][1]
            start += 1
        most_requests = max(most_requests, end - start + 1)
        most_tokens = max(most_tokens, tokens)
    return most_requests, most_tokens


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def prompt_tokens(body: bytes) -> int:
    """The tokens of a chat request's messages: text ÷ 4 (rounded up) plus 3 a message."""
    try:
        messages = json.loads(body).get("messages") or []
    except (ValueError, AttributeError):
        return 1
    total = 0
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):  # content parts
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        total += 3 + estimate_tokens(content if isinstance(content, str) else "")
    return max(1, total)


def _api_key(headers: Mapping[str, str]) -> str:
    auth = headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip() or "anonymous"
    return headers.get("api-key") or headers.get("x-api-key") or "anonymous"


class RateLimiter:
    """The per-key buckets; :meth:`admit` decides one request and returns ``(status, headers, body)``."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits, self.clock = limits, clock
        burst = limits.window_s if limits.burst_s is None else limits.burst_s
        self._capacity_r = max(1.0, limits.rpm * burst / limits.window_s)
        self._capacity_t = max(1.0, limits.tpm * burst / limits.window_s)
        self._buckets: dict[str, tuple[Bucket, Bucket]] = {}
        self.keys: dict[str, KeyStats] = {}

    def admit(self, headers: Mapping[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        key = _api_key(headers)
        now = self.clock()
        lim = self.limits
        if key not in self._buckets:
            empty = lim.start_empty
            self._buckets[key] = (
                Bucket(self._capacity_r, lim.rpm / lim.window_s, now, empty=empty),
                Bucket(self._capacity_t, lim.tpm / lim.window_s, now, empty=empty),
            )
            self.keys[key] = KeyStats(first_t=now)
        requests, tokens = self._buckets[key]
        stats = self.keys[key]
        stats.requests += 1
        stats.last_t = now
        requests.refill(now)
        tokens.refill(now)
        answer = json.loads(echo_response(body))
        completion = estimate_tokens(answer["choices"][0]["message"]["content"])
        prompt = prompt_tokens(body)
        cost = prompt + completion
        wait_r, wait_t = requests.wait_s(1), tokens.wait_s(cost)
        if wait_r > 0 or wait_t > 0:
            stats.limited += 1
            wait = max(wait_r, wait_t)
            kind, limit, used = ("requests", lim.rpm, "RPM") if wait_r >= wait_t else ("tokens", lim.tpm, "TPM")
            message = (
                f"Rate limit reached for bench-model on {kind} per min ({used}): Limit {limit}. Please try again in {go_duration(wait)}."
            )
            error = {"error": {"message": message, "type": kind, "param": None, "code": "rate_limit_exceeded"}}
            out = {"retry-after": str(max(1, math.ceil(wait)))}
            if lim.headers:
                out["retry-after-ms"] = str(max(1, math.ceil(wait * 1000)))
                out.update(self._headers(requests, tokens))
            return 429, out, json.dumps(error).encode()
        requests.level -= 1
        tokens.level -= cost
        stats.ok += 1
        stats.tokens += cost
        stats.admitted.append((now, cost))
        answer["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": cost,
            "prompt_tokens_details": {"cached_tokens": 0},
        }
        return 200, self._headers(requests, tokens) if lim.headers else {}, json.dumps(answer).encode()

    def _headers(self, requests: Bucket, tokens: Bucket) -> dict[str, str]:
        return {
            "x-ratelimit-limit-requests": str(self.limits.rpm),
            "x-ratelimit-remaining-requests": str(max(0, math.floor(requests.level))),
            "x-ratelimit-reset-requests": go_duration(requests.reset_s()),
            "x-ratelimit-limit-tokens": str(self.limits.tpm),
            "x-ratelimit-remaining-tokens": str(max(0, math.floor(tokens.level))),
            "x-ratelimit-reset-tokens": go_duration(tokens.reset_s()),
        }

    def stats(self) -> dict[str, Any]:
        lim = self.limits
        keys: dict[str, Any] = {}
        for key, s in self.keys.items():
            most_r, most_t = _max_in_window(s.admitted, lim.window_s)
            keys[key] = {
                "requests": s.requests,
                "ok": s.ok,
                "responses_429": s.limited,
                "tokens": s.tokens,
                "first_t": s.first_t,
                "last_t": s.last_t,
                "max_requests_per_window": most_r,
                "max_tokens_per_window": most_t,
            }
        return {
            "rpm": lim.rpm,
            "tpm": lim.tpm,
            "window_s": lim.window_s,
            "burst_s": lim.window_s if lim.burst_s is None else lim.burst_s,
            "start_empty": lim.start_empty,
            "headers": lim.headers,
            "keys": keys,
        }


def limits_args(limits: Limits) -> list[str]:
    """The command-line flags that give ``limits``."""
    args = ["--rpm", str(limits.rpm), "--tpm", str(limits.tpm), "--window-s", str(limits.window_s)]
    if limits.burst_s is not None:
        args += ["--burst-s", str(limits.burst_s)]
    args += ["--start", "empty" if limits.start_empty else "full"]
    if not limits.headers:
        args.append("--no-headers")
    return args


class RateLimitedServer(FakeServer):
    """The rate-limited server in a subprocess: ``with RateLimitedServer(Limits(600, 200_000)) as s: s.url``.

    One process (the buckets live in it). ``stats()["limits"]["keys"][KEY]`` is what one API key did.
    """

    def __init__(self, limits: Limits, *, latency_ms: float = 0.0, latency_max_ms: float | None = None, port: int | None = None) -> None:
        super().__init__(latency_ms=latency_ms, latency_max_ms=latency_max_ms, port=port, echo=True)
        self.limits = limits

    def command(self) -> list[str]:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--serve", "--port", str(self.port), "--latency-ms", str(self.latency_ms)]
        if self.latency_max_ms is not None:
            cmd += ["--latency-max-ms", str(self.latency_max_ms)]
        return cmd + limits_args(self.limits)

    def key_stats(self, key: str) -> dict[str, Any]:
        """What the server saw of one API key (zeros when it sent nothing)."""
        keys = self.stats()["limits"]["keys"]
        return dict(keys.get(key) or {"requests": 0, "ok": 0, "responses_429": 0, "tokens": 0})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8124)
    parser.add_argument("--rpm", type=int, required=True, help="requests per window (per API key)")
    parser.add_argument("--tpm", type=int, required=True, help="tokens per window (per API key)")
    parser.add_argument("--window-s", type=float, default=60.0, help="the window the limits are per (default 60: a minute)")
    parser.add_argument("--burst-s", type=float, default=None, help="bucket size in seconds of refill (default: the window)")
    parser.add_argument("--start", choices=("full", "empty"), default="full", help="a key's buckets start full (a fresh key) or empty")
    parser.add_argument("--no-headers", action="store_true", help="429 + retry-after only; no x-ratelimit-* headers")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="latency of each admitted request")
    parser.add_argument("--latency-max-ms", type=float, default=None, help="each admitted request waits a random time up to this")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    limits = Limits(args.rpm, args.tpm, args.window_s, args.burst_s, args.start == "empty", not args.no_headers)
    if args.serve:
        serve(args.port, args.latency_ms, False, True, args.latency_max_ms, limiter=RateLimiter(limits))
        return
    with RateLimitedServer(limits, latency_ms=args.latency_ms, latency_max_ms=args.latency_max_ms, port=args.port) as server:
        print(f"rate-limited fake server on {server.url} ({limits}); Ctrl-C stops it", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
