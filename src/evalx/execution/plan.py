"""Turn a config and the command line's selections into cells, in matrix order.

Matrix order is (dataset, case, target, repeat): reports list cells that way
so two runs diff cleanly.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

from evalx.config.loader import Config
from evalx.config.matrix import Variant, expand
from evalx.errors import ConfigError, DatasetError, Issue
from evalx.models import Case, Cell


@dataclass
class Selection:
    targets: list[str] = field(default_factory=list)
    datasets: list[str] = field(default_factory=list)
    case_globs: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    repeat: int | None = None
    matrix: bool = False


@dataclass
class Plan:
    target_specs: list[dict[str, Any]]
    cases: dict[str, list[Case]]
    cells: list[Cell]
    #: --matrix runs: every target of the run as a variant (id -> variant), in order
    variants: dict[str, Variant] = field(default_factory=dict)

    def cells_for(self, target_id: str) -> list[Cell]:
        return [c for c in self.cells if c.target == target_id]

    def base_id(self, target_id: str) -> str:
        """The ``targets:`` id a run target comes from (a matrix variant's own target)."""
        variant = self.variants.get(target_id)
        return variant.target if variant is not None else target_id

    @property
    def base_target_ids(self) -> list[str]:
        """The ``targets:`` entries this plan runs, each once, in order."""
        return list(dict.fromkeys(self.base_id(t["id"]) for t in self.target_specs))

    def matrix_summary(self) -> dict[str, Any] | None:
        """What summary.json records of a matrix run: its variants."""
        if not self.variants:
            return None
        return {"variants": [v.to_dict() for v in self.variants.values()]}


def load_all_datasets(config: Config, only: list[str] | None = None) -> dict[str, list[Case]]:
    from evalx.datasets.loader import load_dataset

    out: dict[str, list[Case]] = {}
    errors: list[str] = []
    for i, spec in enumerate(config.datasets):
        if only and spec["id"] not in only:
            continue
        try:
            out[spec["id"]] = load_dataset(
                spec,
                base_dir=config.base_dir,
                config_file=config.file,
                line=config.line(("datasets", i)),
                positions=config.loaded.lines,
                path_prefix=("datasets", i),
            )
        except DatasetError as exc:
            errors.extend(str(exc).splitlines())
    if errors:
        # a dataset error's text already names FILE:LINE key.path
        raise ConfigError([Issue(e, None, "", "") for e in errors])
    return out


def select_targets(config: Config, sel: Selection) -> list[dict[str, Any]]:
    known = [t["id"] for t in config.targets]
    if sel.targets:
        unknown = [t for t in sel.targets if t not in known]
        if unknown:
            raise ConfigError(f"unknown target {unknown[0]!r} in --target (known: {', '.join(known)})")
        ids = sel.targets
    elif sel.matrix and (config.data.get("matrix") or {}).get("targets"):
        ids = list(config.data["matrix"]["targets"])
    else:
        ids = config.default_target_ids()
    return [config.target(t) for t in ids]


def build_plan(config: Config, sel: Selection) -> Plan:
    known_ds = [d["id"] for d in config.datasets]
    for d in sel.datasets:
        if d not in known_ds:
            raise ConfigError(f"unknown dataset {d!r} in --dataset (known: {', '.join(known_ds)})")
    target_specs = select_targets(config, sel)
    variants: dict[str, Variant] = {}
    if sel.matrix:
        # --target narrows which targets the matrix expands; provider ones become variants
        expanded = expand(target_specs, config.data.get("matrix"))
        variants = {v.id: v for v in expanded}
        target_specs = [v.spec for v in expanded]
    cases = load_all_datasets(config, sel.datasets or None)
    default_repeat = int(config.defaults.get("repeat", 1))
    cells: list[Cell] = []
    for ds_id, ds_cases in cases.items():
        for case in ds_cases:
            if sel.case_globs and not any(fnmatch.fnmatchcase(case.id, g) for g in sel.case_globs):
                continue
            if sel.categories and case.category not in sel.categories:
                continue
            repeat = sel.repeat or case.repeat or default_repeat
            for spec in target_specs:
                base = variants[spec["id"]].target if spec["id"] in variants else spec["id"]
                if case.targets is not None and base not in case.targets:
                    continue
                for r in range(repeat):
                    cells.append(Cell(len(cells), spec["id"], ds_id, case, r))
    return Plan(target_specs, cases, cells, variants)
