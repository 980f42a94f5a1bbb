"""Issue 13, "Secret leaks": hostile servers on 127.0.0.1, evalx run through its CLI in a subprocess.

- a redirect never carries credentials (nor the body) to another origin;
- every header value set in the config is a secret unless the header is harmless;
- values of secret-named environment variables are masked however they reach an output;
- ``${VAR}`` is data: its value never becomes template code.
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

import pytest
from results_file import read_cells

pytestmark = pytest.mark.slow  # the quick tier (-m 'not slow') leaves these out: they take the longest


class Recorder(ThreadingHTTPServer):
    """Records every request; answers as OpenAI chat completions would, echoing what it received."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.redirect_to = ""  # where /rNNN/... paths redirect (another origin)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Recorder

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        self.server.requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body})
        first = self.path.strip("/").split("/")[0]
        if first.startswith("r") and first[1:].isdigit():  # /r307/v1/...: to the other origin
            return self._send(int(first[1:]), b"", {"Location": self.server.redirect_to + "/v1/chat/completions"})
        if first == "same":  # a same-origin redirect, relative: followed
            return self._send(307, b"", {"Location": "/v1/chat/completions"})
        echo = "echo " + " | ".join(f"{k}={v}" for k, v in self.headers.items()) + " | body=" + body
        if "FAIL" in body:
            return self._send(400, json.dumps({"error": {"message": echo}}).encode(), {"Content-Type": "application/json"})
        answer = {
            "id": "x",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": echo}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8},
        }
        self._send(200, json.dumps(answer).encode(), {"Content-Type": "application/json"})

    do_POST = do_GET = _answer

    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def servers() -> Iterator[tuple[Recorder, Recorder]]:
    started = []
    for _ in range(2):
        server = Recorder()
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
    try:
        yield started[0], started[1]
    finally:
        for server in started:
            server.shutdown()
            server.server_close()


def run_cli(tmp_path: Path, config: str, env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    path = tmp_path / "evalconfig.yaml"
    path.write_text(textwrap.dedent(config), encoding="utf-8")
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("EVALX_")}
    full_env.update(env)
    proc = subprocess.run(
        [sys.executable, "-c", "from evalx.cli import main; main()", "run", "-c", str(path), *args],
        cwd=tmp_path,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    runs = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    assert len(runs) == 1, proc.stdout + proc.stderr
    return proc, runs[0]


def results_of(run_dir: Path) -> dict[str, dict[str, Any]]:
    rows = read_cells(run_dir)
    return {f"{r['target']}/{r['case_id']}": r for r in rows}


def everything_written(tmp_path: Path, proc: subprocess.CompletedProcess[str]) -> str:
    """stdout, stderr and every file evalx wrote (runs, reports, the cache): not the config nor the test's own files."""
    texts = [proc.stdout, proc.stderr]
    for p in tmp_path.rglob("*"):
        if p.is_file() and p.name not in ("evalconfig.yaml", "hostile.py"):
            texts.append(p.read_bytes().decode("utf-8", "replace"))
    return "\n".join(texts)


# --- redirects --------------------------------------------------------------------------------


def test_a_redirect_to_another_origin_carries_no_credentials(servers: tuple[Recorder, Recorder], tmp_path: Path) -> None:
    target, elsewhere = servers
    target.redirect_to = elsewhere.url  # same host, another port: another origin
    codes = (301, 302, 303, 307, 308)
    targets = "".join(
        f"""
          - id: t{code}
            type: provider
            provider: openai
            model: m
            base_url: {target.url}/r{code}/v1
            api_key: sk-redirect-key-0123456789
            headers: {{x-api-key: xkey-redirect-0123456789, X-Engine-Key: ekey-redirect-0123456789}}
        """
        for code in codes
    )
    config = f"""
        version: 1
        targets:{targets}
          - id: same
            type: provider
            provider: openai
            model: m
            base_url: {target.url}/same/v1
            api_key: sk-redirect-key-0123456789
        datasets: [{{id: d, cases: [{{id: a, input: hello}}]}}]
    """
    proc, run_dir = run_cli(tmp_path, config, {})
    assert elsewhere.requests == []  # nothing at all reached the other origin
    rows = results_of(run_dir)
    for code in codes:
        row = rows[f"t{code}/a"]
        assert row["status"] == "error", row
        assert f"HTTP {code}" in row["output"]["error"] and f"127.0.0.1:{elsewhere.server_address[1]}" in row["output"]["error"], row[
            "output"
        ]["error"]
        assert "another origin" in row["output"]["error"]
    # a same-origin redirect is followed (307: same method and body)
    assert rows["same/a"]["status"] == "pass", rows["same/a"]
    followed = [r for r in target.requests if r["path"] == "/v1/chat/completions"]
    assert len(followed) == 1 and followed[0]["method"] == "POST" and '"hello"' in followed[0]["body"]
    assert "redirect-0123456789" not in everything_written(tmp_path, proc)


# --- headers from the config ------------------------------------------------------------------


def test_configured_header_values_are_secrets_unless_harmless(servers: tuple[Recorder, Recorder], tmp_path: Path) -> None:
    target, _ = servers
    config = f"""
        version: 1
        targets:
          - id: p
            type: provider
            provider: openai
            model: m
            base_url: {target.url}/v1
            api_key: none-needed-here
            headers:
              X-Api-Token: tok-literal-abcdef123456
              Proxy-Authorization: "Bearer ${{MY_AUTH}}"
              X-Tenant: evals
              Accept-Language: fr-CH-harmless
        datasets: [{{id: d, cases: [{{id: ok, input: hello}}, {{id: bad, input: FAIL please}}]}}]
    """
    proc, run_dir = run_cli(
        tmp_path,
        config,
        {"MY_AUTH": "cred-xyz-987654321"},
        "--junit",
        str(tmp_path / "out" / "junit.xml"),
        "--html",
        str(tmp_path / "out" / "r.html"),
    )
    sent = target.requests[0]["headers"]
    assert sent["X-Api-Token"] == "tok-literal-abcdef123456" and sent["Proxy-Authorization"] == "Bearer cred-xyz-987654321"
    rows = results_of(run_dir)
    assert rows["p/ok"]["status"] == "pass" and rows["p/bad"]["status"] == "error"
    assert "***" in rows["p/ok"]["output"]["text"] and "***" in rows["p/bad"]["output"]["error"]
    written = everything_written(tmp_path, proc)
    for secret in ("tok-literal-abcdef123456", "cred-xyz-987654321"):
        assert secret not in written
    assert "X-Tenant=evals" in rows["p/ok"]["output"]["text"]  # shorter than 8 chars: free text is left alone
    assert "fr-CH-harmless" in rows["p/ok"]["output"]["text"]  # a harmless header is not a secret
    stored = (run_dir / "config.yaml").read_text()
    assert "X-Tenant: '***'" in stored or 'X-Tenant: "***"' in stored or "X-Tenant: ***" in stored
    assert "fr-CH-harmless" in stored


# --- environment values -----------------------------------------------------------------------


def test_secret_environment_values_are_masked_through_templates_and_callables(servers: tuple[Recorder, Recorder], tmp_path: Path) -> None:
    target, _ = servers
    (tmp_path / "hostile.py").write_text(
        "import os\n\ndef leak(*args, **kwargs):\n    raise RuntimeError('the key is ' + os.environ['ENGINE_KEY'])\n", encoding="utf-8"
    )
    config = f"""
        version: 1
        targets:
          - id: p
            type: provider
            provider: openai
            model: m
            base_url: {target.url}/v1
            api_key: none-needed-here
            prompt: "hello {{{{ env.ENGINE_KEY }}}}"
          - id: py
            type: python
            callable: hostile.py:leak
        datasets: [{{id: d, cases: [{{id: a, input: hi}}]}}]
    """
    secret = "engine-env-secret-4242"
    proc, run_dir = run_cli(tmp_path, config, {"ENGINE_KEY": secret}, "--junit", str(tmp_path / "junit.xml"))
    assert secret in target.requests[0]["body"]  # the template did send it...
    rows = results_of(run_dir)
    assert "hello ***" in rows["p/a"]["output"]["text"] and "the key is ***" in rows["py/a"]["output"]["error"]
    assert secret not in everything_written(tmp_path, proc)  # ...but it is nowhere in results, reports or cache
    assert list(tmp_path.rglob("*cache*")), "the provider answer was cached"


def test_interpolated_environment_value_is_data_not_template_code(servers: tuple[Recorder, Recorder], tmp_path: Path) -> None:
    target, _ = servers
    config = f"""
        version: 1
        targets:
          - id: p
            type: provider
            provider: openai
            model: m
            base_url: {target.url}/v1
            api_key: none-needed-here
            system: "${{USER_MSG}}"
            prompt: "say: ${{USER_MSG}} to {{{{ case.input }}}}"
            params: {{user: "${{USER_MSG}}"}}
        datasets: [{{id: d, cases: [{{id: a, input: Bob}}]}}]
    """
    env = {"USER_MSG": "{{ env.SECRET_TOKEN }}{% raw %}\"'", "SECRET_TOKEN": "very-secret-token-31337"}
    proc, run_dir = run_cli(tmp_path, config, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    body = json.loads(target.requests[0]["body"])
    literal = env["USER_MSG"]
    assert body["messages"] == [
        {"role": "system", "content": literal},
        {"role": "user", "content": f"say: {literal} to Bob"},
    ]
    assert body["user"] == literal
    assert "very-secret-token-31337" not in target.requests[0]["body"]


def test_interpolated_value_in_a_provider_definition_template_is_data(servers: tuple[Recorder, Recorder], tmp_path: Path) -> None:
    target, _ = servers
    (tmp_path / "providers").mkdir()
    (tmp_path / "providers" / "acme.yaml").write_text(
        textwrap.dedent(
            """
            name: acme
            request:
              path: /v1/chat/completions
              body: |
                {"model": {{ model | tojson }}, "greeting": "${GREETING}", "messages": {{ messages | tojson }}}
            response:
              text: response.choices[0].message.content
            """
        ),
        encoding="utf-8",
    )
    config = f"""
        version: 1
        providers_dir: providers
        targets: [{{id: p, type: provider, provider: acme, model: m, base_url: '{target.url}'}}]
        datasets: [{{id: d, cases: [{{id: a, input: hi}}]}}]
    """
    env = {"GREETING": "{{ env.SECRET_TOKEN }}", "SECRET_TOKEN": "very-secret-token-31337"}
    proc, run_dir = run_cli(tmp_path, config, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(target.requests[0]["body"])["greeting"] == "{{ env.SECRET_TOKEN }}"


def test_a_changed_engine_header_is_not_answered_from_the_cache(engine_server: Any, tmp_path: Path) -> None:
    """Header values are masked in the spec a cache key is made from: the key still tells them apart."""
    from conftest import ENGINE_TEST_KEY

    def run(version: str) -> int:
        before = len(engine_server.requests)
        (tmp_path / "evalconfig.yaml").write_text(
            textwrap.dedent(
                f"""
                version: 1
                targets:
                  - {{id: e, type: engine, url: '{engine_server.url}', api_key: {ENGINE_TEST_KEY}, cache: true,
                      headers: {{X-Agent-Version: {version}}}}}
                datasets: [{{id: d, cases: [{{id: a, input: {{message: hello}}}}]}}]
                """
            ),
            encoding="utf-8",
        )
        proc = subprocess.run(
            [sys.executable, "-c", "from evalx.cli import main; main()", "run", "-c", "evalconfig.yaml"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return len(engine_server.requests) - before

    assert run("v1") == 1
    assert run("v1") == 0  # cached
    assert run("v2") == 1  # another header value: asked again
    assert engine_server.requests[-1]["headers"]["X-Agent-Version"] == "v2"
    stored = "".join(p.read_text() for p in (tmp_path / "runs").glob("*/config.yaml"))
    assert "X-Agent-Version: '***'" in stored and "v2" not in stored.replace("version: 1", "")


def test_interpolated_matrix_param_is_data_not_template_code(servers: tuple[Recorder, Recorder], tmp_path: Path) -> None:
    target, _ = servers
    config = f"""
        version: 1
        targets: [{{id: p, type: provider, provider: openai, model: m, base_url: '{target.url}/v1', api_key: none-needed-here}}]
        matrix:
          params: {{user: ["${{USER_MSG}}"], model: ["${{MODEL_NAME}}"]}}
        datasets: [{{id: d, cases: [{{id: a, input: hi}}]}}]
    """
    env = {"USER_MSG": "{{ env.SECRET_TOKEN }}", "SECRET_TOKEN": "very-secret-token-31337", "MODEL_NAME": "model-x"}
    proc, run_dir = run_cli(tmp_path, config, env, "--matrix")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    body = json.loads(target.requests[0]["body"])
    assert body["user"] == "{{ env.SECRET_TOKEN }}" and body["model"] == "model-x"
