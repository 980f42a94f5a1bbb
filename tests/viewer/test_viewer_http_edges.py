"""Issue 30, class 8: small HTTP edges, through real HTTP against a started `evalx view` — numbers that are not ASCII digits,
forms cut short, malformed queries (400 with one line, never 500); redirects to this app's own paths only, rebuilt from the
parsed path; a valid ?token= wins over, and replaces, a stale cookie."""

from __future__ import annotations

import http.client
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import pytest
from viewer_project import make_runs, started_viewer


@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    config, (run_dir,) = make_runs(tmp_path_factory.mktemp("edges"), "a")
    with started_viewer(config.parent / "runs") as (base, _):
        yield base, run_dir.name


def request(base: str, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=120)
    try:
        conn.request(method, path, body=body or None, headers=headers or {})
        res = conn.getresponse()
        return res.status, {k.lower(): v for k, v in res.getheaders()}, res.read().decode("utf-8", "replace")
    finally:
        conn.close()


def raw(base: str, data: bytes) -> bytes:
    parts = urlsplit(base)
    with socket.create_connection((parts.hostname or "", parts.port or 80), timeout=120) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def form(run: str, **extra: str) -> bytes:
    return urlencode({"run": run, "target": "bot", "dataset": "d", "case": "flip", "verdict": "pass", **extra}).encode()


FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.mark.parametrize("repeat", ["²", "١", "٣٤", "+1", "-1", "1e3", "0x1", "9" * 40, "1 2"])
def test_a_repeat_that_is_not_ascii_digits_is_a_400_with_one_line(viewer: tuple[str, str], repeat: str) -> None:
    base, run = viewer
    status, _, body = request(base, "POST", "/review", form(run, repeat=repeat), FORM)
    assert status == 400 and body.count("\n") == 1 and "repeat" in body, (status, body)


def test_forms_cut_short_or_malformed_are_a_400_never_a_500(viewer: tuple[str, str]) -> None:
    base, run = viewer
    boundary = "XyZ"
    cut = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="run"\r\n\r\n{run}\r\n--{boundary}\r\nContent-Disposition: form-da'.encode()
    )
    for body, kind in (
        (cut, f"multipart/form-data; boundary={boundary}"),
        (f"--{boundary}\r\n".encode(), f"multipart/form-data; boundary={boundary}"),
        (b"garbage", f"multipart/form-data; boundary={boundary}"),
        (b"x", "multipart/form-data"),  # no boundary
        (b"run=%FF%FE&verdict=pass", "application/x-www-form-urlencoded"),
        (b"run=" + b"\xff\xfe" * 10, "application/x-www-form-urlencoded; charset=utf-8"),
    ):
        status, _, text = request(base, "POST", "/review", body, {"Content-Type": kind})
        assert 400 <= status < 500 and text.count("\n") <= 1, (kind, body[:40], status, text)
    # a body shorter than its Content-Length (the client gave up): no 500 either
    head = f"POST /review HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: 4000\r\n\r\n"
    answer = raw(base, head.encode() + cut)
    assert not answer.startswith(b"HTTP/1.1 5"), answer[:200]


@pytest.mark.parametrize(
    "path",
    [
        "/cases?q=%FF%FE",
        "/cases?flag=%00",
        "/case?target=%00&dataset=d&case=flip",
        "/case?target=bot&dataset=d&case=%E2%28%A1",
        "/compare?a=%ZZ&b=%",
        "/compare?a=&b=&a=1",
        "/cases?q=" + "%" * 50,
        "/run/%ZZ",
        "/run/%00",
        "/run/..%2F..%2Fetc/review?status=%FF",
    ],
)
def test_malformed_queries_get_an_answer_never_a_500(viewer: tuple[str, str], path: str) -> None:
    base, _ = viewer
    status, _, body = request(base, "GET", path)
    assert status < 500, (path, status, body)
    if status == 400:
        assert body.count("\n") == 1, body


@pytest.mark.parametrize(
    "back",
    [
        "/\t/evil.example",
        "/\n/evil.example",
        "/\\evil.example",
        "/ /evil.example",
        "//evil.example",
        "///evil.example",
        "https://evil.example/",
        "javascript:alert(1)",
        "/\r\nSet-Cookie: x=1",
        "\t//evil.example",
        "/%09/evil.example",
        "/\x00/evil.example",
    ],
)
def test_a_redirect_goes_to_this_apps_paths_only(viewer: tuple[str, str], back: str) -> None:
    base, run = viewer
    status, headers, _ = request(base, "POST", "/review", form(run, back=back), FORM)
    assert status == 303, status
    location = headers["location"]
    assert location.startswith("/") and not location.startswith(("//", "/\\")), location
    assert not any(ord(c) < 0x21 for c in location), repr(location)
    assert "evil.example" not in urlsplit(location).netloc


def test_a_redirect_to_an_own_page_keeps_its_path_and_query(viewer: tuple[str, str]) -> None:
    base, run = viewer
    back = "/case?target=bot&dataset=d&case=flip"
    status, headers, _ = request(base, "POST", "/review", form(run, back=back), FORM)
    assert status == 303 and headers["location"] == back


def test_a_valid_query_token_wins_over_a_stale_cookie_and_replaces_it(tmp_path: Path) -> None:
    config, _ = make_runs(tmp_path, "a")
    with started_viewer(config.parent / "runs", "--token", "fresh-token-2") as (base, token):
        assert token == "fresh-token-2"
        stale = {"Cookie": "evalx_token=old-token-from-before-the-restart"}
        status, _, _ = request(base, "GET", "/", headers=stale)
        assert status == 401  # the stale cookie alone is not enough
        status, headers, _ = request(base, "GET", "/?token=fresh-token-2&x=1", headers=stale)
        assert status == 303 and headers["location"] == "/?x=1", (status, headers)
        assert "evalx_token=fresh-token-2" in headers["set-cookie"]
        status, _, _ = request(base, "GET", "/", headers={"Cookie": "evalx_token=fresh-token-2"})
        assert status == 200
        status, _, _ = request(base, "GET", "/?token=wrong", headers=stale)
        assert status == 401
        for path in ("//evil.example/?token=fresh-token-2", "/\\evil.example/?token=fresh-token-2"):
            status, headers, _ = request(base, "GET", path)
            assert status in (303, 404) and not headers.get("location", "/").startswith(("//", "/\\")), (path, headers)


@pytest.mark.parametrize(
    "score", ["NaN", "nan", "inf", "-inf", "1e999", "1e-999", "０.５", "٠.٥", "½", "0.5\x00", "-0", "+0.5", "0x1", "1_0", "1.0000001", "."]
)
def test_a_score_that_is_not_a_plain_number_from_0_to_1_is_a_400_with_one_line(viewer: tuple[str, str], score: str) -> None:
    base, run = viewer
    status, _, body = request(base, "POST", "/review", form(run, score=score), FORM)
    assert status == 400 and body.count("\n") == 1 and "score" in body, (score, status, body)


@pytest.mark.parametrize(
    "fields",
    [
        {"case": "no-such-case"},
        {"target": "other"},
        {"dataset": "d2"},
    ],
)
def test_a_mark_for_a_cell_the_run_does_not_have_is_a_400_and_is_not_stored(tmp_path: Path, fields: dict[str, str]) -> None:
    config, (run_dir,) = make_runs(tmp_path, "a")
    with started_viewer(config.parent / "runs") as (base, _):
        status, _, body = request(base, "POST", "/review", form(run_dir.name, **fields), FORM)
        assert status == 400 and body.count("\n") == 1 and "has no cell" in body, (status, body)
        # a case id whose bytes are not UTF-8 decodes to another id (U+FFFD): no such cell either
        bad = f"run={run_dir.name}&target=bot&dataset=d&case=fl%FFip&verdict=pass".encode()
        status, _, body = request(base, "POST", "/review", bad, FORM)
        assert status == 400 and "has no cell" in body, (status, body)
        assert request(base, "POST", "/review", form(run_dir.name), FORM)[0] == 303  # a cell it has: stored
    (line,) = (run_dir / "reviews.jsonl").read_text().splitlines()
    assert '"case_id": "flip"' in line


def _answer_to(base: str, data: bytes) -> bytes:
    """What the server answers to ``data``, read until it closes (the request is not ended by a half-close, which aborts it)."""
    parts = urlsplit(base)
    with socket.create_connection((parts.hostname or "", parts.port or 80), timeout=120) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_malformed_http_is_a_400_and_one_line_on_the_viewers_terminal_never_a_traceback(tmp_path: Path) -> None:
    config, _ = make_runs(tmp_path, "a")
    with started_viewer(config.parent / "runs") as (base, _):  # (it fails when the viewer's stderr holds a traceback)
        for data in (
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n",  # Host given twice
            b"GET /run/" + b"a" * 9000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",  # a request line past aiohttp's 8 KiB
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX: " + b"b" * 9000 + b"\r\n\r\n",  # a header line past it
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
        ):
            answer = _answer_to(base, data)
            assert re.match(rb"HTTP/1\.[01] 4\d\d ", answer), (data[:60], answer[:200])
        status, _, _ = request(base, "GET", "/")
        assert status == 200  # and it still serves
