"""Load, interpolate and validate ``evalconfig.yaml``.

Parsing is separate from executing: :func:`load_config` returns a validated
:class:`Config` or raises :class:`ConfigError` carrying every issue found,
each naming ``FILE:LINE key.path``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalx.assertions.plugins import import_config_plugins
from evalx.assertions.registry import check_entry_point_plugins
from evalx.common.documents import (
    KeyPath,
    Loaded,
    SchemaValidator,
    describe_schema_error,
    did_you_mean,
    display_path,
    format_path,
    load_yaml,
    schema_error_leaves,
)
from evalx.common.json_types import JSONObject, as_object
from evalx.common.reading import CONFIG, read_text
from evalx.common.redaction import FREE_TEXT_MIN, Redactor, looks_secret_name
from evalx.common.templates import use_folder
from evalx.common.usercode import resolve_callable
from evalx.config.files import FileValue, resolve_file_keys
from evalx.config.schema import tools_schema
from evalx.errors import ConfigError, Issue, UnreadableFile

if TYPE_CHECKING:
    from evalx.config.model import EvalConfig

#: built-in values of the run-wide ``defaults:`` keys; the target settings' (concurrency, timeout_s,
#: retries...) live in :class:`evalx.targets.TargetSettings`, resolved by :func:`evalx.targets.resolve_settings`
DEFAULTS: JSONObject = {"repeat": 1}


@dataclass
class Config:
    path: Path
    loaded: Loaded
    redactor: Redactor
    warnings: list[Issue] = field(default_factory=list)
    #: with ``load_config(..., raise_errors=False)``: the errors found (else they are raised)
    errors: list[Issue] = field(default_factory=list)
    #: the values read from ``system_file:``/``prompt_file:``/``tools_file:`` (config/files.py)
    file_values: list[FileValue] = field(default_factory=list)

    @property
    def data(self) -> dict[str, Any]:
        """The config as a mapping, after ``${VAR}`` interpolation; readers not yet moved to :attr:`typed` use it."""
        return self.loaded.data  # type: ignore[no-any-return]

    @functools.cached_property
    def typed(self) -> EvalConfig:
        """The config as typed records (:mod:`evalx.config.model`), built on first use from what the schema accepted."""
        from evalx.config.model import eval_config

        return eval_config(self.data)

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    @property
    def file(self) -> str:
        return self.loaded.file

    @property
    def name(self) -> str:
        return self.typed.name or self.path.parent.resolve().name

    # the mapping views below serve the readers not moved to :attr:`typed` yet (the runner, the planner, the CLI)

    @property
    def defaults(self) -> dict[str, Any]:
        """The ``defaults:`` section over :data:`DEFAULTS` (a fresh dict: changing it changes nothing)."""
        return {**DEFAULTS, **(self.data.get("defaults") or {})}

    @property
    def targets(self) -> list[dict[str, Any]]:
        return list(self.data["targets"])

    def target(self, target_id: str) -> dict[str, Any]:
        for t in self.targets:
            if t["id"] == target_id:
                return t
        raise KeyError(target_id)

    @property
    def datasets(self) -> list[dict[str, Any]]:
        return list(self.data["datasets"])

    @property
    def global_asserts(self) -> list[dict[str, Any]]:
        return list(self.data.get("assert") or [])

    @property
    def vars(self) -> dict[str, Any]:
        return dict(self.data.get("vars") or {})

    @property
    def output_dir(self) -> Path:
        return (self.base_dir / self.typed.output.dir).resolve()

    def input_files(self) -> list[Path]:
        """The files a run reads from the user: this config, its dataset files, plugin and target code files."""
        files = [self.path]
        for spec in self.data.get("datasets") or []:
            path = self.base_dir / str(spec.get("path", "")) if isinstance(spec, dict) and spec.get("path") else None
            if path is not None:
                files.extend(sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path])
        code = [str(t.get("callable", "")) for t in self.data.get("targets") or [] if isinstance(t, dict)]
        code += [str(p) for p in self.data.get("plugins") or []]
        files.extend(self.base_dir / ref.split(":")[0] for ref in code if ref.split(":")[0].endswith(".py"))
        files.extend(value.file for value in self.file_values)
        return files

    def line(self, path: KeyPath) -> int | None:
        return self.loaded.line_of(path)

    def issue(self, path: KeyPath, message: str, *, warning: bool = False) -> Issue:
        return Issue(self.file, self.line(path), format_path(path), message, warning)

    def default_target_ids(self) -> list[str]:
        """What ``evalx run`` runs without ``--target``/``--matrix``: ``defaults.targets``, else every target but the judge.

        A target that is only there to grade (``judge.target``) is not also run
        as a candidate (it would grade itself); ``--target`` or
        ``defaults.targets`` still run it when asked.
        """
        typed = self.typed
        if typed.defaults.targets:
            return list(typed.defaults.targets)
        candidates = [t.id for t in typed.targets if t.id != typed.judge.target]
        return candidates or [t.id for t in typed.targets]

    def check_env(self, target_ids: Iterable[str] | None = None) -> None:
        """Raise for variables that are unset but used by what will run.

        A variable under ``targets[i]`` counts only when that target runs, so
        ``--target offline`` works without the engine's key.
        """
        wanted = None if target_ids is None else set(target_ids)
        judge = (self.data.get("judge") or {}).get("target")
        if wanted is not None and isinstance(judge, str):
            wanted.add(judge)
        issues = []
        for path, var in self.loaded.missing_env:
            if path and path[0] == "targets" and wanted is not None and len(path) > 1:
                idx = path[1]
                if isinstance(idx, int) and self.targets[idx].get("id") not in wanted:
                    continue
            issues.append(self.issue(path, f"environment variable {var} is not set (use ${{{var}:-default}} for a default)"))
        if issues:
            raise ConfigError(issues)


def load_config(
    path: str | Path,
    *,
    env: Mapping[str, str] | None = None,
    var_overrides: Mapping[str, Any] | None = None,
    check_imports: bool = True,
    raise_errors: bool = True,
    document: Loaded | None = None,
    env_files: Sequence[str | os.PathLike[str]] = (),
    env_override: bool = False,
    env_file_values: Mapping[str, str] | None = None,
    trace: bool = False,
) -> Config:
    """Read and validate a config; raise :class:`ConfigError` with every issue.

    ``document``: the config already read (an in-memory one, :func:`mapping_document`);
    ``path`` then only places it (its folder is the config's folder).

    ``raise_errors=False`` returns the config with its errors in ``errors``
    (YAML that cannot be read at all still raises): ``evalx validate`` goes on
    to check the datasets, so one pass reports everything. The config's
    ``plugins:`` are imported first, whatever ``check_imports`` says (the
    schema needs their types); one that fails raises at once, since the rest
    would only repeat "unknown assertion type".

    ``env_files`` (``--env-file``) are loaded after the config's ``env_file:``, before
    ``${VAR}`` is resolved (config/env_files.py); ``env_override`` lets them replace set variables.
    With a ``document``, its caller loaded them (:func:`env_from_files`) and gives their values
    in ``env_file_values``, to be redacted. ``trace`` (``--trace``) turns ``tracing.receive`` on.
    """
    p = Path(path)
    env = os.environ if env is None else env
    from_env_files = dict(env_file_values or {})
    if document is None:
        loaded, from_env_files, env = _read_yaml(p, env, env_files, env_override)
    else:
        loaded = document
    load_plugins_of(loaded, p.resolve().parent)
    if trace:  # --trace: as if the config said tracing: {receive: true}
        tracing = loaded.data.get("tracing")
        loaded.data["tracing"] = {**(tracing if isinstance(tracing, dict) else {}), "receive": True}
    if var_overrides:
        loaded.data["vars"] = {**(loaded.data.get("vars") or {}), **var_overrides}

    redactor = Redactor()
    for name, value in loaded.env_values.items():
        if looks_secret_name(name) or name in (loaded.data.get("secrets") or []):
            redactor.add(value)
    for name in loaded.data.get("secrets") or []:
        if isinstance(name, str) and env.get(name):
            redactor.add(env[name])
    secrets = [n for n in loaded.data.get("secrets") or [] if isinstance(n, str)]
    redactor.add_environment(env, secrets)  # reachable through {{ env.X }} and os.environ, not only ${VAR}
    for value in from_env_files.values():  # every value of a .env file is a secret
        redactor.add(value, FREE_TEXT_MIN)
        redactor.add_urls_in(value)
    config = Config(p.resolve(), loaded, redactor)
    _add_configured_secrets(loaded.data, redactor)
    use_folder(config.base_dir)  # {% include %} reads from the config's folder from now on
    config.file_values, issues = resolve_file_keys(loaded, config.base_dir, tools_schema())

    issues += coercion_issues(config)
    coerced = {i.path for i in issues}  # the schema would say the same of them, less clearly
    issues += [i for i in schema_issues(config) if i.path not in coerced]
    issues += semantic_issues(config, check_imports=check_imports)
    issues.sort(key=lambda i: (i.file != config.file, i.line or 0))  # then those of files it names (a tools_file)
    if redactor:  # a message may quote a value, and a value may be a secret
        issues = [dataclasses.replace(i, message=redactor.text(i.message)) for i in issues]
    errors = [i for i in issues if not i.warning]
    if errors and raise_errors:
        raise ConfigError(errors)
    config.errors = errors
    config.warnings.extend(i for i in issues if i.warning)
    return config


def mapping_document(data: Mapping[str, Any], file: str, env: Mapping[str, str] | None = None) -> Loaded:
    """An in-memory config (a dict of YAML-able values) read as a file would be (``${VAR}`` included), without line numbers."""
    import yaml

    try:
        text = yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True)
    except yaml.YAMLError as exc:
        raise ConfigError(Issue(file, None, "", f"cannot be read as a config: {exc}")) from None
    loaded = load_yaml(text, file, env=os.environ if env is None else env, template_path=template_path)
    if not isinstance(loaded.data, dict):
        raise ConfigError(Issue(file, None, "", "the config must be a mapping with targets: and datasets:"))
    loaded.lines = {}  # the lines of a text nobody wrote would only mislead
    return loaded


def _add_configured_secrets(value: Any, redactor: Redactor) -> None:
    """Every ``api_key``, every ``headers:`` value (but the harmless headers') and the credentials of every URL."""
    if isinstance(value, str):
        redactor.add_urls_in(value)  # base_url: http://user:password@host/v1, url: ...?api_key=... anywhere
    elif isinstance(value, dict):
        for key, item in value.items():
            if key == "api_key" and isinstance(item, str):
                redactor.add(item)
            elif key == "headers" and isinstance(item, dict):
                for name, header_value in item.items():
                    redactor.add_header(name, header_value)
            else:
                _add_configured_secrets(item, redactor)
    elif isinstance(value, list):
        for item in value:
            _add_configured_secrets(item, redactor)


#: the keys of a target (and of an inline judge target) whose strings are Jinja templates
_TEMPLATE_KEYS = frozenset({"body", "params", "system", "prompt", "messages"})


def _template_issues(config: Config, value: Any, path: KeyPath, from_files: dict[KeyPath, str] | None = None) -> list[Issue]:
    """A syntax error or a bad include in any template field of the config (what every cell would fail on at run time)."""
    from evalx.common.templates import template_problem

    if from_files is None:  # the values read from system_file: and co. are named by their file in a problem
        from_files = {v.path: f"{v.file_key[-1]} {display_path(v.file)}: " for v in config.file_values}
    if isinstance(value, str):
        problem = template_problem(value, config.base_dir) if template_path(path) else None
        return [config.issue(path, from_files.get(path, "") + problem)] if problem else []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return [issue for key, item in items for issue in _template_issues(config, item, (*path, key), from_files)]


def template_path(path: KeyPath) -> bool:
    """Whether the string at ``path`` is rendered as a template: a target's prompt, body... or a judge's prompt.

    ``${VAR}`` interpolated there renders to the variable's value, never runs as template code.
    """
    if len(path) >= 3 and path[0] == "targets" and path[2] in _TEMPLATE_KEYS:
        return True
    if len(path) >= 3 and path[0] == "matrix" and path[1] in ("params", "include", "exclude") and "model" not in path:
        return True  # a matrix value other than model becomes a templated request param (exclude: to match them)
    for i, key in enumerate(path):
        if key == "judge" and i + 1 < len(path):
            rest = path[i + 1 :]
            if rest[0] == "prompt" or (rest[0] == "target" and len(rest) >= 2 and rest[1] in _TEMPLATE_KEYS):
                return True
    return False


def _read_yaml(
    p: Path, env: Mapping[str, str], env_files: Sequence[str | os.PathLike[str]] = (), env_override: bool = False
) -> tuple[Loaded, dict[str, str], Mapping[str, str]]:
    """The config file read and interpolated after the ``.env`` files it and ``--env-file`` name were loaded; their values; the environment."""
    shown = display_path(p)
    if not p.exists():
        raise ConfigError(Issue(shown, None, "", "config file not found (create one with `evalx init`)"))
    if p.is_dir():
        raise ConfigError(Issue(shown, None, "", "is a directory, not a config file"))
    try:  # a regular file only (a FIFO or a device is refused, never read), at most CONFIG's size
        text = read_text(p, CONFIG, shown=shown)
    except UnreadableFile as exc:
        raise ConfigError(Issue(shown, None, "", exc.reason)) from None
    from_env_files: dict[str, str] = {}
    if env_files or "env_file" in text:  # read once more, uninterpolated, for the files ${VAR} needs first
        raw = load_yaml(text, shown, interpolate=False)
        from_env_files, env = env_from_files(raw.data, raw.lines, shown, p.resolve().parent, env, env_files, env_override)
    loaded = load_yaml(text, shown, env=env, template_path=template_path)
    if not isinstance(loaded.data, dict):
        raise ConfigError(Issue(shown, loaded.line_of(()) or 1, "", "the config must be a mapping with targets: and datasets:"))
    return loaded, from_env_files, env


def env_from_files(
    data: object,
    lines: Mapping[KeyPath, int],
    file: str,
    base_dir: Path,
    env: Mapping[str, str],
    env_files: Sequence[str | os.PathLike[str]] = (),
    env_override: bool = False,
) -> tuple[dict[str, str], Mapping[str, str]]:
    """Load the ``.env`` files of a config (its ``env_file:``, then ``env_files``) into ``env``: their values, and ``env``.

    ``env`` is changed in place when it can be (``os.environ``: every later reader sees the values), else copied.
    """
    from evalx.config.env_files import EnvFile, apply_env_files, config_env_files

    files, override = config_env_files(data, lines, file, base_dir)
    files += [EnvFile(Path(f), "--env-file") for f in env_files]
    target = env if isinstance(env, MutableMapping) else dict(env)
    return apply_env_files(files, target, override=override or env_override), target


def load_plugins(path: str | Path) -> None:
    """Import a config's ``plugins:`` (and the entry-point plugins) without checking the rest: ``evalx schema -c``."""
    p = Path(path)
    load_plugins_of(_read_yaml(p, os.environ)[0], p.resolve().parent)


def load_plugins_of(loaded: Loaded, base_dir: Path) -> None:
    """Before the schema is built (it must know their types): the built-ins, the entry points, the config's ``plugins:``."""
    check_entry_point_plugins()
    import_config_plugins(loaded, base_dir)


# --- schema -----------------------------------------------------------------


def coercion_issues(config: Config) -> list[Issue]:
    """Read each ``${VAR}`` value the schema wants as a number or a boolean as one (in place); the values that are not one."""
    if not config.loaded.interpolated:
        return []
    from evalx.config.coercion import coerce_interpolated
    from evalx.config.schema import config_schema

    missing = {path for path, _ in config.loaded.missing_env}
    problems = coerce_interpolated(config.data, config.loaded.interpolated, config_schema(), missing)
    return [config.issue(path, message) for path, message in problems]


def schema_issues(config: Config) -> list[Issue]:
    from evalx.config.schema import config_schema

    validator = SchemaValidator(config_schema())
    issues: list[Issue] = []
    seen: set[tuple[Any, ...]] = set()
    for err in validator.iter_errors(config.data):
        for leaf in schema_error_leaves(err):
            path, message = describe_schema_error(leaf)
            message += _hint(config, path, message, leaf.instance)
            key = (path, message)
            if key not in seen:
                seen.add(key)
                issues.append(config.issue(path, message))
    issues.sort(key=lambda i: (i.line or 0, i.path))
    return issues


def _hint(config: Config, path: KeyPath, message: str, instance: Any) -> str:
    """What to write instead, for mistakes another tool's habits make: ``type: openai``, ``- contains: Paris``."""
    if message == "'type' is a required property" and "assert" in path:
        from evalx.assertions.hints import missing_type_hint

        return missing_type_hint(instance)
    if message.startswith("unknown type ") and path and path[-1] == "type" and isinstance(instance, str) and _is_target_path(path[:-1]):
        from evalx.targets.definitions import available, providers_dir_of

        if instance in available(providers_dir_of(config)):
            return f"; {instance!r} is a provider: write type: provider, provider: {instance}"
    return ""


def _is_target_path(path: KeyPath) -> bool:
    """``targets[i]``, or a judge's inline target (``judge.target``, also inside an assertion's ``judge:``)."""
    return (len(path) == 2 and path[0] == "targets") or (len(path) >= 2 and path[-2:] == ("judge", "target"))


# --- semantics --------------------------------------------------------------


def semantic_issues(config: Config, *, check_imports: bool = True) -> list[Issue]:
    data = config.data
    issues: list[Issue] = []
    target_ids: dict[str, int] = {}
    # the schema may have failed too: look only at entries well-formed enough to check
    for i, t in enumerate(_entries(data.get("targets"))):
        if t is None:
            continue
        if t["id"] in target_ids:
            first = config.line(("targets", target_ids[t["id"]]))
            issues.append(config.issue(("targets", i, "id"), f"duplicate target id {t['id']!r} (first at line {first})"))
        else:
            target_ids[t["id"]] = i
        if t.get("type") == "python" and check_imports and isinstance(t.get("callable"), str):
            problem = importable(t["callable"], config.base_dir)
            if problem:
                issues.append(config.issue(("targets", i, "callable"), problem))
        if t.get("type") == "provider" and isinstance(t.get("provider"), str):
            issues.extend(_provider_issues(config, ("targets", i, "provider"), t["provider"], t))

    issues.extend(_template_issues(config, data, ()))

    def check_ref(path: KeyPath, ref: Any, what: str) -> None:
        if isinstance(ref, str) and ref not in target_ids:
            issues.append(config.issue(path, f"unknown target {ref!r} in {what}{did_you_mean(ref, target_ids)}"))

    def section(key: str) -> JSONObject:
        return as_object(data.get(key))

    for j, ref in enumerate(_list(section("defaults").get("targets"))):
        check_ref(("defaults", "targets", j), ref, "defaults.targets")
    for j, ref in enumerate(_list(section("matrix").get("targets"))):
        check_ref(("matrix", "targets", j), ref, "matrix.targets")
    judge = section("judge")
    if "target" in judge:
        check_ref(("judge", "target"), judge["target"], "judge.target")
    issues.extend(_judge_provider_issues(config, judge, target_ids))
    gate_targets = section("gates").get("targets")
    for gate_target in gate_targets if isinstance(gate_targets, dict) else {}:
        check_ref(("gates", "targets", gate_target), gate_target, "gates.targets")

    dataset_ids: dict[str, int] = {}
    for i, d in enumerate(_entries(data.get("datasets"))):
        if d is None:
            continue
        if d["id"] in dataset_ids:
            first = config.line(("datasets", dataset_ids[d["id"]]))
            issues.append(config.issue(("datasets", i, "id"), f"duplicate dataset id {d['id']!r} (first at line {first})"))
        else:
            dataset_ids[d["id"]] = i
        if ("path" in d) == ("cases" in d):
            issues.append(config.issue(("datasets", i), "a dataset needs exactly one of 'path' or 'cases'"))
        for j, ref in enumerate(_list(d.get("targets"))):
            check_ref(("datasets", i, "targets", j), ref, f"datasets[{i}].targets")

    from evalx.assertions.deterministic import spec_problems
    from evalx.assertions.traces import NEEDS_TRACING, needs_tracing

    tracing = data.get("tracing")
    receiving = isinstance(tracing, dict) and tracing.get("receive") is True
    for i, spec in enumerate(_list(data.get("assert"))):
        if isinstance(spec, dict) and spec.get("type") in NEEDS_TRACING and not receiving:
            issues.append(config.issue(("assert", i, "type"), f"{spec['type']}: {needs_tracing() or ''}".rstrip(": ")))
        if isinstance(spec, dict) and spec.get("type") == "python" and check_imports and isinstance(spec.get("callable"), str):
            problem = importable(spec["callable"], config.base_dir)
            if problem:
                issues.append(config.issue(("assert", i, "callable"), problem))
        for inner, message in spec_problems(spec):  # what the schema cannot see: a json_schema's $ref outside it
            issues.append(config.issue(("assert", i, *inner), message))

    hooks = data.get("hooks")
    for name, hook in hooks.items() if isinstance(hooks, dict) and check_imports else ():  # a hook function that cannot import
        if isinstance(hook, dict) and isinstance(hook.get("callable"), str):
            problem = importable(hook["callable"], config.base_dir)
            if problem:
                issues.append(config.issue(("hooks", name, "callable"), problem))

    from evalx.config.matrix import matrix_issues

    issues += matrix_issues(config)
    issues += _matrix_param_warnings(config)
    return issues


def _matrix_param_warnings(config: Config) -> list[Issue]:
    """A ``matrix:`` axis or ``include`` key that the provider of a target it applies to does not list: a warning, as in ``params:``."""
    from evalx.config.matrix import FILE_AXES, TARGET_KEYS
    from evalx.targets.definitions import UnknownProvider, find_provider, providers_dir_of, target_problems

    matrix = config.data.get("matrix")
    if not isinstance(matrix, dict):
        return []
    keyed: list[tuple[KeyPath, Any]] = []  # (where the key is written, the key)
    if isinstance(matrix.get("params"), dict):
        keyed += [(("matrix", "params", key), key) for key in matrix["params"]]
    for i, entry in enumerate(_list(matrix.get("include"))):
        if isinstance(entry, dict):
            keyed += [(("matrix", "include", i, key), key) for key in entry]
    keyed = [(path, key) for path, key in keyed if isinstance(key, str) and key not in TARGET_KEYS and key not in FILE_AXES]
    if not keyed:
        return []
    chosen = matrix.get("targets")
    issues: list[Issue] = []
    said: set[KeyPath] = set()
    for t in config.targets:
        if t.get("type") != "provider" or not isinstance(t.get("provider"), str):
            continue
        if isinstance(chosen, list) and t.get("id") not in chosen:
            continue
        try:
            definition = find_provider(t["provider"], providers_dir_of(config))
        except (UnknownProvider, ConfigError):  # said where the target names it
            continue
        probe = {"params": {key: None for _, key in keyed}}
        unknown = {inner[-1]: message for inner, message, warning in target_problems(probe, definition) if warning}
        for path, key in keyed:
            if key in unknown and path not in said:
                said.add(path)
                issues.append(config.issue(path, unknown[key], warning=True))
    return issues


def _judge_provider_issues(config: Config, judge: JSONObject, target_ids: dict[str, int]) -> list[Issue]:
    """An inline provider judge checked as a target is; ``judge.batch`` needs a judge whose provider has a batch API."""
    ref = judge.get("target")
    provider = ref.get("provider") if isinstance(ref, dict) else None
    if isinstance(ref, dict) and ref.get("type") == "provider" and isinstance(provider, str):
        issues = _provider_issues(config, ("judge", "target", "provider"), provider, ref)
        spec: Any = ref
    else:
        issues, spec = [], config.targets[target_ids[ref]] if isinstance(ref, str) and ref in target_ids else None
    batch = judge.get("batch")
    if batch is None or batch is False or not isinstance(spec, dict) or spec.get("type") != "provider":
        return issues
    from evalx.targets.definitions import UnknownProvider, find_provider, providers_dir_of

    try:
        definition = find_provider(str(spec.get("provider")), providers_dir_of(config))
    except (UnknownProvider, ConfigError):  # said where the target names it
        return issues
    if definition.batch is None:
        issues.append(
            config.issue(("judge", "batch"), f"provider {definition.name!r} has no batch API ({definition.file} has no batch: section)")
        )
    return issues


def _provider_issues(config: Config, path: KeyPath, name: str, spec: JSONObject | None = None) -> list[Issue]:
    """The provider a target names must exist, and its definition must be valid (errors name its FILE:LINE);
    the target's ``stream``/``params`` are checked against it (an unknown param is a warning)."""
    from evalx.targets.definitions import UnknownProvider, find_provider, providers_dir_of, target_problems

    try:
        definition = find_provider(name, providers_dir_of(config))
    except UnknownProvider as exc:  # this config's error
        reason = exc.reason
        beside = config.base_dir / "providers" / f"{name}.yaml"
        if config.data.get("providers_dir") is None and beside.is_file():  # written, but not where the config looks
            reason += f" (providers/{name}.yaml is here: add `providers_dir: providers` to the config)"
        return [config.issue(path, reason)]
    except ConfigError as exc:  # a broken definition: its issues name its own FILE:LINE
        return list(exc.issues)
    if spec is None:
        return []
    return [config.issue((*path[:-1], *inner), message, warning=warning) for inner, message, warning in target_problems(spec, definition)]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _entries(value: Any) -> list[dict[str, Any] | None]:
    """Each list item that is a mapping with a string id, else None (keeps indexes)."""
    return [v if isinstance(v, dict) and isinstance(v.get("id"), str) else None for v in _list(value)]


def importable(ref: str, base_dir: Path) -> str | None:
    """None when ``module:function`` (or ``file.py:function``) resolves; else why not."""
    try:
        resolve_callable(ref, base_dir)
    except ImportError as exc:
        return str(exc)
    return None
