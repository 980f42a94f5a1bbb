"""The package layout is the architecture: no import cycle between subpackages, no private name across them."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "evalx"


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _unit(module: str) -> str:
    """The architectural unit of a module: its subpackage, or the module itself at the top level."""
    parts = module.split(".")
    if len(parts) >= 2 and (SRC / parts[1]).is_dir():
        return parts[1]
    return parts[1] if len(parts) > 1 else "evalx"


def _imports(path: Path, module: str) -> list[tuple[str, list[str]]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([node.module] if node.module else []))
            if base == "evalx" or base.startswith("evalx."):
                found.append((base, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("evalx."):
                    found.append((a.name, []))
    return found


def _graph() -> tuple[dict[str, set[str]], list[str]]:
    mods = _modules()
    edges: dict[str, set[str]] = defaultdict(set)
    private: list[str] = []
    for module, path in mods.items():
        me = _unit(module)
        for target, names in _imports(path, module):
            if target == "evalx":
                targets = [f"evalx.{n}" if f"evalx.{n}" in mods else "evalx" for n in names]
            else:
                targets = [target]
            for t in targets:
                other = _unit(t)
                if other in (me, "evalx"):
                    continue
                edges[me].add(other)
                private += [f"{module} imports {n} from {t}" for n in names if n.startswith("_") and not n.startswith("__")]
                if any(p.startswith("_") for p in t.split(".")[1:]):
                    private.append(f"{module} imports private module {t}")
    return edges, private


def test_no_import_cycle_between_subpackages() -> None:
    edges, _ = _graph()
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        for nxt in sorted(edges.get(node, ())):
            if nxt in stack:
                cycles.append(" -> ".join(stack[stack.index(nxt) :] + [nxt]))
            elif len(stack) < 12:
                visit(nxt, stack + [nxt])

    for start in sorted(edges):
        visit(start, [start])
    assert not cycles, "\n".join(sorted(set(cycles)))


def test_no_private_name_imported_across_subpackages() -> None:
    _, private = _graph()
    assert not private, "\n".join(private)
