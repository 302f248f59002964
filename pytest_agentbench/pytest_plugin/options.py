"""Every option of every layer, registered with pytest once and read once (pytest-timeout's habit).

Each layer declares its settings as a tuple of ``core.options.Option``; this module gives each one a
command-line flag (``dest`` = ``option.dest``, default None so "not given" is visible, ``--no-<flag>``
for negatable booleans) and, when it has one, an ini key with the same help text. ``read`` builds the
raw ``Sources`` of one run from the config and resolves them into a frozen ``Settings`` at configure
time; after that nothing reads ``config.getoption`` or ``config.getini``.
"""

from __future__ import annotations

import os
from argparse import SUPPRESS
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import pytest

from ..backends.slurm.commands import SLURM_OPTIONS
from ..benchmarks.registry import benchmark_names, declared_options
from ..core import runfile
from ..core.jobs import BACKEND_OPTIONS
from ..core.options import (
    HELP_GROUPS,
    SET_FLAG,
    Option,
    OptionError,
    Settings,
    Sources,
    by_name,
    help_group_title,
    help_text,
    place,
    resolve,
    set_values,
)
from ..core.run_options import RUN_OPTIONS
from ..envs.options import ENV_OPTIONS
from ..models.options import MODEL_OPTIONS
from ..report.options import REPORT_OPTIONS
from ..sandbox.options import SANDBOX_OPTIONS

GROUP_PREFIX = "agentbench"  # every group of the plugin in pytest --help: "agentbench (model, cost and budget)"
METAVARS = {
    "int": "N",
    "float": "NUMBER",
    "path": "PATH",
    "list": "A,B",
    "multi": "VALUE",
    "json": "JSON",
    "size": "SIZE",
}


def all_options() -> tuple[Option, ...]:
    """The options of every layer and of every installed benchmark, each once, in a stable order (the benchmarks'
    declarations are read without loading the benchmarks: benchmarks/registry.py)."""
    # each layer's help group, for its options that name none (Option.help_group)
    options: list[Option] = [
        *place(RUN_OPTIONS, "run"),
        *place(SANDBOX_OPTIONS, "isolation"),
        *place(MODEL_OPTIONS, "model"),
        *place(ENV_OPTIONS, "isolation"),
        *place(REPORT_OPTIONS, "gates"),
        *place(BACKEND_OPTIONS, "distribution"),  # before the Slurm options, as --bench-backend always was
        *place(SLURM_OPTIONS, "distribution"),
        *declared_options(),
    ]
    options = [with_choices(o) for o in options]
    by_name(options)  # a name or flag declared twice is a programming error, found at start-up
    return tuple(options)


def with_choices(option: Option) -> Option:
    """--bench lists the installed benchmarks in its help."""
    names = benchmark_names()
    if option.name == "bench" and names:
        return replace(option, help=f"{option.help} Installed: {', '.join(names)}.")
    return option


def help_groups(options: tuple[Option, ...]) -> dict[str, list[Option]]:
    """The options by the title of their ``pytest --help`` group: the shared groups in HELP_GROUPS's order, then
    each benchmark's; a group without options is left out."""
    order = [*HELP_GROUPS.values(), *sorted({help_group_title(o) for o in options} - set(HELP_GROUPS.values()))]
    grouped: dict[str, list[Option]] = {title: [] for title in order}
    for option in options:
        grouped[help_group_title(option)].append(option)
    return {title: found for title, found in grouped.items() if found}


# The one repeatable flag for the options not shown (Option.shown); declared as an Option for the readers of the
# command line (pathargs), never resolved as a setting itself: its entries become the named options' values.
SET_OPTION = Option(
    "set",
    SET_FLAG,
    "set any other setting by its name, repeatable: --bench-set tool_concurrency=4 --bench-set executor=subprocess "
    "(each is also an ini key agentbench_NAME and a run-file key; `python -m pytest_agentbench options` lists "
    "every setting, its default and help). A name no setting has is a usage error naming the close ones.",
    kind="multi",
    metavar="NAME=VALUE",
    runfile_group=None,
    stored=False,
    help_group="run",
)


def register(parser: pytest.Parser, options: tuple[Option, ...]) -> None:
    after = None
    for title, grouped in help_groups(tuple(o for o in options if o.shown) + (SET_OPTION,)).items():
        name = f"{GROUP_PREFIX} ({title})"
        register_group(parser, parser.getgroup(name, name, after=after), grouped)
        after = name
    hidden = [o for o in options if not o.shown]
    register_removed(parser.getgroup(GROUP_PREFIX), hidden)
    for option in hidden:
        register_ini(parser, option)


def register_removed(group: pytest.OptionGroup, options: list[Option]) -> None:
    """The old flags of the options not shown: accepted by the parser, out of --help, and refused with the new
    spelling (``removed_flag_error``), so a script or an ini file's addopts that still gives one is not ignored."""
    for option in options:
        if option.kind == "bool":
            group.addoption(option.flag, dest=removed_dest(option), action="store_true", help=SUPPRESS)
            if option.negative_flag is not None:
                group.addoption(option.negative_flag, dest=removed_dest(option), action="store_true", help=SUPPRESS)
        else:
            group.addoption(option.flag, dest=removed_dest(option), default=None, help=SUPPRESS)


def removed_dest(option: Option) -> str:
    return f"agentbench_removed_{option.name}"


def removed_flag_error(namespace: Any, options: tuple[Option, ...]) -> str | None:
    """The usage error for the old flags given (of options no longer shown), naming each one's new spelling."""
    given = [o for o in options if not o.shown and getattr(namespace, removed_dest(o), None) not in (None, False)]
    if not given:
        return None
    spelled = "; ".join(
        f"{o.flag}{'/' + o.negative_flag if o.negative_flag else ''} is now {o.usage()}"
        + (f" (or ini {o.ini})" if o.ini else "")
        for o in given
    )
    return f"agentbench: {spelled}. `python -m pytest_agentbench options` lists every setting."


def register_ini(parser: pytest.Parser, option: Option) -> None:
    if option.ini:
        # a named Literal: mypy reads a bare string in a conditional as a type form against pytest 9.2's stubs
        ini_type: Literal["linelist", "string"] = "linelist" if option.kind == "multi" else "string"
        parser.addini(option.ini, help=help_text(option), type=ini_type)


def register_group(parser: pytest.Parser, group: pytest.OptionGroup, options: list[Option]) -> None:
    for option in options:
        text = help_text(option)
        cli_help = text.replace("%", "%%")  # argparse %-formats help texts
        if option.kind == "bool":
            group.addoption(option.flag, dest=option.dest, action="store_true", default=None, help=cli_help)
            if option.negative_flag is not None:  # a negatable option's
                group.addoption(
                    option.negative_flag,
                    dest=option.dest,
                    action="store_false",
                    default=None,
                    help=f"the opposite of {option.flag}.",
                )
        elif option.kind == "multi":
            group.addoption(
                option.flag,
                dest=option.dest,
                action="append",
                default=None,
                metavar=option.metavar or METAVARS["multi"],
                help=cli_help,
            )
        elif option.kind == "choice":
            group.addoption(
                option.flag,
                dest=option.dest,
                default=None,
                choices=option.choices,
                metavar=option.metavar,
                help=cli_help,
            )
        else:
            group.addoption(
                option.flag,
                dest=option.dest,
                default=None,
                metavar=option.metavar or METAVARS.get(option.kind, "VALUE"),
                help=cli_help,
            )
        register_ini(parser, option)


def sources(
    config: pytest.Config, options: tuple[Option, ...], model: str | None = None, agent: str | None = None
) -> Sources:
    """The raw values of this run: command line, environment, run file, ini file and the folders paths are
    relative to. ``model``, ``agent``: the run file's entries to take (default: the ones --model and
    --bench-agent name, or the only one)."""
    cli = command_line_values(config.option, options)
    ini: dict[str, Any] = {o.name: config.getini(o.ini) for o in options if o.ini}
    inipath = config.inipath
    found = Sources(
        cli=cli,
        ini=ini,
        env=dict(os.environ),
        invocation_dir=Path(config.invocation_params.dir),
        rootdir=Path(config.rootpath),
        ini_dir=inipath.parent if inipath else None,
    )
    run_file = load_run_file(found, options)
    if run_file is None:
        return found
    picked = model if model is not None else cli.get("model")
    picked_agent = agent if agent is not None else cli.get("agent")
    return replace(found, file=run_file.values_for(picked, found.env, picked_agent), file_dir=run_file.folder)


def command_line_values(namespace: Any, options: tuple[Option, ...]) -> dict[str, Any]:
    """Option name -> the command line's value: its flag's, else a ``--bench-set NAME=VALUE`` entry's (an option
    not shown has only these; the plugin's own machinery may also set its ``dest``, as a remote worker's
    settings do). A bad entry is a usage error."""
    try:
        entries = set_values(getattr(namespace, SET_OPTION.dest, None) or (), options)
    except OptionError as exc:
        raise pytest.UsageError(f"agentbench: {exc}") from None
    values: dict[str, Any] = {}
    for option in options:
        value = getattr(namespace, option.dest, None)
        values[option.name] = entries.get(option.name) if value is None else value
    return values


def several_runs(config: pytest.Config, options: tuple[Option, ...], opts: Settings) -> dict[str, Settings]:
    """Run name -> that run's settings, when the run file lists several models or agents and the command line
    picks none (one run per (model, agent) pair, named ``<model>``, or ``<model>+<agent>`` when it lists several
    agents); else {}. A resumed or replayed run is one run's folder."""
    found = sources(config, options)
    run_file = load_run_file(found, options)
    if run_file is None or opts.resume or opts.replay:
        return {}
    check_agents_apply(run_file, options, opts.bench)
    pairs = run_file.runs(found.cli.get("model"), found.cli.get("agent"))
    if len(pairs) < 2:
        return {}
    several_agents = any(agent is not None for _, agent in pairs)
    out: dict[str, Settings] = {}
    try:
        for model, agent in pairs:
            settings = resolve(options, sources(config, options, model, agent.name if agent else None))
            name = str(settings.model or "none")
            out[f"{name}+{agent.run_label}" if several_agents and agent else name] = settings
    except OptionError as exc:
        raise pytest.UsageError(f"agentbench: {exc}") from None
    return out


def check_agents_apply(run_file: runfile.RunFile, options: tuple[Option, ...], bench: str | None) -> None:
    """A run file's ``agents:`` belongs to the benchmark that declares the agent option (a usage error else)."""
    owner = by_name(options)["agent"].owner if run_file.agents else None
    if owner and bench and owner != bench:
        raise pytest.UsageError(
            f"agentbench: {run_file.where(run_file.agents[0].line)}: agents: choose the agent of --bench={owner}; "
            f"--bench={bench} has no agents to choose (remove the agents: section, or run --bench={owner})"
        )


def load_run_file(found: Sources, options: tuple[Option, ...]) -> runfile.RunFile | None:
    """The run file --bench-config (or its ini key or $AGENTBENCH_CONFIG) names, read and checked."""
    config_option = by_name(options).get("config")
    if config_option is None:
        return None
    path = resolve([config_option], found)["config"]
    return runfile.load(path, options) if path is not None else None


# The options that ask for a benchmark run: without one of them given, the plugin does nothing in the session.
ASKING = ("bench", "config", "resume", "replay")


def asks_for_benchmark(early_config: pytest.Config, options: tuple[Option, ...]) -> bool:
    """Whether the session asks for a benchmark: one of ``ASKING`` given on the command line, in its environment
    variable or in its ini key. Nothing is resolved or checked here: a run that asks reads them all at configure."""
    namespace = early_config.known_args_namespace
    declared = by_name(options)
    for name in ASKING:
        option = declared.get(name)
        if option is None:
            continue
        if getattr(namespace, option.dest, None) not in (None, "", []):
            return True
        if option.env and os.environ.get(option.env, ""):
            return True
        if option.ini and early_config.getini(option.ini) not in (None, "", []):
            return True
    return False


def run_file_arguments(early_config: pytest.Config, options: tuple[Option, ...]) -> list[str]:
    """pytest flags (-k, -m, --deselect, -n) a run file gives that the command line did not."""
    namespace = early_config.known_args_namespace
    config_option = by_name(options)["config"]
    inipath = early_config.inipath
    found = Sources(
        cli={"config": getattr(namespace, config_option.dest, None)},
        ini={"config": early_config.getini(config_option.ini or "")},
        env=dict(os.environ),
        invocation_dir=Path(early_config.invocation_params.dir),
        rootdir=Path(early_config.rootpath),
        ini_dir=inipath.parent if inipath else None,
    )
    try:
        run_file = load_run_file(found, options)
    except OptionError as exc:
        raise pytest.UsageError(f"agentbench: {exc}") from None
    if run_file is None:
        return []
    given = {
        "k": bool(getattr(namespace, "keyword", "")),
        "m": bool(getattr(namespace, "markexpr", "")),
        "deselect": bool(getattr(namespace, "deselect", None)),
        "n": getattr(namespace, "numprocesses", None) is not None,
    }
    if not hasattr(namespace, "numprocesses") and "n" in run_file.pytest_args:
        line = run_file.pytest_args["n"].line
        raise pytest.UsageError(
            f"agentbench: {run_file.where(line)}: pytest: n needs pytest-xdist, which is not "
            f"active (pip install pytest-xdist, or remove -p no:xdist)"
        )
    return runfile.pytest_arguments(run_file, given)


def read(config: pytest.Config, options: tuple[Option, ...]) -> Settings:
    """Every option's value, resolved once; a bad value is a usage error that names where it came from."""
    try:
        return resolve(options, sources(config, options))
    except OptionError as exc:
        raise pytest.UsageError(f"agentbench: {exc}") from None
