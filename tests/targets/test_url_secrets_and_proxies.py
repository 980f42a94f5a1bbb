"""Issue 14, "Secrets in URLs" and "Proxies": servers on 127.0.0.1, evalx run through its CLI in a subprocess.

- a URL's ``user:password@`` and its key-like query parameters (``?api_key=``) are never stored nor printed:
  not in config.yaml, results (``output.request.url``), reports, the cache, warnings or errors; the requests
  still authenticate (the userinfo goes as HTTP Basic auth);
- HTTP_PROXY / NO_PROXY are honoured (a proxy's own userinfo goes as Proxy-Authorization), and a proxy that
  is down or refuses is named in the cell's error instead of the target.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from results_file import read_cells

pytestmark = pytest.mark.slow  # the quick tier (-m 'not slow') leaves these out: they take the longest

USER, PASSWORD = "alice", "pw-S3cr3t-4242"
QUERY_KEY = "qkey-abcdef-98765"
WRONG = "pw-Wr0ng-7777"
PROXY_PASSWORD = "proxy-pw-5150"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


class Server(ThreadingHTTPServer):
    """Answers as an OpenAI chat endpoint (any path) and an agent Engine (``.../execute``), if the caller authenticates.

    Authenticated: Basic alice:PASSWORD, or ``api_key=QUERY_KEY`` in the URL. Answers echo what they saw,
    credentials included (servers do): evalx must mask them. As a proxy (absolute-form request lines) it
    answers itself, recording what it was asked.
    """

    daemon_threads = True

    def __init__(self, status: int | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.status = status  # answer every request with this status (a proxy refusing)

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        self.server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
        if self.server.status:
            return self._send(self.server.status, b"no", "text/plain")
        auth = self.headers.get("Authorization", "")
        seen = f"auth={auth} url={self.path} password={PASSWORD}"
        if auth != f"Basic {BASIC}" and f"api_key={QUERY_KEY}" not in self.path:
            return self._send(401, json.dumps({"error": {"message": seen}}).encode(), "application/json")
        if "FAIL" in body:
            return self._send(400, json.dumps({"error": {"message": f"bad request: {seen}"}}).encode(), "application/json")
        if self.path.split("?")[0].endswith("/execute"):
            events = [("text_delta", {"text": f"engine saw {seen}\nVerdict: PASS"}), ("done", {})]
            data = "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in events).encode()
            return self._send(200, data, "text/event-stream")
        answer = {
            "id": "x",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": f"provider saw {seen}\nVerdict: PASS"}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8},
        }
        self._send(200, json.dumps(answer).encode(), "application/json")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _start(server: Server) -> Server:
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def server() -> Iterator[Server]:
    started = _start(Server())
    try:
        yield started
    finally:
        started.shutdown()
        started.server_close()


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def evalx(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("EVALX_") and "proxy" not in k.lower()}
    full_env.pop("OPENAI_API_KEY", None)
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", "from evalx.cli import main; main()", *args],
        cwd=tmp_path,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def results_of(run_dir: Path) -> dict[str, dict[str, Any]]:
    rows = read_cells(run_dir)
    return {f"{r['target']}/{r['case_id']}": r for r in rows}


def written_by_evalx(tmp_path: Path, *procs: subprocess.CompletedProcess[str]) -> str:
    """Every file evalx wrote (runs, reports, the cache, its WAL) and everything it printed."""
    texts = [t for p in procs for t in (p.stdout, p.stderr)]
    for p in tmp_path.rglob("*"):
        if p.is_file() and p.name != "evalconfig.yaml":
            texts.append(p.read_bytes().decode("utf-8", "replace"))
    return "\n".join(texts)


# --- credentials in URLs ------------------------------------------------------------------------


def test_url_credentials_are_never_stored_nor_printed_and_still_authenticate(server: Server, tmp_path: Path) -> None:
    host = server.url
    config = f"""
        version: 1
        targets:
          - {{id: p, type: provider, provider: openai, model: m, base_url: "http://{USER}:{PASSWORD}@{host}/v1", cache: true}}
          - {{id: q, type: provider, provider: openai, model: m, base_url: "${{GATEWAY_URL}}", cache: true}}
          - {{id: e, type: engine, url: "http://{USER}:{PASSWORD}@{host}/", cache: true}}
          - {{id: wrong, type: provider, provider: openai, model: m, base_url: "http://{USER}:{WRONG}@{host}/v1"}}
          - {{id: both, type: provider, provider: openai, model: m, base_url: "http://{USER}:{PASSWORD}@{host}/v1",
              api_key: sk-conflicting-key-123456, cache: false}}  # p may have cached the same request
        judge:
          target: {{type: engine, url: "http://{USER}:{PASSWORD}@{host}/"}}
        datasets:
          - id: d
            cases:
              - {{id: a, input: hello, assert: [{{type: contains, value: saw}}, {{type: llm_judge, rubric: says hello}}]}}
              - {{id: bad, input: FAIL please}}
    """
    (tmp_path / "evalconfig.yaml").write_text(textwrap.dedent(config), encoding="utf-8")
    env = {"GATEWAY_URL": f"http://{host}/v1?api_key={QUERY_KEY}&tier=free"}
    validate = evalx(tmp_path, env, "validate")
    assert validate.returncode == 0, validate.stdout + validate.stderr
    first = evalx(tmp_path, env, "run", "--junit", "out/junit.xml", "--html", "out/report.html")
    second = evalx(tmp_path, env, "run")  # answered from the cache
    report = evalx(tmp_path, env, "report", "latest", "--html", "out/again.html")
    assert report.returncode in (0, 1, 3), report.stderr

    # the requests authenticated: the userinfo went as Basic auth, the query key in the URL
    authed = [r for r in server.requests if r["headers"].get("Authorization") == f"Basic {BASIC}"]
    assert len(authed) >= 3
    assert any(f"api_key={QUERY_KEY}" in r["path"] for r in server.requests)
    assert all("@" not in r["path"] for r in server.requests)

    # in start order (two runs in one second have ids in random order)
    run_dirs = sorted(
        (p for p in (tmp_path / "runs").iterdir() if p.is_dir()), key=lambda p: json.loads((p / "run.json").read_text())["started_unix"]
    )
    assert len(run_dirs) == 2
    rows = results_of(run_dirs[0])
    assert rows["p/a"]["status"] == "pass", rows["p/a"]
    assert rows["e/a"]["status"] == "pass" and rows["q/a"]["status"] == "pass", (rows["e/a"], rows["q/a"])
    assert rows["p/a"]["output"]["request"]["url"] == f"http://***@{host}/v1/chat/completions"
    assert rows["e/a"]["output"]["request"]["url"] == f"http://***@{host}/execute"
    assert "api_key=***" in rows["q/a"]["output"]["request"]["url"]
    assert "password=***" in rows["p/a"]["output"]["text"] and "Basic ***" in rows["e/a"]["output"]["text"]
    assert rows["p/bad"]["status"] == "error" and "***" in rows["p/bad"]["output"]["error"]
    assert rows["wrong/a"]["status"] == "error" and "HTTP 401" in rows["wrong/a"]["output"]["error"]
    conflict = rows["both/a"]["output"]["error"]
    assert rows["both/a"]["status"] == "error" and "Authorization header" in conflict and "Basic auth" in conflict, conflict
    cached = results_of(run_dirs[1])
    assert cached["p/a"]["cached"] and cached["p/a"]["status"] == "pass"
    assert cached["p/a"]["output"]["request"]["url"] == f"http://***@{host}/v1/chat/completions"
    stored = (run_dirs[0] / "config.yaml").read_text()
    assert f"http://***@{host}/v1" in stored
    assert "same model" in first.stderr and f"http://***@{host}" in first.stderr  # the self-grading warning names the URL, masked

    written = written_by_evalx(tmp_path, validate, first, second, report)
    assert list((tmp_path / ".evalx").glob("cache.sqlite*")), "answers were cached"
    for secret in (PASSWORD, WRONG, QUERY_KEY, BASIC, f"{USER}:", base64.b64encode(f"{USER}:{WRONG}".encode()).decode()):
        assert secret not in written, secret


# --- proxies ------------------------------------------------------------------------------------

PROVIDER = "{{id: p, type: provider, provider: openai, model: m, base_url: 'http://{auth}{host}/v1', retries: 0}}"
ENGINE = "{{id: e, type: engine, url: 'http://{auth}{host}', retries: 0}}"


def _config(tmp_path: Path, host: str) -> None:
    auth = f"{USER}:{PASSWORD}@"
    targets = ", ".join([PROVIDER.format(auth=auth, host=host), ENGINE.format(auth=auth, host=host)])
    (tmp_path / "evalconfig.yaml").write_text(
        f"version: 1\ntargets: [{targets}]\ndatasets: [{{id: d, cases: [{{id: a, input: hello}}, {{id: b, input: hi}}]}}]\n"
    )


def test_a_proxy_that_is_down_is_named_in_the_error(server: Server, tmp_path: Path) -> None:
    _config(tmp_path, server.url)
    port = closed_port()
    proc = evalx(tmp_path, {"HTTP_PROXY": f"http://puser:{PROXY_PASSWORD}@127.0.0.1:{port}"}, "run")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    for row in results_of(run_dir).values():
        error = row["output"]["error"]
        assert row["status"] == "error", row
        assert f"the proxy http://127.0.0.1:{port} (HTTP_PROXY)" in error and "connection refused" in error, error
        assert error.startswith("cannot connect to the proxy"), error  # the target is not blamed
    assert server.requests == []
    assert PROXY_PASSWORD not in written_by_evalx(tmp_path, proc) and PASSWORD not in written_by_evalx(tmp_path, proc)


def test_a_proxy_that_refuses_is_named_in_the_error(tmp_path: Path) -> None:
    proxy = _start(Server(status=407))
    try:
        _config(tmp_path, "127.0.0.1:9")
        proc = evalx(tmp_path, {"http_proxy": f"http://{proxy.url}"}, "run")
    finally:
        proxy.shutdown()
        proxy.server_close()
    (run_dir,) = (tmp_path / "runs").iterdir()
    for row in results_of(run_dir).values():
        error = row["output"]["error"]
        assert f"the proxy http://{proxy.url} (HTTP_PROXY) refused to reach http://127.0.0.1:9" in error and "407" in error, error
    assert proxy.requests and PASSWORD not in written_by_evalx(tmp_path, proc)


def test_proxies_are_honoured_with_their_credentials_and_no_proxy_bypasses_them(server: Server, tmp_path: Path) -> None:
    proxy = _start(Server())  # answers as the target would, to the absolute-form requests a proxy gets
    try:
        _config(tmp_path, "127.0.0.1:9")  # nothing listens there: only the proxy can answer
        proc = evalx(tmp_path, {"HTTP_PROXY": f"http://puser:{PROXY_PASSWORD}@{proxy.url}"}, "run")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        paths = sorted(r["path"] for r in proxy.requests)
        assert paths == ["http://127.0.0.1:9/execute"] * 2 + ["http://127.0.0.1:9/v1/chat/completions"] * 2
        proxy_auth = base64.b64encode(f"puser:{PROXY_PASSWORD}".encode()).decode()
        assert all(r["headers"].get("Proxy-Authorization") == f"Basic {proxy_auth}" for r in proxy.requests)
        assert all(r["headers"].get("Authorization") == f"Basic {BASIC}" for r in proxy.requests)
        written = written_by_evalx(tmp_path, proc)
        assert PROXY_PASSWORD not in written and proxy_auth not in written and PASSWORD not in written

        # NO_PROXY lists the target's host: it is reached directly
        (tmp_path / "runs").rename(tmp_path / "runs-proxied")
        _config(tmp_path, server.url)
        before = len(proxy.requests)
        direct = evalx(tmp_path, {"HTTP_PROXY": f"http://{proxy.url}", "NO_PROXY": "127.0.0.1"}, "run")
        assert direct.returncode == 0, direct.stdout + direct.stderr
        assert len(proxy.requests) == before and len(server.requests) == 4
    finally:
        proxy.shutdown()
        proxy.server_close()
