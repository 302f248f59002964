"""The per-command time limit (``--bench-set agent_command_timeout``) is the plugin's to hold for an external agent,
not only the agent's: a command that outlives it is ended whole, whatever the agent's own timeout, and the
record says so. Real agents that ignore the limit: the ``command`` agent waiting on a command that never ends by
itself (in the host environment's sandbox and in Docker), and mini-swe-agent scripted to run ``sleep 1000`` with
its own timeout past the plugin's."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# imported before any in-process pytester run (numpy cannot be imported twice in one process)
from pytest_agentbench.benchmarks.corebench import bench, dataset, scorer  # noqa: F401
from pytest_agentbench.sandbox.containment import NO_PYTHON

from helpers.bench_runs import SHARED_DATA
from helpers.capabilities import needs
from helpers.capsule_factory import committed_image
from helpers.external_agents import ONE_CALL_AGENT, inline, questions, run_capsule

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

KEY = "sk-user-limit-8277e0910d75"
LIMIT = 2  # seconds a command may run
# the agent's whole time, far past the limit: only a command ended by the plugin lets the agent answer before it
AGENT_TIME = 120

# The command agent: a command of its own that never ends by itself (in a session of its own, as mini-swe-agent
# and Codex start theirs), waited on; what ended it and what it printed saved; then its one model call.
WAITING_AGENT = (
    r"""
import json, subprocess
command = subprocess.Popen(["bash", "-c", "echo started; exec sleep 1000"], stdout=subprocess.PIPE,
                           start_new_session=True, text=True)
printed, _ = command.communicate()
open("command-ended.json", "w").write(json.dumps({"code": command.returncode, "printed": printed}))
"""
    + ONE_CALL_AGENT
)
# The same agent, after it tried to stop its supervisor (the ancestor running the limit's program) and to open
# its memory: each errno saved (0: it worked)
STOPPING_AGENT = (
    r"""
import json, os, signal
def supervisor():
    pid = os.getpid()
    while pid > 1:
        pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        if argv[1:3] == [b"-c", b'import os; exec(os.environ.pop("AGENTBENCH_COMMAND_LIMIT"))']:
            return pid
top = supervisor()
def errno_of(call):
    try:
        call()
    except OSError as exc:
        return exc.errno
    return 0
tried = {"stop": errno_of(lambda: os.kill(top, signal.SIGSTOP)),
         "memory": errno_of(lambda: open(f"/proc/{top}/mem", "r+b"))}
open("tried.json", "w").write(json.dumps(tried))
"""
    + WAITING_AGENT
)
TOLD = f"this command was ended by the plugin: it ran past the per-command time limit of {LIMIT} s"


@pytest.fixture(autouse=True)
def data_env(monkeypatch):
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(SHARED_DATA))


def limits() -> tuple[str, ...]:
    return (
        f"--bench-set=agent_command_timeout={LIMIT}",
        f"--bench-set=agent_time={AGENT_TIME}",
        "--bench-set=keep_workspaces=true",
    )


def docker_env(image: str) -> tuple[str, ...]:
    return ("--bench-env=docker", f"--bench-set=docker_image={image}", "--bench-set=docker_network=none")


def check_ended(record: dict, command: str) -> None:
    """The run passed, its record telling the one command the plugin's limit ended."""
    assert record["status"] == "pass" and record["end_reason"] == "submitted", record["message"]
    generation = record["generation"]
    assert generation["commands_timed_out"] == 1, generation
    (ended,) = generation["commands_ended"]
    assert command in ended["command"] and ended["limit"] == LIMIT and ended["seconds"] >= LIMIT


def check_waiting_agent(record: dict) -> None:
    check_ended(record, "sleep 1000")
    seen = json.loads((Path(record["workspace"]) / "command-ended.json").read_text())
    assert seen["code"] == -15, seen  # TERM, to the command's whole process group
    assert seen["printed"].startswith("started\n") and TOLD in seen["printed"]


def run_waiting_agent(
    pytester, tmp_path, server, python: str | None, env: tuple[str, ...], script: str = WAITING_AGENT
) -> dict:
    server.reply(json.dumps(questions()))
    agent = f"--bench-set=agent_command={inline(script, python)}"
    _, record, _ = run_capsule(
        pytester, tmp_path, server, "limit", "--bench-agent=command", agent, *limits(), key=KEY, env=env
    )
    check_waiting_agent(record)
    return record


def test_a_command_past_the_limit_is_ended_in_the_host_sandbox(pytester, tmp_path, server):
    needs("bwrap")
    run_waiting_agent(pytester, tmp_path, server, None, ("--bench-env=host",))


@pytest.mark.docker
def test_a_command_past_the_limit_is_ended_in_the_agents_container(pytester, tmp_path, server):
    run_waiting_agent(pytester, tmp_path, server, "python3", docker_env(needs("docker")))


@pytest.mark.docker
def test_an_agent_in_its_container_cannot_stop_its_supervisor(pytester, tmp_path, server):
    """The supervisor runs as the agent's user (uid 65534) in the container: the agent's SIGSTOP to it is refused
    (the seccomp filter it starts under installs in the container too), its memory is closed to it, and its
    command is still ended by the limit."""
    record = run_waiting_agent(pytester, tmp_path, server, "python3", docker_env(needs("docker")), STOPPING_AGENT)
    tried = json.loads((Path(record["workspace"]) / "tried.json").read_text())
    assert tried == {"stop": errno.EPERM, "memory": errno.EACCES}, tried


def run_mini_sleeping(pytester, tmp_path, server, env: tuple[str, ...]) -> None:
    """mini-swe-agent's own timeout is set past the plugin's limit: its ``sleep 1000`` is ended by the plugin,
    and the model is told so in the command's output."""
    server.reply("Waiting.", tool_calls=[("bash", {"command": "sleep 1000"})])
    submit = f"printf '%s\\n' COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT '{json.dumps(questions())}'"
    server.reply("Submitting.", tool_calls=[("bash", {"command": submit})])
    _, record, _ = run_capsule(
        pytester, tmp_path, server, "mini", "--bench-agent=mini-swe-agent", *limits(), key=KEY, env=env
    )
    check_ended(record, "sleep 1000")
    shown = [str(m["content"]) for m in server.requests[1]["body"]["messages"] if m["role"] == "tool"]
    assert TOLD in shown[-1], shown


def test_mini_swe_agent_with_a_longer_own_timeout_is_held_to_the_plugins(pytester, tmp_path, server, monkeypatch):
    needs("bwrap")
    monkeypatch.setenv("AGENTBENCH_AGENTS_DIR", str(needs("mini-swe-agent")))
    run_mini_sleeping(pytester, tmp_path, server, ("--bench-env=host",))


@pytest.mark.docker
def test_mini_swe_agent_in_docker_is_held_to_the_plugins_limit(pytester, tmp_path, server, monkeypatch):
    image = needs("docker")
    monkeypatch.setenv("AGENTBENCH_AGENTS_DIR", os.environ.get("AGENTBENCH_AGENTS_DIR", "/tmp/agentbench-agents"))
    run_mini_sleeping(pytester, tmp_path, server, docker_env(image))


def test_codex_which_has_no_timeout_switch_is_held_to_the_plugins(pytester, tmp_path, server, monkeypatch):
    """Codex waits on a command as long as the model asks (up to a cap of its own, far past the limit) and has
    no switch for a per-command limit: its ``sleep 1000`` is ended by the plugin, and the model is told so."""
    needs("bwrap")
    monkeypatch.setenv("AGENTBENCH_AGENTS_DIR", str(needs("codex")))
    wait = {"cmd": "sleep 1000", "yield_time_ms": 60000}
    server.reply("Waiting.", tool_calls=[("exec_command", wait)])
    server.reply(json.dumps(questions()))
    _, record, _ = run_capsule(pytester, tmp_path, server, "codex", "--bench-agent=codex", *limits(), key=KEY)
    check_ended(record, "sleep 1000")
    shown = [str(m["content"]) for m in server.requests[1]["body"]["messages"] if m["role"] == "tool"]
    assert TOLD in shown[-1] and "Process exited with code 143" in shown[-1], shown


def ran_to_success(container) -> None:
    container.start()
    assert container.wait(timeout=120)["StatusCode"] == 0, container.logs()


@pytest.fixture
def image_without_python() -> Iterator[str]:
    """The test image with no ``python3`` on its PATH (removed, committed as a new image; removed afterwards)."""
    remove = ["sh", "-c", "rm -f /usr/bin/python3* /usr/local/bin/python3*; ! command -v python3"]
    with committed_image(needs("docker"), "agentbench-test-no-python", remove, ran_to_success) as image:
        yield image


@pytest.mark.docker
def test_an_environment_without_python_is_an_env_error_naming_the_need(
    pytester, tmp_path, server, image_without_python
):
    """The supervisor runs with the environment's python3: without one the agent never starts, and the item is
    the environment's error (not the model's failure), its message naming what is missing and the fix."""
    agent = f"--bench-set=agent_command={inline(WAITING_AGENT, 'python3')}"
    _, record, _ = run_capsule(
        pytester,
        tmp_path,
        server,
        "nopython",
        "--bench-agent=command",
        agent,
        *limits(),
        key=KEY,
        env=docker_env(image_without_python),
    )
    assert record["status"] == "env_error", record
    assert NO_PYTHON in record["message"]
    assert not server.requests  # no model call: the agent did not start
