"""`evalx run --executor ray`: cells on Ray actors of a local Ray instance, results as a local run's (issue 20)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from _fake_llm import OPENAI_KEY, FakeLLMServer, server  # noqa: F401  (the server fixture)
from click.testing import CliRunner
from conftest import ENGINE_TEST_KEY
from identical_runs import assert_identical_runs
from interrupting import interrupt_when
from results_file import cell_lines, read_cells

from evalx.cli import main

pytestmark = pytest.mark.slow  # the quick tier (-m 'not slow') leaves these out: they take the longest

# ---------------------------------------------------------------- without a cluster, without Ray (no Ray started yet)


def _ray_running() -> bool:
    try:
        from ray._private.services import find_gcs_addresses

        return bool(find_gcs_addresses())
    except Exception:
        return False


def test_auto_without_a_cluster_fails_in_one_line(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    if _ray_running():
        pytest.skip("a Ray instance is running on this machine: `auto` would connect to it")
    config = _python_project(tmp_path, cells=2)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        [sys.executable, "-m", "evalx", "run", "-c", str(config), "--executor", "ray", "-q"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("evalx:")]
    assert lines == [
        "evalx: no running Ray cluster found (--ray-address auto): start one (`ray start --head`), "
        "or pass --ray-address local to start a local Ray instance"
    ], done.stderr
    assert "Traceback" not in done.stderr


def test_an_address_where_no_head_can_be_says_why_at_once(tmp_path: Path) -> None:
    """Issue 30: a port nothing listens on, or a host that does not resolve (given, or in RAY_ADDRESS with ``auto``),
    kept ``ray.init`` retrying for minutes under Ray's own warnings; now one line naming the cause, exit 2."""
    pytest.importorskip("ray")
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    config = _python_project(tmp_path, cells=2)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    for address, env_address, cause in (
        (f"127.0.0.1:{port}", None, f"nothing listens on port {port} there (connection refused)"),
        ("no-such-host.invalid:6379", None, "the host 'no-such-host.invalid' cannot be resolved"),
        ("auto", f"127.0.0.1:{port}", f"nothing listens on port {port} there"),
    ):
        shown = env_address or address
        done = subprocess.run(
            [sys.executable, "-m", "evalx", "run", "-c", str(config), "--executor", "ray", "--ray-address", address, "-q"],
            capture_output=True, text=True, timeout=120, env={**env, **({"RAY_ADDRESS": env_address} if env_address else {})},
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith(f"evalx: cannot connect to the Ray cluster at {shown}: {cause}"), lines


def test_without_ray_installed_the_executor_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    config = _python_project(tmp_path, cells=2)
    result = CliRunner().invoke(main, ["run", "-c", str(config), "--executor", "ray", "-q"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == "evalx: --executor ray needs Ray, an optional extra: pip install 'evalx-runner[ray]'"


def test_the_config_names_the_executor_and_the_command_line_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    config = _python_project(tmp_path, cells=2, executor={"kind": "ray", "address": "local"})
    result = CliRunner().invoke(main, ["run", "-c", str(config), "-q"])
    assert "pip install 'evalx-runner[ray]'" in result.output  # the config asked for Ray
    result = CliRunner().invoke(main, ["run", "-c", str(config), "-q", "--executor", "local"])
    assert result.exit_code == 1 and "2 cells in" in result.output and "1 pass · 1 fail" in result.output, result.output  # ran here


def test_the_schema_checks_the_executor_and_ray_settings(tmp_path: Path) -> None:
    config = _python_project(tmp_path, cells=1, executor={"kind": "spark"}, ray={"actors": 0})
    result = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert result.exit_code == 2, result.output
    assert "executor.kind" in result.output and "targets[0].ray.actors" in result.output


def test_pool_shapes_rate_shares_and_the_executor_choice() -> None:
    from evalx.config.model import ExecutorSettings
    from evalx.execution.executors import ExecutorChoice, choose_executor
    from evalx.execution.ray_executor import _share_rate, pool_shape
    from evalx.targets import resolve_settings
    from evalx.targets.spec import target_spec

    python = target_spec({"id": "p", "type": "python", "callable": "m:f", "concurrency": 8, "ray": {"actors": 3}})
    shape = pool_shape(python, resolve_settings(python), cells=100)
    assert (shape.actors, shape.concurrency, shape.num_cpus, shape.num_gpus) == (3, 3, 1.0, 0.0)  # 8 shared out, rounded up
    assert pool_shape(python, resolve_settings(python), cells=2).actors == 2  # never more actors than cells
    provider = target_spec({"id": "m", "type": "provider", "provider": "openai", "model": "x", "ray": {"concurrency": 20, "num_gpus": 1}})
    shape = pool_shape(provider, resolve_settings(provider), cells=100)
    assert (shape.actors, shape.concurrency, shape.num_cpus, shape.num_gpus) == (1, 20, 0.0, 1.0)
    default = target_spec({"id": "p", "type": "python", "callable": "m:f", "concurrency": 8})  # no ray.actors: what the cluster can run
    assert pool_shape(default, resolve_settings(default), cells=100).actors == 1  # no cluster figures: one actor
    shape = pool_shape(default, resolve_settings(default), cells=100, free_cpus=4)
    assert (shape.actors, shape.concurrency, shape.num_cpus) == (4, 2, 1.0)
    assert pool_shape(default, resolve_settings(default), cells=3, free_cpus=4).actors == 3  # at most its cells
    assert pool_shape(default, resolve_settings(default), cells=100, free_cpus=64).actors == 8  # at most its concurrency
    assert pool_shape(default, resolve_settings(default), cells=100, free_cpus=0.5).actors == 1
    halves = target_spec({"id": "p", "type": "python", "callable": "m:f", "concurrency": 8, "ray": {"num_cpus": 0.5}})
    assert pool_shape(halves, resolve_settings(halves), cells=100, free_cpus=3).actors == 6  # free CPUs / num_cpus
    assert pool_shape(provider, resolve_settings(provider), cells=100, free_cpus=4).actors == 1  # it waits on the network
    limited = {"id": "j", "type": "provider", "rate_limit": {"rpm": 600}}
    assert _share_rate(limited, 4)["rate_limit"] == {"rpm": 150.0} and limited["rate_limit"] == {"rpm": 600}  # a copy
    assert _share_rate({"id": "free"}, 4) == {"id": "free"}
    section = ExecutorSettings(kind="ray", address="ray://head:10001", batch_size=16)
    assert choose_executor(section, None, None) == ExecutorChoice("ray", "ray://head:10001", 16, "auto")
    assert choose_executor(section, "local", "local") == ExecutorChoice("local", "local", 16, "auto")  # the command line wins
    assert choose_executor(ExecutorSettings(), None, None) == ExecutorChoice("local", "auto")


# ---------------------------------------------------------------- a local Ray instance, started once


@pytest.fixture(scope="module")
def ray_local() -> Iterator[Any]:
    """One local Ray instance for this file's tests (4 logical CPUs on any machine), shut down afterwards."""
    ray = pytest.importorskip("ray")
    # address="local": a new instance of our own, even when another process's cluster runs here (ray.init() would join it)
    options = {"address": "local", "num_cpus": 4, "include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
    options["object_store_memory"] = 100 * 1024 * 1024  # results travel inline; other suites may run a Ray instance too
    try:
        ray.init(**options)
    except Exception:  # a start-up that timed out on a loaded machine: once more, from nothing
        ray.shutdown()
        ray.init(**options)
    yield ray
    ray.shutdown()


def test_the_default_config_gives_a_local_runs_statuses(ray_local: Any, example_project: Path) -> None:
    config = example_project / "evalconfig.yaml"
    local = _run(config)
    remote = _run(config, "--executor", "ray")
    assert remote["exit"] == local["exit"] == 1  # support-bot-v2's regressions fail the run, both ways
    assert _statuses(remote["dir"]) == _statuses(local["dir"])
    assert Counter(_statuses(remote["dir"]).values()) == Counter(_statuses(local["dir"]).values())
    assert _same_cells(local["dir"], remote["dir"]) == []
    _each_cell_once(remote["dir"], len(read_cells(local["dir"])))


def test_judge_calls_run_from_the_actors(ray_local: Any, example_project: Path) -> None:
    """examples/judge: model-graded checks, their judge a Python target started in each actor, give the local verdicts."""
    config = example_project / "examples" / "judge" / "evalconfig.yaml"
    local, remote = _run(config), _run(config, "--executor", "ray")
    assert remote["exit"] == local["exit"]
    assert _same_cells(local["dir"], remote["dir"]) == []
    graded = [a for c in read_cells(remote["dir"]) for a in c["assertions"] if a["type"] in ("llm_judge", "semantic_similar", "factuality")]
    assert graded and all(a["passed"] is not None for a in graded), graded


def test_identical_results_with_a_local_run(ray_local: Any, tmp_path: Path) -> None:
    """Statuses, scores, outputs and checks (timings aside) of every cell, with batches of 3 and two actors."""
    config = _python_project(tmp_path, cells=30, repeat=2, ray={"actors": 2}, executor={"batch_size": 3}, timed=False)
    local, remote = _run(config), _run(config, "--executor", "ray")
    assert local["exit"] == remote["exit"] == 1  # some cells fail on purpose
    assert_identical_runs(local["dir"], remote["dir"])  # cells, summary figures, JUnit testcases
    cells = read_cells(remote["dir"])
    assert {c["status"] for c in cells} == {"pass", "fail", "error"}
    assert len({pid for pid, _ in _where(tmp_path)} - {os.getpid()}) == 2  # two actors did the work
    _each_cell_once(remote["dir"], 60)


def test_three_shards_run_on_ray_merge_into_the_local_run(ray_local: Any, tmp_path: Path) -> None:
    """Issue 20's identical results: a local run, and 3 shards each run on Ray then merged, are the same run."""
    config = _python_project(tmp_path, cells=20, repeat=2, ray={"actors": 2}, timed=False)
    local = _run(config)
    shards = [_run(config, "--executor", "ray", "--shard", f"{i}/3")["dir"] for i in (1, 2, 3)]
    merged = tmp_path / "merged"
    result = CliRunner().invoke(main, ["merge", *map(str, shards), "-c", str(config), "-o", str(merged)])
    assert result.exit_code == local["exit"] == 1, result.output
    assert_identical_runs(local["dir"], merged)


def test_an_engine_config_runs_on_ray(ray_local: Any, tmp_path: Path, engine_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGINE_KEY", ENGINE_TEST_KEY)
    cases = [
        {"id": "weather", "input": "What's the weather in Paris?", "assert": [{"type": "must_call_tools", "tools": ["web_search"]}]},
        {"id": "plain", "input": {"scenario": "normal", "message": "hello", "answer": "hi there"}, "assert": [{"type": "contains", "value": "hi"}]},
        {"id": "broken", "input": {"scenario": "http_500", "message": "x"}, "assert": [{"type": "completed"}]},
    ]  # fmt: skip
    data = {
        "version": 1,
        "defaults": {"timeout_s": 5, "retries": 0},
        "targets": [{"id": "agent", "type": "engine", "url": engine_server.url, "api_key": "${ENGINE_KEY}"}],
        "datasets": [{"id": "cases", "cases": cases}],
    }
    config = tmp_path / "evalconfig.yaml"
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    local, remote = _run(config), _run(config, "--executor", "ray")
    assert _statuses(remote["dir"]) == _statuses(local["dir"])
    assert _statuses(remote["dir"])[("agent", "cases", "weather", 0)] == "pass"
    assert _same_cells(local["dir"], remote["dir"]) == []
    sent = engine_server.requests_for(read_cells(remote["dir"])[0]["run_id"])
    assert len(sent) == 3 and all(r["headers"]["X-Engine-Key"] == ENGINE_TEST_KEY for r in sent)
    for path in remote["dir"].rglob("*"):  # the key reached the actor, and was written nowhere
        if path.is_file():
            assert ENGINE_TEST_KEY not in path.read_text(encoding="utf-8", errors="replace"), path


def test_a_provider_target_reads_its_key_from_the_environment_and_the_cache_from_its_actor(
    ray_local: Any, tmp_path: Path, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)  # set after Ray started its workers: it reaches them with the target
    target = {"id": "mini", "type": "provider", "provider": "openai", "model": "local-model", "base_url": f"{server.url}/v1"}
    cases = [
        {"id": "add", "input": "What is 2 + 2?", "expected": "4", "assert": [{"type": "numeric_close"}]},
        {"id": "capital", "input": "What is the capital of France?", "assert": [{"type": "icontains", "value": "paris"}]},
        {"id": "refund", "input": "How do I get a refund?", "assert": [{"type": "contains", "value": "30 days"}]},
    ]
    data = {"version": 1, "targets": [{**target, "ray": {"actors": 2}}], "datasets": [{"id": "smoke", "cases": cases}]}
    config = tmp_path / "evalconfig.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    first = _run(config, "--executor", "ray")
    assert first["exit"] == 0 and server.count("/v1/chat/completions") == 3
    assert all(server_request.headers["Authorization"] == f"Bearer {OPENAI_KEY}" for server_request in server.requests)
    again = _run(config, "--executor", "ray")  # the actors share the driver's response cache (same node)
    assert server.count("/v1/chat/completions") == 3
    assert [c["cached"] for c in read_cells(again["dir"])] == [True, True, True]
    local = _run(config, "--no-cache")
    assert_identical_runs(local["dir"], first["dir"])
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert OPENAI_KEY not in path.read_text(encoding="utf-8", errors="replace"), path


def test_a_rate_limit_holds_across_the_actors(ray_local: Any, tmp_path: Path, server: FakeLLMServer) -> None:
    """rpm 240 over 2 actors: each paces at 120 (0.5 s apart), so 8 calls span at least 1.5 s (one bucket each at 240: 0.75 s)."""
    target = {"id": "mini", "type": "provider", "provider": "openai", "model": "m", "base_url": f"{server.url}/v1", "api_key": OPENAI_KEY}
    target.update(rate_limit={"rpm": 240}, cache=False, ray={"actors": 2})
    cases = [{"id": f"c{i}", "input": f"What is {i} + {i}?", "assert": [{"type": "completed"}]} for i in range(8)]
    data = {"version": 1, "targets": [target], "datasets": [{"id": "d", "cases": cases}]}
    config = tmp_path / "evalconfig.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    done = _run(config, "--executor", "ray")
    assert done["exit"] == 0 and len(server.arrivals) == 8
    assert max(server.arrivals) - min(server.arrivals) >= 1.4, server.arrivals


def test_a_killed_actor_of_an_idempotent_target_has_its_cells_run_again(ray_local: Any, tmp_path: Path) -> None:
    config = _python_project(
        tmp_path, cells=24, ray={"actors": 2, "concurrency": 2}, executor={"batch_size": 2}, idempotent=True, kill="c07"
    )
    remote = _run(config, "--executor", "ray")
    assert (tmp_path / "killed").exists()  # an actor was killed mid-run
    cells = _each_cell_once(remote["dir"], 24)
    lost = [c for c in cells if c["case_id"] in ("c06", "c07")]  # c07's batch
    assert all(c["status"] == "pass" for c in lost), lost
    assert Counter(c["status"] for c in cells) == Counter(_statuses(_run(config)["dir"]).values())


def test_a_killed_actor_of_a_target_with_side_effects_loses_its_cells_as_errors_then_resume_runs_them(
    ray_local: Any, tmp_path: Path
) -> None:
    config = _python_project(tmp_path, cells=24, ray={"actors": 2, "concurrency": 2}, executor={"batch_size": 2}, kill="c07")
    remote = _run(config, "--executor", "ray")
    cells = _each_cell_once(remote["dir"], 24)
    lost = [c for c in cells if c["status"] == "error" and c["error"].startswith("worker lost:")]
    assert {c["case_id"] for c in lost} >= {"c07"}
    assert all("`evalx run --resume` runs it again" in c["error"] for c in lost)
    assert remote["exit"] == 1
    run_id = remote["dir"].name
    again = _run(config, "--executor", "ray", "--resume", run_id)
    assert again["dir"] == remote["dir"]
    cells = _each_cell_once(remote["dir"], 24)
    assert not [c for c in cells if c["status"] == "error" and str(c["error"]).startswith("worker lost:")]


def test_an_interrupted_ray_run_keeps_what_finished_and_resume_runs_the_rest(ray_local: Any, tmp_path: Path) -> None:
    address = ray_local.get_runtime_context().gcs_address
    executor = {"kind": "ray", "address": address, "batch_size": 1}
    config = _python_project(tmp_path, cells=12, ray={"actors": 1, "concurrency": 1}, executor=executor, hang="c08")
    stopped = interrupt_when(tmp_path / "busy", config, sig=signal.SIGINT)
    assert stopped.returncode == 3, stopped.err
    assert stopped.seconds < 30, stopped.seconds  # not the hung cell's 60 s
    (run_dir,) = (tmp_path / "runs").iterdir()
    kept = _each_cell_once(run_dir, len(read_cells(run_dir)))
    assert 0 < len(kept) < 12 and "c08" not in {c["case_id"] for c in kept}
    assert json.loads((run_dir / "run.json").read_text(encoding="utf-8"))["status"] == "interrupted"
    again = _run(config, "--resume", run_dir.name)
    assert again["dir"] == run_dir
    _each_cell_once(run_dir, 12)


def test_the_config_folder_can_be_uploaded_as_the_working_dir(ray_local: Any, tmp_path: Path) -> None:
    """A second job on the running instance, which sends the config's folder (as for a cluster of other machines)."""
    config = _python_project(tmp_path, cells=4, executor={"working_dir": "upload"})
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "huge.bin").write_bytes(b"x" * 1000)  # never sent: runs/ is excluded
    address = ray_local.get_runtime_context().gcs_address
    done = subprocess.run(
        [sys.executable, "-m", "evalx", "run", "-c", str(config), "-q", "--executor", "ray", "--ray-address", address],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    cells = read_cells(max((tmp_path / "runs").glob("2*"), key=lambda p: p.stat().st_mtime_ns))
    assert [c["status"] for c in cells] == ["fail", "pass", "pass", "error"]
    cwds = {Path(cwd) for _, cwd in _where(tmp_path)}
    assert len(cwds) == 1 and tmp_path not in cwds  # the actor ran in Ray's copy of the folder
    copy = cwds.pop()
    assert (copy / "agent.py").exists() and not (copy / "runs").exists()


def test_more_actors_than_the_cluster_can_hold_fail_up_front(ray_local: Any, tmp_path: Path) -> None:
    config = _python_project(tmp_path, cells=8, ray={"actors": 8, "num_cpus": 1})
    result = CliRunner().invoke(main, ["run", "-c", str(config), "-q", "--executor", "ray"])
    assert result.exit_code == 2, result.output
    assert "the Ray actors need 8 CPUs (target: 8 x 1) and the cluster has 4" in result.output


def test_a_python_targets_pool_defaults_to_what_the_cluster_can_run_and_says_so(ray_local: Any, tmp_path: Path) -> None:
    """Issue 31: no ``ray.actors``: one actor per free CPU (the fixture's instance has 4), at most the concurrency and cells."""
    config = _python_project(tmp_path, cells=40, timed=False)
    free = ray_local.available_resources().get("CPU", 0)
    address = ray_local.get_runtime_context().gcs_address
    done = subprocess.run(
        [sys.executable, "-m", "evalx", "run", "-c", str(config), "--executor", "ray", "--ray-address", address, "--concurrency", "3"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("evalx: ray: target 'target': ")]
    assert len(lines) == 1, done.stderr
    actors = int(lines[0].split(": ")[3].split(" ")[0])
    assert actors == min(3, int(free)) and actors >= 2, (lines, free)  # 4 CPUs, concurrency 3: 3 actors
    assert "at most concurrency 3 and 40 cell(s); ray.actors sets it" in lines[0]
    assert len({pid for pid, _ in _where(tmp_path)}) == actors  # each one ran cells


def _one_batch(folder: Path, *inputs: str) -> Path:
    """A config whose cases (one per input, each passing when its answer holds "ok") go to agent.py:answer in one batch."""
    cases = [{"id": n, "input": n, "assert": [{"type": "contains", "value": "ok"}]} for n in inputs]
    data = {
        "version": 1,
        "targets": [{"id": "t", "type": "python", "callable": "agent.py:answer"}],
        "datasets": [{"id": "d", "cases": cases}],
        "executor": {"batch_size": len(inputs)},
    }
    config = folder / "evalconfig.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return config


def test_whatever_a_target_returns_a_ray_run_gives_the_local_results(ray_local: Any, tmp_path: Path) -> None:
    """Issue 30: an unpicklable return value (a lock), or exception, sinks neither its cell nor its batch of 4 on Ray."""
    (tmp_path / "agent.py").write_text(
        textwrap.dedent("""
            import threading

            class Unpicklable(Exception):
                def __init__(self, text):
                    super().__init__(text)
                    self.lock = threading.Lock()

            def answer(input):
                if input == "lock":
                    return {"text": "ok lock", "lock": threading.Lock(), "tuple_keyed": {"a": (1, 2)}}
                if input == "raise":
                    raise Unpicklable("no answer here")
                return "ok " + input
        """),
        encoding="utf-8",
    )
    config = _one_batch(tmp_path, "one", "lock", "raise", "two")
    local, remote = _run(config), _run(config, "--executor", "ray")
    statuses = {key[2]: status for key, status in _statuses(remote["dir"]).items()}
    assert statuses == {"one": "pass", "lock": "pass", "raise": "error", "two": "pass"}, read_cells(remote["dir"])
    assert _statuses(remote["dir"]) == _statuses(local["dir"]) and remote["exit"] == local["exit"] == 1
    by_id = {c["case_id"]: c for c in read_cells(remote["dir"])}
    assert by_id["lock"]["output"]["raw"]["lock"].startswith("<unlocked _thread.lock object")  # stored as locally: its repr
    assert by_id["lock"]["output"]["raw"]["tuple_keyed"] == {"a": [1, 2]}
    assert by_id["raise"]["error"] == {c["case_id"]: c for c in read_cells(local["dir"])}["raise"]["error"]
    assert "no answer here" in by_id["raise"]["error"] and "\x1b" not in by_id["raise"]["error"]


def test_a_value_whose_repr_exits_stays_its_cell_on_ray_and_actor_lines_read_plain(ray_local: Any, tmp_path: Path) -> None:
    """Issue 30: a value whose ``__repr__`` raises SystemExit ended the actor's event loop thread: the driver waited for
    its batch for ever. Now every cell of the batch comes back as locally. What a cell prints to its stderr reaches
    the driver's with Ray's prefix as plain text (it was a literal ``\\x1b[36m``)."""
    (tmp_path / "agent.py").write_text(
        textwrap.dedent("""
            import os

            class ReprExits:
                def __repr__(self):
                    raise SystemExit(3)

            class StrExits(Exception):
                def __str__(self):
                    raise SystemExit(5)

            def answer(input):
                if input == "repr-exits":
                    return {"text": "ok repr", "raw": ReprExits()}
                if input == "str-exits":
                    raise StrExits()
                if input == "prints":
                    os.write(2, b"\\x1b[31mfrom the cell\\x1b[0m\\n")
                return "ok " + input
        """),
        encoding="utf-8",
    )
    config = _one_batch(tmp_path, "one", "repr-exits", "str-exits", "prints")
    local = _run(config)
    address = ray_local.get_runtime_context().gcs_address  # this file's instance, from another process: the real CLI
    command = [sys.executable, "-m", "evalx", "run", "-c", str(config), "-q", "--executor", "ray", "--ray-address", address]
    env = {k: v for k, v in os.environ.items() if k != "RAY_COLOR_PREFIX"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)  # it hung here
    assert done.returncode == local["exit"] == 1, done.stderr
    remote = max((tmp_path / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    assert _same_cells(local["dir"], remote) == []
    by_id = {c["case_id"]: c for c in read_cells(remote)}
    assert by_id["repr-exits"]["status"] == "pass" and by_id["repr-exits"]["output"]["raw"] == "<ReprExits object: repr failed: SystemExit>"
    assert by_id["str-exits"]["error"] == "StrExits"
    if "from the cell" in done.stderr:  # Ray forwards an actor's lines when its log monitor gets to them
        line = next(line for line in done.stderr.splitlines() if "from the cell" in line)
        assert "\\x1b[36m" not in line and "(CellWorker pid=" in line, line


def test_a_ray_error_reads_as_plain_text(ray_local: Any) -> None:
    from evalx.execution.ray_executor import ray_error_text

    @ray_local.remote
    def fails() -> None:
        raise ValueError("the real reason")

    with pytest.raises(ray_local.exceptions.RayTaskError) as caught:
        ray_local.get(fails.remote())
    assert "\x1b" in str(caught.value) or "ray::" in str(caught.value)  # what Ray prints: a coloured banner first
    assert ray_error_text(caught.value) == "ValueError: the real reason"


def test_a_head_that_wants_a_token_says_it_is_missing_and_how_to_pass_it(tmp_path: Path) -> None:
    """A Ray head with token authentication: without the token, one line naming it (RAY_AUTH_TOKEN); with it, the run."""
    ray = pytest.importorskip("ray")
    if not hasattr(ray.exceptions, "AuthenticationError"):
        pytest.skip("this Ray has no token authentication (it came in Ray 2.5x)")
    from _fake_llm import wait_for_port

    token = "0123456789abcdef0123456789abcdef"
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    home = tmp_path / "home"  # Ray reads (and a local instance writes) ~/.ray/auth_token: none of the user's
    home.mkdir()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    ray_cli = str(Path(sys.executable).parent / "ray")
    head_env = {**clean, "HOME": str(home), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    # its own temp dir (short: Ray's socket paths must fit), so the head never leaves /tmp/ray/ray_current_cluster
    # behind, where `--ray-address auto` of every later run on this machine would find a dead cluster
    temp = Path(tempfile.mkdtemp(prefix="evalx-ray-", dir="/tmp"))
    head = subprocess.Popen(
        [ray_cli, "start", "--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false", "--disable-usage-stats",
         f"--temp-dir={temp}", "--block"],
        env=head_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        wait_for_port(port)
        config = _python_project(tmp_path, cells=2)
        command = [sys.executable, "-m", "evalx", "run", "-c", str(config), "-q", "--executor", "ray", "--ray-address", f"127.0.0.1:{port}"]
        # ray.init asks a head that refuses it RAY_NUM_REDIS_GET_RETRIES times, a second apart (20 by default): once is
        # enough to be refused, and the line evalx prints is the same after one refusal as after twenty
        no_token = {**clean, "HOME": str(home), "RAY_NUM_REDIS_GET_RETRIES": "1"}
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=no_token)
        assert done.returncode == 2, done.stderr
        lines = [line for line in done.stderr.splitlines() if line.startswith("evalx:")]
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert lines[0].startswith(f"evalx: cannot connect to the Ray cluster at 127.0.0.1:{port}: "), lines
        assert "token is missing" in lines[0] and "RAY_AUTH_TOKEN" in lines[0], lines
        auto = [*command[:-1], "auto"]  # the head found through RAY_ADDRESS: the same cause, not "no running cluster"
        done = subprocess.run(auto, capture_output=True, text=True, timeout=300, env={**no_token, "RAY_ADDRESS": f"127.0.0.1:{port}"})
        assert done.returncode == 2 and "token is missing" in done.stderr, done.stderr
        with_token = {**clean, "HOME": str(home), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=with_token)
        assert done.returncode == 1, done.stderr  # the run ran: one of its two cells fails its check on purpose
    finally:
        # its process group at once: on SIGTERM this head's GCS and autoscaler take some 30 s to wind down, and the
        # throwaway cluster holds nothing to keep (its files are in `temp`, removed next)
        os.killpg(head.pid, signal.SIGKILL)
        head.wait()
        shutil.rmtree(temp, ignore_errors=True)


# ---------------------------------------------------------------- a multi-node cluster, simulated on this machine (in a child process)


@pytest.mark.skipif(bool(os.environ.get("EVALX_SKIP_RAY_CLUSTER")), reason="EVALX_SKIP_RAY_CLUSTER is set (the 3-node cluster takes ~15 s)")
def test_a_simulated_three_node_cluster_gives_the_same_results(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    config = _python_project(tmp_path, cells=40, ray={"actors": 3, "num_cpus": 1}, idempotent=True, executor={"kind": "ray"})
    script = textwrap.dedent(f"""
        import sys
        import ray
        from ray.cluster_utils import Cluster
        cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": 1}})
        cluster.add_node(num_cpus=1)
        cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        from evalx.config.loader import load_config
        from evalx.execution.request import RunRequest
        from evalx.execution.runner import run
        result = run(load_config({str(config)!r}), RunRequest(quiet=True))
        nodes = {{n["NodeID"] for n in ray.nodes() if n["Alive"]}}
        print("NODES", len(nodes), "RUN", result.run_dir)
        ray.shutdown()
        cluster.shutdown()
    """)  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert "NODES 3" in done.stdout, done.stdout + done.stderr
    remote_dir = Path(done.stdout.split("RUN ")[1].strip())
    assert len(_where(tmp_path)) == 3  # an actor on each node
    assert _same_cells(_run(config, "--executor", "local")["dir"], remote_dir) == []


# ---------------------------------------------------------------- helpers


def _python_project(
    folder: Path,
    *,
    cells: int,
    repeat: int = 1,
    ray: dict[str, Any] | None = None,
    executor: dict[str, Any] | None = None,
    idempotent: bool = False,
    kill: str | None = None,
    hang: str | None = None,
    timed: bool = True,
) -> Path:
    """A Python target answering each case by its number: every 5th fails its check, every 7th raises; ``kill``: its actor dies there once."""
    (folder / "agent.py").write_text(
        textwrap.dedent(f"""
            import os
            import time
            from pathlib import Path

            def answer(input):
                n = int(input[1:])
                if {kill!r} == input and not Path({str(folder / "killed")!r}).exists():
                    Path({str(folder / "killed")!r}).touch()
                    import ray
                    ray.kill(ray.get_runtime_context().current_actor, no_restart=True)  # this actor dies mid-run
                    time.sleep(60)
                if {hang!r} == input and not Path({str(folder / "busy")!r}).exists():
                    Path({str(folder / "busy")!r}).touch()
                    time.sleep(60)  # until the run is interrupted
                if n % 7 == 3:
                    raise ValueError(f"no answer for {{input}}")
                time.sleep(0.002)
                with open({str(folder / "where.txt")!r}, "a") as where:  # which process ran it, in which folder
                    where.write(f"{{os.getpid()}} {{os.getcwd()}}\\n")
                return f"answer {{n * n}} "
        """),
        encoding="utf-8",
    )
    target: dict[str, Any] = {"id": "target", "type": "python", "callable": "agent.py:answer"}
    if ray:
        target["ray"] = ray
    if idempotent:
        target["idempotent"] = True
    cases = [
        {"id": f"c{i:02d}", "input": f"c{i:02d}", "assert": [{"type": "contains", "value": f"answer {i * i if i % 5 else -1} "}]}
        for i in range(cells)
    ]
    data: dict[str, Any] = {
        "version": 1,
        "defaults": {"concurrency": 4, "timeout_s": 30, "retries": 0, "repeat": repeat},
        "targets": [target],
        "datasets": [{"id": "cases", "cases": cases}],
        "assert": [{"type": "max_latency_ms", "value": 60000} if timed else {"type": "completed"}],
    }
    if executor:
        data["executor"] = executor
    config = folder / "evalconfig.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return config


def _run(config: Path, *args: str) -> dict[str, Any]:
    before = set((config.parent / "runs").iterdir()) if (config.parent / "runs").exists() else set()
    result = CliRunner().invoke(main, ["run", "-c", str(config), "-q", *args])
    assert "Traceback" not in result.output, result.output
    assert result.exit_code in (0, 1), result.output
    after = set((config.parent / "runs").iterdir())
    new = after - before
    run_dir = new.pop() if new else max(after, key=lambda p: p.stat().st_mtime_ns)  # --resume writes into the same run
    return {"exit": result.exit_code, "dir": run_dir, "output": result.output}


def _where(folder: Path) -> set[tuple[int, str]]:
    """(pid, cwd) of every process that ran a cell of the project in ``folder``."""
    lines = (folder / "where.txt").read_text(encoding="utf-8").splitlines()
    return {(int(pid), cwd) for pid, _, cwd in (line.partition(" ") for line in lines)}


def _key(cell: dict[str, Any]) -> tuple[str, str, str, int]:
    return (cell["target"], cell["dataset"], cell["case_id"], cell["repeat"])


def _statuses(run_dir: Path) -> dict[tuple[str, str, str, int], str]:
    return {_key(c): c["status"] for c in read_cells(run_dir)}


#: what differs between two runs of the same plan on deterministic targets: how long things took (and the run's id)
_TIMINGS = frozenset({"latency_ms", "ttft_ms", "t_ms"})


def _untimed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k not in _TIMINGS}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _comparable(cell: dict[str, Any]) -> dict[str, Any]:
    output = _untimed(json.loads(json.dumps(cell.get("output")).replace(cell["run_id"], "RUN")))  # an engine's task_id names the run
    return {
        "index": cell["index"],
        "status": cell["status"],
        "score": cell["score"],
        "error": cell["error"],
        "output": output,
        "checks": [
            (a["type"], a["passed"], a["score"], a["reason"] if a["type"] != "max_latency_ms" else None) for a in cell["assertions"]
        ],
        "cost_usd": cell["cost_usd"],
    }


def _same_cells(a: Path, b: Path) -> list[str]:
    """What differs between two runs' cells, timings aside ([] when they are the same cells with the same results)."""
    left = {_key(c): _comparable(c) for c in read_cells(a)}
    right = {_key(c): _comparable(c) for c in read_cells(b)}
    problems = [f"only in {a.name}: {k}" for k in left.keys() - right.keys()]
    problems += [f"only in {b.name}: {k}" for k in right.keys() - left.keys()]
    problems += [f"{k}: {left[k]} != {right[k]}" for k in sorted(left.keys() & right.keys()) if left[k] != right[k]]
    return problems


def _each_cell_once(run_dir: Path, expected: int) -> list[dict[str, Any]]:
    """The run's cells, after checking each planned cell is in results.jsonl exactly once."""
    assert len(cell_lines(run_dir / "results.jsonl")) == expected
    cells = read_cells(run_dir)
    assert sorted(c["index"] for c in cells) == list(range(expected))
    return cells
