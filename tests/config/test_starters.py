"""``evalx init --template ...``: every starter validates and runs as written, through the CLI; ``evalx schema --write``.

The provider and engine starters run against the demo servers they bundle,
started here as their comments say: in the foreground on the free port the
server picks and prints (given to the config through ``DEMO_PORT`` as a user
would), and with ``eval "$(python demo_server.py --background)"`` in a shell.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from results_file import read_cells

from evalx.cli import main
from evalx.config.scaffold import TEMPLATES
from evalx.config.schema import schema_json

REPO = Path(__file__).resolve().parents[2]
SERVERS = {"provider": "demo_server.py", "engine": "demo_engine.py"}


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DEMO_PORT", raising=False)
    monkeypatch.delenv("ENGINE_KEY", raising=False)


@pytest.fixture
def demo_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """Start a starter's bundled server: ``start(path)`` runs it on a free port and sets DEMO_PORT."""
    procs: list[subprocess.Popen[str]] = []

    def start(script: Path) -> int:
        proc = subprocess.Popen(
            [sys.executable, str(script)], cwd=script.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed once it listens: no waiting on guesses
        found = re.search(r"127\.0\.0\.1:(\d+)", line)
        assert found, line
        assert f"export DEMO_PORT={found.group(1)}" in line  # what to do with it, said where it is printed
        monkeypatch.setenv("DEMO_PORT", found.group(1))
        return int(found.group(1))

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.parametrize("template", TEMPLATES)
def test_each_starter_validates_and_runs_as_written(
    template: str, tmp_path: Path, demo_server: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = cli("init", "--template", template, "proj")
    assert created.exit_code == 0, created.output
    root = tmp_path / "proj"
    config = root / "evalconfig.yaml"
    assert f"created {Path('proj') / 'evalconfig.yaml'}" in created.output and "next:" in created.output
    assert (root / ".gitignore").read_text(encoding="utf-8").splitlines()[1:] == ["runs/", ".evalx/"]

    # the $schema line points at a file that is there, and is this evalx's schema
    first = config.read_text(encoding="utf-8").splitlines()[0]
    assert first == "# yaml-language-server: $schema=./evalconfig.schema.json"
    assert (root / "evalconfig.schema.json").read_text(encoding="utf-8") == schema_json()

    if template in SERVERS:
        step = f'eval "$(python {SERVERS[template]} --background)"'
        assert step in created.output and step in config.read_text()
        demo_server(root / SERVERS[template])  # type: ignore[operator]
    monkeypatch.chdir(root)  # as the printed next steps say
    validated = cli("validate")
    assert validated.exit_code == 0, validated.output
    for args in (["run"], ["run", "--matrix"]) if template == "matrix" else (["run"],):
        ran = cli(*args)
        assert ran.exit_code == 0, ran.output
        run_dir = max((root / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)
        cells = read_cells(run_dir)
        assert cells and all(c["status"] == "pass" for c in cells), [(c["case_id"], c.get("assertions")) for c in cells]
        if args == ["run", "--matrix"]:
            assert {c["target"] for c in cells} == {"concise", "friendly"}
    if template == "judge":
        summary = json.loads((run_dir / "summary.json").read_text())
        assert "judge" in json.dumps(summary)  # the judge was asked


def test_the_provider_demo_server_sees_the_system_prompt_file(tmp_path: Path, demo_server: object) -> None:
    assert cli("init", "--template", "provider", "p").exit_code == 0
    (tmp_path / "p" / "prompts" / "system.txt").write_text("You are the support assistant of Globex.\n", encoding="utf-8")
    demo_server(tmp_path / "p" / "demo_server.py")  # type: ignore[operator]
    ran = cli("run", "-c", "p/evalconfig.yaml", "--case", "greeting")
    assert ran.exit_code == 1, ran.output  # greets as Globex: "acme" is not in the answer
    assert "greeting" in ran.output


def test_init_never_overwrites_and_writes_nothing_then(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    mine = tmp_path / "proj" / "agent.py"
    mine.write_text("mine", encoding="utf-8")
    result = cli("init", "proj")
    assert result.exit_code == 2
    assert result.output.strip() == f"evalx init: {Path('proj') / 'agent.py'} already exists; not overwriting (nothing written)"
    assert mine.read_text() == "mine" and sorted(p.name for p in (tmp_path / "proj").iterdir()) == ["agent.py"]

    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "evalconfig.schema.json").write_text("{}", encoding="utf-8")
    again = cli("init", "--template", "judge", "s")
    assert again.exit_code == 2 and "evalconfig.schema.json already exists" in again.output
    assert (tmp_path / "s" / "evalconfig.schema.json").read_text() == "{}"


def test_an_unknown_template_is_one_line_listing_the_choices(tmp_path: Path) -> None:
    result = cli("init", "--template", "chat", "proj")
    assert result.exit_code == 2
    assert result.output.strip() == "evalx init: unknown template 'chat'; choose one of: python, provider, engine, judge, matrix"
    assert not (tmp_path / "proj").exists()


@pytest.mark.usefixtures("fresh_registry")
def test_schema_write_refreshes_the_file_beside_the_config_with_its_plugins(tmp_path: Path) -> None:
    assert cli("init", "proj").exit_code == 0
    schema_file = tmp_path / "proj" / "evalconfig.schema.json"
    schema_file.write_text("stale", encoding="utf-8")
    plugin = tmp_path / "proj" / "checks_starter_test.py"
    plugin.write_text(
        "from evalx import assertion, Verdict\n\n\n"
        "@assertion('starter_shout', schema={'value': {'type': 'string'}})\n"
        "def shout(ctx, *, value):\n    return Verdict.ok('loud') if value in ctx.output.text.upper() else Verdict.fail('quiet')\n",
        encoding="utf-8",
    )
    config = tmp_path / "proj" / "evalconfig.yaml"
    config.write_text(config.read_text() + "plugins: [checks_starter_test.py]\n", encoding="utf-8")
    result = cli("schema", "-c", str(config), "--write")
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"wrote {schema_file.relative_to(tmp_path)}"
    written = json.loads(schema_file.read_text())
    assert "assert_starter_shout" in written["$defs"]

    # PATH: a file, or a folder (the file goes in it); no -c and no PATH: this folder
    assert cli("schema", "--write", "out.json").exit_code == 0
    assert json.loads((tmp_path / "out.json").read_text())["title"] == written["title"]
    (tmp_path / "schemas").mkdir()
    assert cli("schema", "--write", "schemas").exit_code == 0
    assert (tmp_path / "schemas" / "evalconfig.schema.json").is_file()
    assert cli("schema", "--write").exit_code == 0
    assert (tmp_path / "evalconfig.schema.json").is_file()


def test_the_repo_configs_point_at_schema_files_that_exist_and_are_current() -> None:
    configs = [REPO / "evalconfig.yaml", *sorted((REPO / "examples").glob("*/evalconfig.yaml"))]
    configs += sorted((REPO / "src" / "evalx" / "config" / "starters").glob("*/evalconfig.yaml"))
    current = schema_json()
    for config in configs:
        first = config.read_text(encoding="utf-8").splitlines()[0]
        found = re.fullmatch(r"# yaml-language-server: \$schema=(\S+)", first)
        assert found, f"{config}: {first}"
        if "starters" in config.parts:
            assert found.group(1) == "./evalconfig.schema.json"  # init writes it there
            continue
        target = (config.parent / found.group(1)).resolve()
        assert target == REPO / "schemas" / "evalconfig.schema.json", config
        assert target.read_text(encoding="utf-8") == current, "run `evalx schema --write schemas/`"


@pytest.mark.slow
def test_the_starters_ship_in_the_wheel(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    names = set(zipfile.ZipFile(next(tmp_path.glob("*.whl"))).namelist())
    for template in TEMPLATES:
        assert f"evalx/config/starters/{template}/evalconfig.yaml" in names
    assert "evalx/config/starters/provider/demo_server.py.tmpl" in names
    assert not any("__pycache__" in n and "starters" in n for n in names)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="--background forks (POSIX)")
@pytest.mark.parametrize("template", sorted(SERVERS))
def test_the_demo_servers_background_step_runs_on_a_free_port_as_the_comments_say(template: str, tmp_path: Path) -> None:
    """The printed next steps, in a shell: the server on a free port (not 8765/8766), the run against it, then stopped."""
    assert cli("init", "--template", template, "proj").exit_code == 0
    script = (
        f'eval "$({sys.executable} {SERVERS[template]} --background)" && echo "port=$DEMO_PORT" '
        f"&& {sys.executable} -m evalx run -q; status=$?; kill $DEMO_PID; exit $status"
    )
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("DEMO_PORT", "ENGINE_KEY")}
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path / "proj", capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    port = int(re.search(r"^port=(\d+)$", proc.stdout, re.M).group(1))  # type: ignore[union-attr]
    assert port not in (0, 8765, 8766)
    assert f"on http://127.0.0.1:{port}" in proc.stderr and "stop it with: kill $DEMO_PID" in proc.stderr
    assert "exit 0: every graded cell passed" in proc.stdout


def test_init_keeps_an_existing_gitignore_and_adds_what_it_lacks(tmp_path: Path) -> None:
    """A project's own .gitignore keeps its lines and gains runs/ and .evalx/ where it lacks them (no run committed by
    accident); one that ignores them already, in any spelling, is left as it is."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / ".gitignore").write_text("mine\n/runs", encoding="utf-8")
    result = cli("init", "proj")
    assert result.exit_code == 0, result.output
    assert f"added .evalx/ to {Path('proj', '.gitignore')}" in result.output
    assert (tmp_path / "proj" / ".gitignore").read_text(encoding="utf-8").splitlines() == [
        "mine",
        "/runs",
        "# evalx: the run folders and the response cache (evalx init)",
        ".evalx/",
    ]
    assert (tmp_path / "proj" / "evalconfig.yaml").is_file()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / ".gitignore").write_text("runs\n.evalx\n", encoding="utf-8")
    again = cli("init", "other")
    assert again.exit_code == 0 and "added" not in again.output
    assert (tmp_path / "other" / ".gitignore").read_text(encoding="utf-8") == "runs\n.evalx\n"
