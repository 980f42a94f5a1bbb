"""Issue 30, class 7, the files written outside a run's report path: `schema -o`, `schema --provider -o`, `compare -o`,
`capture -o` (its case files and attachments) and a hook's log, through the real CLI. A symbolic link at the name is
replaced, never written through (the file it points at keeps its bytes); a FIFO nobody reads is replaced, never waited
on; a `hooks` link planted in a run folder is not followed. Each goes through the one atomic writer."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from cli_project import evalx, evalx_each
from viewer_project import make_runs

VICTIM = "the user's own file\n"


def _planted(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A file outside the project (the victim) and a link to it at ``name``; (the link, the victim)."""
    victim = tmp_path / "elsewhere" / "victim.txt"
    victim.parent.mkdir(exist_ok=True)
    victim.write_text(VICTIM)
    link = tmp_path / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim)
    return link, victim


def _written_in_place_of(link: Path, victim: Path) -> str:
    assert victim.read_text() == VICTIM  # not written through
    assert not link.is_symlink() and link.is_file()  # the link was replaced by the file
    return link.read_text()


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    return make_runs(tmp_path_factory.mktemp("runs"), "ab")


@pytest.mark.parametrize(
    "args",
    [
        ("schema", "-o", "{out}"),
        ("schema", "--provider", "-o", "{out}"),
        ("compare", "{a}", "{b}", "-o", "{out}"),
        ("compare", "{a}", "{b}", "--markdown", "-o", "{out}"),
    ],
    ids=["schema", "provider-schema", "compare", "compare-markdown"],
)
def test_an_output_file_that_is_a_link_is_replaced_never_written_through(
    tmp_path: Path, two_runs: tuple[Path, list[Path]], args: tuple[str, ...]
) -> None:
    _, (a, b) = two_runs
    link, victim = _planted(tmp_path, "out/written.txt")
    done = evalx(*(x.format(out=link, a=a, b=b) for x in args))
    assert done.returncode == 0, done.stderr
    assert _written_in_place_of(link, victim).strip()


def test_an_output_file_that_is_a_fifo_nobody_reads_is_replaced_never_waited_on(tmp_path: Path, two_runs: tuple[Path, list[Path]]) -> None:
    _, (a, b) = two_runs
    fifos = [tmp_path / f"out{i}.json" for i in range(3)]
    for fifo in fifos:
        os.mkfifo(fifo)
    done = evalx_each(
        tmp_path,
        ["schema", "-o", str(fifos[0])],
        ["schema", "--provider", "-o", str(fifos[1])],
        ["compare", str(a), str(b), "-o", str(fifos[2])],
        timeout=120,  # a write that waited for a reader would hang here
    )
    for d in done:
        assert d.returncode == 0, d.stderr
    assert json.loads(fifos[0].read_text())["$schema"] and json.loads(fifos[1].read_text())
    assert "Comparing" in fifos[2].read_text()


def test_capture_replaces_a_link_at_its_case_file_and_attachment(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "bot.py").write_text("def answer(q):\n    return 'no'\n")
    (project / "pic.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 32)
    (project / "evalconfig.yaml").write_text(
        textwrap.dedent(
            """\
            version: 1
            targets: [{id: bot, type: python, callable: bot.py:answer}]
            datasets:
              - id: d
                cases:
                  - id: c1
                    input: [{type: text, text: look}, {type: image, path: pic.png}]
                    assert: [{type: contains, value: "yes"}]
            """
        )
    )
    run = evalx("run", "-q", cwd=project)
    assert run.returncode == 1, run.stderr
    (run_dir,) = (project / "runs").iterdir()
    out = tmp_path / "cases"
    first = evalx("capture", str(run_dir), "--case", "c1", "-o", str(out))
    assert first.returncode == 0, first.stderr
    (case_file,) = out.glob("*.yaml")
    (attachment,) = (out / "attachments").iterdir()
    case_text = case_file.read_text()
    for path in (case_file, attachment):  # links planted where the next capture writes
        path.unlink()
    case_link, victim = _planted(tmp_path, f"cases/{case_file.name}")
    attachment.symlink_to(tmp_path / "elsewhere" / "dangling.png")  # a link to nothing: `exists()` is False there
    again = evalx("capture", str(run_dir), "--case", "c1", "-o", str(out), "--force")
    assert again.returncode == 0, again.stderr
    assert _written_in_place_of(case_link, victim) == case_text
    assert not attachment.is_symlink() and attachment.read_bytes().startswith(b"\x89PNG")
    assert not (tmp_path / "elsewhere" / "dangling.png").exists()


def test_a_hook_log_in_a_resumed_run_folder_is_never_written_through_a_link(tmp_path: Path) -> None:
    (tmp_path / "bot.py").write_text("def answer(q):\n    return q\n")
    (tmp_path / "evalconfig.yaml").write_text(
        "version: 1\nhooks: {before_run: 'echo seeded', after_run: 'echo done'}\n"
        "targets: [{id: bot, type: python, callable: bot.py:answer}]\n"
        "datasets: [{id: d, cases: [{id: c1, input: q, assert: [{type: contains, value: q}]}]}]\n"
    )
    first = evalx("run", "-q", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    # a run folder restored from an artifact: its hook log is a link out, its `hooks` folder may be one too
    (run_dir / "hooks" / "before_run.log").unlink()
    log_link, victim = _planted(tmp_path, f"runs/{run_dir.name}/hooks/before_run.log")
    outside = tmp_path / "elsewhere" / "hooks"
    outside.mkdir()
    (run_dir / "hooks" / "after_run.log").unlink()
    again = evalx("run", "-q", "--resume", run_dir.name, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert _written_in_place_of(log_link, victim).strip() == "seeded"
    # the whole `hooks` folder as a link out of the run folder
    for log in (run_dir / "hooks").iterdir():
        log.unlink()
    (run_dir / "hooks").rmdir()
    (run_dir / "hooks").symlink_to(outside)
    third = evalx("run", "-q", "--resume", run_dir.name, cwd=tmp_path)
    assert third.returncode == 0, third.stderr
    assert list(outside.iterdir()) == []
    assert (run_dir / "hooks").is_dir() and not (run_dir / "hooks").is_symlink()
    assert (run_dir / "hooks" / "after_run.log").read_text().strip() == "done"


def test_the_response_caches_gitignore_is_never_written_through_a_link(tmp_path: Path) -> None:
    (tmp_path / "bot.py").write_text("def answer(q):\n    return q\n")
    (tmp_path / "evalconfig.yaml").write_text(
        "version: 1\ntargets: [{id: bot, type: python, callable: bot.py:answer, cache: true}]\n"
        "datasets: [{id: d, cases: [{id: c1, input: q, assert: [{type: contains, value: q}]}]}]\n"
    )
    (tmp_path / ".evalx").mkdir()
    target = tmp_path / "elsewhere" / "made-by-evalx"
    target.parent.mkdir()
    (tmp_path / ".evalx" / ".gitignore").symlink_to(target)  # a link to nothing: `exists()` is False
    done = evalx("run", "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not target.exists()
    assert "*" in (tmp_path / ".evalx" / ".gitignore").read_text()
