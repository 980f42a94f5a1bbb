"""The config as typed records: the one declaration of every key ``evalconfig.yaml`` may hold.

Each section's record lives with the package that owns it (targets in
``targets/spec.py``, datasets in ``datasets/spec.py``, assertions in
``assertions/spec.py`` with each type's parameters from its ``@assertion``
function, the judge in ``judge/spec.py``, gates in ``results/gates.py``);
:class:`EvalConfig` here assembles them with the run-wide sections. The
shipped ``schemas/evalconfig.schema.json`` is written from these records
(``config/schema.py``, pinned by a test), and :attr:`evalx.config.loader.Config.typed`
is the :class:`EvalConfig` of a config that schema accepted.
"""

# No `from __future__ import annotations` here: evalx.common.typeschema reads these annotations at run time, and
# evaluated once at import (from cached bytecode) they cost half of what compiling them from strings does.

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from evalx.assertions.spec import AssertionSpec
from evalx.common.typeschema import NonNegative, PositiveInt, PositiveNumber, Schema, build
from evalx.datasets.spec import DatasetSpec
from evalx.judge.spec import JudgeSettings
from evalx.results.gates import Gates
from evalx.targets.spec import AnyTargetSpec, DefaultSettings
from evalx.tracing.spec import TracingSettings

__all__ = [
    "Defaults",
    "EnvFiles",
    "EvalConfig",
    "ExecutorSettings",
    "HookSpec",
    "Hooks",
    "Matrix",
    "Output",
    "eval_config",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Defaults(DefaultSettings):
    """``defaults:``: target settings under every target's own, and the run-wide settings."""

    repeat: Annotated[PositiveInt, Schema(description="Samples per case and target.")] = 1
    max_cells: Annotated[
        PositiveInt | None,
        Schema(description="Refuse a run of more cells (targets x cases x repeats) before it starts (default 10000000; --max-cells)."),
    ] = None
    max_variants: Annotated[
        PositiveInt | None,
        Schema(description="Refuse a --matrix run of more variants before it expands (default 10000; --max-variants)."),
    ] = None
    targets: Annotated[tuple[str, ...] | None, Schema(description="Targets `evalx run` uses without --matrix.")] = None
    max_total_cost: Annotated[NonNegative | None, Schema(description="Stop scheduling cells past this spend (USD).")] = None
    repeat_pass_rule: Literal["all", "majority", "any"] | None = None
    slow_ms: Annotated[
        PositiveNumber | None,
        Schema(description="Flag cells slower than this (ms): the summary counts them and lists the slowest (docs/reports.md)."),
    ] = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Matrix:
    """``matrix:``: the variants ``evalx run --matrix`` runs (``config/matrix.py`` expands them)."""

    targets: tuple[str, ...] | None = None
    params: Annotated[
        Mapping[str, tuple[Any, ...]] | None,
        Schema(
            description="Axes: model, system, prompt, messages, tools, json_mode (and system_file, prompt_file, tools_file) "
            "set that key of a provider target, any other name params[name]; a value may be {label, value, pricing} (docs/matrix.md)."
        ),
    ] = None
    include: tuple[Mapping[str, object], ...] | None = None
    exclude: tuple[Mapping[str, object], ...] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Output:
    dir: Annotated[str, Schema(description="Where runs are stored (default: runs).")] = "runs"


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutorSettings:
    """``executor:``: where cells run (docs/scale-out.md)."""

    kind: Annotated[Literal["local", "ray"] | None, Schema(description="Where cells run (default local; --executor).")] = None
    address: Annotated[
        str | None,
        Schema(description="The Ray cluster: auto (a running one, the default), local (start one), or an address (--ray-address)."),
    ] = None
    batch_size: Annotated[
        PositiveInt | None, Schema(description="Cells sent to a Ray actor at once (default: sized to about 0.5 s of work).")
    ] = None
    working_dir: Annotated[
        Literal["auto", "upload", "shared"] | None,
        Schema(
            description="How the config's folder reaches Ray workers: upload (runtime_env working_dir), shared (read in place), "
            "auto (upload unless every node is this machine)."
        ),
    ] = None


@dataclass(frozen=True, kw_only=True, slots=True)
class HookSpec:
    """A hook written as a mapping: a command (``run``) or a Python callable, with its timeout."""

    run: Annotated[
        str | tuple[Annotated[str, Schema(minLength=1)], ...] | None,
        Schema(description="A shell command (a string, run by /bin/sh -c) or an argv list.", minLength=1, minItems=1),
    ] = None
    callable: Annotated[
        str | None, Schema(description="module:function or path/to/file.py:function, called with the run's values.", minLength=1)
    ] = None
    timeout_s: Annotated[PositiveNumber, Schema(description="Stop the hook after this long (default 300).")] = 300.0


#: a hook as the config may write it
Hook = (
    Annotated[str, Schema(minLength=1)]
    | tuple[Annotated[str, Schema(minLength=1)], ...]
    | Annotated[HookSpec, Schema(oneOf=[{"required": ["run"]}, {"required": ["callable"]}])]
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Hooks:
    """``hooks:``: commands or callables around a run (docs/running.md#hooks)."""

    before_run: Annotated[
        Hook | None, Schema(description="Runs before any cell (reset an engine, seed a database); a failure stops the run (exit 3).")
    ] = None
    after_run: Annotated[
        Hook | None, Schema(description="Runs after the reports, always (also after Ctrl-C); a failure is reported, the verdict stands.")
    ] = None


@dataclass(frozen=True, kw_only=True, slots=True)
class EnvFiles:
    """``env_file: {path, override}``: the long form of ``env_file:``."""

    path: Annotated[str | tuple[Annotated[str, Schema(minLength=1)], ...], Schema(minLength=1)]
    override: Annotated[bool, Schema(description="Replace variables already set in the environment (default false).")] = False


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalConfig:
    """A whole ``evalconfig.yaml``, as the schema accepted it (after ``${VAR}`` interpolation)."""

    version: Literal[1] | None = None
    name: str | None = None
    description: str | None = None
    defaults: Defaults = field(default_factory=Defaults)
    vars: Annotated[Mapping[str, object], Schema(description="Values available to every template as `vars`.")] = field(default_factory=dict)
    secrets: Annotated[tuple[str, ...], Schema(description="Env vars whose values are redacted everywhere.")] = ()
    plugins: Annotated[
        tuple[Annotated[str, Schema(minLength=1)], ...],
        Schema(
            description="Modules that register assertion types, imported before the config is checked: "
            ".py files relative to the config, or module names (docs/plugins.md)."
        ),
    ] = ()
    providers_dir: str | None = None
    env_file: Annotated[
        str | tuple[Annotated[str, Schema(minLength=1)], ...] | EnvFiles | None,
        Schema(
            description=".env files (relative to the config) loaded before ${VAR} is resolved; set variables win unless "
            "override: true; every value is redacted (docs/config.md#env-files).",
            minLength=1,
        ),
    ] = None
    hooks: Hooks = field(default_factory=Hooks)
    targets: Annotated[tuple[Annotated[AnyTargetSpec, Schema(ref="target")], ...], Schema(minItems=1)]
    datasets: Annotated[tuple[Annotated[DatasetSpec, Schema(ref="dataset")], ...], Schema(minItems=1)]
    asserts: Annotated[tuple[Annotated[AssertionSpec, Schema(ref="assertion")], ...], Schema(key="assert")] = ()
    judge: JudgeSettings = field(default_factory=JudgeSettings)
    matrix: Matrix | None = None
    gates: Gates = field(default_factory=Gates)
    output: Output = field(default_factory=Output)
    executor: ExecutorSettings = field(default_factory=ExecutorSettings)
    tracing: TracingSettings = field(default_factory=TracingSettings)

    def target(self, target_id: str) -> AnyTargetSpec:
        """The ``targets:`` entry with this id (KeyError if none)."""
        for spec in self.targets:
            if spec.id == target_id:
                return spec
        raise KeyError(target_id)


def eval_config(data: Mapping[str, object]) -> EvalConfig:
    """The records of a config mapping the schema accepted."""
    return build(EvalConfig, data)
