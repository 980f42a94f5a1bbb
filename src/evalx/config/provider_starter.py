"""``evalx init --provider NAME``: the provider starter's ``evalconfig.yaml`` for a shipped provider, written from its definition.

The definition says what the config names: the provider, its ``example_model:``, where the key
comes from (``auth.env``, or the ``auth:`` kind's credentials and the extra it needs), the
variables its URL needs (``${AZURE_OPENAI_ENDPOINT}``), and a ``region:`` when its URL has
one. The same setup steps are printed as ``evalx init``'s next steps, so a new definition is
covered without a line here. Only shipped definitions: a new folder has no ``providers_dir:``.
"""

from __future__ import annotations

import json
import re

from evalx.targets.definitions import ProviderDefinition, available, find_provider
from evalx.targets.transport.auth import AUTH_EXTRAS, EXAMPLE_REGIONS, REGION_VARIABLES

__all__ = ["config_text", "load", "next_steps", "setup_steps", "shipped_names"]

#: ``${VAR}`` with no default: a variable the definition cannot do without
_REQUIRED_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: ``${VAR:-default}``
_DEFAULTED_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):-([^}]*)\}")
#: the model written when a definition names no ``example_model:``
MODEL_PLACEHOLDER = "your-model"


def shipped_names() -> list[str]:
    """The shipped providers' names, sorted."""
    return [name for name, entry in available(None).items() if entry.shipped]


def load(name: str) -> ProviderDefinition:
    """The shipped definition ``name``; :class:`~evalx.errors.UnknownProvider` (with a did-you-mean and the list) if none."""
    return find_provider(name, None)


def _command_width(steps: list[tuple[str, str]]) -> int:
    return max((len(command) for command, _ in steps if command), default=0)


def setup_steps(d: ProviderDefinition) -> list[tuple[str, str]]:
    """``(shell command, why)`` for what to do before ``evalx run`` (a step with no command is a note)."""
    steps: list[tuple[str, str]] = []
    kind = d.auth.kind
    if kind in AUTH_EXTRAS:
        steps.append((f"pip install '{AUTH_EXTRAS[kind]}'", f"auth kind {kind} needs it"))
    if kind == "google":
        steps.append(("gcloud auth application-default login", "Application Default Credentials (or GOOGLE_APPLICATION_CREDENTIALS)"))
    elif kind == "sigv4":
        steps.append(("export AWS_PROFILE=...", "or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY: botocore's credential chain"))
    elif kind == "bearer_from_command":
        steps.append(("", f"the bearer token comes from `{' '.join(d.auth.command)}` (evalx runs it)"))
    for name in _required_vars(d):
        steps.append((f"export {name}=...", f"{d.name}'s URL needs it"))
    if kind == "header" and d.auth_envs:
        first, others = d.auth_envs[0], d.auth_envs[1:]
        why = "your API key" if d.auth_required else "your API key, if the server wants one"
        if others:
            why += f" ({', '.join(others)} works too)"
        steps.append((f"export {first}=...", why))
    elif kind == "header" and not d.auth_required:
        steps.append(("", "no key is sent"))
    base = _defaulted_base(d)
    if base is not None and _is_local(base[1]):
        steps.append(("", f"the server must be running on {base[1]} ({base[0]} points elsewhere)"))
    return steps


def _is_local(url: str) -> bool:
    return re.search(r"//(localhost|127\.0\.0\.1)[:/]", url + "/") is not None


def _required_vars(d: ProviderDefinition) -> list[str]:
    """The ``${VAR}`` (no default) in the definition's base URL and request path, in order."""
    found: list[str] = []
    for path in (("base_url",), ("request", "path")):
        for name in _REQUIRED_VAR.findall(d.written(*path) or ""):
            if name not in found:
                found.append(name)
    return found


def _defaulted_base(d: ProviderDefinition) -> tuple[str, str] | None:
    """``(VAR, default)`` of a base URL written ``${VAR:-default}``."""
    m = _DEFAULTED_VAR.fullmatch((d.written("base_url") or "").strip())
    return (m.group(1), m.group(2)) if m else None


def _comment(steps: list[tuple[str, str]], indent: str, note: str = "# ") -> list[str]:
    """The steps as lines: ``command   # why``, aligned; a note (no command) as ``{note}why``."""
    width = _command_width(steps)
    return [f"{indent}{command.ljust(width)}   # {why}" if command else f"{indent}{note}{why}" for command, why in steps]


def next_steps(d: ProviderDefinition) -> list[str]:
    """What ``evalx init`` prints after writing the starter for ``d`` (``{dir}`` is the folder)."""
    return ["cd {dir}", *_comment(setup_steps(d), ""), "evalx run"]


def config_text(d: ProviderDefinition) -> str:
    """The starter's ``evalconfig.yaml`` for ``d``: it validates as written and runs once the setup steps are done."""
    header = [
        "# yaml-language-server: $schema=./evalconfig.schema.json",
        f"# A model behind provider {d.name}: {d.description or d.name}.",
        f"# `evalx providers show {d.name}` prints its definition; the evalx docs' providers page",
        "# says what works with it.",
        "#",
        "# Before `evalx run`:",
        *_comment(setup_steps(d), "#   ", note=""),
    ]
    base = _defaulted_base(d)
    if base is not None and not _is_local(base[1]):
        header.append(f"# The API's address: {base[1]} (set {base[0]}, or the target's base_url, for another).")
    model = d.example_model or MODEL_PLACEHOLDER
    target = [
        "  - id: model",
        "    type: provider",
        f"    provider: {d.name}",
        f"    model: {json.dumps(model)}".ljust(42) + "# an example: the model you want",
    ]
    if d.uses_region:
        kind = d.auth.kind
        region = EXAMPLE_REGIONS.get(kind, "REGION")
        variables = REGION_VARIABLES.get(kind, ())
        why = f"else {' or '.join(variables)}" if variables else "in the API's URL"
        target.append(f"    region: {region}".ljust(42) + f"# {why}")
    target += [
        "    # params: {temperature: 0}            # sent to the API as they are",
        "    system_file: prompts/system.txt       # one system prompt for every case",
        '    prompt: "{{ case.input }}"            # the user message (a Jinja2 template)',
    ]
    body = [
        "version: 1",
        f"name: my-{d.name}",
        "",
        "defaults:",
        "  concurrency: 4",
        "  timeout_s: 60",
        "  retries: 2",
        "",
        "targets:",
        *target,
        "",
        "datasets:",
        "  - id: golden",
        "    path: datasets/cases.yaml",
        "",
        "assert:                                   # applied to every case",
        "  - {type: completed}",
        "  - {type: max_latency_ms, value: 30000}",
    ]
    return "\n".join([*header, *body]) + "\n"
