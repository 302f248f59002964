"""External agents (``--bench-agent``): an agent CLI someone else wrote, run as model code in the item's environment.

The agent is installed outside the workspace (a venv in the plugin's cache, per agent and version, shown
read-only in the host environment's sandbox; in Docker an image layer over the task image, ``agent_layers``),
started with one bash command in the item's environment (so the environment's containment and the plugin's
time limit hold for it), and pointed at the item's metering proxy (``models.proxy``) with the item's own token
as its key. What it leaves is read afterwards: ``report.json`` in
the workspace, else its final message (or answer file) parsed as a JSON object.

The ``command`` agent's contract (any agent CLI): ``--bench-set agent_command`` is run with bash in the workspace
(the current folder) with these variables set:

* ``OPENAI_BASE_URL`` and ``OPENAI_API_BASE``: the proxy's ``.../v1`` (Chat Completions and Responses API);
* ``OPENAI_API_KEY``: the item's token (the only key the proxy takes; never the user's key);
* ``AGENTBENCH_MODEL``: the run's model name (the proxy answers with the run's model whatever is asked);
* ``AGENTBENCH_PROMPT_FILE``: a file holding the task's prompt;
* ``AGENTBENCH_WORKSPACE``: the workspace folder;
* ``AGENTBENCH_ANSWER_FILE``: where the agent may write its final answer (a JSON object) instead of report.json;
* ``AGENTBENCH_TIME_LIMIT`` and ``AGENTBENCH_COMMAND_TIMEOUT``: seconds for the whole run and one command.

The named agents: ``mini-swe-agent`` (PyPI, a venv) and ``codex`` (npm ``@openai/codex``, its native binary run
directly, on the Responses API through a custom provider).

Without report.json and without an answer file, the command's standard output is read as its final message.

Every agent's commands are held to the per-command timeout by the plugin (``containment.limited_agent``): a
command is a process the agent starts in a process group of its own (as mini-swe-agent and Codex start each
shell command), with what it starts; one older than the timeout is ended, and the record tells it.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..models.proxy import AgentView
from ..sandbox.containment import limited_agent

BUILTIN = "builtin"
COMMAND = "command"
MINI_SWE_AGENT = "mini-swe-agent"
CODEX = "codex"
# the versions these settings were written and tested against; NAME==VERSION picks another
PINNED = {MINI_SWE_AGENT: "2.4.6", CODEX: "0.171.0"}
AGENT_NAMES = (BUILTIN, COMMAND, *PINNED)
INSTALL_TIMEOUT = 1800.0
AGENTS_DIR_ENV = "AGENTBENCH_AGENTS_DIR"  # where installs go instead of <cache>/agents (shared by runs, by CI)
AGENT_FOLDER = "agentbench-agent"  # under the environment's /tmp: the prompt, the answer file, the agent's logs
ENDED_COMMANDS = "ended-commands.jsonl"  # in the agent's folder: the commands the plugin's limit ended
MAX_ENDED = 200  # of them, the most a record lists
# an agent's own per-command timeout is set this much past the plugin's, so the plugin's (which the record
# tells) ends a command first and the agent's own stays the fallback
OWN_TIMEOUT_MARGIN = 10.0


class AgentInstallError(Exception):
    """An agent could not be installed (no registry, a failing pip): an infrastructure failure, not the model's."""


@dataclass(frozen=True)
class AgentChoice:
    """``--bench-agent`` parsed: the agent's name and its version (None: the built-in agent, or ``command``)."""

    name: str = BUILTIN
    version: str | None = None
    command: str | None = None  # the command agent's command line (--bench-set agent_command)

    @property
    def external(self) -> bool:
        return self.name != BUILTIN

    def label(self) -> str:
        return f"{self.name} {self.version}" if self.version else self.name

    def to_record(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version}


def parse_agent(text: str | None, command: str | None = None) -> AgentChoice:
    """``NAME`` or ``NAME==VERSION`` (``--bench-agent``); ValueError naming the choices otherwise."""
    given = (text or BUILTIN).strip()
    name, _, version = given.partition("==")
    name, version = name.strip(), version.strip()
    if name not in AGENT_NAMES:
        raise ValueError(f"unknown agent {name!r}; the agents are {', '.join(AGENT_NAMES)} (NAME or NAME==VERSION)")
    if name in (BUILTIN, COMMAND):
        if version:
            raise ValueError(f"the {name} agent has no version to choose (give {name} alone)")
        if name == COMMAND and not (command or "").strip():
            raise ValueError("--bench-agent=command needs --bench-set agent_command (the agent's command line)")
        return AgentChoice(name, None, command if name == COMMAND else None)
    if version and not all(ch.isalnum() or ch in ".-+_" for ch in version):
        raise ValueError(f"agent version {version!r} is not a version number")
    return AgentChoice(name, version or PINNED[name])


# ---------------------------------------------------------------- installs


def install_folder(cache_dir: Path, choice: AgentChoice) -> Path:
    """``$AGENTBENCH_AGENTS_DIR/NAME-VERSION`` (default under the cache folder)."""
    root = os.environ.get(AGENTS_DIR_ENV) or str(Path(cache_dir) / "agents")
    return Path(root) / f"{choice.name}-{choice.version}"


def install_into_folder(
    cache_dir: Path, choice: AgentChoice, what: str, steps: Callable[[Path], list[list[str]]], registry: str
) -> Path:
    """The agent's install folder, made once per (agent, version) and reused: ``steps(folder)`` (argv lists) run
    in a temporary folder beside it, renamed into place when all succeeded, so no process ever sees a half-made
    install; a lock keeps processes of one run (xdist workers) from making it twice. ``what`` and ``registry``
    name the package and where it comes from in an AgentInstallError."""
    folder = install_folder(cache_dir, choice)
    marker = folder / "installed.json"
    if marker.is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.is_file():
            return folder
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
        try:
            for argv in steps(staging):
                run_install_step(argv, what, registry)
            (staging / marker.name).write_text(json.dumps({"installed": what}))
            os.chmod(staging, 0o755)  # the sandbox's user reads it
            shutil.rmtree(folder, ignore_errors=True)  # a half-made install of an older plugin
            os.rename(staging, folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return folder


def run_install_step(argv: list[str], what: str, registry: str) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AgentInstallError(f"installing {what} failed: {exc}") from None
    if done.returncode != 0:
        raise AgentInstallError(
            f"installing {what} failed (exit {done.returncode}, {shlex.join(argv[:4])} ...): "
            f"{done.stderr.strip()[-800:]}; check {registry} is reachable"
        )


def venv_steps(requirement: str) -> Callable[[Path], list[list[str]]]:
    """A venv (``venv/`` of the folder) holding ``requirement``. Its scripts' first lines name the temporary
    folder, so they are run with the venv's python (which finds its packages wherever the venv is)."""

    def steps(folder: Path) -> list[list[str]]:
        venv = folder / "venv"
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
        return [[sys.executable, "-m", "venv", str(venv)], [*pip, requirement]]

    return steps


def npm_steps(package: str) -> Callable[[Path], list[list[str]]]:
    """``package`` installed with npm into the folder, its install scripts not run."""
    npm = shutil.which("npm")
    if npm is None:
        raise AgentInstallError(f"installing {package} needs npm (e.g. apt-get install -y npm)")

    def steps(folder: Path) -> list[list[str]]:
        return [[npm, "install", "--prefix", str(folder), "--no-audit", "--no-fund", "--ignore-scripts", package]]

    return steps


# ---------------------------------------------------------------- one run


@dataclass
class AgentSetting:
    """What an agent's command is given: the endpoint, its key, and where things are in the environment."""

    base_url: str
    token: str
    model: str
    prompt_file: str  # environment paths
    answer_file: str
    folder: str
    workdir: str
    time_limit: float
    command_timeout: float
    steps: int

    def variables(self) -> dict[str, str]:
        return {
            "OPENAI_BASE_URL": self.base_url,
            "OPENAI_API_BASE": self.base_url,
            "OPENAI_API_KEY": self.token,
            "AGENTBENCH_MODEL": self.model,
            "AGENTBENCH_PROMPT_FILE": self.prompt_file,
            "AGENTBENCH_ANSWER_FILE": self.answer_file,
            "AGENTBENCH_WORKSPACE": self.workdir,
            "AGENTBENCH_TIME_LIMIT": f"{self.time_limit:g}",
            "AGENTBENCH_COMMAND_TIMEOUT": f"{self.command_timeout:g}",
        }


def exports(variables: dict[str, str]) -> str:
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in variables.items())


@dataclass
class ExternalAgent:
    """One agent kind: how it is installed, the bash script that runs it, where its final message is."""

    choice: AgentChoice
    install_dir: Path | None = None  # host folder its sandbox sees read-only
    extra: dict[str, Any] = field(default_factory=dict)

    def install(self, cache_dir: Path) -> None:
        """Make the agent's install (nothing for ``command``)."""

    def request_view(self) -> Callable[[list[dict[str, Any]]], AgentView] | None:
        """How the agent's requests are seen by the model and the response cache (``models.proxy``); None: as sent."""
        return None

    def step_limit(self, steps: int) -> int | None:
        """The most model calls the metering proxy serves (``--bench-set agent_steps`` where the agent has a switch
        for its steps, so the plugin holds it to the limit it was given); None: no limit."""
        return None

    def script(self, setting: AgentSetting) -> str:
        raise NotImplementedError

    def command(self, setting: AgentSetting) -> str:
        """The bash command that runs the agent's ``script`` with its commands held to the plugin's per-command
        time limit (``containment.limited_agent``)."""
        log = f"{setting.folder}/{ENDED_COMMANDS}"
        return limited_agent(self.script(setting), seconds=setting.command_timeout, log_file=log)

    def ended_commands(self, read: Any, setting: AgentSetting) -> list[dict[str, Any]]:
        """The commands the plugin's per-command limit ended (``command_limit``: what each ran, its seconds and
        the limit). The file is in the agent's reach: only those fields are taken, of the first ``MAX_ENDED``."""
        try:
            text = bytes(read(f"{setting.folder}/{ENDED_COMMANDS}")).decode(errors="replace")
        except (OSError, ValueError):
            return []
        ended = []
        for line in text.splitlines()[:MAX_ENDED]:
            try:
                entry = json.loads(line)
                ended.append(
                    {
                        "command": str(entry["command"])[:300],
                        "seconds": float(entry["seconds"]),
                        "limit": float(entry["limit"]),
                    }
                )
            except (ValueError, TypeError, KeyError):
                continue
        return ended

    def final_message(self, read: Any, setting: AgentSetting, stdout: str) -> str | None:
        """The agent's final message: the answer file when it wrote one, else what the agent says is final."""
        try:
            return bytes(read(setting.answer_file)).decode(errors="replace")
        except (OSError, ValueError):
            return None


class CommandAgent(ExternalAgent):
    def script(self, setting: AgentSetting) -> str:
        return exports(setting.variables()) + (self.choice.command or "") + "\n"

    def final_message(self, read: Any, setting: AgentSetting, stdout: str) -> str | None:
        return super().final_message(read, setting, stdout) or stdout or None


class MiniSweAgent(ExternalAgent):
    """mini-swe-agent's ``mini`` CLI, non-interactive: no first-run setup (MSWEA_CONFIGURED), no confirmation at
    the end (--exit-immediately, stdin closed), no cost lookup for models litellm does not price
    (MSWEA_COST_TRACKING); its step limit is the plugin's, its own per-command timeout a little past the
    plugin's (``OWN_TIMEOUT_MARGIN``)."""

    def install(self, cache_dir: Path) -> None:
        requirement = f"mini-swe-agent=={self.choice.version}"
        folder = install_into_folder(cache_dir, self.choice, requirement, venv_steps(requirement), "pip's index")
        self.install_dir = folder / "venv"

    def step_limit(self, steps: int) -> int | None:
        return steps  # one model call a step, as its agent.step_limit counts them

    def script(self, setting: AgentSetting) -> str:
        assert self.install_dir is not None, "install the agent first"
        trajectory = f"{setting.folder}/trajectory.json"
        variables = {
            **setting.variables(),
            "MSWEA_CONFIGURED": "true",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_GLOBAL_CONFIG_DIR": f"{setting.folder}/config",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no download of litellm's price list at start
        }
        argv = [
            str(self.install_dir / "bin" / "python"),
            str(self.install_dir / "bin" / "mini"),
            "-m",
            f"openai/{setting.model}",
            "-c",
            "mini.yaml",
            "-c",
            f"environment.timeout={int(max(1, setting.command_timeout + OWN_TIMEOUT_MARGIN))}",
            "-c",
            f"agent.step_limit={setting.steps}",
            "-l",
            "0",
            "--yolo",
            "--exit-immediately",
            "-o",
            trajectory,
        ]
        return (
            exports(variables) + f'exec {shlex.join(argv)} -t "$(cat {shlex.quote(setting.prompt_file)})" < /dev/null\n'
        )

    def final_message(self, read: Any, setting: AgentSetting, stdout: str) -> str | None:
        answer = super().final_message(read, setting, stdout)
        if answer:
            return answer
        try:
            trajectory = json.loads(bytes(read(f"{setting.folder}/trajectory.json")))
        except (OSError, ValueError):
            return None
        info = trajectory.get("info") if isinstance(trajectory, dict) else None
        submission = info.get("submission") if isinstance(info, dict) else None
        if isinstance(submission, str) and submission.strip():
            return submission
        for message in reversed(trajectory.get("messages") or []):  # no submission: the last thing it said
            if isinstance(message, dict) and message.get("role") == "assistant" and message.get("content"):
                return str(message["content"])
        return None


class CodexAgent(ExternalAgent):
    """OpenAI's Codex CLI, ``codex exec``: a custom model provider pointing at the proxy on the Responses API
    (the only wire protocol it speaks), its own sandbox and approvals off (the plugin's sandbox holds it), web
    search off (the proxy serves the model only), its last message written to a file. What Codex makes up in
    each request is numbered or masked (``codex_view``) so a replay finds the recorded replies."""

    def request_view(self) -> Callable[[list[dict[str, Any]]], AgentView] | None:
        return codex_view

    def install(self, cache_dir: Path) -> None:
        package = f"@openai/codex@{self.choice.version}"
        self.install_dir = install_into_folder(cache_dir, self.choice, package, npm_steps(package), "the npm registry")

    def binary(self) -> Path:
        """The native binary (the npm package's Node shim only finds and starts it); in Docker, where the agent's
        image layer has it (``agent_layers``)."""
        if self.extra.get("binary"):
            return Path(self.extra["binary"])
        assert self.install_dir is not None, "install the agent first"
        found = sorted(self.install_dir.glob("node_modules/@openai/codex*/vendor/*/bin/codex"))
        if not found:
            raise AgentInstallError(f"no codex binary for this platform under {self.install_dir}/node_modules")
        return found[0]

    def script(self, setting: AgentSetting) -> str:
        provider = "model_providers.agentbench"
        overrides = {
            "model": setting.model,
            "model_provider": "agentbench",
            f"{provider}.name": "agentbench",
            f"{provider}.base_url": setting.base_url,
            f"{provider}.env_key": "OPENAI_API_KEY",
            f"{provider}.wire_api": "responses",
            "web_search": "disabled",
        }
        argv = [str(self.binary()), "exec", "--json", "--skip-git-repo-check"]
        argv += ["--dangerously-bypass-approvals-and-sandbox", "-o", f"{setting.folder}/last-message.txt"]
        for key, value in overrides.items():
            argv += ["-c", f"{key}={json.dumps(value)}"]  # (a TOML string is a JSON string)
        # in the agent's folder, a path that is the same for every item (the home's is not): codex names it in
        # its instructions, which are part of the cache key (under /tmp it only warns it makes no helper links)
        variables = {**setting.variables(), "CODEX_HOME": f"{setting.folder}/codex-home"}
        return (
            exports(variables)
            + 'mkdir -p "$CODEX_HOME"\n'
            + f'exec {shlex.join(argv)} "$(cat {shlex.quote(setting.prompt_file)})" < /dev/null\n'
        )

    def final_message(self, read: Any, setting: AgentSetting, stdout: str) -> str | None:
        answer = super().final_message(read, setting, stdout)
        if answer:
            return answer
        try:
            return bytes(read(f"{setting.folder}/last-message.txt")).decode(errors="replace") or None
        except (OSError, ValueError):
            return None


# What Codex writes into the header of a command's output (the lines before ``Output:``) that differs from run to
# run of the same conversation: a random id of the output, the wall time, the random handle of a process still
# running (the model names it to wait on it or write to it); and today's date in its environment context. What
# the command printed (after ``Output:``) is never touched.
CODEX_OUTPUT = "\nOutput:\n"
CODEX_CHUNK_ID = re.compile(r"^(Chunk ID: )(\S+)$", re.M)
CODEX_WALL_TIME = re.compile(r"^(Wall time: )[0-9.]+( seconds)$", re.M)
CODEX_SESSION_ID = re.compile(r"^(Process running with session ID )(\d+)$", re.M)
CODEX_DATE = re.compile(r"(<current_date>)[^<]*(</current_date>)")


def ordinal(table: dict[str, int], value: str) -> int:
    """``value``'s number in order of first appearance (1, 2, ...)."""
    return table.setdefault(value, len(table) + 1)


def in_codex_header(content: str, change: Callable[[str], str]) -> str:
    """``content`` (a tool message) with ``change`` applied to Codex's header only (none: unchanged)."""
    head, marker, printed = content.partition(CODEX_OUTPUT)
    return change(head) + marker + printed if marker else content


def with_session(call: dict[str, Any], swap: dict[str, int]) -> dict[str, Any]:
    """A chat tool call whose ``session_id`` argument is swapped through ``swap`` (unchanged when not in it)."""
    function = call.get("function") or {}
    try:
        arguments = json.loads(function.get("arguments") or "")
    except (TypeError, ValueError):
        return call
    if not isinstance(arguments, dict) or str(arguments.get("session_id")) not in swap:
        return call
    arguments["session_id"] = swap[str(arguments["session_id"])]
    return {**call, "function": {**function, "arguments": json.dumps(arguments)}}


def codex_view(messages: list[dict[str, Any]]) -> AgentView:
    """A Codex request as the model sees it (output ids and process handles numbered in order of appearance) and
    as the response cache keys on it (wall times and the date masked too); the reply's process handles go back
    to the live ones, so a model replayed from another run waits on the process of this one."""
    chunks: dict[str, int] = {}
    sessions: dict[str, int] = {}  # live handle -> its number

    def numbered(head: str) -> str:
        head = CODEX_CHUNK_ID.sub(lambda m: f"{m[1]}{ordinal(chunks, m[2])}", head)
        return CODEX_SESSION_ID.sub(lambda m: f"{m[1]}{ordinal(sessions, m[2])}", head)

    seen: list[dict[str, Any]] = []
    for message in messages:
        message = dict(message)
        if message.get("role") == "tool" and isinstance(message.get("content"), str):
            message["content"] = in_codex_header(message["content"], numbered)
        if message.get("tool_calls"):
            message["tool_calls"] = [with_session(call, sessions) for call in message["tool_calls"]]
        seen.append(message)
    keyed = [masked_codex_message(message) for message in seen]
    live = {str(number): int(handle) for handle, number in sessions.items()}

    def to_agent(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        back = [with_session({"function": call}, live)["function"] for call in calls]
        return calls if back == calls else back

    return AgentView(seen, keyed, to_agent)


def masked_codex_message(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if not isinstance(content, str):
        return message
    if message.get("role") == "tool":
        content = in_codex_header(content, lambda head: CODEX_WALL_TIME.sub(r"\1(time)\2", head))
    else:
        content = CODEX_DATE.sub(r"\1(date)\2", content)
    return {**message, "content": content}


def make_agent(choice: AgentChoice) -> ExternalAgent:
    if choice.name == COMMAND:
        return CommandAgent(choice)
    if choice.name == MINI_SWE_AGENT:
        return MiniSweAgent(choice)
    if choice.name == CODEX:
        return CodexAgent(choice)
    raise ValueError(f"{choice.name} is not an external agent")
