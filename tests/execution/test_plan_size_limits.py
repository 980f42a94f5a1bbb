"""Sizes nobody checked (issue 14): a plan is counted before it is built, refused past a limit, and planned quickly.

A matrix of 8 axes of 10 values (10**8 variants) made ``validate`` and
``run --matrix --dry-run`` die with ``internal error: SystemError`` at 3 GB,
``--repeat 100000000`` died with MemoryError, and 1,000 variants took 10 s
to dry-run because the provider YAML was parsed again for each variant.
"""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from _fake_llm import OPENAI_KEY, FakeLLMServer, fast_backoff, server  # noqa: F401  (fixtures)
from click.testing import CliRunner
from measured import run_measured
from results_file import read_cells

from evalx.cli import main
from evalx.config.matrix import combinations, count_combinations, format_value
from evalx.targets import definitions
from evalx.targets.definitions import find_provider, shipped_dir

AGENT = "def answer(text):\n    return 'ok: ' + str(text)\n"


def _matrix_config(folder: Path, axes: int, values: int = 10, *, extra: str = "", base_url: str = "http://127.0.0.1:9/v1") -> Path:
    """One provider target (never called unless the test runs it) and ``axes`` axes of ``values`` values."""
    lines = [
        "version: 1",
        "targets:",
        f"  - {{id: mini, type: provider, provider: openai, model: m, base_url: '{base_url}', api_key: {OPENAI_KEY},",
        "     prompt: '{{ case.input }}'}",
        "datasets:",
        "  - id: d",
        "    cases:",
        "      - {id: a, input: hi, assert: [{type: completed}]}",
        "matrix:",
        "  params:",
        *(f"    p{i}: [{', '.join(str(j) for j in range(values))}]" for i in range(axes)),
    ]
    path = folder / "evalconfig.yaml"
    path.write_text("\n".join(lines) + "\n" + extra, encoding="utf-8")
    return path


def _python_config(folder: Path, *, defaults: str = "", cases: int = 3) -> Path:
    (folder / "agent.py").write_text(AGENT, encoding="utf-8")
    rows = "".join(f"      - {{id: c{i}, input: hi, assert: [{{type: completed}}]}}\n" for i in range(cases))
    path = folder / "evalconfig.yaml"
    path.write_text(
        "version: 1\n"
        + (f"defaults:\n{defaults}" if defaults else "")
        + "targets:\n"
        + '  - {id: t, type: python, callable: "agent.py:answer"}\n'
        + '  - {id: u, type: python, callable: "agent.py:answer"}\n'
        + "datasets:\n  - id: d\n    cases:\n"
        + rows,
        encoding="utf-8",
    )
    return path


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(text))


def _evalx(*args: str, cwd: Path) -> tuple[int, str, str, float, float]:
    """``python -m evalx ARGS`` in a child process: status, stdout, stderr, CPU seconds and peak RSS in MB.

    The child gets 2 GB of address space and 60 s of CPU, so a regression fails the test instead of the machine.
    CPU seconds, not wall time: a loaded machine stretches the one, not the other.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "EVALX_"))}

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        resource.setrlimit(resource.RLIMIT_CPU, (60, 60))

    done = run_measured([sys.executable, "-m", "evalx", *args], cwd, timeout_s=300, env=env, preexec_fn=limits)
    return done.returncode, done.stdout, done.stderr, done.cpu_s, done.peak_mb  # its own peak, not pytest's (tests/measured.py)


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith("warning:")]
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    assert len(lines) == 1, stderr
    return lines[0]


# -- matrix explosion ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("command", [["validate"], ["run", "--matrix", "--dry-run"], ["run", "--matrix"]])
def test_a_matrix_of_10_to_the_8_variants_is_refused_at_once_naming_its_line(tmp_path: Path, command: list[str]) -> None:
    config = _matrix_config(tmp_path, axes=8)
    code, out, err, cpu_s, peak_mb = _evalx(*command, "-c", str(config), cwd=tmp_path)
    assert code == 2, (out, err)
    line = _one_line(err)
    assert line.startswith(f"evalconfig.yaml:{_line_of(config, 'matrix:')} matrix: 100,000,000 variants"), line
    assert "limit of 10,000 variants" in line and "--max-variants N" in line and "defaults.max_variants" in line, line
    assert cpu_s < 10 and peak_mb < 300, (cpu_s, peak_mb)  # ~0.7 s here; was: internal error: SystemError after 3 GB
    assert not (tmp_path / "runs").exists()  # refused before a run folder is made


def test_the_variant_limit_is_documented_in_help_and_overridable(tmp_path: Path) -> None:
    config = _matrix_config(tmp_path, axes=3, extra="defaults:\n  max_variants: 999\n")
    code, _, err = _cli("run", "--matrix", "--dry-run", "-c", str(config))
    assert code == 2 and "1,000 variants" in _one_line(err) and "limit of 999 variants" in err, err
    code, out, err = _cli("run", "--matrix", "--dry-run", "-c", str(config), "--max-variants", "1000")
    assert code == 0, err
    assert "1000 cells" in out and "1 targets → 1000 variants" in out, out[:300]
    code, out, err = _cli("validate", "-c", str(config), "--max-variants", "1000")
    assert code == 0 and "evalx run --matrix: 1,000 variants, 1,000 cells" in out, (out, err)
    code, _, err = _cli("validate", "-c", str(config))
    assert code == 2 and "limit of 999 variants" in _one_line(err)
    for command in ("run", "validate"):
        assert "--max-variants" in _cli(command, "--help")[1] and "--max-cells" in _cli(command, "--help")[1]
    code, _, err = _cli("run", "--matrix", "--dry-run", "-c", str(config), "--max-variants", "0")
    assert code == 2 and "--max-variants" in err


def test_exclude_and_include_are_counted_exactly_without_expanding(tmp_path: Path) -> None:
    # 10**5 combinations, nine exclude entries leave 10**4: exactly the default limit, so it runs
    exclude = "".join(f"    - {{p0: {v}}}\n" for v in range(1, 10))
    config = _matrix_config(tmp_path, axes=5, extra="  exclude:\n" + exclude)
    code, out, err = _cli("validate", "-c", str(config))
    assert code == 0 and "evalx run --matrix: 10,000 variants, 10,000 cells" in out, (out, err)
    # an include entry that fits no remaining combination (p0=1 is excluded) adds one: over the limit
    config = _matrix_config(tmp_path, axes=5, extra="  exclude:\n" + exclude + "  include:\n    - {p0: 1, p1: 99}\n")
    code, _, err = _cli("run", "--matrix", "--dry-run", "-c", str(config))
    assert code == 2 and "10,001 variants" in _one_line(err), err
    # an include entry that fits existing combinations adds none
    config = _matrix_config(tmp_path, axes=5, extra="  exclude:\n" + exclude + "  include:\n    - {p0: 0, extra: 1}\n")
    assert _cli("validate", "-c", str(config))[0] == 0


@pytest.mark.slow
def test_the_count_is_the_expansion_size() -> None:
    # randomized: count_combinations is len(combinations) (GitHub-Actions semantics) whenever include entries differ
    rng = random.Random(14)
    pool: list[Any] = [0, 1, 2, "x", True, False, 0.5, None]
    for _ in range(3000):
        params = {f"a{i}": rng.sample(pool, rng.randint(1, 5)) for i in range(rng.randint(0, 5))}

        def entry(params: dict[str, list[Any]] = params) -> dict[str, Any]:
            keys = rng.sample([*params, "other"], rng.randint(0, min(3, len(params) + 1)))
            return {k: rng.choice([*pool, 9]) for k in keys}

        exclude = [entry() for _ in range(rng.randint(0, 6))]
        include: list[dict[str, Any]] = []
        for candidate in (entry() for _ in range(rng.randint(0, 4))):
            if candidate and all(format_value(candidate) != format_value(e) for e in include):
                include.append(candidate)
        counted = count_combinations(params, include, exclude)
        assert counted.exact
        assert counted.combinations == len(combinations(params, include, exclude)), (params, include, exclude)


def test_counting_a_tangled_matrix_settles_for_an_upper_bound_quickly() -> None:
    rng = random.Random(0)
    params = {f"p{i}": list(range(10)) for i in range(8)}
    exclude = [
        {f"p{a}": rng.randrange(10), f"p{(a + 1 + rng.randrange(7)) % 8}": rng.randrange(10)} for a in (rng.randrange(8) for _ in range(60))
    ]
    t0 = time.thread_time()
    counted = count_combinations(params, [{"p0": 1, "x": i} for i in range(5000)], exclude)
    assert time.thread_time() - t0 < 5  # CPU seconds, which load does not stretch: ~0.05 s here
    assert not counted.exact and counted.combinations == 10**8 + 5000  # never below the real size


# -- cells: repeats, datasets, targets -------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("dry_run", [True, False])
def test_repeat_100000000_is_refused_at_once(tmp_path: Path, dry_run: bool) -> None:
    config = _python_config(tmp_path, cases=1)
    args = ["run", "-c", str(config), "--repeat", "100000000", *(["--dry-run"] if dry_run else [])]
    code, out, err, cpu_s, peak_mb = _evalx(*args, cwd=tmp_path)
    assert code == 2, (out, err)
    line = _one_line(err)
    assert line.startswith("--repeat 100000000: 200,000,000 cells (1 case × 2 targets × 100,000,000 repeats)"), line
    assert "limit of 10,000,000 cells" in line and "--max-cells N or defaults.max_cells" in line, line
    assert cpu_s < 10 and peak_mb < 300, (cpu_s, peak_mb)  # ~0.7 s here; was: MemoryError
    assert not (tmp_path / "runs").exists()


def test_a_repeat_in_the_config_or_a_case_names_its_file_and_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = _python_config(tmp_path, defaults="  repeat: 100000000\n")
    for command in (["validate"], ["run"], ["run", "--dry-run"]):
        code, _, err = _cli(*command, "-c", str(config))
        assert code == 2, err
        assert _one_line(err).startswith(f"evalconfig.yaml:{_line_of(config, '  repeat:')} defaults.repeat: 600,000,000 cells"), err
    # a case's own repeat, in a dataset file
    (tmp_path / "cases.jsonl").write_text(
        '{"id": "a", "input": "hi", "assert": [{"type": "completed"}]}\n'
        '{"id": "b", "input": "hi", "repeat": 100000000, "assert": [{"type": "completed"}]}\n',
        encoding="utf-8",
    )
    text = config.read_text().replace("  repeat: 100000000\n", "  repeat: 1\n")
    config.write_text(text[: text.index("  - id: d")] + "  - {id: d, path: cases.jsonl}\n", encoding="utf-8")
    code, _, err = _cli("run", "-c", str(config))
    assert code == 2 and _one_line(err).startswith(
        "cases.jsonl:2 repeat: 200,000,002 cells (2 cases, 2 targets, up to 100,000,000 repeats)"
    ), err


def test_the_cell_limit_is_overridable_and_applies_to_real_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = _python_config(tmp_path, defaults="  repeat: 2\n  max_cells: 11\n")  # 3 cases x 2 targets x 2 = 12
    code, _, err = _cli("run", "-c", str(config))
    assert code == 2 and "12 cells (3 cases × 2 targets × 2 repeats) is more than the limit of 11 cells" in _one_line(err), err
    code, _, err = _cli("validate", "-c", str(config))
    assert code == 2 and "limit of 11 cells" in err
    code, out, err = _cli("run", "-c", str(config), "--max-cells", "12", "--json")
    assert code == 0, err
    run_dir = next((tmp_path / "runs").iterdir())
    assert len(read_cells(run_dir)) == 12
    code, out, err = _cli("validate", "-c", str(config), "--max-cells", "12")
    assert code == 0 and "evalx run: 12 cells" in out, out
    # a big dataset is blamed on its dataset entry
    config = _python_config(tmp_path, cases=30)
    code, _, err = _cli("run", "--dry-run", "-c", str(config), "--max-cells", "50")
    assert code == 2 and _one_line(err).startswith(f"evalconfig.yaml:{_line_of(config, '  - id: d')} datasets[0]: 60 cells"), err


# -- a provider definition is parsed once ------------------------------------------------------------


def test_a_provider_definition_is_parsed_once_for_a_whole_matrix_run(
    tmp_path: Path, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "providers").mkdir()
    shutil.copy(shipped_dir() / "openai.yaml", tmp_path / "providers" / "openai.yaml")  # a file no earlier test parsed
    config = _matrix_config(tmp_path, axes=2, values=15, base_url=f"{server.url}/v1", extra="providers_dir: providers\n")
    parsed: list[Path] = []
    real = definitions._parse_definition

    def counting(path: Path, *args: Any) -> Any:
        parsed.append(path)
        return real(path, *args)

    monkeypatch.setattr(definitions, "_parse_definition", counting)
    code, out, err = _cli("validate", "-c", str(config))
    assert code == 0 and "225 variants" in out, err
    code, out, err = _cli("run", "--matrix", "--dry-run", "-c", str(config))
    assert code == 0 and "225 cells" in out, err
    code, out, err = _cli("run", "--matrix", "--json", "-c", str(config))
    assert code == 0, err
    assert json.loads(out)["totals"]["cells"] == 225 and len(server.requests) == 225
    assert parsed == [tmp_path / "providers" / "openai.yaml"]  # validate, dry-run, the run's 225 targets: one parse


def test_an_edited_definition_or_a_changed_variable_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "providers"
    folder.mkdir()
    source = (shipped_dir() / "openai.yaml").read_text()
    path = folder / "openai.yaml"
    path.write_text(source)
    first = find_provider("openai", folder)
    assert find_provider("openai", folder) is first  # the same parse, twice
    # an edit of the same size, with the file's mtime put back as it was: its ctime still tells
    old = path.stat()
    edited = source.replace("gpt-4o-mini:", "gpt-4o-MINI:", 1)
    assert len(edited) == len(source) and edited != source
    path.write_text(edited)
    os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
    assert "gpt-4o-MINI" in find_provider("openai", folder).pricing
    # a settled file (changed long ago) is trusted by its stat without being read; an edit changes the stat
    past = time.time_ns() - 3_600 * 10**9
    os.utime(path, ns=(past, past))
    settled = find_provider("openai", folder)
    assert find_provider("openai", folder) is settled
    path.write_text(source)
    assert "gpt-4o-mini" in find_provider("openai", folder).pricing
    # the value of a ${VAR} the file uses (base_url: ${OPENAI_BASE_URL:-...}) is part of what it means
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:2/v1")
    assert find_provider("openai", folder).base_url == "http://127.0.0.1:2/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:3/v1")
    assert find_provider("openai", folder).base_url == "http://127.0.0.1:3/v1"
    os.utime(path, ns=(past, past))
    find_provider("openai", folder)
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert find_provider("openai", folder).base_url == "https://api.openai.com/v1"
    # a provider file added to a listed folder is found at once, even one that was listed long ago
    os.utime(folder, ns=(past, past))
    assert "acme" not in definitions.available(folder)
    (folder / "acme.yaml").write_text(source.replace("name: openai", "name: acme"))
    assert find_provider("acme", folder).name == "acme"
