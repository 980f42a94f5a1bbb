"""Images and documents in cases: a case's input as parts, through the real CLI.

Each provider definition's ``parts:`` mapping is checked against the fake server of the contract tests (the wire
shape each API documents: OpenAI chat ``image_url``/``file``, the Responses API ``input_image``/``input_file``,
Anthropic ``image``/``document`` blocks with a base64 source, Ollama ``images``, Gemini ``inline_data``); an engine
and a Python target receive the parts; a target that cannot take them is refused at validate time, naming the case's
FILE:LINE; results hold the parts by reference; a changed image (same path, new bytes) misses the cache and stops
``--resume``.
"""

from __future__ import annotations

import base64
import json
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from contract_server import Answer, ContractServer
from engine_server import EngineServer
from results_file import read_cells

from evalx.cli import main

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"
PNG64, PDF64 = base64.b64encode(PNG).decode(), base64.b64encode(PDF).decode()

CASES = """\
- id: look
  input:
    - {type: text, text: "What is in the picture and the invoice?"}
    - {type: image, path: images/cat.png}
    - {type: document, path: docs/invoice.pdf}
  assert: [{type: contains, value: "ok"}]
"""


@pytest.fixture(scope="module")
def server() -> Iterator[ContractServer]:
    s = ContractServer().start()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALX_BACKOFF_BASE_S", "0.001")
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(name, "test-key")


def project(tmp: Path, target: str, cases: str = CASES) -> Path:
    (tmp / "images").mkdir(exist_ok=True)
    (tmp / "docs").mkdir(exist_ok=True)
    (tmp / "images" / "cat.png").write_bytes(PNG)
    (tmp / "docs" / "invoice.pdf").write_bytes(PDF)
    (tmp / "cases.yaml").write_text(cases, encoding="utf-8")
    config = tmp / "evalconfig.yaml"
    body = textwrap.indent(textwrap.dedent(target).strip("\n"), "  ")
    config.write_text(f"version: 1\nname: parts\ntargets:\n{body}\ndatasets:\n  - id: d\n    path: cases.yaml\n", encoding="utf-8")
    return config


def run(config: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["run", "-c", str(config), *args])
    return result.exit_code, result.output


def last_cells(config: Path) -> list[dict[str, Any]]:
    runs = sorted((config.parent / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    return read_cells(runs[-1])


def provider(name: str, server: ContractServer, model: str = "m", extra: str = "") -> str:
    base = f"{server.url}/v1" if name in ("openai", "openai-responses") else server.url
    return f"- id: t\n  type: provider\n  provider: {name}\n  model: {model}\n  base_url: {base}\n  retries: 0\n{extra}"


OPENAI_ANSWER = {"choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}], "usage": {}}


def test_openai_chat_gets_image_url_and_file_parts(server: ContractServer, tmp_path: Path) -> None:
    server.script(Answer(body=OPENAI_ANSWER))
    code, output = run(project(tmp_path, provider("openai", server)), "--no-cache")
    assert code == 0, output
    [req] = server.requests
    assert req["body"]["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in the picture and the invoice?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG64}"}},
                {"type": "file", "file": {"filename": "invoice.pdf", "file_data": f"data:application/pdf;base64,{PDF64}"}},
            ],
        }
    ]
    [cell] = last_cells(tmp_path / "evalconfig.yaml")
    image = cell["input"][1]
    assert image == {"type": "image", "path": "images/cat.png", "media_type": "image/png", "sha256": image["sha256"], "size": len(PNG)}
    text = (tmp_path / "runs").joinpath(*[p.name for p in sorted((tmp_path / "runs").iterdir())][-1:], "results.jsonl").read_text()
    assert PNG64 not in text and PDF64 not in text  # by reference, never inline


def test_openai_responses_gets_input_image_and_input_file(server: ContractServer, tmp_path: Path) -> None:
    answer = {"output": [{"type": "message", "content": [{"type": "output_text", "text": "ok"}]}], "usage": {}, "status": "completed"}
    server.script(Answer(body=answer))
    code, output = run(project(tmp_path, provider("openai-responses", server)), "--no-cache")
    assert code == 0, output
    content = server.requests[0]["body"]["input"][0]["content"]
    assert content[1:] == [
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG64}"},
        {"type": "input_file", "filename": "invoice.pdf", "file_data": f"data:application/pdf;base64,{PDF64}"},
    ]


def test_anthropic_gets_image_and_document_blocks(server: ContractServer, tmp_path: Path) -> None:
    answer = {"content": [{"type": "text", "text": "ok"}], "usage": {"input_tokens": 3, "output_tokens": 1}, "stop_reason": "end_turn"}
    server.script(Answer(body=answer))
    code, output = run(project(tmp_path, provider("anthropic", server)), "--no-cache")
    assert code == 0, output
    assert server.requests[0]["body"]["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in the picture and the invoice?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG64}},
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF64}},
            ],
        }
    ]


def test_gemini_gets_inline_data_parts(server: ContractServer, tmp_path: Path) -> None:
    answer = {"candidates": [{"content": {"parts": [{"text": "ok"}], "role": "model"}, "finishReason": "STOP"}]}
    server.script(Answer(body=answer))
    code, output = run(project(tmp_path, provider("gemini", server, "gemini-2.5-flash")), "--no-cache")
    assert code == 0, output
    assert server.requests[0]["body"]["contents"][0]["parts"] == [
        {"text": "What is in the picture and the invoice?"},
        {"inline_data": {"mime_type": "image/png", "data": PNG64}},
        {"inline_data": {"mime_type": "application/pdf", "data": PDF64}},
    ]


def test_ollama_gets_images_and_refuses_a_document_at_validate_time(server: ContractServer, tmp_path: Path) -> None:
    config = project(tmp_path, provider("ollama", server, "llava"))
    result = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert result.exit_code == 2
    assert re.search(
        r"cases\.yaml:1 input: case 'look' has document and image parts, which target 't' cannot send: .*documents \(PDF\)", result.output
    )
    image_only = CASES.replace("    - {type: document, path: docs/invoice.pdf}\n", "")
    server.script(Answer(body={"message": {"role": "assistant", "content": "ok"}, "done": True}))
    code, output = run(project(tmp_path, provider("ollama", server, "llava"), image_only), "--no-cache")
    assert code == 0, output
    assert server.requests[0]["body"]["messages"] == [
        {"role": "user", "content": "What is in the picture and the invoice?", "images": [PNG64]}
    ]


def test_a_definition_without_vision_refuses_image_cases_before_any_request(server: ContractServer, tmp_path: Path) -> None:
    server.script()
    code, output = run(project(tmp_path, provider("deepseek", server, "deepseek-chat")), "--no-cache")
    assert code == 2
    assert "cases.yaml:1 input: case 'look' has document and image parts, which target 't' cannot send" in output
    assert "capabilities.vision false" in output
    assert server.requests == []


def test_part_problems_name_their_file_and_line(tmp_path: Path) -> None:
    cases = """\
- id: a
  input:
    - {type: text, text: hi}
    - {type: image, path: ../outside.png}
    - {type: image, path: images/missing.png}
    - {type: image, data: "not base64!", media_type: image/png}
    - {type: image, path: images/cat.png, media_type: image/bmp}
    - {type: document}
"""
    (tmp_path / "parts_plain_app.py").write_text("def run(input):\n    return 'ok'\n", encoding="utf-8")
    config = project(tmp_path, "- id: t\n  type: python\n  callable: parts_plain_app:run\n", cases)
    result = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("cases.yaml:4 cases[0].input[1].path: path '../outside.png': '..' leads outside")
    assert lines[1] == "cases.yaml:5 cases[0].input[2].path: images/missing.png: no such file"
    assert lines[2] == "cases.yaml:6 cases[0].input[3].data: data is not valid base64"
    assert lines[3].startswith("cases.yaml:7 cases[0].input[4].media_type: media_type of a image must be one of")
    assert lines[4] == "cases.yaml:8 cases[0].input[5]: a document part needs exactly one of path or data"


def test_python_target_receives_the_parts_with_their_bytes(tmp_path: Path) -> None:
    (tmp_path / "parts_app.py").write_text(
        "import hashlib\n"
        "def run(input, case):\n"
        "    assert case['input'] == input\n"
        "    return ' '.join(p['type'] + ':' + (p['text'] if p['type'] == 'text' else p['media_type'] + ':' + "
        "hashlib.sha256(p['data']).hexdigest()[:8]) for p in input) + ' ok'\n",
        encoding="utf-8",
    )
    config = project(tmp_path, "- id: t\n  type: python\n  callable: parts_app:run\n")
    code, output = run(config)
    assert code == 0, output
    [cell] = last_cells(config)
    import hashlib

    png, pdf = hashlib.sha256(PNG).hexdigest()[:8], hashlib.sha256(PDF).hexdigest()[:8]
    assert cell["output"]["text"] == f"text:What is in the picture and the invoice? image:image/png:{png} document:application/pdf:{pdf} ok"


def test_engine_receives_the_parts_base64_in_the_body(tmp_path: Path, engine_server: EngineServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import ENGINE_TEST_KEY

    monkeypatch.setenv("ENGINE_KEY", ENGINE_TEST_KEY)
    config = project(tmp_path, f"- id: t\n  type: engine\n  url: {engine_server.url}\n  api_key: ${{ENGINE_KEY}}\n")
    run(config, "--no-cache")  # the scripted engine's answer does not matter here: what it was sent does
    [cell] = last_cells(config)
    bodies = [r["body"] for r in list(engine_server.requests)]
    body = next(b for b in reversed(bodies) if "parts" in b)
    assert body["message"] == "What is in the picture and the invoice?"
    assert body["parts"][1] == {
        "type": "image", "media_type": "image/png", "name": "cat.png", "path": "images/cat.png",
        "sha256": cell["input"][1]["sha256"], "size": len(PNG), "data": PNG64,
    }  # fmt: skip
    assert body["parts"][2]["data"] == PDF64 and body["parts"][2]["media_type"] == "application/pdf"


def test_a_changed_image_misses_the_cache_and_stops_resume(server: ContractServer, tmp_path: Path) -> None:
    config = project(tmp_path, provider("openai", server))
    server.script(Answer(body=OPENAI_ANSWER), Answer(body=OPENAI_ANSWER))
    assert run(config)[0] == 0
    assert run(config)[0] == 0
    assert len(server.requests) == 1  # the second run: from the cache
    first = sorted((tmp_path / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)[0].name
    (tmp_path / "images" / "cat.png").write_bytes(PNG + b"\0")  # same path, new bytes
    assert run(config)[0] == 0
    assert len(server.requests) == 2  # a cache miss
    sent = server.requests[1]["body"]["messages"][0]["content"][1]["image_url"]["url"]
    assert sent == "data:image/png;base64," + base64.b64encode(PNG + b"\0").decode()
    code, output = run(config, "--resume", first)
    assert code != 0 and "cannot resume" in output, output
    assert json.loads((tmp_path / "runs" / first / "run.json").read_text())["run_id"] == first


@pytest.mark.slow
def test_report_shows_the_image_thumbnail_and_the_document_name(tmp_path: Path) -> None:
    from browser import chromium

    (tmp_path / "parts_report_app.py").write_text("def run(input):\n    return 'ok'\n", encoding="utf-8")
    cases = CASES.replace("images/cat.png}", "images/cat.png}\n    - {type: image, path: 'images/<b>x.png'}")
    config = project(tmp_path, "- id: t\n  type: python\n  callable: parts_report_app:run\n", cases)
    (tmp_path / "images" / "<b>x.png").write_bytes(PNG)
    code, output = run(config)
    assert code == 0, output
    [run_dir] = (tmp_path / "runs").iterdir()
    for browser in chromium():
        page = browser.new_page()
        page.goto((run_dir / "report.html").resolve().as_uri())
        page.wait_for_selector("#mx-body tr.row")
        page.click('#mx-body button.chip[data-row="0"][data-t="0"]')
        page.wait_for_selector("#detail:not([hidden])")
        body = page.locator("#d-body").inner_text()
        assert "ATTACHMENTS (3)" in body.upper()
        assert "image: images/cat.png" in body and "document: docs/invoice.pdf" in body
        assert "image: images/<b>x.png" in body  # a name is text, never markup
        assert page.locator("#d-body b").count() == 0
        thumbs = page.locator("#d-body img.thumb")
        assert thumbs.count() == 2
        assert thumbs.first.get_attribute("src") == f"data:image/png;base64,{PNG64}"
        assert page.evaluate("() => document.querySelector('#d-body img.thumb').naturalWidth") == 1  # it decoded: the CSP lets it show
        page.close()


def test_a_judge_with_attachments_is_shown_the_image(server: ContractServer, tmp_path: Path) -> None:
    (tmp_path / "parts_judged_app.py").write_text("def run(input):\n    return 'a cat'\n", encoding="utf-8")
    cases = CASES.replace('assert: [{type: contains, value: "ok"}]', "assert: [{type: llm_judge, rubric: names the animal in the picture}]")
    config = project(tmp_path, "- id: t\n  type: python\n  callable: parts_judged_app:run\n", cases)
    text = config.read_text(encoding="utf-8")
    judge = f"judge:\n  target: {{type: provider, provider: openai, model: gpt-4o, base_url: {server.url}/v1}}\n  attachments: true\n"
    config.write_text(text + judge, encoding="utf-8")
    verdict = {"choices": [{"message": {"role": "assistant", "content": '{"pass": true, "score": 1, "reason": "a cat"}'}}], "usage": {}}
    server.script(Answer(body=verdict))
    code, output = run(config, "--no-cache")
    assert code == 0, output
    [req] = server.requests
    user = req["body"]["messages"][-1]
    assert user["role"] == "user" and user["content"][0]["type"] == "text" and "names the animal" in user["content"][0]["text"]
    assert user["content"][1] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG64}"}}
    assert user["content"][2]["type"] == "file"
    [cell] = last_cells(config)
    assert cell["status"] == "pass"


def test_capture_keeps_the_attachments_beside_the_captured_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "parts_capture_app.py").write_text("def run(input):\n    return 'no idea'\n", encoding="utf-8")
    config = project(tmp_path, "- id: t\n  type: python\n  callable: parts_capture_app:run\n")
    code, output = run(config)
    assert code == 1, output  # the case failed: a regression to capture
    [run_dir] = (tmp_path / "runs").iterdir()
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["capture", f"runs/{run_dir.name}", "--case", "look", "--out", "captured"])
    assert result.exit_code == 0, result.output
    import yaml

    [written] = (tmp_path / "captured").glob("*.yaml")
    case = yaml.safe_load(written.read_text(encoding="utf-8"))
    text, image, document = case["input"]
    assert text == {"type": "text", "text": "What is in the picture and the invoice?"}
    assert (written.parent / image["path"]).read_bytes() == PNG and image["media_type"] == "image/png"
    assert (written.parent / document["path"]).read_bytes() == PDF and document["type"] == "document"
    (tmp_path / "images" / "cat.png").write_bytes(PNG + b"changed")  # the file changed since the run: not what it read
    again = CliRunner().invoke(main, ["capture", f"runs/{run_dir.name}", "--case", "look", "--out", "captured2"])
    assert again.exit_code == 0, again.output
    assert "image 'images/cat.png'" in again.output and "left out of the case" in again.output


def test_a_definition_declaring_vision_must_map_images(server: ContractServer, tmp_path: Path) -> None:
    (tmp_path / "providers").mkdir()
    (tmp_path / "providers" / "novis.yaml").write_text("name: novis\nextends: openai\nparts: null\n", encoding="utf-8")
    config = project(tmp_path, provider("novis", server))
    config.write_text("providers_dir: providers\n" + config.read_text(encoding="utf-8"), encoding="utf-8")
    result = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert result.exit_code == 2
    assert "capabilities.vision: capabilities.vision is true but no parts: section maps images" in result.output
