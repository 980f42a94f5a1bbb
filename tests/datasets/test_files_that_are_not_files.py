"""Inputs that are not regular files (issue 30, class 6): refused in one line, never read, never a hang.

Through the real CLI in a subprocess (a hang would show as the subprocess's
timeout, not as a frozen test run): a dataset that links to ``/dev/zero``, a
FIFO dataset (JSONL, read a line at a time, and YAML/CSV, read whole), a FIFO
case file in a dataset folder, a FIFO config, a FIFO ``system_file:``,
``{% include %}``, ``context_file:`` and provider definition. Each is
``FILE: not a regular file (...)``, exit 2, for ``evalx validate`` and
``evalx run`` alike, and nothing else of the file system is touched.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from cli_project import evalx_each

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(), reason="needs FIFOs and /dev/zero")

AGENT = "def answer(q):\n    return 'hi'\n"


def evalx(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``evalx ARGS`` in ``project`` in a process of its own; a hang fails here, at the timeout, instead of stopping the suite."""
    (done,) = evalx_each(project, args)
    return done


def project(tmp_path: Path, dataset: str, extra: str = "") -> Path:
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "evalconfig.yaml").write_text(
        textwrap.dedent(
            f"""\
            version: 1
            targets:
              - {{id: echo, type: python, callable: agent.py:answer}}
            datasets:
              - {{id: d, path: {dataset}}}
            assert: [{{type: completed}}]
            """
        )
        + textwrap.dedent(extra)
    )
    return tmp_path


def one_line_refusal(done: subprocess.CompletedProcess[str], file: str, what: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == [f"{file}: not a regular file ({what})"] or any(
        line.endswith(f"{file}: not a regular file ({what})") for line in lines
    ), done.stderr


@pytest.mark.parametrize("name", ["data.jsonl", "data.csv"])
def test_a_dataset_that_links_to_dev_zero_is_refused_not_read(tmp_path: Path, name: str) -> None:
    root = project(tmp_path, name)
    (root / name).symlink_to("/dev/zero")
    for done in evalx_each(root, ["validate"], ["run", "-q"]):
        one_line_refusal(done, name, "a character device")
        assert done.stderr.count("\n") == 1
    assert not (root / "runs").exists() or not any((root / "runs").iterdir())


@pytest.mark.parametrize("name", ["data.jsonl", "data.yaml", "data.csv"])
def test_a_fifo_dataset_is_refused_at_once_by_validate_and_run(tmp_path: Path, name: str) -> None:
    root = project(tmp_path, name)
    os.mkfifo(root / name)
    for done in evalx_each(root, ["validate"], ["run", "-q"]):
        one_line_refusal(done, name, "a FIFO")
        assert done.stderr == f"{name}: not a regular file (a FIFO)\n"


def test_a_fifo_among_a_folders_case_files_is_named(tmp_path: Path) -> None:
    root = project(tmp_path, "cases")
    (root / "cases").mkdir()
    (root / "cases" / "a.yaml").write_text("id: a\ninput: x\n")
    os.mkfifo(root / "cases" / "b.yaml")
    done = evalx(root, "validate")
    one_line_refusal(done, "cases/b.yaml", "a FIFO")


def test_a_fifo_config_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "evalconfig.yaml")
    for done in evalx_each(tmp_path, ["validate"], ["run", "-c", "evalconfig.yaml"]):
        one_line_refusal(done, "evalconfig.yaml", "a FIFO")


def test_fifo_template_files_say_not_a_regular_file_not_no_such_file(tmp_path: Path) -> None:
    """``system_file:``, ``{% include %}`` in a provider prompt and ``context_file:``: each a FIFO, each named as one."""
    (tmp_path / "agent.py").write_text(AGENT)
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "evalconfig.yaml").write_text(
        textwrap.dedent(
            """\
            version: 1
            targets:
              - {id: echo, type: python, callable: agent.py:answer}
              - id: model
                type: provider
                provider: openai
                model: m
                api_key: sk-test-0123456789abcdef
                base_url: http://127.0.0.1:9/v1
                system_file: pipe
              - id: included
                type: provider
                provider: openai
                model: m
                api_key: sk-test-0123456789abcdef
                base_url: http://127.0.0.1:9/v1
                prompt: "{% include 'pipe' %}"
            datasets:
              - id: d
                targets: [echo]
                cases:
                  - {id: c, input: q, context_file: pipe, assert: [{type: completed}]}
            """
        )
    )
    done = evalx(tmp_path, "validate")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "no such file" not in done.stderr, done.stderr
    assert "system_file 'pipe': not a regular file (a FIFO)" in done.stderr
    assert "included file 'pipe': not a regular file (a FIFO)" in done.stderr
    assert "context_file 'pipe': not a regular file (a FIFO)" in done.stderr


def test_a_fifo_provider_definition_is_refused(tmp_path: Path) -> None:
    root = project(tmp_path, "data.jsonl", extra="providers_dir: providers\n")
    (root / "data.jsonl").write_text('{"id": "a", "input": "x"}\n')
    (root / "providers").mkdir()
    os.mkfifo(root / "providers" / "mine.yaml")
    config = (
        (root / "evalconfig.yaml").read_text().replace("targets:\n", "targets:\n  - {id: p, type: provider, provider: mine, model: m}\n")
    )
    (root / "evalconfig.yaml").write_text(config)
    done = evalx(root, "validate")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not a regular file (a FIFO)" in done.stderr and "mine.yaml" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_fifo_response_cache_is_not_used_and_the_run_goes_on(tmp_path: Path) -> None:
    root = project(tmp_path, "data.jsonl")
    (root / "data.jsonl").write_text('{"id": "a", "input": "x"}\n')
    config = (root / "evalconfig.yaml").read_text().replace("agent.py:answer}", "agent.py:answer, cache: true}")
    (root / "evalconfig.yaml").write_text(config)
    (root / ".evalx").mkdir()
    os.mkfifo(root / ".evalx" / "cache.sqlite")
    done = evalx(root, "run", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "response cache not used" in done.stderr and "cache.sqlite: not a regular file (a FIFO)" in done.stderr, done.stderr
