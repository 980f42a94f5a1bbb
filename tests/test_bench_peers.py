"""bench/ratelimited_server.py answers like OpenAI at its limits, and bench/peers/run.py produces its figures.

The server tests send a few requests over HTTP to the server in its own process and read what comes
back: 200s carrying the ``x-ratelimit-*`` trio for requests and tokens, a 429 with ``retry-after``
(and ``retry-after-ms``) once a bucket is empty, nothing but ``retry-after`` without headers, one
bucket per API key, and ``/stats`` counting it all. The limits are per hour, so no bucket refills
by a whole request during a test however slow the machine.

The harness test runs ``bench/peers/run.py`` in its smallest form with ``--only evalx`` (no npm,
no network): both parts, both modes, and asserts the rows it writes — evalx ran every cell without
an error, and ``concurrency: auto`` is either run or reported as not supported by this evalx.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))


def _bench_server() -> ModuleType:
    """bench/ratelimited_server.py under its own name: tests/rate_limited_openai.py is the suite's own, in-thread server."""
    spec = importlib.util.spec_from_file_location("bench_ratelimited_server", BENCH / "ratelimited_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


_server = _bench_server()
Limits, RateLimitedServer, go_duration = _server.Limits, _server.RateLimitedServer, _server.go_duration

HOUR = 3600.0


def _chat(url: str, key: str, text: str = "hello (case 7)") -> tuple[int, dict[str, str], dict[str, object]]:
    body = json.dumps({"model": "bench-model", "messages": [{"role": "user", "content": text}]}).encode()
    request = urllib.request.Request(
        url + "/v1/chat/completions", data=body, headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, json.loads(e.read())


def test_a_key_gets_429_with_openai_headers_once_its_request_bucket_is_empty() -> None:
    with RateLimitedServer(Limits(rpm=3, tpm=1_000_000, window_s=HOUR)) as server:
        answers = [_chat(server.url, "sk-a") for _ in range(4)]
        other = _chat(server.url, "sk-b")
        stats = server.stats()["limits"]["keys"]
    for i, (status, headers, body) in enumerate(answers[:3]):
        assert status == 200
        assert headers["x-ratelimit-limit-requests"] == "3"
        assert headers["x-ratelimit-remaining-requests"] == str(2 - i)
        assert headers["x-ratelimit-limit-tokens"] == "1000000"
        assert int(headers["x-ratelimit-remaining-tokens"]) < 1_000_000
        assert headers["x-ratelimit-reset-requests"].endswith("s")
        assert "Reference: case 7." in body["choices"][0]["message"]["content"]  # type: ignore[index]
        assert body["usage"]["total_tokens"] > 0  # type: ignore[index]
    status, headers, body = answers[3]
    assert status == 429
    assert int(headers["retry-after"]) >= 1
    assert int(headers["retry-after-ms"]) > 1000  # an hour's window: a request back in ~20 minutes
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert body["error"]["code"] == "rate_limit_exceeded"  # type: ignore[index]
    assert other[0] == 200  # another key has its own buckets
    assert stats["sk-a"]["requests"] == 4 and stats["sk-a"]["ok"] == 3 and stats["sk-a"]["responses_429"] == 1
    assert stats["sk-a"]["max_requests_per_window"] == 3
    assert stats["sk-b"]["ok"] == 1


def test_without_headers_a_429_carries_retry_after_alone() -> None:
    with RateLimitedServer(Limits(rpm=1, tpm=1_000_000, window_s=HOUR, headers=False)) as server:
        ok = _chat(server.url, "sk-a")
        limited = _chat(server.url, "sk-a")
    assert ok[0] == 200 and not [h for h in ok[1] if "ratelimit" in h or "retry" in h]
    assert limited[0] == 429
    assert [h for h in limited[1] if "ratelimit" in h or "retry" in h] == ["retry-after"]


def test_the_token_bucket_limits_too_and_an_empty_start_refuses_the_first_request() -> None:
    with RateLimitedServer(Limits(rpm=1000, tpm=100, window_s=HOUR)) as server:
        first = _chat(server.url, "sk-a", "word " * 100 + "(case 1)")  # ~130 tokens: more than the bucket, so only a full one fits
        second = _chat(server.url, "sk-a")
    assert first[0] == 200 and first[1]["x-ratelimit-remaining-tokens"] == "0"
    assert second[0] == 429 and "tokens per min" in second[2]["error"]["message"]  # type: ignore[index]
    with RateLimitedServer(Limits(rpm=3, tpm=1_000_000, window_s=HOUR, start_empty=True)) as server:
        assert _chat(server.url, "sk-a")[0] == 429


def test_reset_times_are_written_like_openai() -> None:
    assert [go_duration(s) for s in (0.02, 0.5, 1.0, 1.5, 59.64, 360.0, 3723.5)] == [
        "20ms",
        "500ms",
        "1s",
        "1.5s",
        "59.64s",
        "6m0s",
        "1h2m3.5s",
    ]


@pytest.mark.slow
def test_the_peers_harness_measures_evalx_in_its_smallest_form(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    cmd = [sys.executable, str(BENCH / "peers" / "run.py"), "--only", "evalx", "--cases", "12", "--rpm", "600", "--start", "full"]
    cmd += ["--concurrency", "8,auto", "--latency-ms", "0", "--latency-max-ms", "0", "--unlimited-cells", "40"]
    cmd += ["--work", str(tmp_path / "work"), "--out", str(out), "--no-warm-up"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| mode | tool | setting |" in proc.stdout
    rows = json.loads(out.read_text())["rows"]
    ran = [(r["part"], r["mode"], r["setting"]) for r in rows]
    assert ran == [
        ("limited", "headers", "8"),
        ("limited", "headers", "auto"),
        ("limited", "plain", "8"),
        ("limited", "plain", "auto"),
        ("unlimited", "none", "50"),
    ]
    for r in rows:
        if r["setting"] == "auto" and r["status"] == "not supported by this evalx":
            assert "concurrency" in r["note"]
            continue
        assert r["status"] == "ok", r
        cells = 12 if r["part"] == "limited" else 40
        assert (r["cells"], r["passed"], r["errored"]) == (cells, cells, 0), r
        # the server answered each cell's request once; a paced run may still meet a 429 or two when a loaded machine
        # reads the 1 s windows late (waited out, never a cell error)
        assert r["requests"] - (r["responses_429"] or 0) == cells
        if r["part"] == "limited":
            assert r["responses_429"] <= 3 and r["ratio_to_floor"] is not None
