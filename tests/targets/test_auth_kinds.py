"""Issue 32: a provider definition's ``auth: {kind: ...}`` and providers/bedrock.yaml.

- the kinds' keys are checked with FILE:LINE;
- sigv4: each request is signed by botocore's SigV4 signer; the fake Bedrock server on 127.0.0.1
  re-computes the signature from what it received (method, path, signed headers, body bytes);
- bedrock.yaml's request and answer mapping (text, tool calls, usage, stopReason) and its errors
  (403 fatal, 429 throttled, 503 retried) through a real ``evalx run``;
- bearer_from_command: the command's token, run once for a run's cells; its failure is one line;
- google: Application Default Credentials refreshed when expired, through a fake credentials object;
- no key, token or signature anywhere evalx writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import aws_eventstream as eventstream
import pytest
from cli_project import evalx
from results_file import read_cells

from evalx.errors import ConfigError
from evalx.targets.definitions import load_definition

botocore_auth = pytest.importorskip("botocore.auth")  # the `test` extra installs it: skipped only outside it
from botocore.awsrequest import AWSRequest  # noqa: E402
from botocore.credentials import Credentials  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ACCESS_KEY = "AKIDEXAMPLE0123456789"
SECRET_KEY = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
SESSION_TOKEN = "FwoGZXIvYXdzEXAMPLE-session-token-0123456789"
REGION = "eu-west-3"

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": ACCESS_KEY,
    "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
    "AWS_SESSION_TOKEN": SESSION_TOKEN,
    "AWS_CONFIG_FILE": "/nonexistent/aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
    "AWS_EC2_METADATA_DISABLED": "true",
    "EVALX_BACKOFF_BASE_S": "0.01",
}


# --- the definition language ----------------------------------------------------------------------


def _definition(tmp_path: Path, auth: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(
        "name: p\nbase_url: http://127.0.0.1:1\nauth:\n"
        + textwrap.indent(textwrap.dedent(auth), "  ")
        + "request: {path: /x, body: '{}'}\nresponse: {text: response.text}\n",
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("auth", "line", "expected"),
    [
        ("kind: sigv4\n", 3, "auth: auth kind 'sigv4' needs service:"),
        ("kind: bearer_from_command\nttl_s: 60\n", 3, "auth: auth kind 'bearer_from_command' needs command:"),
        ("kind: google\nheader: Authorization\n", 5, "auth.header: header: is not read by auth kind 'google'"),
        ("kind: sigv4\nservice: bedrock\nenv: AWS_KEY\n", 6, "auth.env: env: is not read by auth kind 'sigv4'"),
        ("env: KEY\n", 3, "auth: auth kind 'header' needs header:"),
        ("kind: basic\n", 4, "auth.kind"),
        ("kind: bearer_from_command\ncommand: 'gcloud \"auth'\n", 5, "cannot split the command"),
        ("header: X-Key\nenv: []\n", 5, "auth.env"),
    ],
)
def test_auth_keys_are_checked_against_their_kind(tmp_path: Path, auth: str, line: int, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_definition(_definition(tmp_path, auth))
    message = str(caught.value)
    assert f"p.yaml:{line} " in message and expected in message, message


def test_todays_header_auth_is_kind_header(tmp_path: Path) -> None:
    d = load_definition(_definition(tmp_path, "header: Authorization\nvalue: 'Bearer {{ api_key }}'\n"))
    assert d.auth.kind == "header" and d.auth_header == "Authorization"
    d = load_definition(_definition(tmp_path, "header: X-Key\nenv: [FIRST_KEY, SECOND_KEY]\n"))
    assert d.auth_envs == ("FIRST_KEY", "SECOND_KEY") and d.auth_env == "FIRST_KEY"
    d = load_definition(_definition(tmp_path, "kind: bearer_from_command\ncommand: gcloud auth print-access-token\n"))
    assert d.auth.command == ("gcloud", "auth", "print-access-token") and d.auth.ttl_s == 600


# --- SigV4 ------------------------------------------------------------------------------------------


def expected_signature(method: str, url: str, headers: dict[str, str], body: bytes, region: str = REGION) -> str:
    """What botocore's own signer computes for this request, at its X-Amz-Date, over the headers it says it signed."""
    authorization = headers["Authorization"]
    signed = authorization.split("SignedHeaders=")[1].split(",")[0].split(";")
    lower = {k.lower(): v for k, v in headers.items()}
    request = AWSRequest(method=method, url=url, data=body, headers={k: lower[k] for k in signed if k in lower})
    request.context["timestamp"] = lower["x-amz-date"]
    signer = botocore_auth.SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY, SESSION_TOKEN), "bedrock", region)
    canonical = signer.canonical_request(request)
    return str(signer.signature(signer.string_to_sign(request, canonical), request))


def test_sigv4_signs_the_exact_request_as_botocore_does(monkeypatch: pytest.MonkeyPatch) -> None:
    from evalx.targets.transport.auth import SigV4

    for k, v in AWS_ENV.items():
        monkeypatch.setenv(k, v)
    secrets: list[str] = []
    signer = SigV4("bedrock", REGION, secrets.append, "target 't'")
    url = "https://bedrock-runtime.eu-west-3.amazonaws.com/model/amazon.nova-lite-v1:0/converse"
    body = json.dumps({"messages": [{"role": "user", "content": [{"text": "héllo"}]}]}, ensure_ascii=False).encode()
    headers = signer.sign_now("POST", url, {"Content-Type": "application/json", "X-Custom": "a"}, body)
    auth = headers["Authorization"]
    assert auth.startswith(f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/")
    assert f"/{REGION}/bedrock/aws4_request" in auth
    assert "SignedHeaders=content-type;host;x-amz-date;x-amz-security-token;x-custom," in auth
    assert headers["X-Amz-Security-Token"] == SESSION_TOKEN and headers["X-Amz-Date"].endswith("Z")
    assert auth.endswith("Signature=" + expected_signature("POST", url, headers, body))
    # one byte more in the body is another signature
    assert not auth.endswith("Signature=" + expected_signature("POST", url, headers, body + b" "))
    assert SECRET_KEY in secrets and SESSION_TOKEN in secrets  # masked in everything the run writes


def test_sigv4_needs_a_region(monkeypatch: pytest.MonkeyPatch) -> None:
    from evalx.targets.transport.auth import SigV4

    for k, v in AWS_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    with pytest.raises(ConfigError, match="needs a region: set the target's region or AWS_REGION"):
        SigV4("bedrock", None, lambda s: None, "target 't'")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    assert SigV4("bedrock", None, lambda s: None, "target 't'").region == "us-west-2"


def test_a_missing_package_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from evalx.targets.transport.auth import GoogleADC, SigV4

    monkeypatch.setitem(sys.modules, "botocore.auth", None)
    with pytest.raises(ConfigError, match=r"^target 't': auth kind sigv4 needs the botocore package: install evalx-runner\[aws\]$"):
        SigV4("bedrock", REGION, lambda s: None, "target 't'")
    monkeypatch.setitem(sys.modules, "google.auth", None)
    with pytest.raises(ConfigError, match=r"install evalx-runner\[google\]$"):
        GoogleADC((), lambda s: None, "target 't'")


# --- Google Application Default Credentials ---------------------------------------------------------


class FakeCredentials:
    def __init__(self) -> None:
        self.token: str | None = None
        self.refreshed = 0

    @property
    def valid(self) -> bool:
        return self.token is not None and self.refreshed < 2

    def refresh(self, request: object) -> None:
        self.refreshed += 1
        self.token = f"ya29.fake-google-token-{self.refreshed}"


def test_google_credentials_are_refreshed_when_expired(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    import google.auth

    from evalx.targets.transport.auth import GoogleADC

    creds = FakeCredentials()
    scopes_asked: list[object] = []

    def default(scopes: object = None, **kw: object) -> tuple[FakeCredentials, str]:
        scopes_asked.append(scopes)
        return creds, "my-project"

    monkeypatch.setattr(google.auth, "default", default)
    secrets: list[str] = []
    auth = GoogleADC((), secrets.append, "target 't'")

    async def go() -> list[dict[str, str]]:
        await auth.prepare()
        return [await auth.sign("POST", "https://x", {"A": "b"}, b"{}") for _ in range(2)]

    first, second = asyncio.run(go())
    assert scopes_asked == [["https://www.googleapis.com/auth/cloud-platform"]]
    assert first == {"A": "b", "Authorization": "Bearer ya29.fake-google-token-1"}
    assert second["Authorization"] == "Bearer ya29.fake-google-token-1"  # still valid: not refreshed
    creds.token = None  # expired
    assert asyncio.run(auth.sign("GET", "https://x", {}, None))["Authorization"] == "Bearer ya29.fake-google-token-2"
    assert secrets == ["ya29.fake-google-token-1", "ya29.fake-google-token-1", "ya29.fake-google-token-1", "ya29.fake-google-token-2"]


# --- a fake Bedrock on 127.0.0.1, through `evalx run` ----------------------------------------------


class _QuietHangUps(ThreadingHTTPServer):
    """A client that stops reading mid-answer (evalx giving up on a corrupt or cut stream) is expected, not a traceback:
    socketserver prints one to stderr, which an in-process `evalx run` captures as its own."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeBedrock(_QuietHangUps):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _BedrockHandler)
        self.requests: list[dict[str, Any]] = []
        self.bad_signatures: list[str] = []
        self.accepts: list[str | None] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def _answer(text: str) -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 10, "outputTokens": 4, "totalTokens": 16, "cacheReadInputTokens": 2},
        "metrics": {"latencyMs": 12},
    }


class _BedrockHandler(BaseHTTPRequestHandler):
    server: FakeBedrock

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = dict(self.headers)
        self.server.requests.append({"path": self.path, "headers": headers, "body": body})
        try:
            good = headers["Authorization"].endswith(
                "Signature=" + expected_signature("POST", self.server.url + self.path, headers, body, REGION)
            )
        except (KeyError, IndexError) as exc:
            good = False
            self.server.bad_signatures.append(repr(exc))
        if not good:
            self.server.bad_signatures.append(self.path)
            return self._send(403, {"message": "The request signature we calculated does not match"}, "InvalidSignatureException")
        text = json.loads(body)["messages"][0]["content"][0]["text"]
        if self.path.endswith("/converse-stream"):
            return self._stream(text)
        if text == "tool":
            answer = _answer("Let me look.")
            answer["output"]["message"]["content"].append({"toolUse": {"toolUseId": "tooluse_1", "name": "lookup", "input": {"order": 42}}})
            answer["stopReason"] = "tool_use"
            return self._send(200, answer)
        if text == "forbidden":  # a server that echoes what it got: the token must not reach any output
            message = f"The security token included in the request is invalid: {headers.get('X-Amz-Security-Token')}"
            return self._send(403, {"message": message + " " + headers["Authorization"]}, "UnrecognizedClientException")
        if text == "throttled":
            return self._send(429, {"message": "Too many requests, please wait before trying again."}, "ThrottlingException")
        if text == "unavailable":
            return self._send(503, {"message": "Service unavailable"}, "ServiceUnavailableException")
        if text == "loading":
            return self._send(429, {"message": "Model is not ready"}, "ModelNotReadyException")
        self._send(200, _answer(f"echo {text}"))

    def _stream(self, text: str) -> None:
        """ConverseStream: AWS event-stream messages with real CRCs, written a few bytes at a time."""
        self.server.accepts.append(self.headers.get("Accept"))
        usage = {"inputTokens": 10, "outputTokens": 7, "totalTokens": 25, "cacheReadInputTokens": 8}
        frames = [eventstream.event("messageStart", {"role": "assistant"})]
        frames += [
            eventstream.event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": piece}, "p": "abcdefgh"})
            for piece in ("echo ", text)
        ]
        frames.append(eventstream.event("contentBlockStop", {"contentBlockIndex": 0}))
        stop = "end_turn"
        if text == "tool":
            start = {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "tooluse_s1", "name": "lookup"}}}
            frames.append(eventstream.event("contentBlockStart", start))
            for piece in ('{"order"', ": 42}"):
                frames.append(eventstream.event("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": piece}}}))
            frames.append(eventstream.event("contentBlockStop", {"contentBlockIndex": 1}))
            stop = "tool_use"
        frames.append(eventstream.event("messageStop", {"stopReason": stop}))
        frames.append(eventstream.event("metadata", {"usage": usage, "metrics": {"latencyMs": 120}}))
        if text == "throttled":  # before any answer: retried
            frames = [eventstream.exception("throttlingException", "Too many tokens, please wait before trying again.")]
        elif text == "broken":  # after some text: the cell's error, not sent again
            frames = [*frames[:2], eventstream.exception("modelStreamErrorException", "The model stream failed.")]
        elif text == "corrupt":  # the third message's CRC flipped
            frames[2] = frames[2][:-1] + bytes([frames[2][-1] ^ 0xFF])
        elif text == "cut":  # closed before metadata
            frames = frames[:-1]
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.amazon.eventstream")
        self.send_header("x-amzn-RequestId", "6a3c8c70-0000-4d5e-9f00-5c0ffee00000")
        self.end_headers()  # HTTP/1.0: the body ends when the connection closes
        data = b"".join(frames)
        for i in range(0, len(data), 29):
            self.wfile.write(data[i : i + 29])
            self.wfile.flush()

    def _send(self, status: int, answer: dict[str, Any], error_type: str | None = None) -> None:
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if error_type:
            self.send_header("x-amzn-ErrorType", f"{error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def bedrock() -> Iterator[FakeBedrock]:
    server = FakeBedrock()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def run_cli(tmp_path: Path, config: str, env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], Path | None]:
    path = tmp_path / "evalconfig.yaml"
    path.write_text(textwrap.dedent(config), encoding="utf-8")
    unset: dict[str, str | None] = {k: None for k in os.environ if k.startswith(("EVALX_", "AWS_"))}
    proc = evalx("run", "-c", str(path), *args, cwd=tmp_path, env={**unset, **env})
    runs = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()] if (tmp_path / "runs").is_dir() else []
    return proc, runs[0] if runs else None


def everything_written(tmp_path: Path, proc: subprocess.CompletedProcess[str]) -> str:
    texts = [proc.stdout, proc.stderr]
    for p in tmp_path.rglob("*"):
        if p.is_file() and p.name not in ("evalconfig.yaml", "print_token.py", "token-runs", "application_default_credentials.json"):
            texts.append(p.read_bytes().decode("utf-8", "replace"))
    return "\n".join(texts)


def test_bedrock_converse_signed_mapped_and_its_errors(bedrock: FakeBedrock, tmp_path: Path) -> None:
    config = f"""
        version: 1
        defaults: {{retries: 1}}
        targets:
          - id: nova
            type: provider
            provider: bedrock
            model: us.amazon.nova-lite-v1:0
            region: {REGION}
            base_url: {bedrock.url}
            system: Be brief.
            params: {{max_tokens: 64, temperature: 0, guardrailConfig: {{guardrailIdentifier: g1, guardrailVersion: "1"}}}}
            tools: [{{name: lookup, description: Find an order, parameters: {{type: object, properties: {{order: {{type: integer}}}}}}}}]
        datasets:
          - id: d
            cases:
              - {{id: hello, input: hello, assert: [{{type: contains, value: echo hello}}]}}
              - {{id: tool, input: tool}}
              - {{id: forbidden, input: forbidden}}
              - {{id: throttled, input: throttled}}
              - {{id: unavailable, input: unavailable}}
              - {{id: loading, input: loading}}
    """
    proc, run_dir = run_cli(tmp_path, config, AWS_ENV)
    assert run_dir is not None, proc.stdout + proc.stderr
    assert bedrock.bad_signatures == []
    rows = {r["case_id"]: r for r in read_cells(run_dir)}

    first = bedrock.requests[0]
    assert first["path"] == "/model/us.amazon.nova-lite-v1:0/converse"
    auth = first["headers"]["Authorization"]
    assert auth.startswith(f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/") and f"/{REGION}/bedrock/aws4_request" in auth
    body = json.loads(next(r["body"] for r in bedrock.requests if b'"hello"' in r["body"]))
    assert body == {
        "messages": [{"role": "user", "content": [{"text": "hello"}]}],
        "system": [{"text": "Be brief."}],
        "inferenceConfig": {"maxTokens": 64, "temperature": 0},
        "toolConfig": {
            "tools": [
                {
                    "toolSpec": {
                        "name": "lookup",
                        "description": "Find an order",
                        "inputSchema": {"json": {"type": "object", "properties": {"order": {"type": "integer"}}}},
                    }
                }
            ]
        },
        "guardrailConfig": {"guardrailIdentifier": "g1", "guardrailVersion": "1"},
    }

    hello = rows["hello"]
    assert hello["status"] == "pass", hello
    assert hello["output"]["text"] == "echo hello"
    assert hello["output"]["usage"]["input_tokens"] == 12 and hello["output"]["usage"]["output_tokens"] == 4
    assert hello["output"]["stop_reason"] == "end_turn"
    recorded = json.dumps(hello["output"].get("request"))
    assert "Authorization" not in recorded and "X-Amz" not in recorded and "x-amz" not in recorded

    tool = rows["tool"]["output"]
    assert [(c["name"], c["args"]) for c in tool["tool_calls"]] == [("lookup", {"order": 42})], tool
    assert tool["stop_reason"] == "tool_use"

    def tries(text: str) -> int:
        return sum(1 for r in bedrock.requests if json.loads(r["body"])["messages"][0]["content"][0]["text"] == text)

    for case in ("forbidden", "throttled", "unavailable", "loading"):
        assert rows[case]["status"] == "error", rows[case]
    # an auth error's body is never quoted (servers echo credentials): the line says what to check
    assert "HTTP 403 forbidden" in rows["forbidden"]["output"]["error"] and "AWS credentials" in rows["forbidden"]["output"]["error"]
    assert "Too many requests" in rows["throttled"]["output"]["error"]
    assert "Service unavailable" in rows["unavailable"]["output"]["error"]
    assert tries("forbidden") == 1  # fatal: never sent again
    assert tries("throttled") == tries("unavailable") == tries("loading") == 2  # retried once, each signed afresh

    written = everything_written(tmp_path, proc)
    assert (run_dir / "report.html").is_file() and list(tmp_path.rglob("cache.sqlite")), "results, report and cache are searched"
    signatures = {r["headers"]["Authorization"].split("Signature=")[1] for r in bedrock.requests}
    for secret in (SECRET_KEY, SESSION_TOKEN, *signatures):
        assert secret not in written, secret


def test_bedrock_converse_stream_signed_framed_and_its_errors(bedrock: FakeBedrock, tmp_path: Path) -> None:
    config = f"""
        version: 1
        defaults: {{retries: 1}}
        targets:
          - id: claude
            type: provider
            provider: bedrock
            model: us.anthropic.claude-3-5-haiku-20241022-v1:0
            region: {REGION}
            base_url: {bedrock.url}
            stream: true
            params: {{max_tokens: 64}}
            tools: [{{name: lookup, parameters: {{type: object, properties: {{order: {{type: integer}}}}}}}}]
        datasets:
          - id: d
            cases:
              - {{id: hello, input: hello, assert: [{{type: contains, value: echo hello}}]}}
              - {{id: tool, input: tool}}
              - {{id: throttled, input: throttled}}
              - {{id: broken, input: broken}}
              - {{id: corrupt, input: corrupt}}
              - {{id: cut, input: cut}}
    """
    proc, run_dir = run_cli(tmp_path, config, AWS_ENV)
    assert run_dir is not None, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert bedrock.bad_signatures == []  # every attempt signed, the Accept header too
    assert {r["path"] for r in bedrock.requests} == {"/model/us.anthropic.claude-3-5-haiku-20241022-v1:0/converse-stream"}
    assert set(bedrock.accepts) == {"*/*"}  # no Accept of evalx's own, as AWS's SDKs send none (aiohttp's default)
    body = json.loads(next(r["body"] for r in bedrock.requests if b'"hello"' in r["body"]))
    assert body["inferenceConfig"] == {"maxTokens": 64} and "stream" not in body  # the same request as Converse's
    rows = {r["case_id"]: r for r in read_cells(run_dir)}

    hello = rows["hello"]
    assert hello["status"] == "pass", hello
    assert hello["output"]["text"] == "echo hello" and hello["stop_reason"] == "end_turn"
    # inputTokens (10) + cacheReadInputTokens (8): all input; cached 8
    assert hello["output"]["usage"] == {"input_tokens": 18, "output_tokens": 7, "cache_hit_tokens": 8}
    assert hello["ttft_ms"] is not None and hello["output"]["raw"]["stream_events"] == 6
    # priced from the table: claude-3-5-haiku, $0.80 in, $0.08 cached, $4.00 out per million
    assert hello["cost_usd"] == pytest.approx((10 * 0.80 + 8 * 0.08 + 7 * 4.00) / 1e6)

    tool = rows["tool"]
    assert [(c["name"], c["args"]) for c in tool["output"]["tool_calls"]] == [("lookup", {"order": 42})], tool
    assert tool["stop_reason"] == "tool_use" and tool["output"]["text"] == "echo tool"

    def tries(text: str) -> int:
        return sum(1 for r in bedrock.requests if json.loads(r["body"])["messages"][0]["content"][0]["text"] == text)

    assert rows["throttled"]["status"] == "error"
    assert "throttlingException: Too many tokens, please wait" in rows["throttled"]["output"]["error"]
    assert tries("throttled") == 2  # rate-limited, nothing answered: retried once, signed afresh
    assert rows["broken"]["status"] == "error"
    assert "sent an error after 2 events: modelStreamErrorException: The model stream failed." in rows["broken"]["output"]["error"]
    assert tries("broken") == 1  # text had come: not sent again
    assert rows["corrupt"]["status"] == "error"
    assert "malformed event-stream message #3 from" in rows["corrupt"]["output"]["error"]
    assert "the message CRC does not match" in rows["corrupt"]["output"]["error"]
    assert tries("corrupt") == 1
    assert rows["cut"]["status"] == "error"
    assert "closed before its end (event: metadata) after 5 events" in rows["cut"]["output"]["error"]
    written = everything_written(tmp_path, proc)
    for secret in (SECRET_KEY, SESSION_TOKEN):
        assert secret not in written


@pytest.mark.slow  # two runs
def test_bedrock_needs_a_region_and_credentials(tmp_path: Path) -> None:
    config = """
        version: 1
        targets: [{id: b, type: provider, provider: bedrock, model: amazon.nova-micro-v1:0}]
        datasets: [{id: d, cases: [{id: a, input: hi}]}]
    """
    env = {k: v for k, v in AWS_ENV.items() if not k.startswith("AWS_SE") and k != "AWS_ACCESS_KEY_ID"}
    proc, _ = run_cli(tmp_path, config, env)
    assert proc.returncode != 0
    assert "base_url uses the region: set the target's region" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    proc, _ = run_cli(tmp_path, config, {**env, "AWS_REGION": "us-east-1"})
    assert proc.returncode != 0
    assert "no AWS credentials found" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


# --- bearer_from_command ----------------------------------------------------------------------------


class OpenAIish(_QuietHangUps):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _OpenAIHandler)
        self.authorizations: list[str | None] = []


class _OpenAIHandler(BaseHTTPRequestHandler):
    server: OpenAIish

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.authorizations.append(self.headers.get("Authorization"))
        answer = {"choices": [{"message": {"content": f"seen {self.headers.get('Authorization')}"}, "finish_reason": "stop"}]}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _command_provider(tmp_path: Path, script: str) -> None:
    (tmp_path / "print_token.py").write_text(textwrap.dedent(script), encoding="utf-8")
    (tmp_path / "providers").mkdir()
    (tmp_path / "providers" / "cmd.yaml").write_text(
        textwrap.dedent(
            f"""
            name: cmd
            auth:
              kind: bearer_from_command
              command: [{json.dumps(sys.executable)}, {json.dumps(str(tmp_path / "print_token.py"))}]
            request:
              path: /chat/completions
              body: '{{"model": {{{{ model | tojson }}}}, "messages": {{{{ messages | tojson }}}}}}'
            response:
              text: response.choices[0].message.content
              stop_reason: response.choices[0].finish_reason
            """
        ),
        encoding="utf-8",
    )


def test_bearer_from_command_runs_once_and_its_token_is_a_secret(tmp_path: Path) -> None:
    server = OpenAIish()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    token = "cmd-token-0123456789abcdef"
    try:
        _command_provider(
            tmp_path,
            f"""
            import pathlib
            with open(pathlib.Path(__file__).with_name("token-runs"), "a") as f:
                f.write("ran\\n")
            print({token!r})
            """,
        )
        config = f"""
            version: 1
            providers_dir: providers
            targets: [{{id: c, type: provider, provider: cmd, model: m, base_url: "http://127.0.0.1:{server.server_address[1]}"}}]
            datasets: [{{id: d, cases: [{{id: a, input: one}}, {{id: b, input: two}}, {{id: c, input: three}}]}}]
        """
        proc, run_dir = run_cli(tmp_path, config, {})
    finally:
        server.shutdown()
        server.server_close()
    assert run_dir is not None, proc.stderr
    assert server.authorizations == [f"Bearer {token}"] * 3
    assert (tmp_path / "token-runs").read_text() == "ran\n"  # cached for ttl_s: one run for the whole run
    rows = read_cells(run_dir)
    assert [r["status"] for r in rows] == ["pass"] * 3, rows
    assert all(r["output"]["text"] == "seen Bearer ***" for r in rows), rows  # the server's echo of the token is masked
    assert token not in everything_written(tmp_path, proc)


def test_a_failing_token_command_is_one_line(tmp_path: Path) -> None:
    _command_provider(
        tmp_path,
        """
        import sys
        print("ERROR: (gcloud.auth.print-access-token) You do not currently have an active account selected.", file=sys.stderr)
        print("second line", file=sys.stderr)
        sys.exit(1)
        """,
    )
    config = """
        version: 1
        providers_dir: providers
        targets: [{id: c, type: provider, provider: cmd, model: m, base_url: "http://127.0.0.1:9"}]
        datasets: [{id: d, cases: [{id: a, input: one}]}]
    """
    proc, _ = run_cli(tmp_path, config, {})
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "auth command" in line]
    assert len(lines) == 1, proc.stderr
    assert "failed (exit status 1): ERROR: (gcloud.auth.print-access-token) You do not currently have an active account" in lines[0]
    assert "second line" not in proc.stderr


# --- Vertex AI with Application Default Credentials, through `evalx run` ----------------------------


class FakeVertex(_QuietHangUps):
    """Google's OAuth token endpoint (``/token``, named by the ADC file's token_uri) and Vertex's generateContent."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _VertexHandler)
        self.token_requests = 0
        self.calls: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


GOOGLE_TOKEN = "ya29.vertex-access-token-0123456789"
REFRESH_TOKEN = "1//refresh-token-0123456789abcdef"


class _VertexHandler(BaseHTTPRequestHandler):
    server: FakeVertex

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/token":
            self.server.token_requests += 1
            assert b"grant_type=refresh_token" in body
            return self._send(200, {"access_token": GOOGLE_TOKEN, "expires_in": 3600, "token_type": "Bearer"})
        self.server.calls.append({"path": self.path, "authorization": self.headers.get("Authorization"), "body": json.loads(body)})
        if self.headers.get("Authorization") != f"Bearer {GOOGLE_TOKEN}":
            return self._send(401, {"error": {"code": 401, "message": "no", "status": "UNAUTHENTICATED"}})
        text = json.loads(body)["contents"][0]["parts"][0]["text"]
        if text == "busy":
            return self._send(429, {"error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED"}})
        parts: list[dict[str, Any]] = [{"text": "pondering", "thought": True}, {"text": f"gemini says {text}"}]
        if text == "tool":
            parts.append({"functionCall": {"name": "lookup", "args": {"order": 7}}})
        answer = {
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 3, "thoughtsTokenCount": 2, "cachedContentTokenCount": 4},
        }
        self._send(200, answer)

    def _send(self, status: int, answer: dict[str, Any]) -> None:
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_vertex_gemini_with_application_default_credentials(tmp_path: Path) -> None:
    pytest.importorskip("google.auth")
    server = FakeVertex()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    adc = tmp_path / "adc" / "application_default_credentials.json"
    adc.parent.mkdir()
    adc.write_text(
        json.dumps(
            {
                "type": "authorized_user",
                "client_id": "client.apps.googleusercontent.com",
                "client_secret": "client-secret-0123456789",
                "refresh_token": REFRESH_TOKEN,
                # google-auth always refreshes these at oauth2.googleapis.com: a token still valid is used as it is
                # (refreshing is test_google_credentials_are_refreshed_when_expired's)
                "token": GOOGLE_TOKEN,
                "expiry": "2099-01-01T00:00:00Z",
            }
        ),
        encoding="utf-8",
    )
    config = f"""
        version: 1
        defaults: {{retries: 0}}
        targets:
          - id: gem
            type: provider
            provider: vertex
            model: gemini-2.5-flash
            region: europe-west4
            base_url: {server.url}
            params: {{temperature: 0, max_tokens: 100}}
            tools: [{{name: lookup, parameters: {{type: object}}}}]
        datasets: [{{id: d, cases: [{{id: a, input: hello}}, {{id: t, input: tool}}, {{id: b, input: busy}}]}}]
    """
    env = {"GOOGLE_APPLICATION_CREDENTIALS": str(adc), "GOOGLE_CLOUD_PROJECT": "proj", "NO_GCE_CHECK": "true"}
    try:
        proc, run_dir = run_cli(tmp_path, config, env)
    finally:
        server.shutdown()
        server.server_close()
    assert run_dir is not None, proc.stderr
    assert server.token_requests == 0
    assert {c["path"] for c in server.calls} == {"/publishers/google/models/gemini-2.5-flash:generateContent"}
    first = next(c for c in server.calls if c["body"]["contents"][0]["parts"][0]["text"] == "hello")
    assert first["authorization"] == f"Bearer {GOOGLE_TOKEN}"
    assert first["body"]["generationConfig"] == {"temperature": 0, "maxOutputTokens": 100}
    assert first["body"]["tools"] == [{"functionDeclarations": [{"name": "lookup", "parameters": {"type": "object"}}]}]
    rows = {r["case_id"]: r for r in read_cells(run_dir)}
    a = rows["a"]["output"]
    assert rows["a"]["status"] == "pass" and a["text"] == "gemini says hello" and a["stop_reason"] == "STOP", rows["a"]
    assert (a["usage"]["input_tokens"], a["usage"]["output_tokens"]) == (9, 5)
    assert [(c["name"], c["args"]) for c in rows["t"]["output"]["tool_calls"]] == [("lookup", {"order": 7})]
    assert rows["b"]["status"] == "error" and "Resource exhausted" in rows["b"]["output"]["error"]
    written = everything_written(tmp_path, proc)
    assert GOOGLE_TOKEN not in written and REFRESH_TOKEN not in written


def test_base_url_and_path_see_model_and_region_and_an_environment_value_stays_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "base_url: https://{{ region }}.example/${PROJECT}\nrequest: {path: '/m/{{ model }}:go', body: '{}'}\nresponse: {text: response.t}\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("PROJECT", "proj-1")
    d = load_definition(path)
    scope = {"model": "gemini-2.5-flash", "region": "eu-west-1"}
    assert d.render_location(str(d.base_url), scope, "base_url") == "https://eu-west-1.example/proj-1"
    assert d.render_location(d.path, scope, "request", "path") == "/m/gemini-2.5-flash:go"
    with pytest.raises(Exception, match=r"p\.yaml:1 base_url uses the region: set the target's region"):
        d.render_location(str(d.base_url), {"model": "m", "region": None}, "base_url")
    monkeypatch.setenv("PROJECT", "{{ model }}")  # a value is never template code
    d = load_definition(path)
    with pytest.raises(Exception, match="an environment variable's value has template markers"):
        d.render_location(str(d.base_url), scope, "base_url")
    path.write_text("base_url: https://h/${PROJECT}\nrequest: {path: /x, body: '{}'}\nresponse: {text: response.t}\n", encoding="utf-8")
    d = load_definition(path)
    assert d.render_location(str(d.base_url), scope, "base_url") == "https://h/{{ model }}"  # as it is
