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
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


def install_python_agent(cache_dir: Path, choice: AgentChoice, requirement: str) -> Path:
    """A venv holding ``requirement`` in the cache, made once per (agent, version) and reused (a lock keeps
    processes of one run from making it twice); its folder. Venvs cannot move, so it is made in place and
    marked complete last: a half-made one is made again."""
    folder = install_folder(cache_dir, choice)
    venv, marker = folder / "venv", folder / "installed.json"
    if marker.is_file():
        return venv
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.is_file():
            return venv
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(mode=0o755)
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q", requirement],
        ]
        for argv in steps:
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise AgentInstallError(f"installing {requirement} failed: {exc}") from None
            if done.returncode != 0:
                raise AgentInstallError(
                    f"installing {requirement} into {venv} failed (exit {done.returncode}): "
                    f"{done.stderr.strip()[-800:]}; check the package registry (pip's index) is reachable"
                )
        os.chmod(folder, 0o755)  # the sandbox's user reads it
        marker.write_text(json.dumps({"requirement": requirement, "python": sys.executable}))
    return venv


def install_npm_agent(cache_dir: Path, choice: AgentChoice, package: str) -> Path:
    """``package`` installed with npm into a folder of the cache, once per (agent, version); its folder."""
    folder = install_folder(cache_dir, choice)
    marker = folder / "installed.json"
    if marker.is_file():
        return folder
    npm = shutil.which("npm")
    if npm is None:
        raise AgentInstallError(f"installing {package} needs npm (e.g. apt-get install -y npm)")
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.is_file():
            return folder
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(mode=0o755)
        argv = [npm, "install", "--prefix", str(folder), "--no-audit", "--no-fund", "--ignore-scripts", package]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise AgentInstallError(f"installing {package} failed: {exc}") from None
        if done.returncode != 0:
            raise AgentInstallError(
                f"installing {package} into {folder} failed (exit {done.returncode}): "
                f"{done.stderr.strip()[-800:]}; check the npm registry is reachable"
            )
        marker.write_text(json.dumps({"package": package}))
    return folder


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

    def script(self, setting: AgentSetting) -> str:
        raise NotImplementedError

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
    (MSWEA_COST_TRACKING); its per-command timeout and step limit are the plugin's."""

    def install(self, cache_dir: Path) -> None:
        self.install_dir = install_python_agent(cache_dir, self.choice, f"mini-swe-agent=={self.choice.version}")

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
            str(self.install_dir / "bin" / "mini"),
            "-m",
            f"openai/{setting.model}",
            "-c",
            "mini.yaml",
            "-c",
            f"environment.timeout={int(max(1, setting.command_timeout))}",
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
    search off (the proxy serves the model only), its last message written to a file."""

    def install(self, cache_dir: Path) -> None:
        self.install_dir = install_npm_agent(cache_dir, self.choice, f"@openai/codex@{self.choice.version}")

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


def make_agent(choice: AgentChoice) -> ExternalAgent:
    if choice.name == COMMAND:
        return CommandAgent(choice)
    if choice.name == MINI_SWE_AGENT:
        return MiniSweAgent(choice)
    if choice.name == CODEX:
        return CodexAgent(choice)
    raise ValueError(f"{choice.name} is not an external agent")
