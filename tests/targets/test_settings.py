"""Target settings: one resolver (command line > target > defaults > built-in), obeyed by every pool and clock.

Real servers on 127.0.0.1 count the requests they answer at once: ``--concurrency``
over a target's own value must give that many calls in flight, and a cell
must never time out for time it spent waiting for its turn.
"""

from __future__ import annotations

import asyncio
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from _fake_llm import OPENAI_KEY, FakeLLMServer, fast_backoff  # noqa: F401  (an autouse fixture)
from click.testing import CliRunner
from conftest import ENGINE_TEST_KEY
from engine_server import EngineServer
from results_file import read_cells

from evalx.cli import main
from evalx.targets import RunContext, TargetSettings, build_target, resolve_settings
from evalx.targets.settings import BACKOFF_ENV, SETTING_KEYS, Overrides

# -- the precedence table -------------------------------------------------------------------

#: setting key -> (command-line value, target value, defaults value, built-in value or None when it depends on others)
TABLE: dict[str, tuple[Any, Any, Any, Any]] = {
    "concurrency": (20, 4, 2, 8),
    "timeout_s": (9.0, 5.0, 3.0, 120.0),
    "retries": (7, 1, 0, 3),
    "backoff_s": (0.3, 0.2, 0.1, 0.5),
    "idle_timeout_s": (4.0, 2.0, 1.0, None),  # built-in: the resolved timeout_s
    "cache": (False, True, False, None),  # built-in: on for provider targets only
    "rate_limit": ({"rpm": 30}, {"rpm": 20}, {"rpm": 10}, None),
    "max_response_bytes": (3000, 2000, 1000, 64 * 1024 * 1024),
}


def _field(key: str, settings: TargetSettings) -> Any:
    return settings.rate_limit_rpm if key == "rate_limit" else getattr(settings, key)


def _expect(key: str, value: Any) -> Any:
    return float(value["rpm"]) if key == "rate_limit" else value


def test_the_table_covers_every_setting() -> None:
    assert set(TABLE) == SETTING_KEYS
    fields = {f for f in TargetSettings.__dataclass_fields__}
    # concurrency also gives `adaptive` (auto / {min, start, max}); rate_limit gives its rpm and its max_wait_s
    # batch: a provider target's own key (and --batch), not a defaults: setting
    assert fields == (SETTING_KEYS - {"rate_limit"}) | {"rate_limit_rpm", "rate_limit_max_wait_s", "adaptive", "batch"}


def test_adaptive_concurrency_resolves_to_its_bounds() -> None:
    from evalx.targets.transport.pacing import AdaptiveBounds

    auto = resolve_settings({"id": "p", "type": "provider", "concurrency": "auto"})
    assert auto.adaptive == AdaptiveBounds(1, 8, 64) and auto.concurrency == 64  # max: the cells run at once
    given = resolve_settings({"id": "p", "type": "provider", "concurrency": {"min": 2, "start": 4, "max": 10}})
    assert given.adaptive == AdaptiveBounds(2, 4, 10) and given.concurrency == 10
    disordered = resolve_settings({"id": "p", "type": "provider", "concurrency": {"start": 50, "max": 10}})
    assert disordered.adaptive == AdaptiveBounds(1, 10, 10)  # start kept within [min, max]
    over = resolve_settings({"id": "p", "type": "provider", "concurrency": 5}, None, Overrides(concurrency="auto"))
    assert over.adaptive == AdaptiveBounds(1, 8, 64)  # --concurrency auto over a target's number
    fixed = resolve_settings({"id": "p", "type": "provider", "concurrency": "auto"}, None, Overrides(concurrency=3))
    assert fixed.adaptive is None and fixed.concurrency == 3
    engine = resolve_settings({"id": "e", "type": "engine", "concurrency": "auto"})
    assert engine.adaptive is None and engine.concurrency == 8  # only a provider adapts: the others run `start` cells


def test_batch_is_a_provider_targets_key_or_the_command_lines() -> None:
    from evalx.targets.settings import BatchSettings

    provider = {"id": "t", "type": "provider", "provider": "openai", "model": "m"}
    assert resolve_settings(provider).batch is None
    assert resolve_settings({**provider, "batch": True}).batch == BatchSettings()
    assert resolve_settings({**provider, "batch": {"poll_interval_s": 0.5, "max_requests": 9}}).batch == BatchSettings(0.5, 9)
    assert resolve_settings(provider, None, Overrides(batch=True)).batch == BatchSettings()  # --batch
    assert resolve_settings({"id": "t", "type": "engine", "url": "http://x"}, None, Overrides(batch=True)).batch is None


@pytest.mark.parametrize("key", sorted(TABLE))
def test_command_line_over_target_over_defaults_over_built_in(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BACKOFF_ENV, raising=False)
    cli, target, defaults, built_in = TABLE[key]
    spec = {"id": "t", "type": "engine", key: target}
    no_key = {"id": "t", "type": "engine"}
    assert _field(key, resolve_settings(spec, {key: defaults}, Overrides(**{key: cli}))) == _expect(key, cli)
    assert _field(key, resolve_settings(spec, {key: defaults}, Overrides())) == _expect(key, target)
    assert _field(key, resolve_settings(no_key, {key: defaults}, Overrides())) == _expect(key, defaults)
    # null in a layer is "not set": the next layer decides
    assert _field(key, resolve_settings({**spec, key: None}, {key: defaults}, Overrides(**{key: None}))) == _expect(key, defaults)
    if built_in is not None:
        assert _field(key, resolve_settings(no_key, {}, None)) == built_in
        assert _field(key, TargetSettings()) == built_in


def test_built_ins_that_depend_on_other_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BACKOFF_ENV, raising=False)
    engine = resolve_settings({"id": "e", "type": "engine"})
    assert engine == TargetSettings(
        concurrency=8, timeout_s=120.0, retries=3, backoff_s=0.5, idle_timeout_s=120.0, cache=False, rate_limit_rpm=None
    )
    assert resolve_settings({"id": "e", "type": "engine"}, {"timeout_s": 7}).idle_timeout_s == 7.0  # idle follows the resolved timeout
    assert resolve_settings({"id": "e", "type": "engine", "timeout_s": 3}, {"timeout_s": 7}, Overrides()).idle_timeout_s == 3.0
    assert resolve_settings({"id": "p", "type": "provider"}).cache is True
    assert resolve_settings({"id": "p", "type": "python"}).cache is False
    assert resolve_settings({"id": "p", "type": "provider"}, {"cache": False}).cache is False
    assert resolve_settings({"id": "p", "type": "provider", "cache": True}, {}, Overrides(cache=False)).cache is False  # --no-cache wins
    monkeypatch.setenv(BACKOFF_ENV, "0.01")  # replaces the built-in only
    assert resolve_settings({"id": "e", "type": "engine"}).backoff_s == 0.01
    assert resolve_settings({"id": "e", "type": "engine"}, {"backoff_s": 2}).backoff_s == 2.0


def test_settings_are_frozen_and_the_command_line_takes_known_keys_only() -> None:
    settings = resolve_settings({"id": "e", "type": "engine"})
    with pytest.raises(AttributeError):
        settings.concurrency = 3  # type: ignore[misc]
    with pytest.raises(TypeError, match="concurrncy"):
        Overrides(concurrncy=3)  # type: ignore[call-arg]
    with pytest.raises(AttributeError):
        Overrides().concurrency = 3  # type: ignore[misc]


def test_targets_run_under_the_settings_they_are_given() -> None:
    settings = TargetSettings(concurrency=3, timeout_s=2.0, retries=1, backoff_s=0.25, idle_timeout_s=1.5)
    engine: Any = build_target({"id": "e", "type": "engine", "url": "http://127.0.0.1:9", "concurrency": 99}, settings)
    assert engine.settings is settings


def test_the_connection_pool_is_as_large_as_the_resolved_concurrency(tmp_path: Path) -> None:
    spec = {
        "id": "p",
        "type": "provider",
        "provider": "openai",
        "model": "m",
        "base_url": "http://127.0.0.1:9/v1",
        "api_key": "k",
        "concurrency": 4,
    }
    settings = resolve_settings(spec, {}, Overrides(concurrency=20))

    async def limit() -> int:
        target: Any = build_target(spec, settings)
        await target.start(RunContext(run_id="r", config_dir=tmp_path))
        try:
            return int(target.client._get_session().connector.limit)
        finally:
            await target.aclose()

    assert asyncio.run(limit()) == 20


# -- calls in flight: --concurrency over the target's own value --------------------------------


def _run(config: Path, *args: str) -> tuple[int, str, list[dict[str, Any]]]:
    result = CliRunner().invoke(main, ["run", "-c", str(config), "-q", *args])
    runs = sorted((config.parent / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    return result.exit_code, result.output, read_cells(runs[-1])


def _write(tmp_path: Path, target: dict[str, Any], cases: list[dict[str, Any]], **extra: Any) -> Path:
    config = {"version": 1, "name": "settings", "targets": [target], "datasets": [{"id": "d", "cases": cases}], **extra}
    path = tmp_path / "evalconfig.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    """The fake OpenAI-compatible server, counting the requests it answers at once."""
    s = FakeLLMServer().start()
    yield s
    s.stop()


def _provider(server: FakeLLMServer, **over: Any) -> dict[str, Any]:
    return {
        "id": "llm",
        "type": "provider",
        "provider": "openai",
        "model": "m",
        "base_url": f"{server.url}/v1",
        "api_key": OPENAI_KEY,
        **over,
    }


def _engine(server: EngineServer, **over: Any) -> dict[str, Any]:
    return {"id": "agent", "type": "engine", "url": server.url, "api_key": ENGINE_TEST_KEY, **over}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "cells", "peak"),
    [(["--concurrency", "20"], 24, 20), ([], 24, 4), (["--concurrency", "20"], 6, 6)],
    ids=["flag-over-target", "target-alone", "fewer-cells-than-flag"],
)
def test_provider_calls_in_flight(llm: FakeLLMServer, tmp_path: Path, args: list[str], cells: int, peak: int) -> None:
    llm.gather, llm.hold_s = peak, 0.2  # the first `peak` calls meet, then 0.2 s more for any extra one to show up
    cases = [{"id": f"c{i}", "input": f"question {i}", "assert": [{"type": "contains", "value": "You said"}]} for i in range(cells)]
    # mistral: no rate_limits: section, so no endpoint limiter holds the first burst until the first answer
    config = _write(tmp_path, _provider(llm, provider="mistral", concurrency=4), cases)
    code, output, results = _run(config, "--no-cache", *args)
    assert code == 0, output
    assert [r["status"] for r in results] == ["pass"] * cells
    assert llm.peak_in_flight == peak


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "cells", "peak"),
    [(["--concurrency", "20"], 24, 20), ([], 24, 4), (["--concurrency", "20"], 6, 6)],
    ids=["flag-over-target", "target-alone", "fewer-cells-than-flag"],
)
def test_engine_calls_in_flight(engine_server: EngineServer, tmp_path: Path, args: list[str], cells: int, peak: int) -> None:
    engine_server.peak_in_flight = 0
    cases = [
        {"id": f"c{i}", "input": {"scenario": "hold", "gather": peak, "hold_s": 0.2, "message": f"m{i}"}, "assert": [{"type": "completed"}]}
        for i in range(cells)
    ]
    config = _write(tmp_path, _engine(engine_server, concurrency=4), cases)
    code, output, results = _run(config, *args)
    assert code == 0, output
    assert [r["status"] for r in results] == ["pass"] * cells
    assert engine_server.peak_in_flight == peak


# -- a cell's clock starts when the cell does ---------------------------------------------------

SLOW_PY = """
import time

def answer(input):
    time.sleep(0.3)
    return "done"
"""

TOGETHER_PY = """
import threading

_three = threading.Barrier(3, timeout=60)

def answer(input):
    _three.wait()  # returns once three calls run at the same time, each on its own thread
    return "done"
"""


def _cases(n: int) -> list[dict[str, Any]]:
    return [{"id": f"c{i}", "input": f"q{i}", "assert": [{"type": "contains", "value": "done"}]} for i in range(n)]


@pytest.mark.slow
def test_queued_python_cells_do_not_time_out_for_their_wait(tmp_path: Path) -> None:
    """concurrency 1, timeout_s 1.5, seven cells of 0.3 s: the last waits 1.8 s for the ones before, and none times out.

    A cell's own 0.3 s has five times its timeout to spare, so a loaded machine cannot make it time out.
    """
    (tmp_path / "slow.py").write_text(SLOW_PY, encoding="utf-8")
    target = {"id": "py", "type": "python", "callable": "slow.py:answer", "concurrency": 1, "timeout_s": 1.5}
    code, output, results = _run(_write(tmp_path, target, _cases(7)))
    assert code == 0, output
    assert [r["status"] for r in results] == ["pass"] * 7
    assert all(300 <= r["latency_ms"] < 1500 for r in results)  # the wait (up to 1.8 s) is not the cell's latency either


def test_the_flag_sizes_the_python_thread_pool(tmp_path: Path) -> None:
    """--concurrency 3 over concurrency: 1: three threads, so no started cell waits for one (with one thread, all three time out)."""
    (tmp_path / "together.py").write_text(TOGETHER_PY, encoding="utf-8")
    target = {"id": "py", "type": "python", "callable": "together.py:answer", "concurrency": 1, "timeout_s": 10}
    code, output, results = _run(_write(tmp_path, target, _cases(3)), "--concurrency", "3")
    assert code == 0, output
    assert [r["status"] for r in results] == ["pass"] * 3


def test_the_flag_sizes_the_connection_pool_so_no_cell_times_out_queued(llm: FakeLLMServer, tmp_path: Path) -> None:
    """Before: three workers shared one connection, one request at a time (the third cell waited 1.2 s on its 1 s clock)."""
    llm.gather, llm.hold_s = 3, 0.2  # answered once all three are in flight: one at a time, none is
    cases = [{"id": f"c{i}", "input": f"q{i}", "assert": [{"type": "contains", "value": "You said"}]} for i in range(3)]
    # mistral: the OpenAI shape without a rate_limits: section, so no endpoint limiter holds the first burst until the
    # first answer (which the gathering server would never give): only the connection pool is under test
    config = _write(tmp_path, _provider(llm, provider="mistral", concurrency=1, timeout_s=5, retries=0), cases)
    code, output, results = _run(config, "--no-cache", "--concurrency", "3")
    assert code == 0, output
    assert [r["status"] for r in results] == ["pass"] * 3
    assert llm.peak_in_flight == 3


@pytest.mark.slow
def test_waiting_for_the_rate_limit_is_not_the_cells_time(llm: FakeLLMServer, tmp_path: Path) -> None:
    """rpm 100 = a request every 0.6 s: the third cell's turn comes 1.2 s in, past its 1 s timeout, and it passes."""
    cases = [{"id": f"c{i}", "input": f"q{i}", "assert": [{"type": "contains", "value": "You said"}]} for i in range(3)]
    config = _write(tmp_path, _provider(llm, concurrency=3, timeout_s=1, retries=0, rate_limit={"rpm": 100}), cases)
    t0 = time.monotonic()
    code, output, results = _run(config, "--no-cache")
    assert code == 0, output
    assert [r["status"] for r in results] == ["pass"] * 3
    assert time.monotonic() - t0 >= 1.1  # still paced
    gaps = [b - a for a, b in zip(llm.arrivals, llm.arrivals[1:], strict=False)]
    assert len(llm.arrivals) == 3 and min(gaps) >= 0.3, gaps  # 0.6 s apart (less what a loaded machine shifts); unpaced: ~0
    assert all(r["latency_ms"] < 500 for r in results), [r["latency_ms"] for r in results]


# -- the judge: the same resolver, the same command line ------------------------------------------

JUDGE_PY = """
import asyncio, pathlib

WANT = 0  # the peak the test expects: calls wait (up to 30 s) until that many run at once, so load cannot hide it
_now = 0
peak = 0

async def grade(input):
    global _now, peak
    _now += 1
    peak = max(peak, _now)
    try:
        for _ in range(3000):
            if peak >= WANT:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.15)  # time for any call past the limit to show up
        return '{"pass": true, "score": 1, "reason": "fine"}'
    finally:
        _now -= 1
        (pathlib.Path(__file__).parent / "judge_peak.txt").write_text(str(peak))

def agent(input):
    return "an answer"
"""


@pytest.mark.slow
@pytest.mark.parametrize(("args", "peak"), [(["--concurrency", "5"], 5), ([], 1)], ids=["flag-over-judge-target", "judge-target-alone"])
def test_the_judge_target_follows_the_same_precedence(tmp_path: Path, args: list[str], peak: int) -> None:
    (tmp_path / "judging.py").write_text(textwrap.dedent(JUDGE_PY).replace("WANT = 0", f"WANT = {peak}"), encoding="utf-8")
    cases = [{"id": f"c{i}", "input": f"q{i}", "assert": [{"type": "llm_judge", "rubric": "is an answer"}]} for i in range(10)]
    config = _write(
        tmp_path,
        {"id": "agent", "type": "python", "callable": "judging.py:agent", "concurrency": 10},
        cases,
        judge={"target": {"type": "python", "callable": "judging.py:grade", "concurrency": 1, "timeout_s": 10}},
        defaults={"concurrency": 2},
    )
    code, output, results = _run(config, *args)
    assert code == 0, output
    assert [r["status"] for r in results] == ["pass"] * 10
    assert (tmp_path / "judge_peak.txt").read_text() == str(peak)
