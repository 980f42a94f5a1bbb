"""Run a composite action's steps here, as a GitHub runner would: the same bash, the same environment files.

Each ``run:`` step is the script of ``action.yml`` as written, run by
``bash --noprofile --norc -eo pipefail`` (what ``shell: bash`` means) with
the environment GitHub sets (``GITHUB_OUTPUT``, ``GITHUB_STEP_SUMMARY``,
``GITHUB_PATH``, ``GITHUB_EVENT_PATH``...) and the step's ``env:``, its
``${{ }}`` expressions evaluated from ``inputs``, ``steps`` and ``github``.
A step's ``if:`` is evaluated the same way (implicitly ``success() && ...``
unless it names a status function). A ``uses:`` step is run by the stub the
test gives for that action (``actions/upload-artifact``...), or skipped.

The expression language is the part GitHub's actions use: literals,
``a.b.c`` lookups, ``!``, ``==``, ``!=``, ``&&``, ``||``, parentheses and
``always()``/``success()``/``failure()``/``cancelled()``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

#: a uses: stub: (the step's evaluated `with:`, the job's environment) -> the step's outputs
Stub = Callable[[dict[str, str], dict[str, str]], dict[str, str]]

_TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<op>&&|\|\||==|!=|!|\(|\)|,)|(?P<word>[A-Za-z_][A-Za-z0-9_.\-]*(?:\(\))?))")


class Expression:
    """One ``${{ }}`` expression, evaluated against ``contexts`` and the job's status."""

    def __init__(self, text: str, contexts: Mapping[str, Any], failed: bool) -> None:
        self.tokens = self._tokens(text)
        self.pos = 0
        self.contexts, self.failed = contexts, failed

    @staticmethod
    def _tokens(text: str) -> list[str]:
        tokens, pos = [], 0
        text = text.strip()
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            if not match or match.end() == pos:
                raise ValueError(f"cannot read the expression at {text[pos:]!r}")
            tokens.append(match.group().strip())
            pos = match.end()
        return tokens

    def value(self) -> Any:
        result = self._or()
        if self.pos != len(self.tokens):
            raise ValueError(f"unexpected {self.tokens[self.pos]!r}")
        return result

    def _peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _or(self) -> Any:
        left = self._and()
        while self._peek() == "||":
            self.pos += 1
            right = self._and()
            left = left if truthy(left) else right
        return left

    def _and(self) -> Any:
        left = self._compare()
        while self._peek() == "&&":
            self.pos += 1
            right = self._compare()
            left = right if truthy(left) else left
        return left

    def _compare(self) -> Any:
        left = self._unary()
        while self._peek() in ("==", "!="):
            op = self.tokens[self.pos]
            self.pos += 1
            right = self._unary()
            same = _loose(left) == _loose(right)
            left = same if op == "==" else not same
        return left

    def _unary(self) -> Any:
        if self._peek() == "!":
            self.pos += 1
            return not truthy(self._unary())
        if self._peek() == "(":
            self.pos += 1
            inner = self._or()
            assert self._peek() == ")", "unbalanced parentheses"
            self.pos += 1
            return inner
        token = self.tokens[self.pos]
        self.pos += 1
        if token.startswith("'"):
            return token[1:-1].replace("''", "'")
        if token in ("true", "false"):
            return token == "true"
        if token == "null":
            return None
        if token.endswith("()"):
            return {"always()": True, "success()": not self.failed, "failure()": self.failed, "cancelled()": False}[token]
        value: Any = self.contexts
        for part in token.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        return value


def truthy(value: Any) -> bool:
    return value not in (None, False, "", 0)


def _loose(value: Any) -> Any:
    return "" if value is None else str(value).lower() if isinstance(value, str) else value


_TEMPLATE = re.compile(r"\$\{\{\s*(.*?)\s*\}\}", re.S)


def render(text: str, contexts: Mapping[str, Any], failed: bool = False) -> str:
    """``text`` with each ``${{ expr }}`` replaced by its value (null: empty)."""

    def one(match: re.Match[str]) -> str:
        value = Expression(match.group(1), contexts, failed).value()
        return "" if value is None else ("true" if value is True else "false" if value is False else str(value))

    return _TEMPLATE.sub(one, text)


def condition(text: str | None, contexts: Mapping[str, Any], failed: bool) -> bool:
    """A step's ``if:``: implicitly ``success() && (...)`` unless it names a status function."""
    if text is None:
        return not failed
    inner = _TEMPLATE.sub(lambda m: m.group(1), str(text)).strip()
    result = truthy(Expression(inner, contexts, failed).value())
    if not re.search(r"\b(always|success|failure|cancelled)\(\)", inner):
        result = result and not failed
    return result


def read_outputs(path: Path) -> dict[str, str]:
    """A ``$GITHUB_OUTPUT`` file: ``name=value`` lines and ``name<<DELIMITER`` blocks."""
    outputs: dict[str, str] = {}
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            end = lines.index(delimiter, i + 1)
            outputs[name] = "\n".join(lines[i + 1 : end])
            i = end + 1
            continue
        if "=" in line:
            name, value = line.split("=", 1)
            outputs[name] = value
        i += 1
    return outputs


@dataclass
class StepRun:
    id: str
    name: str
    ran: bool
    exit_code: int = 0
    output: str = ""
    outputs: dict[str, str] = field(default_factory=dict)


@dataclass
class JobRun:
    steps: list[StepRun]
    outputs: dict[str, str]

    @property
    def failed(self) -> bool:
        return any(s.ran and s.exit_code != 0 for s in self.steps)

    def step(self, step_id: str) -> StepRun:
        return next(s for s in self.steps if s.id == step_id)

    @property
    def log(self) -> str:
        return "\n".join(f"--- {s.name} (exit {s.exit_code})\n{s.output}" for s in self.steps if s.ran)


def run_action(
    action: Path,
    *,
    inputs: Mapping[str, str],
    env: Mapping[str, str],
    github: Mapping[str, Any],
    workdir: Path,
    stubs: Mapping[str, Stub] | None = None,
    skip: tuple[str, ...] = (),
) -> JobRun:
    """Run ``action``'s steps in ``workdir`` with ``env`` (the runner's: GITHUB_*...); ``skip``: step ids not run."""
    spec = yaml.safe_load(action.read_text(encoding="utf-8"))
    assert spec["runs"]["using"] == "composite"
    contexts: dict[str, Any] = {"github": dict(github), "steps": {}, "inputs": {}, "runner": {"temp": env.get("RUNNER_TEMP", "")}}
    for name, declared in spec.get("inputs", {}).items():
        given = inputs.get(name)
        contexts["inputs"][name] = given if given is not None else render(str(declared.get("default", "")), contexts)
    unknown = set(inputs) - set(spec.get("inputs", {}))
    assert not unknown, f"inputs the action does not declare: {unknown}"
    stubs = stubs or {}
    failed = False
    runs: list[StepRun] = []
    extra_path: list[str] = []
    temp = Path(env["RUNNER_TEMP"])
    for n, step in enumerate(spec["runs"]["steps"]):
        step_id = step.get("id") or f"step{n}"
        name = step.get("name") or step.get("uses") or step_id
        if step_id in skip or not condition(step.get("if"), contexts, failed):
            runs.append(StepRun(step_id, name, ran=False))
            contexts["steps"][step_id] = {"outputs": {}, "outcome": "skipped", "conclusion": "skipped"}
            continue
        step_env = {k: render(str(v), contexts, failed) for k, v in (step.get("env") or {}).items()}
        if "uses" in step:
            action_name = str(step["uses"]).split("@")[0]
            stub = stubs.get(action_name)
            if stub is None:
                runs.append(StepRun(step_id, name, ran=False))
                contexts["steps"][step_id] = {"outputs": {}, "outcome": "skipped", "conclusion": "skipped"}
                continue
            with_ = {k: render(str(v), contexts, failed) for k, v in (step.get("with") or {}).items()}
            outputs = stub(with_, {**env, **step_env})
            run = StepRun(step_id, name, ran=True, outputs=outputs)
        else:
            assert step.get("shell") == "bash", f"step {name}: shell must be bash"
            script = str(step["run"])
            output_file = temp / f"output-{n}"
            path_file = temp / f"path-{n}"
            output_file.write_text("")
            path_file.write_text("")
            script_file = temp / f"step-{n}.sh"
            script_file.write_text(script, encoding="utf-8")
            full_env = {
                **env,
                **step_env,
                "GITHUB_OUTPUT": str(output_file),
                "GITHUB_PATH": str(path_file),
                "PATH": os.pathsep.join([*extra_path, env.get("PATH", os.environ["PATH"])]),
            }
            proc = subprocess.run(
                ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script_file)],
                cwd=workdir,
                env=full_env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            extra_path = [*reversed([p for p in path_file.read_text().splitlines() if p]), *extra_path]
            run = StepRun(
                step_id, name, ran=True, exit_code=proc.returncode, output=proc.stdout + proc.stderr, outputs=read_outputs(output_file)
            )
        runs.append(run)
        failed = failed or run.exit_code != 0
        outcome = "failure" if run.exit_code else "success"
        contexts["steps"][step_id] = {"outputs": run.outputs, "outcome": outcome, "conclusion": outcome}
    outputs = {k: render(str(v["value"]), contexts, failed) for k, v in (spec.get("outputs") or {}).items()}
    return JobRun(runs, outputs)


def pull_request_event(number: int, *, fork: bool = False, base: str = "main", repository: str = "acme/bot") -> dict[str, Any]:
    """A ``pull_request`` event's payload, as much as evalx and the action read of it."""
    head_repo = "someone/bot" if fork else repository
    return {
        "action": "synchronize",
        "number": number,
        "pull_request": {
            "number": number,
            "head": {"ref": "feature", "repo": {"full_name": head_repo, "fork": fork}},
            "base": {"ref": base, "repo": {"full_name": repository, "fork": False}},
        },
        "repository": {"full_name": repository, "default_branch": "main"},
    }


def write_event(path: Path, event: Mapping[str, Any]) -> Path:
    path.write_text(json.dumps(event), encoding="utf-8")
    return path
