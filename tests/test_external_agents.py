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

pytestmark = pytest.mark.e2e

CAPSULE = "capsule-7038571"
USER_KEY = "sk-user-secret-d41d8cd98f00"

# The command agent: one model call through the proxy, the reply's text written as the answer file; what the
# sandbox can find of the user's key (environment, its own files, the workspace) goes into the workspace.
COMMAND_AGENT = r"""
import json, os, subprocess, urllib.request
prompt = open(os.environ["AGENTBENCH_PROMPT_FILE"]).read()
body = json.dumps({"model": "x", "messages": [{"role": "user", "content": prompt}]}).encode()
request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body, headers={
    "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
reply = json.load(urllib.request.urlopen(request, timeout=60))
open(os.environ["AGENTBENCH_ANSWER_FILE"], "w").write(reply["choices"][0]["message"]["content"])
found = subprocess.run(["grep", "-rIl", "--", os.environ["USER_KEY_PROBE"], "/etc", "/tmp", os.environ["HOME"], "."],
                       capture_output=True, text=True).stdout
leaks = {"environ": [k for k, v in os.environ.items() if os.environ["USER_KEY_PROBE"] in v and k != "USER_KEY_PROBE"],
         "files": [f for f in found.splitlines() if "key-probe" not in f]}
open("key-probe.json", "w").write(json.dumps(leaks))
"""


def questions() -> dict:
    task = next(t for t in dataset.load_split(SHARED_DATA, "train") if t["capsule_id"] == CAPSULE)
    return task["results"][0]


@pytest.fixture(autouse=True)
def data_env(monkeypatch):
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(SHARED_DATA))


def run_agent(pytester, tmp_path, server: Any, run_id: str, *extra: str, cache: str = "off"):
    staged = tmp_path / "staged"
    if not staged.exists():
        build_capsule_archive(staged, CAPSULE, figure=True)
    reports = tmp_path / "reports"
    result = pytester.runpytest_subprocess(
        "--bench=core-bench",
        "--bench-split=train",
        f"--bench-ids={CAPSULE}",
        "--model=agent-model",
        f"--model-base-url={server.base_url}",
        f"--model-api-key={USER_KEY}",
        "--model-max-retries=0",
        f"--bench-cache={cache}",
        f"--bench-cache-dir={tmp_path / 'cache'}",
        f"--bench-capsules-dir={staged}",
        f"--bench-report-dir={reports}",
        f"--bench-run-id={run_id}",
        "--bench-env=host",
        "--bench-difficulty=easy",
        "-p",
        "no:cacheprovider",
        *extra,
    )
    run_dir = reports / "core-bench" / "agent-model" / run_id
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    assert len(records) == 1, result.stdout.str()[-3000:]
    return result, records[0], run_dir


def command_args() -> list[str]:
    """The command agent's options: its script inline (nothing of the test's folders is in the sandbox)."""
    command = (
        f"USER_KEY_PROBE={shlex.quote(USER_KEY)} {shlex.quote(sys.executable)} - <<'AGENT'\n{COMMAND_AGENT}\nAGENT"
    )
    return ["--bench-agent=command", f"--bench-agent-command={command}", "--bench-keep-workspaces"]


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
    assert record["submission_source"] == "final_answer"
    assert record["generation"]["model_calls"] == 1 == len(server.requests)
    assert (record["generation"]["prompt_tokens"], record["generation"]["completion_tokens"]) == (123, 45)
    sent = server.requests[0]
    assert sent["headers"]["authorization"] == f"Bearer {USER_KEY}"  # the plugin's client, not the agent
    assert "CORE-Bench" in json.dumps(sent["body"]["messages"]) or len(sent["body"]["messages"][0]["content"]) > 100
    probe = json.loads((Path(record["workspace"]) / "key-probe.json").read_text())
    assert probe == {"environ": [], "files": []}
    trajectory = json.loads((run_dir / record["trajectory"]).read_text())
    assert trajectory["agent"] == {"name": "command", "version": None}
    assert trajectory["messages"][-1]["role"] == "assistant"


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
        f"--bench-agent-command={command}",
        "--bench-keep-workspaces",
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
