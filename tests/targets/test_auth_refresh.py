"""A kept token the server refuses (HTTP 401) is refreshed once and the request sent again once.

For ``auth.kind: bearer_from_command`` (a project definition extending openai, its token from a
script that prints a new token each time it runs) and ``google`` (``provider: vertex`` with a
service-account ADC file whose ``token_uri`` is the fake server's ``/token``), against a fake
server on 127.0.0.1 that takes the first token once and refuses it after that:

- the token is refreshed once for all the requests refused with it (the command runs twice in all),
  and every cell passes, streamed or not;
- a server that refuses every token: each request is sent at most twice (never a loop) and the cell's
  error names the auth kind;
- no token (the server echoes them in its 401 bodies) in anything the run writes or prints.
"""

from __future__ import annotations

import json
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main


class TokenServer(ThreadingHTTPServer):
    """A model API that takes its first token once, then refuses it (``refuse_all``: refuses every token),
    and Google's OAuth token endpoint (``POST /token``), which hands out ``ya29.google-token-N``."""

    daemon_threads = True

    def __init__(self, refuse_all: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.refuse_all = refuse_all
        self.lock = threading.Lock()
        self.tokens_seen: list[str] = []  # the bearer token of each model request, in order
        self.first: str | None = None
        self.expired: set[str] = set()
        self.token_requests = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: TokenServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        s = self.server
        if self.path == "/token":
            assert b"grant_type=urn" in body and b"assertion=" in body  # a service account's signed JWT
            with s.lock:
                s.token_requests += 1
                n = s.token_requests
            return self._send(200, {"access_token": f"ya29.google-token-{n}-0123456789", "expires_in": 3600, "token_type": "Bearer"})
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        with s.lock:
            s.tokens_seen.append(token)
            if s.first is None:
                s.first = token
            refused = s.refuse_all or token in s.expired
            if token == s.first:
                s.expired.add(token)  # taken once: expired after that
        if refused:  # as some servers do: the refused credential quoted back
            return self._send(401, {"error": {"code": 401, "message": f"token {token} expired", "status": "UNAUTHENTICATED"}})
        if ":generateContent" in self.path:
            return self._send(
                200,
                {
                    "candidates": [{"content": {"role": "model", "parts": [{"text": "Paris"}]}, "finishReason": "STOP"}],
                    "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 1},
                },
            )
        self._send(200, {"choices": [{"message": {"role": "assistant", "content": "Paris"}, "finish_reason": "stop"}]})

    def _send(self, status: int, answer: dict[str, Any]) -> None:
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def serve(refuse_all: bool = False) -> Iterator[TokenServer]:
    server = TokenServer(refuse_all)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def expiring() -> Iterator[TokenServer]:
    yield from serve()


@pytest.fixture
def refusing() -> Iterator[TokenServer]:
    yield from serve(refuse_all=True)


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("EVALX_BACKOFF_BASE_S", "0.001")


CASES = "datasets: [{id: d, cases: [{id: a, input: one}, {id: b, input: two}, {id: c, input: three}, {id: d, input: four}]}]\n"


def run(tmp_path: Path, targets: str, extra: str = "") -> tuple[int, str, list[dict[str, Any]]]:
    config = tmp_path / "evalconfig.yaml"
    config.write_text("version: 1\n" + extra + textwrap.dedent(targets) + CASES, encoding="utf-8")
    result = CliRunner().invoke(main, ["run", "-c", str(config), "--no-cache"])
    runs = sorted((tmp_path / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns) if (tmp_path / "runs").is_dir() else []
    assert runs, result.output
    return result.exit_code, result.output, read_cells(runs[-1])


def written(tmp_path: Path, output: str) -> str:
    """The run's output and every file it wrote (results, summary, report...)."""
    return output + "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in (tmp_path / "runs").rglob("*") if p.is_file())


# --- bearer_from_command ----------------------------------------------------------------------------


def command_provider(tmp_path: Path) -> Path:
    """providers/cmd.yaml: openai's API with a token from print_token.py, which prints cmd-token-N (N: its runs so far)."""
    script = tmp_path / "print_token.py"
    script.write_text(
        textwrap.dedent(
            """
            import pathlib
            runs = pathlib.Path(__file__).with_name("token-runs")
            n = len(runs.read_text().splitlines()) + 1 if runs.exists() else 1
            runs.write_text("ran\\n" * n)
            print(f"cmd-token-{n}-0123456789abcdef")
            """
        ),
        encoding="utf-8",
    )
    (tmp_path / "providers").mkdir()
    (tmp_path / "providers" / "cmd.yaml").write_text(
        f"extends: openai\nauth:\n  kind: bearer_from_command\n  command: [{json.dumps(sys.executable)}, {json.dumps(str(script))}]\n",
        encoding="utf-8",
    )
    return tmp_path / "token-runs"


def cmd_target(server: TokenServer, concurrency: int, stream: bool = False) -> str:
    return f"""
        providers_dir: providers
        targets:
          - {{id: t, type: provider, provider: cmd, model: m, base_url: {server.url}, concurrency: {concurrency}, stream: {str(stream).lower()}}}
        """


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_refused_command_token_is_refreshed_once_and_each_request_sent_again(stream: bool, expiring: TokenServer, tmp_path: Path) -> None:
    runs = command_provider(tmp_path)
    code, output, cells = run(tmp_path, cmd_target(expiring, concurrency=4, stream=stream))
    assert code == 0, output
    assert all(c["status"] == "pass" and c["output"]["text"] == "Paris" for c in cells), cells
    # the token the server refused: the command ran again once, however many requests it refused at once
    assert len(runs.read_text().splitlines()) == 2
    first, second = "cmd-token-1-0123456789abcdef", "cmd-token-2-0123456789abcdef"
    assert set(expiring.tokens_seen) == {first, second}
    refused = expiring.tokens_seen.count(first) - 1  # taken once, then refused
    assert len(expiring.tokens_seen) == 4 + refused  # each refused request sent again once, with the new token
    text = written(tmp_path, output)
    assert first not in text and second not in text


def test_a_token_refused_again_after_its_refresh_is_the_cells_error_naming_the_kind(refusing: TokenServer, tmp_path: Path) -> None:
    runs = command_provider(tmp_path)
    code, output, cells = run(tmp_path, cmd_target(refusing, concurrency=1), extra="defaults: {retries: 3}\n")
    assert code != 0
    assert len(refusing.tokens_seen) == 2 * 4  # each request: once, and once more after the refresh; never a loop
    for cell in cells:
        assert cell["status"] == "error"
        assert "HTTP 401 unauthorized" in cell["error"] and "auth kind bearer_from_command" in cell["error"], cell["error"]
    assert len(runs.read_text().splitlines()) == 1 + 4  # before the first cell, then one refresh per refused token
    text = written(tmp_path, output)
    assert "cmd-token-" not in text


# --- google (Application Default Credentials: a service account whose token_uri is the fake server) --


def service_account(tmp_path: Path, server: TokenServer) -> Path:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    path = tmp_path / "adc" / "service-account.json"
    path.parent.mkdir()
    info = {
        "type": "service_account",
        "project_id": "proj",
        "private_key_id": "key-1",
        "private_key": pem,
        "client_email": "evalx-test@proj.iam.gserviceaccount.com",
        "client_id": "1234567890",
        "token_uri": f"{server.url}/token",
    }
    path.write_text(json.dumps(info), encoding="utf-8")
    return path


def vertex_target(server: TokenServer, concurrency: int) -> str:
    return f"""
        targets:
          - {{id: g, type: provider, provider: vertex, model: gemini-2.5-flash, region: europe-west4, base_url: {server.url},
             concurrency: {concurrency}}}
        """


@pytest.fixture
def google_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    pytest.importorskip("google.auth")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "proj")
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    yield


@pytest.mark.usefixtures("google_env")
def test_a_refused_google_token_is_refreshed_once(expiring: TokenServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(service_account(tmp_path, expiring)))
    code, output, cells = run(tmp_path, vertex_target(expiring, concurrency=4))
    assert code == 0, output
    assert all(c["status"] == "pass" and c["output"]["text"] == "Paris" for c in cells), cells
    assert expiring.token_requests == 2  # before the first cell, then once when the server refused it
    first, second = "ya29.google-token-1-0123456789", "ya29.google-token-2-0123456789"
    assert set(expiring.tokens_seen) == {first, second}
    assert len(expiring.tokens_seen) == 4 + expiring.tokens_seen.count(first) - 1
    text = written(tmp_path, output)
    assert "ya29.google-token" not in text


@pytest.mark.usefixtures("google_env")
def test_a_google_token_refused_after_its_refresh_is_the_cells_error(
    refusing: TokenServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(service_account(tmp_path, refusing)))
    code, output, cells = run(tmp_path, vertex_target(refusing, concurrency=1))
    assert code != 0
    assert len(refusing.tokens_seen) == 2 * 4
    for cell in cells:
        assert cell["status"] == "error" and "auth kind google" in cell["error"], cell["error"]
    assert "ya29.google-token" not in written(tmp_path, output)
