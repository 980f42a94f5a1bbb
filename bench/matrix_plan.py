"""Benchmark: planning a large matrix (`evalx validate`, `evalx run --matrix --dry-run`) and refusing a huge one.

    python bench/matrix_plan.py [--sizes 3,4] [--repeats 3] [--src DIR]

For each size N it writes a config with one provider target and N axes of
10 values (10**N variants, one case each) and times, as whole processes,
`evalx validate` and `evalx run --matrix --dry-run` (stdout discarded); then
the refusals: 8 axes of 10 values (10**8 variants) and `--repeat 100000000`,
which must answer at once with exit 2. Prints wall seconds and peak RSS for
each repeat. `--src DIR` runs the evalx package found in DIR/src (a `git
worktree` of an older commit) to measure before/after on the same machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_config(folder: Path, axes: int, values: int = 10) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        "version: 1",
        "targets:",
        "  - {id: mini, type: provider, provider: openai, model: m, base_url: 'http://127.0.0.1:9/v1',"
        " api_key: sk-bench-0000000000, prompt: '{{ case.input }}'}",
        "datasets:",
        "  - id: d",
        "    cases:",
        "      - {id: a, input: hi, assert: [{type: completed}]}",
    ]
    if axes:
        lines += ["matrix:", "  params:"]
    lines += [f"    p{i}: [{', '.join(str(j) for j in range(values))}]" for i in range(axes)]
    path = folder / "evalconfig.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def timed(args: list[str], src: Path | None) -> tuple[float, float, int]:
    """Wall seconds, peak RSS (MB) and exit status of ``python -m evalx ARGS``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "EVALX_"))}
    if src is not None:
        env["PYTHONPATH"] = str(src / "src")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "evalx", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="3,4", help="axis counts to plan (10**N variants each)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--src", type=Path, help="a checkout whose src/ to run instead of the installed evalx")
    parser.add_argument("--no-refusals", action="store_true", help="skip the 10**8 cases (an old evalx may take minutes there)")
    args = parser.parse_args()
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # an old evalx dies here rather than swapping the machine
    with tempfile.TemporaryDirectory() as tmp:
        cases: list[tuple[str, list[str]]] = []
        for n in (int(s) for s in args.sizes.split(",")):
            config = str(write_config(Path(tmp) / f"m{n}", n))
            cases.append((f"validate 10^{n} variants", ["validate", "-c", config]))
            cases.append((f"run --matrix --dry-run 10^{n} variants", ["run", "--matrix", "--dry-run", "-c", config]))
        if not args.no_refusals:
            huge = str(write_config(Path(tmp) / "m8", 8))
            small = str(write_config(Path(tmp) / "m0", 0))
            cases.append(("validate 10^8 variants (refused)", ["validate", "-c", huge]))
            cases.append(("run --matrix --dry-run 10^8 variants (refused)", ["run", "--matrix", "--dry-run", "-c", huge]))
            cases.append(("run --dry-run --repeat 100000000 (refused)", ["run", "--dry-run", "--repeat", "100000000", "-c", small]))
        for label, cmd in cases:
            runs = [timed(cmd, args.src) for _ in range(args.repeats)]
            walls = ", ".join(f"{w:.2f}" for w, _, _ in runs)
            rss = max(r for _, r, _ in runs)
            codes = sorted({c for _, _, c in runs})
            median = statistics.median(w for w, _, _ in runs)
            print(f"{label:<48} median {median:6.2f} s  ({walls})  peak {rss:6.0f} MB  exit {codes}")


if __name__ == "__main__":
    main()
