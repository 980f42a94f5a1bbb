"""A conversation in report.html: the cell detail shows each turn as a chat, the failing turn marked, model text as text.

The browser tests open the report of a real ``evalx run`` (a Python target
that answers from the history) in headless Chromium from file://, with every
request but the file itself refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from browser import chromium
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main
from evalx.reports import write_html
from evalx.reports.html import TURN_CAP
from evalx.results.summary import SummaryBuilder

IMG_XSS = "<img src=x onerror=window.__pwned=1>"

AGENT = '''
def chat(messages):
    """Answers from the history: remembers the order number, and echoes markup it is asked to."""
    said = " ".join(m["content"] for m in messages if m["role"] == "user")
    last = messages[-1]["content"]
    if "markup" in last:
        return "here: <img src=x onerror=window.__pwned=1>"
    if "order number" in last and "?" in last:
        found = [w for w in said.replace(".", " ").split() if w.isdigit()]
        return f"Your order number is {found[0]}." if found else "I do not know it."
    return f"Noted ({len(messages)} messages so far)."
'''

TURNS = [
    {"input": "Hi, my order number is 4815.", "assert": [{"type": "contains", "value": "Noted"}]},
    {"input": "Say some markup", "assert": [{"type": "contains", "value": "refund"}]},
    {"input": "What is my order number?", "assert": [{"type": "contains", "value": "4815"}]},
]


def run_conversation(tmp: Path) -> Path:
    (tmp / "agent.py").write_text(AGENT, encoding="utf-8")
    config = {
        "version": 1,
        "name": "chat",
        "targets": [{"id": "bot", "type": "python", "callable": "agent.py:chat"}],
        "datasets": [{"id": "chats", "cases": [{"id": "order", "turns": TURNS, "assert": [{"type": "contains", "value": "4815"}]}]}],
    }
    (tmp / "evalconfig.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    result = CliRunner().invoke(main, ["run", "-c", str(tmp / "evalconfig.yaml"), "--quiet"], catch_exceptions=False)
    assert result.exit_code == 1, result.output  # turn 2 fails the cell
    [run_dir] = (tmp / "runs").iterdir()
    return run_dir


def embedded(html: str) -> dict[str, Any]:
    match = re.search(r'<script type="application/json" id="evalx-data">(.*?)</script>', html, re.S)
    assert match
    data: dict[str, Any] = json.loads(match.group(1))
    return data


# ---------------------------------------------------------------- the embedded data


def turn(n: int, text: str, passed: bool | None = True, **extra: Any) -> dict[str, Any]:
    assertions = (
        []
        if passed is None
        else [{"type": "contains", "name": None, "passed": passed, "score": float(passed), "reason": f"r{n}", "turn": n}]
    )
    output = {"text": text, "tool_calls": [], "usage": {"input_tokens": 9}, "events": [{"type": "text_delta", "data": "x" * 500}], **extra}
    return {
        "input": f"user says {n}",
        "output": output,
        "latency_ms": 10.0 * n,
        "usage": output["usage"],
        "tool_calls": [],
        "assertions": assertions,
    }


def write_report(tmp: Path, cells: list[dict[str, Any]]) -> str:
    path = tmp / "results.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in cells), encoding="utf-8")
    builder = SummaryBuilder("r", "n", "2026-01-01T00:00:00+00:00")
    for c in cells:
        builder.add(c)
    write_html(path, builder.finish("2026-01-01T00:00:01+00:00", 1.0), tmp / "report.html")
    return (tmp / "report.html").read_text(encoding="utf-8")


def cell(case_id: str, status: str, turns: list[dict[str, Any]] | None, **extra: Any) -> dict[str, Any]:
    row = {
        "run_id": "r",
        "target": "t",
        "dataset": "d",
        "case_id": case_id,
        "category": "general",
        "status": status,
        "score": 0.0,
        "latency_ms": 5.0,
        "output": {"text": "last"},
        "assertions": [],
        "error": None,
        **extra,
    }
    if turns is not None:
        row["turns"] = turns
    return row


def test_a_conversation_is_embedded_small_with_its_failing_turn_flagged(tmp_path: Path) -> None:
    long = "é" * (TURN_CAP + 50)
    turns = [
        turn(1, "fine"),
        turn(2, long, passed=False),
        turn(3, "", passed=None, tool_calls=[{"name": "lookup", "args": {"q": 1}, "result": "ok"}]),
    ]
    turns[2]["tool_calls"] = turns[2]["output"]["tool_calls"]
    errored = [turn(1, "fine"), {**turn(2, "", passed=None), "output": {"text": "", "error": "engine error TOOL_FAILED: boom"}}]
    html = write_report(
        tmp_path,
        [
            cell("chat", "fail", turns),
            cell("broken", "error", errored, error="turn 2: engine error TOOL_FAILED: boom"),
            cell("plain", "pass", None),
        ],
    )
    cells = {c["c"]: c for c in embedded(html)["cells"]}
    chat, broken, plain = cells[0]["cv"], cells[1]["cv"], cells[2]
    assert [t["i"] for t in chat] == ["user says 1", "user says 2", "user says 3"]
    assert [t.get("f") for t in chat] == [None, 1, None]
    assert [t["ms"] for t in chat] == [10.0, 20.0, 30.0]
    assert chat[0]["a"] == [[True, "contains", None, 1.0, "r1", None, None, 1]]  # the eighth item: the turn it checked
    # as the runner writes them, the turns' checks are among the cell's too: embedded once, there
    tagged = [a for t in turns for a in t["assertions"]]
    again = embedded(write_report(tmp_path, [cell("chat", "fail", turns, assertions=tagged)]))["cells"][0]
    assert [a[7] for a in again["a"]] == [1, 2] and all("a" not in t for t in again["cv"])
    assert [t.get("f") for t in again["cv"]] == [None, 1, None]
    assert len(chat[1]["o"]) == TURN_CAP and chat[1]["oN"] == TURN_CAP + 50  # clipped like other texts
    assert chat[2]["tc"] == [["lookup", '{"q": 1}', "ok"]]
    for t in chat:  # only what the chat needs: no events, no usage, no raw output
        assert set(t) <= {"i", "iN", "o", "oN", "ms", "tc", "a", "e", "eN", "f"}
    assert broken[1]["f"] == 1 and broken[1]["e"] == "engine error TOOL_FAILED: boom"
    assert "cv" not in plain


# ---------------------------------------------------------------- in a real browser


@pytest.fixture(scope="module")
def conversation_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run, made before the browser starts (Playwright's sync API keeps an event loop running)."""
    return run_conversation(tmp_path_factory.mktemp("chat"))


@pytest.fixture(scope="module")
def browser(conversation_run: Path) -> Iterator[Any]:
    yield from chromium()


@pytest.mark.slow
def test_the_cell_detail_shows_the_conversation_as_a_chat(conversation_run: Path, browser: Any) -> None:
    run_dir = conversation_run
    [result] = read_cells(run_dir)
    assert [a.get("turn") for a in result["assertions"]] == [1, 2, 3, None]
    url = (run_dir / "report.html").resolve().as_uri()
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    requests: list[str] = []
    errors: list[str] = []
    context.on("request", lambda r: requests.append(r.url))
    context.route(re.compile(r"^(?!file://).*"), lambda route: route.abort())
    page = context.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(url)
        page.wait_for_selector("#mx-body tr.row")
        page.click('#mx-body button.chip[data-row="0"][data-t="0"]')
        page.wait_for_selector("#detail:not([hidden])")
        chat = page.locator("#d-body ol.chat")
        assert chat.locator(".bubble.user").count() == 3
        assert chat.locator(".bubble.assistant").count() == 3
        assert chat.locator(".bubble.user pre").all_text_contents() == [t["input"] for t in TURNS]
        assert chat.locator("li.turn.failed").count() == 1
        failed = chat.locator("li.turn.failed")
        assert failed.get_attribute("data-turn") == "2"
        assert "failed" in failed.locator(".turn-head").text_content()
        assert "expected to contain 'refund'" in failed.locator(".checks").text_content()
        # the model's markup is text: shown as written, no element made of it, no script run
        assert failed.locator(".bubble.assistant pre").text_content() == "here: " + IMG_XSS
        assert page.locator("#d-body img").count() == 0
        assert page.evaluate("typeof window.__pwned") == "undefined"
        replies = chat.locator(".bubble.assistant pre").all_text_contents()
        assert replies[2] == "Your order number is 4815."
        assert "failed: turn 2" in page.locator("#d-body h3", has_text="Conversation").text_content()
        assert "turn 2: contains" in page.locator("#d-body table.asserts").text_content()  # the cell's checks say their turn
        assert errors == []
        assert requests == [url]
    finally:
        context.close()
