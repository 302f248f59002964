"""Run files: a YAML (or JSON) file that says what a command line would, kept in a repository.

    bench:   {bench: scicode, split: validation, timeout: 600}    # any option, by its name
    models:  [{name: gpt-4o, base_url: ..., api_key_env: OPENAI_API_KEY, params: {temperature: 0}}]
    agents:  [builtin, codex, {name: command, command: "my-agent --task prompt.txt"}]
    gates:   {fail_under: ["main=40%"], max_drop: ["main=50%"], baseline: reports/base}
    pytest:  {k: "not 51", m: validation, deselect: [...], n: 2}

Keys are the options' own names (``Option.name``); ``gates:`` takes the options that declare
``runfile_group="gates"``, ``bench:`` every other option that is not a model's. Each (model, agent) pair of
``models:`` and ``agents:`` is one run (``runs``); a session runs them all unless ``--model`` or
``--bench-agent`` picks one. A value read here keeps
where it came from (``file agentbench.yaml:12``), which errors and settings.json name. Precedence is the
resolver's: command line > environment > run file > ini > default. The API key is never in the file:
``api_key_env`` names the environment variable that holds it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .options import Option, OptionError

GROUPS = ("bench", "models", "agents", "gates", "pytest")
# pytest's own options a run file may give, and the flag each becomes on pytest's command line
PYTEST_KEYS = {"k": "-k", "m": "-m", "deselect": "--deselect", "n": "-n"}
# keys of one entry of ``models:`` -> the model option each sets
MODEL_KEYS = {
    "name": "model",
    "base_url": "model_base_url",
    "protocol": "model_protocol",
    "params": "model_params",
    "timeout": "model_timeout",
    "max_retries": "model_max_retries",
    "max_retry_time": "model_max_retry_time",
    "retry_delay": "model_retry_delay",
    "preflight": "model_preflight",
    "price": "model_price",
}
KEY_ENV = "api_key_env"
MODEL_GROUP = "models"
# keys of one entry of ``agents:`` (a name alone, or a mapping of these) -> the option each sets
AGENT_KEYS = {"name": "agent", "command": "agent_command"}
AGENT_GROUP = "agents"


@dataclass(frozen=True)
class Located:
    """A value read from the file and the line it stands on (1-based)."""

    value: Any
    line: int


@dataclass(frozen=True)
class ModelEntry:
    name: str
    values: Mapping[str, Located]  # option name -> value (model options only)
    line: int


@dataclass(frozen=True)
class AgentEntry:
    name: str  # as --bench-agent takes it: ``codex``, ``codex==0.171.0``, ``command``
    values: Mapping[str, Located]  # option name -> value (the agent options only)
    line: int

    @property
    def run_label(self) -> str:
        """The agent as a run's name shows it (``codex==0.171.0`` -> ``codex-0.171.0``)."""
        return self.name.replace("==", "-")


@dataclass(frozen=True)
class RunFile:
    """What a run file says, every value with its place."""

    path: Path
    options: Mapping[str, Located] = field(default_factory=dict)  # option name -> value
    models: tuple[ModelEntry, ...] = ()
    pytest_args: Mapping[str, Located] = field(default_factory=dict)  # "k", "m", "deselect", "n"
    agents: tuple[AgentEntry, ...] = ()

    def where(self, line: int) -> str:
        return f"file {self.path.name}:{line}"

    @property
    def folder(self) -> Path:
        return self.path.parent

    def model_names(self) -> list[str]:
        return [m.name for m in self.models]

    def values_for(
        self, model: str | None, env: Mapping[str, str], agent: str | None = None
    ) -> dict[str, tuple[Any, str]]:
        """Option name -> (raw value, where) for the resolver, with the model ``model`` and the agent ``agent``
        (or the only one of each; with several and none picked, the values every run shares)."""
        out = {name: (located.value, self.where(located.line)) for name, located in self.options.items()}
        picked = self.pick_agent(agent)
        if picked is not None:
            out.update({name: (located.value, self.where(located.line)) for name, located in picked.values.items()})
        entry = self.pick_model(model)
        if entry is not None:
            out.update(
                {
                    name: (located.value, self.where(located.line))
                    for name, located in entry.values.items()
                    if name != KEY_ENV
                }
            )
            if KEY_ENV in entry.values and env.get(str(entry.values[KEY_ENV].value)):
                # unset: no key from here (listing items needs none; a run's preflight says it is missing)
                out["model_api_key"] = self.api_key(entry, env)
        return out

    def runs(self, model: str | None, agent: str | None) -> list[tuple[str | None, AgentEntry | None]]:
        """(model entry's name, agent entry) of each run the file asks for, models outermost: every listed model
        unless ``model`` (--model) picks one, with every listed agent unless ``agent`` (--bench-agent) picks one
        (None: what the rest of the settings say)."""
        models: list[str | None] = [model] if model is not None or not self.models else [*self.model_names()]
        agents: list[AgentEntry | None] = [None] if agent is not None or not self.agents else list(self.agents)
        return [(m, a) for m in models for a in agents]

    def several(self, model: str | None, agent: str | None = None) -> bool:
        """Whether this session runs several runs (models or agents listed, and none picked on the command line)."""
        return len(self.runs(model, agent)) > 1

    def pick_agent(self, agent: str | None) -> AgentEntry | None:
        """The entry of ``agent`` (or the only one); None when the file lists none, or several and none is picked."""
        if agent is not None:
            return next((a for a in self.agents if a.name == agent), None)
        return self.agents[0] if len(self.agents) == 1 else None

    def pick_model(self, model: str | None) -> ModelEntry | None:
        """The entry of ``model`` (or the only one); None when the file lists none, or several and none is
        picked (a run of several models resolves each entry on its own: ``values_for(name, ...)``)."""
        if not self.models:
            return None
        if model is not None:
            return next((m for m in self.models if m.name == model), None)
        return self.models[0] if len(self.models) == 1 else None

    def api_key(self, entry: ModelEntry, env: Mapping[str, str]) -> tuple[Any, str]:
        located = entry.values[KEY_ENV]
        variable = str(located.value)
        return env[variable], f"${variable} (named at {self.where(located.line)})"


def load(path: Path, options: Iterable[Option]) -> RunFile:
    """Read and check a run file; an unknown key or a malformed file is an OptionError naming file and line."""
    import yaml  # why: only a run with a run file needs it

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise OptionError(f"run file {path} cannot be read ({exc}); check --bench-config") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f":{mark.line + 1}" if mark is not None else ""
        raise OptionError(f"run file {path.name}{at} is not valid YAML ({getattr(exc, 'problem', exc)})") from None
    reader = _Reader(path, {o.name: o for o in options})
    return reader.run_file(root)


class _Reader:
    def __init__(self, path: Path, options: Mapping[str, Option]) -> None:
        self.path = path
        self.options = options

    def fail(self, node: Any, message: str) -> OptionError:
        line = node.start_mark.line + 1 if node is not None else 1
        return OptionError(f"file {self.path.name}:{line}: {message}")

    def mapping(self, node: Any, what: str) -> list[tuple[str, Any, Any]]:
        """(key, key node, value node) of a mapping node."""
        import yaml  # why: only a run with a run file needs it; plugin start-up stays light

        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, f"{what} must be a mapping of names to values")
        out = []
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.fail(key_node, f"{what}: a key must be a name")
            out.append((str(key_node.value), key_node, value_node))
        return out

    def value(self, node: Any) -> Any:
        import yaml  # why: only a run with a run file needs it; plugin start-up stays light

        return yaml.SafeLoader("").construct_object(node, deep=True) if node is not None else None

    def run_file(self, root: Any) -> RunFile:
        if root is None:
            raise OptionError(
                f"run file {self.path.name} is empty; `python -m pytest_agentbench init` writes an example"
            )
        options: dict[str, Located] = {}
        models: tuple[ModelEntry, ...] = ()
        agents: tuple[AgentEntry, ...] = ()
        pytest_args: dict[str, Located] = {}
        for key, key_node, value_node in self.mapping(root, "the run file"):
            if key == "bench":
                options.update(self.options_group(value_node, "bench"))
            elif key == "gates":
                options.update(self.options_group(value_node, "gates"))
            elif key == MODEL_GROUP:
                models = self.models(value_node)
            elif key == AGENT_GROUP:
                agents = self.agents(key_node, value_node)
            elif key == "pytest":
                pytest_args = self.pytest_group(value_node)
            else:
                raise self.fail(key_node, f"unknown section {key!r}; sections: {', '.join(GROUPS)}")
        return RunFile(self.path, options, models, pytest_args, agents)

    def options_group(self, node: Any, group: str) -> dict[str, Located]:
        out = {}
        for key, key_node, value_node in self.mapping(node, f"{group}:"):
            option = self.options.get(key)
            if option is None or option.runfile_group != group:
                raise self.fail(key_node, f"{group}: unknown key {key!r}; {self.valid_keys(group)}")
            out[key] = Located(as_raw(option, self.value(value_node)), key_node.start_mark.line + 1)
        return out

    def valid_keys(self, group: str) -> str:
        names = sorted(o.name for o in self.options.values() if o.runfile_group == group)
        return f"valid keys: {', '.join(names)}"

    def models(self, node: Any) -> tuple[ModelEntry, ...]:
        import yaml  # why: only a run with a run file needs it; plugin start-up stays light

        if not isinstance(node, yaml.SequenceNode) or not node.value:
            raise self.fail(node, "models: must be a list of models, e.g. - {name: gpt-4o, base_url: ...}")
        entries: list[ModelEntry] = []
        for item in node.value:
            values: dict[str, Located] = {}
            for key, key_node, value_node in self.mapping(item, "a model"):
                line = key_node.start_mark.line + 1
                if key == KEY_ENV:
                    values[KEY_ENV] = Located(str(self.value(value_node)), line)
                elif key == "api_key":
                    raise self.fail(
                        key_node,
                        f"a model: the API key itself never goes in a run file; give "
                        f"{KEY_ENV}: NAME_OF_THE_VARIABLE_THAT_HOLDS_IT",
                    )
                elif key in MODEL_KEYS:
                    name = MODEL_KEYS[key]
                    values[name] = Located(as_raw(self.options[name], self.value(value_node)), line)
                else:
                    raise self.fail(
                        key_node, f"a model: unknown key {key!r}; valid keys: {', '.join([*MODEL_KEYS, KEY_ENV])}"
                    )
            if "model" not in values:
                raise self.fail(item, "a model needs a name (name: gpt-4o)")
            name = str(values["model"].value)
            if name in (e.name for e in entries):
                raise self.fail(item, f"model {name!r} is listed twice")
            entries.append(ModelEntry(name, values, item.start_mark.line + 1))
        return tuple(entries)

    def agents(self, key_node: Any, node: Any) -> tuple[AgentEntry, ...]:
        """``agents:``: each entry an agent's name as --bench-agent takes it, or {name: ..., command: ...}."""
        import yaml  # why: only a run with a run file needs it; plugin start-up stays light

        if any(name not in self.options for name in AGENT_KEYS.values()):
            raise self.fail(key_node, "agents: no installed benchmark has agents to choose (--bench-agent)")
        if not isinstance(node, yaml.SequenceNode) or not node.value:
            raise self.fail(node, "agents: must be a list of agents, e.g. [builtin, codex]")
        entries: list[AgentEntry] = []
        for item in node.value:
            if isinstance(item, yaml.ScalarNode):
                given = {"agent": (item, item)}
            else:
                given = {}
                for key, key_node_, value_node in self.mapping(item, "an agent"):
                    if key not in AGENT_KEYS:
                        valid = ", ".join(AGENT_KEYS)
                        raise self.fail(key_node_, f"an agent: unknown key {key!r}; valid keys: {valid}")
                    given[AGENT_KEYS[key]] = (key_node_, value_node)
            if "agent" not in given:
                raise self.fail(item, "an agent needs a name (name: codex)")
            values = {
                name: Located(as_raw(self.options[name], self.value(value)), at.start_mark.line + 1)
                for name, (at, value) in given.items()
            }
            name = str(values["agent"].value)
            if name in (e.name for e in entries):
                raise self.fail(item, f"agent {name!r} is listed twice")
            entries.append(AgentEntry(name, values, item.start_mark.line + 1))
        return tuple(entries)

    def pytest_group(self, node: Any) -> dict[str, Located]:
        out = {}
        for key, key_node, value_node in self.mapping(node, "pytest:"):
            if key not in PYTEST_KEYS:
                raise self.fail(key_node, f"pytest: unknown key {key!r}; valid keys: {', '.join(PYTEST_KEYS)}")
            value = self.value(value_node)
            if key == "deselect":
                value = [str(v) for v in (value if isinstance(value, list) else [value])]
            elif key == "n":
                if isinstance(value, bool) or not (isinstance(value, int) or value in ("auto", "logical")):
                    raise self.fail(value_node, f"pytest: n must be a number of workers or auto, got {value!r}")
            else:
                value = str(value)
            out[key] = Located(value, key_node.start_mark.line + 1)
        return out


def as_raw(option: Option, value: Any) -> Any:
    """A YAML value in the form the resolver takes from a command line (lists joined, mappings as JSON)."""
    if option.kind == "list" and isinstance(value, list):
        return ",".join(str(v) for v in value)
    if option.kind == "multi":
        return [str(v) for v in value] if isinstance(value, list) else [str(value)]
    if option.kind == "json" or isinstance(value, dict):  # a mapping (a model's price) reaches its check as JSON
        return value if isinstance(value, str) else json.dumps(value)
    if option.kind in ("str", "choice", "path", "size") and value is not None:
        return str(value)
    return value


def pytest_arguments(run_file: RunFile, given: Mapping[str, bool]) -> list[str]:
    """pytest flags the run file adds: only those the command line did not give (``given[key]``)."""
    out: list[str] = []
    for key, located in run_file.pytest_args.items():
        if given.get(key):
            continue
        flag = PYTEST_KEYS[key]
        values = located.value if isinstance(located.value, list) else [located.value]
        for value in values:
            out += [flag, str(value)]
    return out
