"""External agents (``--bench-agent``) in Docker, end to end: the agent installed as an image layer over the task
image (built once, found again), run as a non-root user in the item's own container, its model calls going
through the item's metering proxy (a unix socket relayed to the container's loopback) to the scripted server."""

from __future__ import annotations

import json
import os
import shlex
import uuid
from pathlib import Path
from typing import Any

import pytest

# imported before any in-process pytester run (numpy cannot be imported twice in one process)
from pytest_agentbench.benchmarks.corebench import bench, dataset, scorer  # noqa: F401

from helpers.bench_runs import SHARED_DATA
from helpers.capabilities import needs
from helpers.capsule_factory import build_capsule_archive
from helpers.external_agents import (
    CAPSULE,
    CODEX,
    MINI,
    ONE_CALL_AGENT,
    Gone,
    check_codex_turns,
    check_replay,
    check_scored_run,
    inline,
    questions,
    run_capsule,
    script_codex_turns,
)
from helpers.fake_openai import FakeOpenAI

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]

USER_KEY = "sk-user-secret-0cc175b9c0f1"
LAYERS = "agentbench-agent"

# What the agent finds in its container, written into its workspace (copied out with it): who it runs as, every
# file of the places it can write or that the harness made holding the user's key, the key in its environment,
# and whether it can open the proxy's socket itself (it must not: only the root forwarder can)
PROBE = (
    # the key in two halves: no command text (which the agent logs) holds it whole
    f"k={USER_KEY[:12]}; k=${{k}}{USER_KEY[12:]}; "
    '{ id -u; env | grep -c -- "$k" || true; '
    'grep -rIl -- "$k" /etc /tmp /run /capsule /opt/agentbench/*/bin "$HOME" 2>/dev/null; '
    "python3 -c \"import socket; socket.socket(socket.AF_UNIX).connect('/run/agentbench-proxy/proxy.sock')\" "
    "2>&1 | tail -n 1; } > /capsule/environment/probe.txt 2>&1"
)


@pytest.fixture(autouse=True)
def data_env(monkeypatch):
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(SHARED_DATA))


@pytest.fixture
def image(monkeypatch) -> str:
    """The test image; the agents' downloads shared with the other tests (CI installs them once)."""
    found = needs("docker")
    monkeypatch.setenv("AGENTBENCH_AGENTS_DIR", os.environ.get("AGENTBENCH_AGENTS_DIR", "/tmp/agentbench-agents"))
    return found


def run_agent(pytester, tmp_path, server: Any, run_id: str, image: str, *extra: str, cache: str = "off"):
    env = (
        "--bench-env=docker",
        f"--bench-set=docker_image={image}",
        "--bench-set=docker_network=none",
        "--bench-set=keep_workspaces=true",
    )
    return run_capsule(pytester, tmp_path, server, run_id, *extra, key=USER_KEY, env=env, cache=cache)


def layers(image: str, agent: str) -> dict[str, tuple[str, str]]:
    """The agent's layers over ``image`` on the engine: tag -> (id, creation time)."""
    import docker

    client = docker.from_env()
    found = {}
    for layer in client.images.list(name=LAYERS):
        labels = layer.labels or {}
        if labels.get("agentbench.layer.agent") == agent and labels.get("agentbench.layer.base") == image:
            for tag in layer.tags:
                found[tag] = (layer.id, layer.attrs["Created"])
    return found


# ---------------------------------------------------------------- mini-swe-agent


def script_mini(server: FakeOpenAI, answers: dict) -> None:
    """mini-swe-agent's conversation: look around (the probe), run the capsule's code, then submit the answers as
    its final output (the first output line is mini's end marker; the rest is its submission)."""
    server.reply(
        "Let me run the code.",
        tool_calls=[
            (
                "bash",
                {"command": f"{PROBE}; cd code && python3 main.py && cat ../results/output.txt"},
            )
        ],
        prompt_tokens=101,
        completion_tokens=11,
    )
    submit = f"printf '%s\\n' COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT {shlex.quote(json.dumps(answers))}"
    server.reply("Submitting.", tool_calls=[("bash", {"command": submit})], prompt_tokens=202, completion_tokens=22)


@pytest.mark.parametrize("right", [True, False])
def test_mini_swe_agent_in_docker_solves_or_fails_the_capsule(pytester, tmp_path, server, image, right):
    answers = questions() if right else {key: 0.5 for key in questions()}
    script_mini(server, answers)
    result, record, run_dir = run_agent(pytester, tmp_path, server, "mini", image, "--bench-agent=mini-swe-agent")
    check_scored_run(record, server, right=right, agent=MINI, calls=2, tokens=(303, 33), key=USER_KEY)
    assert record["env"] == "docker"
    body = server.requests[1]["body"]
    assert body["model"] == "agent-model" and [t["function"]["name"] for t in body["tools"]] == ["bash"]
    assert any("mean accuracy" in json.dumps(m) for m in body["messages"] if m["role"] == "tool")
    uid, keys_in_env, *rest = (Path(record["workspace"]) / "probe.txt").read_text().splitlines()
    assert uid == "65534" and keys_in_env == "0"
    assert rest and "PermissionError" in rest[-1], rest  # the socket: the forwarder's only
    assert rest[:-1] == []  # no file holding the key
    assert layers(image, "mini-swe-agent")  # the layer the item ran in is on the engine, labelled


def test_mini_swe_agent_layer_is_reused_and_a_replay_needs_no_endpoint(pytester, tmp_path, server, image):
    script_mini(server, questions())
    _, first, _ = run_agent(pytester, tmp_path, server, "record", image, "--bench-agent=mini-swe-agent", cache="rw")
    built = layers(image, "mini-swe-agent")
    assert len(built) == 1, built
    base_url = server.base_url
    server.stop()
    # the same base URL (part of the cache key); nothing listens there now; downloads and builds are off
    _, again, _ = run_agent(
        pytester, tmp_path, Gone(base_url), "replay", image, "--bench-agent=mini-swe-agent", cache="replay"
    )
    check_replay(first, again, calls=2)
    assert layers(image, "mini-swe-agent") == built  # the same image, not built again


def test_a_missing_layer_offline_is_a_usage_error_naming_the_fix(pytester, tmp_path, server, image, monkeypatch):
    """A task image the agent was never layered over (a new tag of the test image): with downloads off, no build
    is tried, and the run stops before any item saying how to get the layer."""
    import docker

    client = docker.from_env()
    fresh = f"agentbench-test-offline:{uuid.uuid4().hex[:12]}"
    client.images.get(image).tag(fresh)
    try:
        monkeypatch.setenv("AGENTBENCH_OFFLINE", "1")
        staged = tmp_path / "staged"
        build_capsule_archive(staged, CAPSULE)
        result = pytester.runpytest_subprocess(
            "--bench=core-bench",
            "--bench-split=train",
            f"--bench-ids={CAPSULE}",
            "--model=m",
            f"--model-base-url={server.base_url}",
            "--model-api-key=x",
            f"--bench-capsules-dir={staged}",
            f"--bench-cache-dir={tmp_path / 'cache'}",
            "--bench-env=docker",
            f"--bench-set=docker_image={fresh}",
            "--bench-set=docker_network=none",
            "--bench-agent=mini-swe-agent",
            "-p",
            "no:cacheprovider",
        )
        said = result.stderr.str() + result.stdout.str()
        assert result.ret != 0
        assert "is not on the Docker engine and installs are off ($AGENTBENCH_OFFLINE)" in said, said[-2000:]
        assert "run once without $AGENTBENCH_OFFLINE to build it" in said
        assert layers(fresh, "mini-swe-agent") == {}
        assert server.requests == []
    finally:
        client.images.remove(fresh)


# ---------------------------------------------------------------- Codex CLI


def script_codex(server: FakeOpenAI, answers: dict) -> None:
    """Codex's conversation (the proxy turns its Responses API requests into these chat calls): run the code,
    then answer in the final message."""
    run = "id -u > /capsule/environment/uid.txt; cd code && python3 main.py && cat ../results/output.txt"
    server.reply("", tool_calls=[("exec_command", {"cmd": run})], prompt_tokens=301, completion_tokens=31)
    server.reply(json.dumps(answers), prompt_tokens=402, completion_tokens=42)


@pytest.mark.parametrize("right", [True, False])
def test_codex_in_docker_solves_or_fails_the_capsule(pytester, tmp_path, server, image, monkeypatch, right):
    monkeypatch.setenv("AGENTBENCH_AGENTS_DIR", str(needs("codex")))
    answers = questions() if right else {key: 0.5 for key in questions()}
    script_codex(server, answers)
    result, record, _ = run_agent(pytester, tmp_path, server, "codex", image, "--bench-agent=codex")
    check_scored_run(record, server, right=right, agent=CODEX, calls=2, tokens=(703, 73), key=USER_KEY)
    assert record["env"] == "docker"
    body = server.requests[1]["body"]
    assert any("mean accuracy: 0.9300" in json.dumps(m) for m in body["messages"] if m["role"] == "tool")
    assert (Path(record["workspace"]) / "uid.txt").read_text().strip() == "65534"
    assert layers(image, "codex")


def test_a_multi_turn_codex_run_in_docker_replays_without_the_endpoint(pytester, tmp_path, server, image, monkeypatch):
    """Codex's own process handles, output ids and wall times differ from run to run of its container: the replay
    still finds every recorded reply, and its verdict is the recording's."""
    monkeypatch.setenv("AGENTBENCH_AGENTS_DIR", str(needs("codex")))
    script_codex_turns(server, questions())
    _, first, _ = run_agent(pytester, tmp_path, server, "record", image, "--bench-agent=codex", cache="rw")
    check_codex_turns(first, server)
    base_url = server.base_url
    server.stop()
    _, again, _ = run_agent(pytester, tmp_path, Gone(base_url), "replay", image, "--bench-agent=codex", cache="replay")
    check_replay(first, again, calls=4)
    assert again["env"] == "docker"


# ---------------------------------------------------------------- the command agent, limits


# The command agent's one model call, then the user it ran as
COMMAND_AGENT = ONE_CALL_AGENT + 'open("whoami.txt", "w").write(str(os.getuid()))\n'

# An agent that keeps asking until the proxy says no (then waits to be ended)
GREEDY_AGENT = r"""
import json, os, time, urllib.error, urllib.request
for n in range(20):
    body = json.dumps({"model": "x", "messages": [{"role": "user", "content": f"call {n}"}]}).encode()
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body, headers={
        "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
    try:
        urllib.request.urlopen(request, timeout=60).read()
    except urllib.error.HTTPError:
        break
time.sleep(600)
"""


def test_command_agent_in_docker_answers_through_the_proxy(pytester, tmp_path, server, image):
    """``command`` has no layer: the image's own python3 runs it, as the agent's user, through the proxy."""
    server.reply(json.dumps(questions()), prompt_tokens=123, completion_tokens=45)
    _, record, _ = run_agent(
        pytester,
        tmp_path,
        server,
        "command",
        image,
        "--bench-agent=command",
        f"--bench-set=agent_command={inline(COMMAND_AGENT, 'python3')}",
    )
    assert record["status"] == "pass", record["message"]
    assert record["submission_source"] == "final_answer"
    assert (record["generation"]["prompt_tokens"], record["generation"]["completion_tokens"]) == (123, 45)
    assert server.requests[0]["headers"]["authorization"] == f"Bearer {USER_KEY}"
    assert (Path(record["workspace"]) / "whoami.txt").read_text() == "65534"


def test_a_spent_budget_ends_the_agents_container(pytester, tmp_path, server, image):
    for _ in range(3):  # $0.007 a call at $2 / $10 per million tokens: the third is never asked
        server.reply("more", prompt_tokens=1000, completion_tokens=500)
    _, record, _ = run_agent(
        pytester,
        tmp_path,
        server,
        "budget",
        image,
        "--bench-agent=command",
        f"--bench-set=agent_command={inline(GREEDY_AGENT, 'python3')}",
        "--model-price=2,10",
        "--bench-set=max_cost_per_item=0.01",
        "--bench-set=agent_time=300",
    )
    assert record["status"] == "budget" and record["end_reason"] == "budget", record["message"]
    assert record["generation"]["model_calls"] == 2 == len(server.requests)
    assert record["generation"]["agent_seconds"] < 300  # ended by the plugin, not by its time limit


def test_the_agent_time_limit_ends_the_agent(pytester, tmp_path, server, image):
    _, record, _ = run_agent(
        pytester,
        tmp_path,
        server,
        "time",
        image,
        "--bench-agent=command",
        "--bench-set=agent_command=sleep 600",
        "--bench-set=agent_time=5",
    )
    assert record["end_reason"] == "time_limit", record["message"]
    assert record["status"] == "fail" and server.requests == []
