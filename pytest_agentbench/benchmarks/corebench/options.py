"""CORE-Bench's own options, declared once (flag, ini key, type, default, help, check).

The plugin registers them with pytest and resolves them with the run's other options; this module
only declares them and turns the resolved values into the benchmark's effective settings.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, ClassVar

from ...core.jobs import BackendOptions
from ...core.options import Option, given_settings, view
from ...core.run_options import RunOptions
from ...envs.options import EnvOptions
from ...models.options import ModelOptions
from ...models.price import price_of
from .defaults import DEFAULT_COMMAND_TIMEOUT, DEFAULT_STEPS, DEFAULT_TIME, DIFFICULTIES

if TYPE_CHECKING:
    from .agent import AgentLimits
    from .dataset import DataSet

OWNER = "core-bench"
DEFAULT_WORKSPACE_ROOT = "/capsule/environment"


def existing_folder(path: Path) -> Path:
    """The check of --bench-capsules-dir: the folder must exist (capsules are downloaded into it)."""
    if not Path(path).is_dir():
        raise ValueError(f"is not a folder ({path}); create it (capsules are downloaded into it) or fix the path")
    return path


def environment_path(value: str) -> str:
    """The check of the in-environment paths: absolute POSIX, without ``..``; returned normalized."""
    text = str(value)
    if not text.startswith("/"):
        raise ValueError("must be an absolute POSIX path inside the environment (starting with /)")
    if ".." in PurePosixPath(text).parts:
        raise ValueError("must not contain '..'")
    normalized = posixpath.normpath(text).replace("//", "/")
    if normalized == "/":
        raise ValueError("must be a folder below /, not / itself")
    return normalized


CORE_BENCH_OPTIONS: tuple[Option, ...] = (
    Option(
        "difficulty",
        "--bench-difficulty",
        kind="choice",
        choices=DIFFICULTIES,
        default="hard",
        ini="agentbench_difficulty",
        owner=OWNER,
        help="CORE-Bench difficulty: easy (answer from the shipped results/), medium (reproduce with "
        "REPRODUCING.md and environment/ given), hard (reproduce from the code alone). Default hard.",
    ),
    Option(
        "capsules_dir",
        "--bench-capsules-dir",
        kind="path",
        check=existing_folder,
        ini="agentbench_capsules_dir",
        owner=OWNER,
        help="CORE-Bench: folder with pre-staged capsules (<capsule_id>.tar.gz or unpacked <capsule_id>/); "
        "missing ones are downloaded into it. Default <data-dir>/core_bench/capsules, or <cache>/capsules "
        "when the data dir is read-only.",
    ),
    Option(
        "hints",
        "--bench-hints",
        kind="bool",
        default=True,
        negatable=True,
        ini="agentbench_hints",
        owner=OWNER,
        help="CORE-Bench: add short difficulty-specific hints to the task prompt (the same for every "
        "model); --bench-set=hints=false gives upstream's prompt alone. Default on.",
        shown=False,
    ),
    Option(
        "upstream_abort",
        "--bench-upstream-abort",
        kind="bool",
        default=False,
        ini="agentbench_upstream_abort",
        owner=OWNER,
        help="CORE-Bench: score like upstream, which stops reading a report at the first value "
        "that cannot be compared (e.g. text for a numeric question), so later answers earn "
        "nothing. Default: such a value fails only its own question.",
        shown=False,
    ),
    Option(
        "workspace_root",
        "--bench-workspace-root",
        default=DEFAULT_WORKSPACE_ROOT,
        check=environment_path,
        ini="agentbench_workspace_root",
        owner=OWNER,
        metavar="/ABS/PATH",
        help=f"CORE-Bench: the folder inside the environment holding the capsule's folders (code/, data/, "
        f"results/, ...), REPRODUCING.md and report.json (default {DEFAULT_WORKSPACE_ROOT}); the host "
        f"environment applies it only under isolation, else the item's own folder is used and reports say so.",
        free_on_resume=True,
        shown=False,
    ),
    Option(
        "dataset_path",
        "--bench-dataset-path",
        kind="path",
        exists="file",
        ini="agentbench_dataset_path",
        owner=OWNER,
        metavar="FILE",
        help="CORE-Bench: a task metadata file (JSON, or GPG-encrypted like core_test.json.gpg) used instead of "
        "the selected split's official file; checked like custom data and named in the report.",
        shown=False,
    ),
    Option(
        "preinstalled_input_dir",
        "--bench-preinstalled-input-dir",
        check=environment_path,
        ini="agentbench_preinstalled_input_dir",
        owner=OWNER,
        metavar="PATH",
        help="CORE-Bench: a folder inside the environment image holding the capsule (<capsule_id>/) and an "
        "input.json manifest; the workspace is copied from it instead of uploaded, then the folder is deleted "
        "in the container (masked on the host) before the agent's first command.",
        shown=False,
    ),
    Option(
        "docker_dind",
        "--bench-docker-dind",
        kind="bool",
        default=False,
        ini="agentbench_docker_dind",
        owner=OWNER,
        help="CORE-Bench with --bench-env=docker: medium items run in a PRIVILEGED container with its own "
        "Docker daemon (the image needs docker.io); such a run is not isolated.",
        free_on_resume=True,
        shown=False,
    ),
    Option(
        "review",
        "--bench-review",
        kind="path",
        exists="file",
        ini="agentbench_review",
        owner=OWNER,
        metavar="FILE.yaml",
        help="CORE-Bench: a YAML file of human verdicts that override the automatic one for single questions "
        "(capsule, question, verdict, reviewer, reason; see docs/corebench.md). Summaries then carry an "
        "automatic and a reviewed score; records keep the automatic verdict beside the override.",
        free_on_resume=True,
    ),
    Option(
        "agent_steps",
        "--bench-agent-steps",
        kind="int",
        default=DEFAULT_STEPS,
        minimum=0,
        exclusive_minimum=True,
        ini="agentbench_agent_steps",
        owner=OWNER,
        help=f"CORE-Bench agent: most model turns per capsule (default {DEFAULT_STEPS}).",
        shown=False,
    ),
    Option(
        "agent_time",
        "--bench-agent-time",
        kind="float",
        default=DEFAULT_TIME,
        minimum=0,
        exclusive_minimum=True,
        ini="agentbench_agent_time",
        owner=OWNER,
        help=f"CORE-Bench agent: seconds per capsule (default {DEFAULT_TIME:g}, as upstream).",
        shown=False,
    ),
    Option(
        "agent_tokens",
        "--bench-agent-tokens",
        kind="int",
        default=None,
        minimum=0,
        exclusive_minimum=True,
        ini="agentbench_agent_tokens",
        owner=OWNER,
        help="CORE-Bench agent: budget of prompt plus completion tokens per capsule (default: none).",
        shown=False,
    ),
    Option(
        "agent_command_timeout",
        "--bench-agent-command-timeout",
        kind="float",
        default=DEFAULT_COMMAND_TIMEOUT,
        minimum=0,
        exclusive_minimum=True,
        ini="agentbench_agent_command_timeout",
        owner=OWNER,
        help=f"CORE-Bench agent: default timeout of one bash command in seconds (default "
        f"{DEFAULT_COMMAND_TIMEOUT:g}); the built-in agent may ask for up to ten times more; an external agent's "
        "commands are ended by the plugin at it.",
        shown=False,
    ),
)


def agent_choice(value: str) -> str:
    """The check of --bench-agent: a known agent, with a version where it has one."""
    from .. import agents  # why: the check runs only when the option is given

    agents.parse_agent(value, command="(checked with the settings)")
    return value


AGENT_OPTIONS: tuple[Option, ...] = (
    Option(
        "agent",
        "--bench-agent",
        default="builtin",
        check=agent_choice,
        ini="agentbench_agent",
        owner=OWNER,
        metavar="NAME[==VERSION]",
        help="CORE-Bench: the agent that works on each capsule: builtin (default, the plugin's own), "
        "mini-swe-agent (pinned 2.4.6), codex (Codex CLI, pinned 0.171.0; NAME==VERSION for another) or "
        "command (--bench-set agent_command=COMMAND). An "
        "external agent runs as a non-root user in the item's environment (the host's sandbox, or in Docker "
        "its container made from the agent's image layer over the task image, built once and kept) and "
        "reaches the model only through a per-item metering proxy, with a per-item token instead of the key.",
    ),
    Option(
        "agent_command",
        "--bench-agent-command",
        default=None,
        ini="agentbench_agent_command",
        owner=OWNER,
        metavar="COMMAND",
        help="CORE-Bench with --bench-agent=command: the agent's bash command line, run in the workspace "
        "with OPENAI_BASE_URL, OPENAI_API_KEY (the item's token), AGENTBENCH_PROMPT_FILE and "
        "AGENTBENCH_ANSWER_FILE set (see docs/corebench.md).",
        shown=False,
    ),
)
CORE_BENCH_OPTIONS = CORE_BENCH_OPTIONS + AGENT_OPTIONS


@dataclass(frozen=True)
class CoreBenchOptions:
    """CORE-Bench's settings, typed (``view(CoreBenchOptions, opts)``); one field per option of CORE_BENCH_OPTIONS.
    The benchmark reads its own settings through this view only (the shared ones through ``RunOptions``,
    ``ModelOptions``, ``EnvOptions``)."""

    OPTIONS: ClassVar[tuple[Option, ...]] = CORE_BENCH_OPTIONS
    difficulty: str
    capsules_dir: Path | None
    hints: bool
    upstream_abort: bool
    workspace_root: str
    dataset_path: Path | None
    preinstalled_input_dir: str | None
    docker_dind: bool
    review: Path | None
    agent_steps: int
    agent_time: float
    agent_tokens: int | None
    agent_command_timeout: float
    agent: str
    agent_command: str | None


def agent_settings(opts: Mapping[str, Any]) -> dict[str, Any]:
    """The agent's part of the settings: nothing for the built-in agent (earlier runs compare), else its name
    with the version (``mini-swe-agent==2.4.6``) and, for ``command``, the command line."""
    from .. import agents  # why: kept off the plugin's start-up path

    own = view(CoreBenchOptions, opts)
    choice = agents.parse_agent(own.agent, own.agent_command)
    if not choice.external:
        return {}
    out: dict[str, Any] = {"agent": f"{choice.name}=={choice.version}" if choice.version else choice.name}
    if choice.command:
        out["agent_command"] = choice.command
    return out


def effective_settings(opts: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of a CORE-Bench run (report header, summary.json, baselines) from resolved options.

    ``opts`` holds at least the values of ``CORE_BENCH_OPTIONS``; ``env`` (the environment option,
    declared by the environment layer) is taken when given, else :func:`default_env`.
    """
    from .capsules import capsule_base_url  # why: declaring the options must not import the capsule downloader
    from .dataset import data_set  # why: nor the data files' downloader

    own = view(CoreBenchOptions, opts)
    chosen = data_set(view(RunOptions, opts).dataset)
    return {
        "difficulty": own.difficulty,
        "hints": bool(own.hints),
        "upstream_abort": bool(own.upstream_abort),
        "capsules_dir": str(own.capsules_dir) if own.capsules_dir else None,
        "capsule_url": capsule_base_url(chosen.capsule_url),
        "env": view(EnvOptions, opts).env or default_env(opts),
        "workspace_root": own.workspace_root,
        "dataset_path": str(own.dataset_path) if own.dataset_path else None,
        "preinstalled_input_dir": own.preinstalled_input_dir,
        "docker_dind": bool(own.docker_dind),
        "agent_steps": own.agent_steps,
        "agent_time": float(own.agent_time),
        "agent_tokens": own.agent_tokens,
        "agent_command_timeout": float(own.agent_command_timeout),
        **({"review": str(own.review)} if own.review else {}),  # only when given: older runs match
        **agent_settings(opts),
        **dataset_settings(chosen),
    }


def dataset_settings(chosen: DataSet) -> dict[str, Any]:
    """The data set's settings (--bench-dataset): none for v1, so a v1 run's settings stay what they were and its
    earlier runs remain its baselines; a v1.1 set's name, label, release and grading rules."""
    from .dataset import V1  # why: declaring the options must not import the data files' downloader

    if chosen.name == V1:
        return {}
    return {
        "dataset": chosen.name,
        "dataset_label": chosen.label,
        "dataset_version": chosen.version,
        "grading": chosen.grading,
    }


def default_env(opts: Mapping[str, Any]) -> str:
    """Where the agent runs when ``--bench-env`` is not given: with a real model in Docker, so the agent
    never sees the answers, the data dir or the controller's files (``--bench-env=host`` given explicitly
    runs it in the isolated host sandbox instead); the oracle runs no agent (the host, unused). With
    ``--bench-backend=slurm`` the host sandbox (bubblewrap) is the default: Slurm nodes rarely allow Docker."""
    given = given_settings(opts, ModelOptions, BackendOptions)
    if view(BackendOptions, given).backend == "slurm":  # Docker is rarely allowed on Slurm nodes
        return "host"
    return "host" if view(ModelOptions, given).model in (None, "oracle") else "docker"


def describe_isolation(settings: Mapping[str, Any]) -> str:
    """What keeps the agent's commands away from the answers, for the header and every report:
    ``none (...)`` when nothing does."""
    if settings.get("model") == "oracle":
        return "not needed (the oracle runs no agent)"
    if settings["env"] == "docker":
        if settings.get("docker_dind") and settings.get("difficulty") == "medium":
            return "none (privileged)"  # nested Docker: the agent is root over the Docker host
        return "docker container (the engine's isolation)"
    from ...envs.host import check_host_network, describe_host_network  # why: with the probe, host runs only
    from ...sandbox.isolation import probe  # why: probing runs bwrap once; only a host run needs it

    found = probe()
    if found.active:
        network = settings.get("host_network") or "user"
        check_host_network(network, found)  # (the oracle returned above: it runs no command)
        return f"{found.describe()}; agent commands: {describe_host_network(network)}"
    # the workspace root is a path in the sandbox's own mount namespace: without one it cannot be had
    return (
        f"{found.describe()}; workspace root {settings.get('workspace_root', DEFAULT_WORKSPACE_ROOT)} "
        f"not applied: commands run in each item's own host folder, which prompts and records name"
    )


def agent_limits(settings: Mapping[str, Any]) -> AgentLimits:
    """The agent's limits from the run settings (its price and cost budget are there when given)."""
    from .agent import AgentLimits  # why: declaring the options must not import the agent

    return AgentLimits(
        steps=settings["agent_steps"],
        time=settings["agent_time"],
        tokens=settings["agent_tokens"],
        command_timeout=settings["agent_command_timeout"],
        cost=settings.get("max_cost_per_item"),
        price=price_of(settings.get("price")),
    )
