"""The response cache (SQLite, shared by processes) and the rate limiter."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from evalx.targets.transport.cache import ResponseCache, cache_path, make_key
from evalx.targets.transport.ratelimit import RateLimiter

SRC = Path(__file__).resolve().parents[2] / "src"


def test_make_key_is_stable_and_order_independent() -> None:
    assert make_key("provider", {"a": 1, "b": 2}, 0) == make_key("provider", {"b": 2, "a": 1}, 0)
    assert make_key("provider", {"a": 1}, 0) != make_key("provider", {"a": 1}, 1)  # the repeat index matters
    assert len(make_key("x")) == 64


def test_roundtrip_and_gitignore(tmp_path: Path) -> None:
    path = cache_path(tmp_path)
    assert path == tmp_path / ".evalx" / "cache.sqlite"

    async def scenario() -> None:
        cache = ResponseCache(path)
        assert await cache.get("k") is None
        cache.put("k", {"text": "hello", "usage": {"input_tokens": 3}})
        assert await cache.get("k") == {"text": "hello", "usage": {"input_tokens": 3}}
        await cache.aclose()
        assert (cache.hits, cache.misses, cache.writes) == (1, 1, 1)

        again = ResponseCache(path)  # a later run reads what the first one wrote
        assert await again.get("k") == {"text": "hello", "usage": {"input_tokens": 3}}
        await again.aclose()

    asyncio.run(scenario())
    assert (tmp_path / ".evalx" / ".gitignore").read_text().splitlines()[-1] == "*"
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_many_queued_writes_are_committed_on_close(tmp_path: Path) -> None:
    async def scenario() -> None:
        cache = ResponseCache(cache_path(tmp_path))
        for i in range(500):
            cache.put(f"k{i}", {"text": str(i)})
        await cache.aclose()

    asyncio.run(scenario())
    with sqlite3.connect(cache_path(tmp_path)) as conn:
        assert conn.execute("SELECT count(*) FROM responses").fetchone()[0] == 500


def test_an_unusable_file_disables_the_cache_without_failing(tmp_path: Path) -> None:
    path = cache_path(tmp_path)
    path.parent.mkdir()
    path.write_bytes(b"this is not a database" * 100)

    async def scenario() -> ResponseCache:
        cache = ResponseCache(path)
        assert await cache.get("k") is None
        cache.put("k", {"text": "x"})
        await cache.aclose()
        return cache

    cache = asyncio.run(scenario())
    assert cache.problem and "cache.sqlite" in cache.problem


WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {src!r})
    from pathlib import Path
    from evalx.targets.transport.cache import ResponseCache
    cache = ResponseCache(Path({path!r}))
    name = sys.argv[1]
    print("ready", flush=True)
    sys.stdin.readline()  # start together
    for i in range(300):
        cache.put_sync(f"{{name}}-{{i}}", {{"writer": name, "i": i, "pad": "x" * 500}})
        if i % 50 == 0:
            assert cache.get_sync(f"{{name}}-{{i}}")["i"] == i
    cache.close()
    assert cache.problem is None, cache.problem
    print("done", cache.writes, flush=True)
    """
)


def test_concurrent_writers_do_not_corrupt_the_file(tmp_path: Path) -> None:
    path = cache_path(tmp_path)
    script = WRITER.format(src=str(SRC), path=str(path))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for name in ("a", "b", "c")
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:  # release them at once
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    outputs = [p.communicate(timeout=60) for p in procs]
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err
        assert out.strip().endswith("done 300")
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM responses").fetchone()[0] == 900
        assert conn.execute("SELECT count(DISTINCT key) FROM responses WHERE key LIKE 'b-%'").fetchone()[0] == 300


def test_rate_limiter_spaces_requests_evenly() -> None:
    now = [100.0]
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(round(seconds, 6))
        now[0] += seconds

    async def scenario() -> list[float]:
        limiter = RateLimiter(120, clock=lambda: now[0], sleep=fake_sleep)  # one every 0.5 s
        starts = []
        for _ in range(4):
            await limiter.acquire()
            starts.append(now[0])
        now[0] += 10  # idle for a while: no burst credit builds up beyond one request
        await limiter.acquire()
        await limiter.acquire()
        starts.append(now[0])
        return starts

    starts = asyncio.run(scenario())
    assert starts[:4] == [100.0, 100.5, 101.0, 101.5]
    assert slept == [0.5, 0.5, 0.5, 0.5]
