"""evalx, promptfoo and Inspect side by side, on one workload against one server in the same run (issue 33).

    python bench/peers/run.py [--quick] [--only evalx,promptfoo,inspect] [--parts limited,unlimited]
        [--modes headers,plain] [--concurrency 1,8,50,500,auto,rpm] [--out bench/out/peers.json]

Each tool runs as a whole process (wall time from spawn to exit, like
bench/run.py), with its own API key, so the server can tell what each run did.

**limited** — 600 cases, each its own prompt (~1,000 characters, ~270 tokens
with the answer) asserting what the server answers to that case only;
against bench/ratelimited_server.py at **600 requests and 200,000 tokens a
minute** per key, the buckets starting empty (as if the key had been used at
its limit for a while), so no run can beat the floor of N ÷ RPM minutes
(1 minute); each admitted answer after a random 100–300 ms. Two servers, one
per mode: **headers** (429 and 200 carry OpenAI's ``x-ratelimit-*`` trio
for requests and for tokens, and a 429 ``retry-after`` and
``retry-after-ms``) and **plain** (429 + ``retry-after`` alone). Rows:

- evalx with ``concurrency`` 1, 8, 50, 500 and ``auto`` (a config this evalx
  rejects is reported as "not supported by this evalx", not run), and ``rpm``:
  concurrency 50 with ``rate_limit: {rpm: <the server's RPM>}`` (the user who
  knows the limit); otherwise evalx's defaults (``retries: 3``, ...);
- promptfoo with its adaptive scheduler (on by default since 0.121: AIMD on
  429s, reading the ``x-ratelimit-*``/``retry-after*`` headers) and
  ``--max-concurrency 50`` as the ceiling it adapts under;
- Inspect with its adaptive connections (``--adaptive-connections``, on by
  default in the versions that have it: 10–20–100), or its default
  ``--max-connections 10`` where the installed version has none;
  ``--no-fail-on-error`` so an errored sample is counted, not fatal.

Figures: wall time, the ratio to the floor, cells, passed, errored (cells
that ended in an error, or never ran), and from the server: requests, 429s
and the most requests admitted in any window (≤ RPM: the server held the limit).

**unlimited** — 2,000 cells of a short prompt, concurrency 50, no latency,
against bench/fake_server.py (``--echo``); the wall time of each whole process
and promptfoo ÷ evalx (issue 33 wants ≥ 10).

Set-up (not committed; bench/peers/.work is gitignored; ``--work`` moves it):
promptfoo is ``npm install``-ed into ``.work/promptfoo`` (and, when the
system's Node is older than its ``engines`` field asks, Node itself from the
npm registry's ``node-<os>-<arch>`` package into ``.work/node``), Inspect
(``inspect-ai`` and ``openai``) into the venv ``.work/inspect-venv``; versions
pinned by ``--promptfoo-version``/``--inspect-version``. A peer whose install
or ``--version`` fails is skipped with the reason in its row. Every tool runs
a five-case warm-up first (promptfoo creates its database, Python compiles
bytecode) that is not measured.

``--quick`` scales the limited part to 60 cases at 60 requests per 10-second
window (floor 10 s) and the unlimited part to 400 cells. Prints markdown
tables; writes JSON to ``--out`` (default bench/out/peers.json, gitignored).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PEERS = Path(__file__).resolve().parent
BENCH = PEERS.parent
sys.path.insert(0, str(BENCH))

from fake_server import FakeServer  # noqa: E402
from ratelimited_server import Limits, RateLimitedServer  # noqa: E402


def _load_bench_run() -> Any:
    """bench/run.py as a module (its name clashes with this file's): run_process, machine, compile_evalx, EVALX."""
    spec = importlib.util.spec_from_file_location("bench_run", BENCH / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_run"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bench_run = _load_bench_run()

PROMPTFOO_VERSION = "0.123.1"
INSPECT_VERSION = "0.3.285"
NODE_MAJOR = "22"
NOT_SUPPORTED = "not supported by this evalx"
_VOCABULARY = (
    "refund order parcel invoice account address delivery warranty return exchange receipt payment card balance shipping "
    "courier tracking damaged missing late early weekend holiday store online support ticket manager customer policy "
    "days business express standard premium member discount coupon voucher gift size colour"
)  # the words of the long prompts


# -- the workload -----------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    prompt: str
    expected: str  # what the echoing server puts in its answer to this case only


def make_cases(n: int, *, long: bool) -> list[Case]:
    """``n`` cases, each its own prompt ending ``(case i)``; ``long``: ~1,000 characters of varied text before it."""
    cases = []
    for i in range(n):
        if long:
            rng, vocabulary = random.Random(i), _VOCABULARY.split()
            words = " ".join(rng.choice(vocabulary) for _ in range(150))[:960]
            prompt = f"Question {i}: a customer writes about {words}. What should we answer? (case {i})"
        else:
            prompt = f"What is 2 + 2? (case {i})"
        cases.append(Case(f"case-{i:05d}", prompt, f"Reference: case {i}."))
    return cases


@dataclass
class Row:
    part: str  # limited | unlimited
    mode: str  # headers | plain | none
    tool: str
    setting: str
    status: str = "ok"  # ok | failed | timeout | skipped | not supported by this evalx
    wall_s: float | None = None
    floor_s: float | None = None
    ratio_to_floor: float | None = None
    cells: int | None = None
    passed: int | None = None
    errored: int | None = None
    requests: int | None = None
    responses_429: int | None = None
    max_requests_per_window: int | None = None
    max_tokens_per_window: int | None = None
    exit_code: int | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Outcome:
    cells: int
    passed: int
    errored: int
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Launch:
    """One run of a tool: its command, working folder, environment, and how to read what it produced."""

    cmd: list[str]
    cwd: Path
    env: dict[str, str]
    read: Callable[[], Outcome]


# -- the tools --------------------------------------------------------------------------


def _fresh(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


class Evalx:
    name = "evalx"

    def describe(self) -> str:
        proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=BENCH, capture_output=True, text=True)
        commit = f" at {proc.stdout.strip()}" if proc.returncode == 0 else ""
        return " ".join(bench_run.EVALX) + commit + f" (PYTHONPATH={os.environ.get('PYTHONPATH', '')})"

    def launch(self, d: Path, cases: list[Case], url: str, key: str, setting: str, rpm_per_minute: float) -> Launch:
        with open(d / "cases.jsonl", "w", encoding="utf-8") as f:
            for c in cases:
                f.write(json.dumps({"id": c.id, "input": c.prompt, "assert": [{"type": "contains", "value": c.expected}]}) + "\n")
        concurrency, extra = setting, ""
        if setting == "rpm":
            concurrency, extra = "50", f", rate_limit: {{rpm: {rpm_per_minute:g}}}"
        (d / "evalconfig.yaml").write_text(
            f"""version: 1
name: peers
targets:
  - {{id: model, type: provider, provider: openai, model: bench-model, base_url: '{url}/v1', api_key: '{key}',
     concurrency: {concurrency}{extra}}}
datasets:
  - {{id: bench, path: cases.jsonl}}
output: {{dir: runs}}
""",
            encoding="utf-8",
        )

        def read() -> Outcome:
            summaries = sorted((d / "runs").glob("*/summary.json"))
            if not summaries:
                raise RuntimeError("no summary.json written")
            summary = json.loads(summaries[-1].read_text())
            totals = summary["totals"]
            extra = {"rate_limits": found} if (found := _find_key(summary, "rate_limits")) is not None else {}
            return Outcome(totals["cells"], totals["pass"], totals["error"], extra)

        return Launch([*bench_run.EVALX, "run", "-c", "evalconfig.yaml", "--no-cache", "-q"], d, {}, read)

    def unsupported(self, d: Path) -> str | None:
        """The one-line reason this evalx refuses the config (``evalx validate``), or None."""
        proc = subprocess.run([*bench_run.EVALX, "validate", "-c", "evalconfig.yaml"], cwd=d, capture_output=True, text=True, timeout=120)
        if proc.returncode == 0:
            return None
        lines = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
        return lines[-1].strip() if lines else f"evalx validate exited {proc.returncode}"


def _find_key(data: Any, key: str) -> Any:
    if isinstance(data, dict):
        if key in data:
            return data[key]
        data = list(data.values())
    if isinstance(data, list):
        for item in data:
            if (found := _find_key(item, key)) is not None:
                return found
    return None


def _node_satisfies(version: str, spec: str) -> bool:
    """Whether Node ``version`` (``v20.20.2``) meets an ``engines.node`` spec of ``>=X.Y.Z`` / ``^X.Y.Z`` alternatives."""
    have = tuple(int(x) for x in re.findall(r"\d+", version)[:3])
    for alternative in spec.split("||"):
        alternative = alternative.strip()
        m = re.fullmatch(r"(>=|\^)?\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", alternative)
        if not m:
            return True  # a spec this cannot read: let promptfoo itself decide
        want = tuple(int(x or 0) for x in m.group(2, 3, 4))
        if m.group(1) == "^" and have[0] != want[0]:
            continue
        if have >= want:
            return True
    return False


def _tail(text: str, n: int = 300) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip() and "ExperimentalWarning" not in line]
    return " | ".join(lines[-3:])[-n:]


class Promptfoo:
    name = "promptfoo"

    def __init__(self, work: Path, version: str) -> None:
        self.dir, self.version = work / "promptfoo", version
        self.node_dir = work / "node"
        self.home = work / "promptfoo-home"
        self.path_prefix = ""
        self.installed = ""

    def _bin(self) -> Path:
        return self.dir / "node_modules" / ".bin" / "promptfoo"

    def _installed_version(self) -> str:
        try:
            return str(json.loads((self.dir / "node_modules" / "promptfoo" / "package.json").read_text())["version"])
        except (OSError, ValueError, KeyError):
            return ""

    def setup(self) -> str | None:
        """Install if missing; returns why promptfoo cannot run, or None."""
        if shutil.which("npm") is None or shutil.which("node") is None:
            return "promptfoo skipped: no node/npm on PATH"
        have = self._installed_version()
        if not have or (self.version != "latest" and have != self.version):
            print(f"installing promptfoo@{self.version} into {self.dir} (npm) ...", flush=True)
            err = _install(
                ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", str(self.dir), f"promptfoo@{self.version}"]
            )
            if err:
                return f"promptfoo skipped: npm install promptfoo@{self.version} failed: {err}"
        package = json.loads((self.dir / "node_modules" / "promptfoo" / "package.json").read_text())
        self.installed = str(package["version"])
        wants = str(package.get("engines", {}).get("node", ""))
        node_version = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
        if wants and not _node_satisfies(node_version, wants):
            node_bin = self.node_dir / "node_modules" / NODE_PACKAGE / "bin"
            if not (node_bin / "node").exists():
                print(
                    f"promptfoo {self.installed} wants Node {wants}, this machine has {node_version}: "
                    f"installing {NODE_PACKAGE}@{NODE_MAJOR} into {self.node_dir} (npm) ...",
                    flush=True,
                )
                err = _install(
                    [
                        "npm",
                        "install",
                        "--no-audit",
                        "--no-fund",
                        "--loglevel=error",
                        "--prefix",
                        str(self.node_dir),
                        f"{NODE_PACKAGE}@{NODE_MAJOR}",
                    ]
                )
                if err:
                    return f"promptfoo skipped: it wants Node {wants} (have {node_version}) and npm install {NODE_PACKAGE}@{NODE_MAJOR} failed: {err}"
            self.path_prefix = str(node_bin)
        proc = subprocess.run([str(self._bin()), "--version"], env=self.env(), capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            return f"promptfoo skipped: `promptfoo --version` failed ({proc.returncode}): {_tail(proc.stdout + proc.stderr)}"
        return None

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.extra_env())
        return env

    def extra_env(self) -> dict[str, str]:
        env = {
            "PROMPTFOO_DISABLE_TELEMETRY": "1",
            "PROMPTFOO_DISABLE_UPDATE": "1",
            "PROMPTFOO_DISABLE_SHARING": "1",
            "PROMPTFOO_CONFIG_DIR": str(self.home),
            "NODE_NO_WARNINGS": "1",
        }
        if self.path_prefix:
            env["PATH"] = self.path_prefix + os.pathsep + os.environ.get("PATH", "")
        return env

    def describe(self) -> str:
        return f"promptfoo {self.installed}" + (f" on Node from {self.path_prefix}" if self.path_prefix else "")

    def launch(self, d: Path, cases: list[Case], url: str, key: str, setting: str, rpm_per_minute: float) -> Launch:
        config = {
            "description": "peers",
            "prompts": ["{{question}}"],
            "providers": [{"id": "openai:chat:bench-model", "config": {"apiBaseUrl": f"{url}/v1", "apiKey": key}}],
            "tests": [{"vars": {"question": c.prompt}, "assert": [{"type": "contains", "value": c.expected}]} for c in cases],
        }
        (d / "promptfooconfig.yaml").write_text(json.dumps(config, indent=1), encoding="utf-8")  # JSON is YAML
        cmd = [str(self._bin()), "eval", "-c", "promptfooconfig.yaml", "--no-cache", "-j", setting.split()[-1], "-o", "out.json"]
        cmd += ["--no-table", "--no-progress-bar", "--no-share"]

        def read() -> Outcome:
            out = d / "out.json"
            if not out.exists():
                raise RuntimeError("no out.json written")
            stats = json.loads(out.read_text())["results"]["stats"]
            ran = stats["successes"] + stats["failures"] + stats["errors"]
            return Outcome(len(cases), stats["successes"], stats["errors"] + (len(cases) - ran))

        return Launch(cmd, d, {**self.extra_env(), "OPENAI_API_KEY": key}, read)


class Inspect:
    name = "inspect"

    def __init__(self, work: Path, version: str) -> None:
        self.venv, self.version = work / "inspect-venv", version
        self.installed = ""
        self.adaptive = False

    def _bin(self, name: str) -> Path:
        return self.venv / "bin" / name

    def _installed_version(self) -> str:
        if not self._bin("python").exists():
            return ""
        proc = subprocess.run(
            [str(self._bin("python")), "-c", "import importlib.metadata as m; print(m.version('inspect-ai'))"],
            capture_output=True,
            text=True,
        )
        return proc.stdout.strip() if proc.returncode == 0 else ""

    def setup(self) -> str | None:
        have = self._installed_version()
        if not have or (self.version != "latest" and have != self.version):
            spec = "inspect-ai" if self.version == "latest" else f"inspect-ai=={self.version}"
            print(f"installing {spec} into the venv {self.venv} (pip) ...", flush=True)
            if not self._bin("python").exists():
                err = _install([sys.executable, "-m", "venv", str(self.venv)])
                if err:
                    return f"inspect skipped: python -m venv {self.venv} failed: {err}"
            err = _install([str(self._bin("python")), "-m", "pip", "install", "-q", "--disable-pip-version-check", spec, "openai"])
            if err:
                return f"inspect skipped: pip install {spec} openai failed: {err}"
        self.installed = self._installed_version()
        proc = subprocess.run([str(self._bin("inspect")), "eval", "--help"], capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            return f"inspect skipped: `inspect eval --help` failed ({proc.returncode}): {_tail(proc.stdout + proc.stderr)}"
        self.adaptive = "--adaptive-connections" in proc.stdout
        return None

    def describe(self) -> str:
        return f"inspect-ai {self.installed}"

    def limited_setting(self) -> str:
        return "adaptive connections (default 10-20-100)" if self.adaptive else "max-connections 10 (default; no adaptive mode)"

    def launch(self, d: Path, cases: list[Case], url: str, key: str, setting: str, rpm_per_minute: float) -> Launch:
        with open(d / "samples.jsonl", "w", encoding="utf-8") as f:
            for c in cases:
                f.write(json.dumps({"id": c.id, "input": c.prompt, "target": c.expected}) + "\n")
        (d / "task.py").write_text(
            '"""The peers workload as an Inspect task: each sample\'s answer must include its target."""\n\n'
            "from inspect_ai import Task, task\n"
            "from inspect_ai.dataset import json_dataset\n"
            "from inspect_ai.scorer import includes\n"
            "from inspect_ai.solver import generate\n\n\n"
            "@task\n"
            "def peers() -> Task:\n"
            '    return Task(dataset=json_dataset("samples.jsonl"), solver=generate(), scorer=includes())\n',
            encoding="utf-8",
        )
        cmd = [str(self._bin("inspect")), "eval", "task.py", "--model", "openai/bench-model", "--model-base-url", f"{url}/v1"]
        # responses_api=false: the same chat-completions endpoint the others use (Inspect would call /v1/responses)
        cmd += ["-M", "responses_api=false", "--log-dir", "logs", "--log-format", "json", "--display", "none", "--no-fail-on-error"]
        if setting.startswith("max-connections") and "default" not in setting:
            cmd += ["--max-connections", setting.split()[-1]]

        def read() -> Outcome:
            logs = sorted((d / "logs").glob("*.json"))
            if not logs:
                raise RuntimeError("no log written")
            log = json.loads(logs[-1].read_text())
            samples = log.get("samples") or []
            errored = sum(1 for s in samples if s.get("error"))
            passed = sum(1 for s in samples if not s.get("error") and any(v.get("value") == "C" for v in (s.get("scores") or {}).values()))
            return Outcome(len(cases), passed, errored + (len(cases) - len(samples)), {"log_status": log.get("status")})

        return Launch(cmd, d, {"OPENAI_API_KEY": key, "INSPECT_LOG_DIR": str(d / "logs")}, read)


NODE_PACKAGE = "node-{}-{}".format(
    {"linux": "linux", "darwin": "darwin"}.get(sys.platform, sys.platform),
    {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower(), platform.machine()),
)


def _install(cmd: list[str]) -> str | None:
    """Run an install command; its failure in one line, or None."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if proc.returncode == 0 else f"exit {proc.returncode}: {_tail(proc.stderr + proc.stdout)}"


# -- running ----------------------------------------------------------------------------


class Harness:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work: Path = args.work
        self.rows: list[Row] = []
        self.tools: dict[str, Any] = {}
        self.skipped: dict[str, str] = {}

    def setup(self) -> None:
        for name in self.args.only:
            if name == "evalx":
                bench_run.compile_evalx()
                self.tools[name] = Evalx()
                continue
            tool = (
                Promptfoo(self.work, self.args.promptfoo_version) if name == "promptfoo" else Inspect(self.work, self.args.inspect_version)
            )
            reason = tool.setup()
            if reason:
                print(reason, flush=True)
                self.skipped[name] = reason
            else:
                self.tools[name] = tool
                print(f"{name}: {tool.describe()}", flush=True)

    def settings(self, name: str, part: str) -> list[str]:
        if part == "unlimited":
            c = str(self.args.unlimited_concurrency)
            return {"evalx": [c], "promptfoo": [f"max-concurrency {c}"], "inspect": [f"max-connections {c}"]}[name]
        if name == "evalx":
            return list(self.args.concurrency)
        if name == "promptfoo":
            return [f"adaptive scheduler, max-concurrency {self.args.peer_max_concurrency}"]
        return [self.tools[name].limited_setting()]

    def run_one(self, part: str, mode: str, name: str, setting: str, cases: list[Case], server: FakeServer, floor_s: float | None) -> Row:
        tool = self.tools[name]
        slug = re.sub(r"[^a-z0-9]+", "-", f"{part}-{mode}-{name}-{setting}".lower()).strip("-")
        key = f"sk-{slug}"
        row = Row(part, mode, name, setting, floor_s=round(floor_s, 2) if floor_s else None)
        d = _fresh(self.work / "runs" / slug)
        rpm_per_minute = self.args.rpm * 60.0 / self.args.window_s
        launch = tool.launch(d, cases, server.url, key, setting, rpm_per_minute)
        if name == "evalx" and setting == "auto":
            reason = tool.unsupported(d)
            if reason:
                row.status, row.note = NOT_SUPPORTED, reason
                return self._done(row)
        limited = isinstance(server, RateLimitedServer)
        before = None if limited else server.stats()["requests"]
        timeout = self.args.timeout_s or (floor_s * 8 + 180 if floor_s else len(cases) * 0.5 + 300)
        proc = bench_run.run_process(launch.cmd, cwd=launch.cwd, extra_env=launch.env, timeout_s=timeout)
        row.wall_s, row.exit_code = round(proc.wall_s, 2), proc.returncode
        if limited:
            assert isinstance(server, RateLimitedServer)
            seen = server.key_stats(key)
            row.requests, row.responses_429 = seen["requests"], seen["responses_429"]
            row.max_requests_per_window = seen.get("max_requests_per_window")
            row.max_tokens_per_window = seen.get("max_tokens_per_window")
        else:
            row.requests = server.stats()["requests"] - (before or 0)
        if floor_s:
            row.ratio_to_floor = round(proc.wall_s / floor_s, 2)
        if proc.timed_out:
            row.status, row.note = "timeout", f"killed after {timeout:.0f} s"
            row.errored = len(cases)
            return self._done(row)
        try:
            outcome = launch.read()
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            row.status, row.note = "failed", f"exit {proc.returncode}: {exc}; {_tail(proc.stderr + proc.stdout)}"
            return self._done(row)
        row.cells, row.passed, row.errored, row.extra = outcome.cells, outcome.passed, outcome.errored, outcome.extra
        notes = []
        if outcome.errored:
            notes.append(f"{outcome.errored} cells errored: the run gave up on them, so its time is no finish")
        if outcome.passed + outcome.errored < outcome.cells:
            notes.append(f"{outcome.cells - outcome.passed - outcome.errored} cells failed their assertion")
        row.note = "; ".join(notes)
        return self._done(row)

    def _done(self, row: Row) -> Row:
        self.rows.append(row)
        print(table_line(row), flush=True)
        return row

    def warm_up(self) -> None:
        """A five-case run of each tool, not measured: first-run costs (a database, bytecode) out of the figures."""
        cases = make_cases(5, long=False)
        with FakeServer(echo=True) as server:
            for name in self.tools:
                setting = self.settings(name, "unlimited")[0]
                launch = self.tools[name].launch(
                    _fresh(self.work / "runs" / f"warm-up-{name}"), cases, server.url, f"sk-warm-{name}", setting, 60.0
                )
                proc = bench_run.run_process(launch.cmd, cwd=launch.cwd, extra_env=launch.env, timeout_s=600)
                if proc.returncode not in (0, 100):  # promptfoo exits 100 when a test fails
                    print(f"warm-up of {name} exited {proc.returncode}: {_tail(proc.stderr + proc.stdout)}", flush=True)

    def limited(self) -> None:
        a = self.args
        cases = make_cases(a.cases, long=True)
        floor_s = a.cases / a.rpm * a.window_s
        for mode in a.modes:
            limits = Limits(a.rpm, a.tpm, a.window_s, None, start_empty=a.start == "empty", headers=mode == "headers")
            print(
                f"\n### limited, {mode}: {a.cases} cases; {a.rpm:,} requests and {a.tpm:,} tokens per {a.window_s:g} s per key, "
                f"buckets start {a.start}, latency {a.latency_ms:g}-{a.latency_max_ms:g} ms; floor {floor_s:g} s",
                flush=True,
            )
            print(TABLE_HEAD, flush=True)
            with RateLimitedServer(limits, latency_ms=a.latency_ms, latency_max_ms=a.latency_max_ms) as server:
                for name in a.only:
                    if name in self.skipped:
                        self._done(Row("limited", mode, name, "-", status="skipped", note=self.skipped[name]))
                        continue
                    for setting in self.settings(name, "limited"):
                        self.run_one("limited", mode, name, setting, cases, server, floor_s)

    def unlimited(self) -> None:
        a = self.args
        cases = make_cases(a.unlimited_cells, long=False)
        print(f"\n### unlimited: {a.unlimited_cells} cells, concurrency {a.unlimited_concurrency}, no latency", flush=True)
        print(TABLE_HEAD, flush=True)
        with FakeServer(echo=True) as server:
            for round_no in range(a.repeats):
                for name in a.only:
                    if name in self.skipped:
                        if round_no == 0:
                            self._done(Row("unlimited", "none", name, "-", status="skipped", note=self.skipped[name]))
                        continue
                    for setting in self.settings(name, "unlimited"):
                        self.run_one("unlimited", "none", name, setting, cases, server, None)


TABLE_HEAD = (
    "| mode | tool | setting | status | wall s | × floor | cells | passed | errored | requests | 429s | max req/window | note |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def _cell(v: Any) -> str:
    return "–" if v is None else (f"{v:,}" if isinstance(v, int) else str(v))


def table_line(r: Row) -> str:
    values = (r.mode, r.tool, r.setting, r.status, r.wall_s, r.ratio_to_floor, r.cells, r.passed, r.errored, r.requests, r.responses_429)
    note = r.note.replace("|", "/")[:160]
    return "| " + " | ".join(_cell(v) for v in values) + f" | {_cell(r.max_requests_per_window)} | {note} |"


def unlimited_ratios(rows: list[Row]) -> dict[str, float]:
    """Each peer's best wall time ÷ evalx's best in the unlimited part (the rows that ran)."""
    best: dict[str, float] = {}
    for r in rows:
        if r.part == "unlimited" and r.status == "ok" and r.wall_s:
            best[r.tool] = min(best.get(r.tool, r.wall_s), r.wall_s)
    if "evalx" not in best:
        return {}
    return {f"{tool}_over_evalx": round(wall / best["evalx"], 2) for tool, wall in best.items() if tool != "evalx"}


def _csv(choices: tuple[str, ...]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        items = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in items if x not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"{', '.join(bad)}: not one of {', '.join(choices)}")
        return items

    return parse


def _concurrencies(text: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    for x in items:
        if x not in ("auto", "rpm") and not x.isdigit():
            raise argparse.ArgumentTypeError(f"{x}: a number, auto or rpm")
    return items


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="limited: 60 cases at 60 requests per 10 s (floor 10 s); unlimited: 400 cells")
    p.add_argument("--only", type=_csv(("evalx", "promptfoo", "inspect")), default=["evalx", "promptfoo", "inspect"])
    p.add_argument("--parts", type=_csv(("limited", "unlimited")), default=["limited", "unlimited"])
    p.add_argument(
        "--modes", type=_csv(("headers", "plain")), default=["headers", "plain"], help="limited: with rate-limit headers, without"
    )
    p.add_argument(
        "--concurrency", type=_concurrencies, default=["1", "8", "50", "500", "auto", "rpm"], help="evalx's rows in the limited part"
    )
    p.add_argument("--cases", type=int, help="limited: cases (default 600; 60 with --quick)")
    p.add_argument("--rpm", type=int, help="limited: requests per window (default 600; 60 with --quick)")
    p.add_argument("--tpm", type=int, help="limited: tokens per window (default 200,000; 20,000 with --quick)")
    p.add_argument("--window-s", type=float, help="limited: the window the limits are per (default 60; 10 with --quick)")
    p.add_argument(
        "--start", choices=("empty", "full"), default="empty", help="limited: each key's buckets start empty (the floor holds) or full"
    )
    p.add_argument("--latency-ms", type=float, default=100.0, help="limited: least latency of an admitted request")
    p.add_argument("--latency-max-ms", type=float, default=300.0, help="limited: most latency (uniform between)")
    p.add_argument(
        "--peer-max-concurrency", type=int, default=50, help="limited: promptfoo's --max-concurrency (its scheduler adapts under it)"
    )
    p.add_argument("--unlimited-cells", type=int, help="unlimited: cells (default 2,000; 400 with --quick)")
    p.add_argument("--unlimited-concurrency", type=int, default=50)
    p.add_argument("--repeats", type=int, default=1, help="unlimited: runs of each tool, interleaved (the best is compared)")
    p.add_argument(
        "--timeout-s", type=float, help="kill a run after this (default: limited 8 x the floor + 180 s, unlimited 0.5 s a cell + 300 s)"
    )
    p.add_argument(
        "--promptfoo-version", default=PROMPTFOO_VERSION, help=f"npm version to install (default {PROMPTFOO_VERSION}; or latest)"
    )
    p.add_argument(
        "--inspect-version", default=INSPECT_VERSION, help=f"inspect-ai version to install (default {INSPECT_VERSION}; or latest)"
    )
    p.add_argument("--work", type=Path, default=PEERS / ".work", help="installs and generated projects (default bench/peers/.work)")
    p.add_argument("--out", type=Path, default=BENCH / "out" / "peers.json")
    p.add_argument("--no-warm-up", action="store_true", help="skip the unmeasured five-case run of each tool")
    args = p.parse_args(argv)
    quick = args.quick
    args.cases = args.cases or (60 if quick else 600)
    args.rpm = args.rpm or (60 if quick else 600)
    args.tpm = args.tpm or (20_000 if quick else 200_000)
    args.window_s = args.window_s or (10.0 if quick else 60.0)
    args.unlimited_cells = args.unlimited_cells or (400 if quick else 2_000)
    args.work = args.work.resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    args.work.mkdir(parents=True, exist_ok=True)
    info = bench_run.machine()
    started, load = time.strftime("%Y-%m-%d %H:%M:%S %Z"), os.getloadavg()[0]
    print(f"peers — {started} — {info['nproc']} cores, {info['cpu']}, load {load:.1f}", flush=True)
    h = Harness(args)
    h.setup()
    if not args.no_warm_up and h.tools:
        h.warm_up()
    if "limited" in args.parts:
        h.limited()
    if "unlimited" in args.parts:
        h.unlimited()
    ratios = unlimited_ratios(h.rows)
    for name, ratio in ratios.items():
        want = " (issue 33 wants ≥ 10)" if name.startswith("promptfoo") else ""
        print(f"unlimited: {name.replace('_over_', ' ÷ ')} wall time = {ratio}{want}", flush=True)
    result = {
        "date": started,
        "machine": {**info, "load_at_start": round(load, 1), "load_at_end": round(os.getloadavg()[0], 1)},
        "command": " ".join(["python", "bench/peers/run.py", *(argv if argv is not None else sys.argv[1:])]),
        "seconds": round(time.perf_counter() - t0, 1),
        "tools": {name: tool.describe() for name, tool in h.tools.items()},
        "skipped": h.skipped,
        "limited": {
            "cases": args.cases,
            "rpm": args.rpm,
            "tpm": args.tpm,
            "window_s": args.window_s,
            "start": args.start,
            "latency_ms": [args.latency_ms, args.latency_max_ms],
            "floor_s": args.cases / args.rpm * args.window_s,
        },
        "unlimited": {"cells": args.unlimited_cells, "concurrency": args.unlimited_concurrency, **ratios},
        "rows": [asdict(r) for r in h.rows],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\n{len(h.rows)} rows; wrote {args.out} in {result['seconds']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
