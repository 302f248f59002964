"""External agents (``--bench-agent``) end to end: a CORE-Bench capsule worked on by an agent CLI in the host
environment's sandbox, its model calls going through the item's metering proxy to the scripted server."""

from __future__ import annotations

import json
import shlex
import sys
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

pytestmark = pytest.mark.e2e

USER_KEY = "sk-user-secret-d41d8cd98f00"

# The command agent: its one model call, then what the sandbox can find of the user's key (environment, its own
# files, the workspace) written into the workspace.
COMMAND_AGENT = (
    ONE_CALL_AGENT
    + r"""
import subprocess
found = subprocess.run(["grep", "-rIl", "--", os.environ["USER_KEY_PROBE"], "/etc", "/tmp", os.environ["HOME"], "."],
                       capture_output=True, text=True).stdout
leaks = {"environ": [k for k, v in os.environ.items() if os.environ["USER_KEY_PROBE"] in v and k != "USER_KEY_PROBE"],
         "files": [f for f in found.splitlines() if "key-probe" not in f]}
open("key-probe.json", "w").write(json.dumps(leaks))
"""
)


@pytest.fixture(autouse=True)
def data_env(monkeypatch):
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(SHARED_DATA))


def run_agent(pytester, tmp_path, server: Any, run_id: str, *extra: str, cache: str = "off"):
    return run_capsule(pytester, tmp_path, server, run_id, *extra, key=USER_KEY, cache=cache)


def command_args() -> list[str]:
    """The command agent's options: its script inline (nothing of the test's folders is in the sandbox)."""
    command = f"USER_KEY_PROBE={shlex.quote(USER_KEY)} {inline(COMMAND_AGENT)}"
    return ["--bench-agent=command", f"--bench-set=agent_command={command}", "--bench-set=keep_workspaces=true"]


# one whole agent run stays in the fast loop, the right answer's; the wrong one's verdict is the scorer's
# (tests/test_corebench_scorer.py), its run here the full suite's
@pytest.mark.slow  # a whole agent run; the fast loop keeps the bad agent name's refusal
@pytest.mark.parametrize("right", [True, False])
def test_command_agent_answers_through_the_proxy(pytester, tmp_path, server, right):
    needs("bwrap")
    answers = questions()
    if not right:
        answers = {key: "no idea" for key in answers}
    server.reply(json.dumps(answers), prompt_tokens=123, completion_tokens=45)
    result, record, run_dir = run_agent(pytester, tmp_path, server, "command", *command_args())
    assert record["status"] == ("pass" if right else "fail"), record["message"]
    assert record["agent"] == {"name": "command", "version": None}
    result.stdout.fnmatch_lines(["CORE-Bench v1 train split, difficulty easy, hints on, agent command*"])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["settings"]["agent"] == "command" and summary["comparability"]["harness"] == {"agent": "command"}
    assert record["submission_source"] == "final_answer"
    assert record["generation"]["model_calls"] == 1 == len(server.requests)
    assert (record["generation"]["prompt_tokens"], record["generation"]["completion_tokens"]) == (123, 45)
    sent = server.requests[0]
    assert sent["headers"]["authorization"] == f"Bearer {USER_KEY}"  # the plugin's client, not the agent
    assert "CORE-Bench" in json.dumps(sent["body"]["messages"]) or len(sent["body"]["messages"][0]["content"]) > 100
    probe = json.loads((Path(record["workspace"]) / "key-probe.json").read_text())
    assert probe == {"environ": [], "files": []}
    saved = json.loads((run_dir / "artifacts" / CAPSULE / "report.json").read_text())
    assert saved == answers  # the final message, kept as the report.json the agent did not write
    trajectory = json.loads((run_dir / record["trajectory"]).read_text())
    assert trajectory["agent"] == {"name": "command", "version": None}
    assert trajectory["messages"][-1]["role"] == "assistant"


@pytest.mark.slow
def test_command_agent_that_cannot_reach_the_endpoint_directly(pytester, tmp_path, server):
    """The agent's sandbox has no way to this machine's loopback: the real endpoint is out of its reach."""
    needs("bwrap")
    port = server.base_url.split(":")[2].split("/")[0]
    command = (
        f"{shlex.quote(sys.executable)} -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 5)\" "
        "2>err.txt; echo $? > reached.txt"
    )
    result, record, _ = run_agent(
        pytester,
        tmp_path,
        server,
        "reach",
        "--bench-agent=command",
        f"--bench-set=agent_command={command}",
        "--bench-set=keep_workspaces=true",
    )
    assert (Path(record["workspace"]) / "reached.txt").read_text().strip() != "0"
    assert server.requests == []
    assert record["status"] == "fail"  # no answer: an invalid submission, scored as such


def test_bad_agent_name_is_a_usage_error(pytester, tmp_path, server):
    result = pytester.runpytest_subprocess(
        "--bench=core-bench",
        "--model=m",
        f"--model-base-url={server.base_url}",
        "--bench-agent=claude-code",
        "-p",
        "no:cacheprovider",
    )
    assert result.ret != 0
    assert "unknown agent 'claude-code'" in result.stderr.str() + result.stdout.str()


# ---------------------------------------------------------------- mini-swe-agent


def script_mini(server: FakeOpenAI, answers: dict) -> None:
    """mini-swe-agent's conversation: run the capsule's code, then submit the answers as its final output (the
    first output line is mini's end marker; the rest is its submission)."""
    server.reply(
        "Let me run the code.",
        tool_calls=[("bash", {"command": "cd code && python3 main.py && cat ../results/output.txt"})],
        prompt_tokens=101,
        completion_tokens=11,
    )
    submit = f"printf '%s\\n' COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT {shlex.quote(json.dumps(answers))}"
    server.reply("Submitting.", tool_calls=[("bash", {"command": submit})], prompt_tokens=202, completion_tokens=22)


def mini_args() -> list[str]:
    return ["--bench-agent=mini-swe-agent", "--bench-set=keep_workspaces=true"]


@pytest.fixture
def mini(monkeypatch):
    needs("bwrap")
    monkeypatch.setenv("AGENTBENCH_AGENTS_DIR", str(needs("mini-swe-agent")))


@pytest.mark.slow
@pytest.mark.parametrize("right", [True, False])
def test_mini_swe_agent_solves_or_fails_the_capsule(pytester, tmp_path, server, mini, right):
    answers = questions() if right else {key: 0.5 for key in questions()}
    script_mini(server, answers)
    result, record, run_dir = run_agent(pytester, tmp_path, server, "mini", *mini_args())
    check_scored_run(record, server, right=right, agent=MINI, calls=2, tokens=(303, 33), key=USER_KEY)
    body = server.requests[1]["body"]
    assert body["model"] == "agent-model" and [t["function"]["name"] for t in body["tools"]] == ["bash"]
    assert any("mean accuracy" in json.dumps(m) for m in body["messages"] if m["role"] == "tool")
    trajectory = json.loads((run_dir / record["trajectory"]).read_text())
    assert trajectory["agent"]["name"] == "mini-swe-agent" and len(trajectory["turns"]) == 2


@pytest.mark.slow
def test_mini_swe_agent_replay_gives_the_same_verdict_without_the_endpoint(pytester, tmp_path, server, mini):
    script_mini(server, questions())
    _, first, _ = run_agent(pytester, tmp_path, server, "record", *mini_args(), cache="rw")
    assert first["status"] == "pass", first["message"]
    base_url = server.base_url
    server.stop()
    # the same base URL (part of the cache key); nothing listens there now
    _, again, _ = run_agent(pytester, tmp_path, Gone(base_url), "replay", *mini_args(), cache="replay")
    check_replay(first, again, calls=2)


# ---------------------------------------------------------------- Codex CLI


def script_codex(server: FakeOpenAI, answers: dict) -> None:
    """Codex's conversation (the proxy turns its Responses API requests into these chat calls): run the code,
    then answer in the final message."""
    run = "cd code && python3 main.py && cat ../results/output.txt"
    server.reply("", tool_calls=[("exec_command", {"cmd": run})], prompt_tokens=301, completion_tokens=31)
    server.reply(json.dumps(answers), prompt_tokens=402, completion_tokens=42)


@pytest.fixture
def codex(monkeypatch):
    needs("bwrap")
    monkeypatch.setenv("AGENTBENCH_AGENTS_DIR", str(needs("codex")))


@pytest.mark.slow
@pytest.mark.parametrize("right", [True, False])
def test_codex_solves_or_fails_the_capsule(pytester, tmp_path, server, codex, right):
    answers = questions() if right else {key: 0.5 for key in questions()}
    script_codex(server, answers)
    result, record, run_dir = run_agent(pytester, tmp_path, server, "codex", "--bench-agent=codex")
    check_scored_run(record, server, right=right, agent=CODEX, calls=2, tokens=(703, 73), key=USER_KEY)
    body = server.requests[1]["body"]
    assert "web_search" not in json.dumps(body["tools"])
    assert any("mean accuracy: 0.9300" in json.dumps(m) for m in body["messages"] if m["role"] == "tool")


@pytest.mark.slow
def test_a_multi_turn_codex_run_replays_in_full_without_the_endpoint(pytester, tmp_path, server, codex):
    script_codex_turns(server, questions())
    _, first, _ = run_agent(pytester, tmp_path, server, "record", "--bench-agent=codex", cache="rw")
    check_codex_turns(first, server)
    base_url = server.base_url
    server.stop()
    _, again, _ = run_agent(pytester, tmp_path, Gone(base_url), "replay", "--bench-agent=codex", cache="replay")
    check_replay(first, again, calls=4)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--bench-agent=command"], "needs --bench-set agent_command"),
        # in Docker the agent's layer is built over the image: no image, no layer, said before any item
        (["--bench-agent=mini-swe-agent", "--bench-env=docker"], "`docker pull agentbench-no-such-image:x`"),
        (["--bench-agent=mini-swe-agent==0.0.999999", "--bench-env=host"], "installing mini-swe-agent==0.0.999999"),
    ],
)
@pytest.mark.slow
def test_an_agent_that_cannot_run_is_a_usage_error(pytester, tmp_path, server, monkeypatch, options, said):
    monkeypatch.setenv("AGENTBENCH_AGENTS_DIR", str(tmp_path / "agents"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # the install fails on this machine, as without the registry
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
        "--bench-set=docker_image=agentbench-no-such-image:x",
        "-p",
        "no:cacheprovider",
        *options,
    )
    assert result.ret != 0
    assert said in result.stderr.str() + result.stdout.str()
    assert server.requests == []


# An agent that keeps asking until the proxy says no (then waits to be ended)
GREEDY_AGENT = r"""
import json, os, time, urllib.error, urllib.request
for n in range(20):
    body = json.dumps({"model": "x", "messages": [{"role": "user", "content": f"call {n}"}]}).encode()
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body, headers={
        "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
    try:
        urllib.request.urlopen(request, timeout=60).read()
    except urllib.error.HTTPError as exc:
        open("refused.txt", "w").write(f"{exc.code} {exc.read().decode()}")
        break
time.sleep(600)
"""


@pytest.mark.slow
def test_a_spent_budget_ends_the_agent_with_budget(pytester, tmp_path, server):
    needs("bwrap")
    for _ in range(3):  # $0.007 a call at $2 / $10 per million tokens: the third is never asked
        server.reply("more", prompt_tokens=1000, completion_tokens=500)
    command = inline(GREEDY_AGENT)
    _, record, _ = run_agent(
        pytester,
        tmp_path,
        server,
        "budget",
        "--bench-agent=command",
        f"--bench-set=agent_command={command}",
        "--model-price=2,10",
        "--bench-set=max_cost_per_item=0.01",
        "--bench-set=agent_time=300",
    )
    assert record["status"] == "budget" and record["end_reason"] == "budget", record["message"]
    assert "spent $0.0140 of its budget of $0.01 (--bench-set max_cost_per_item)" in record["message"]
    assert record["generation"]["model_calls"] == 2 == len(server.requests)
    assert record["generation"]["agent_seconds"] < 300  # ended by the plugin, not by its time limit


@pytest.mark.slow
def test_an_agent_past_its_time_is_ended_by_the_plugin(pytester, tmp_path, server):
    """The whole run's time is the plugin's to hold: an agent that ignores the signal to stop and leaves a
    background job holding its output is still ended at --bench-set agent_time."""
    needs("bwrap")
    command = "trap '' TERM INT HUP; (trap '' TERM; sleep 600) & sleep 600"
    _, record, _ = run_agent(
        pytester,
        tmp_path,
        server,
        "time",
        "--bench-agent=command",
        f"--bench-set=agent_command={command}",
        "--bench-set=agent_time=3",
    )
    assert record["end_reason"] == "time_limit", record["message"]
    assert "ran out of its 3 s" in record["message"] and record["status"] == "fail"
    assert record["generation"]["agent_seconds"] < 120  # ended by the plugin, long before the agent would end
    assert server.requests == []
