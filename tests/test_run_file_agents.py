"""Several agents, one command: a run file's ``agents:`` beside ``models:`` makes each (model, agent) pair its own
run of CORE-Bench in one session (the built-in agent and the ``command`` agent here, both against the scripted
server), with one table across the runs that names each run's agent, and no comparison between runs of
different agents unless it is asked for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import pytest_agentbench

# imported before any in-process pytester run (numpy cannot be imported twice in one process)
from pytest_agentbench.benchmarks.corebench import dataset  # noqa: F401

from helpers.bench_runs import SHARED_DATA
from helpers.capabilities import needs
from helpers.capsule_factory import build_capsule_archive
from helpers.external_agents import CAPSULE, ONE_CALL_AGENT, inline, questions

pytestmark = pytest.mark.e2e

KEY = "sk-agents-0123456789"
RUNS = ("agent-model+builtin", "agent-model+command")
FOLDERS = {"agent-model+builtin": "agent-model_builtin", "agent-model+command": "agent-model_command"}  # safe names


def answering(body: dict) -> dict:
    """The built-in agent (it offers tools) submits the right answers; the command agent answers wrongly. Each
    agent's call has its own token counts, so a run's record shows only its own agent's calls."""
    if body.get("tools"):
        return {"tool_calls": [("submit", {"answers": questions()})], "prompt_tokens": 100, "completion_tokens": 10}
    return {"text": json.dumps(dict.fromkeys(questions(), "no idea")), "prompt_tokens": 200, "completion_tokens": 20}


@pytest.fixture
def run_file(pytester, tmp_path, server, monkeypatch) -> Path:
    """A run file of one model and two agents, everything of the run in it (one command runs it)."""
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(SHARED_DATA))
    monkeypatch.setenv("AGENT_MODEL_KEY", KEY)
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENTBENCH_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    staged = tmp_path / "staged"
    build_capsule_archive(staged, CAPSULE, figure=True)
    command = inline(ONE_CALL_AGENT)
    path = pytester.path / "agents.yaml"
    path.write_text(
        f"bench: {{bench: core-bench, split: train, ids: [{CAPSULE}], env: host, difficulty: easy,\n"
        f"        cache: 'off', capsules_dir: {json.dumps(str(staged))},\n"
        f"        report_dir: {json.dumps(str(tmp_path / 'reports'))}}}\n"
        "models:\n"
        f"  - {{name: agent-model, base_url: {json.dumps(server.base_url)}, api_key_env: AGENT_MODEL_KEY,"
        " max_retries: 0}\n"
        "agents:\n"
        "  - builtin\n"
        f"  - {{name: command, command: {json.dumps(command)}}}\n"
    )
    return path


def run(pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "--bench-config=agents.yaml", "--bench-run-id=pair", "-p", "no:cacheprovider", *args
    )


def records_of(tmp_path: Path, name: str) -> list[dict]:
    path = tmp_path / "reports" / "core-bench" / FOLDERS[name] / "pair" / "records.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def comparison_md(tmp_path: Path) -> str:
    return (tmp_path / "reports" / "core-bench" / "_models" / "pair" / "summary.md").read_text()


@pytest.mark.slow
def test_each_agent_of_the_run_file_is_its_own_run_and_the_table_names_it(pytester, tmp_path, server, run_file):
    needs("bwrap")
    for _ in range(4):
        server.reply_with(answering)
    result = run(pytester, "-v")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out[-3000:]  # the command agent's answers are wrong
    result.stdout.fnmatch_lines(
        [
            f"*core-bench::{CAPSULE}[[]agent-model+builtin[]] PASSED*",
            f"*core-bench::{CAPSULE}[[]agent-model+command[]] FAILED*",
        ]
    )
    builtin, command = (records_of(tmp_path, name) for name in RUNS)
    assert [r["status"] for r in builtin] == ["pass"] and [r["status"] for r in command] == ["fail"]
    assert command[0]["agent"] == {"name": "command", "version": None}
    assert builtin[0]["agent"] == {"name": "builtin", "version": pytest_agentbench.__version__}  # the plugin's
    assert builtin[0]["model"] == command[0]["model"] == "agent-model"
    # each run counted its own agent's calls, as the server counted them
    assert (builtin[0]["generation"]["prompt_tokens"], builtin[0]["generation"]["completion_tokens"]) == (100, 10)
    assert (command[0]["generation"]["prompt_tokens"], command[0]["generation"]["completion_tokens"]) == (200, 20)
    assert len(server.requests) == 2
    assert all(r["headers"]["authorization"] == f"Bearer {KEY}" for r in server.requests)
    for name in RUNS:
        summary = json.loads(
            (tmp_path / "reports" / "core-bench" / FOLDERS[name] / "pair" / "summary.json").read_text()
        )
        assert summary["comparability"]["harness"]["agent"] == name.split("+")[1]
    table = out[out.index("2 runs compared") :]
    header = table.splitlines()[1].split()
    assert header[:2] == ["model", "agent"], table
    rows = [line.split() for line in table.splitlines()[3:5]]
    assert [row[:2] for row in rows] == [["agent-model", "builtin"], ["agent-model", "command"]], table
    text = comparison_md(tmp_path)
    assert "| agent-model | builtin |" in text and "| agent-model | command |" in text
    assert "## agent-model+command compared with agent-model+builtin" in text
    assert "Not compared (the runs' harnesses differ (agent: builtin and command)" in text
    assert "allow_incomparable=true" in text
    page = (tmp_path / "reports" / "core-bench" / "_models" / "pair" / "report.html").read_text()
    assert "<th>agent</th>" in page and "Not compared" in page


@pytest.mark.slow
def test_runs_of_different_agents_are_compared_when_allowed(pytester, tmp_path, server, run_file):
    needs("bwrap")
    for _ in range(4):
        server.reply_with(answering)
    result = run(pytester, "--bench-set=allow_incomparable=true")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()[-3000:]
    text = comparison_md(tmp_path)
    assert "Not compared" not in text
    assert "the runs are NOT comparable" in text  # compared, and said so
    assert "harness" in text.split("## agent-model+command compared with agent-model+builtin", 1)[1]


@pytest.mark.slow
def test_the_commands_users_type_pick_a_run(pytester, tmp_path, server, run_file):
    """Listing and selection need no agent to run: -k picks a run by its name, --bench-agent one agent."""
    listed = run(pytester, "--collect-only", "-q")
    assert listed.ret == pytest.ExitCode.OK, listed.stdout.str()[-2000:]
    listed.stdout.fnmatch_lines([f"core-bench::{CAPSULE}[[]{RUNS[0]}[]]", f"core-bench::{CAPSULE}[[]{RUNS[1]}[]]"])
    picked = run(pytester, "--collect-only", "-q", "-k", "command")
    picked.stdout.fnmatch_lines([f"core-bench::{CAPSULE}[[]{RUNS[1]}[]]", "*1/2 tests collected (1 deselected)*"])
    one = run(pytester, "--collect-only", "-q", "--bench-agent=builtin")
    assert one.ret == pytest.ExitCode.OK, one.stderr.str()
    one.stdout.fnmatch_lines([f"core-bench::{CAPSULE}", "*1 test collected*"])
    assert server.requests == []


def test_an_unknown_agent_in_the_run_file_is_a_usage_error_naming_its_line(pytester, run_file):
    run_file.write_text(run_file.read_text().replace("  - builtin\n", "  - codx\n"))
    result = run(pytester, "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "agents.yaml:" in err and "unknown agent 'codx'" in err and "codex" in err, err


@pytest.mark.slow
def test_under_xdist_each_run_is_written_and_one_run_resumes_alone(pytester, tmp_path, server, run_file):
    """Workers route each record to its run; a run's folder is then resumed as that run alone (its agent's
    settings come back from its settings.json and the run file's entry)."""
    needs("bwrap")
    for _ in range(4):
        server.reply_with(answering)
    result = run(pytester, "-n", "2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()[-3000:]
    assert [r["status"] for r in records_of(tmp_path, RUNS[0])] == ["pass"]
    assert [r["status"] for r in records_of(tmp_path, RUNS[1])] == ["fail"]
    assert {r["worker"] for name in RUNS for r in records_of(tmp_path, name)} <= {"gw0", "gw1"}
    assert "2 runs compared" in result.stdout.str()
    folder = tmp_path / "reports" / "core-bench" / FOLDERS[RUNS[1]] / "pair"
    resumed = run(pytester, f"--bench-resume={folder}")
    out = resumed.stdout.str()
    assert "agent command" in out and "runs compared" not in out, out[-3000:]
    assert records_of(tmp_path, RUNS[1])[0]["status"] == "fail" and len(server.requests) == 2  # nothing ran again


@pytest.mark.slow
def test_agents_in_a_run_file_of_a_benchmark_without_agents_is_a_usage_error(pytester, run_file):
    run_file.write_text(run_file.read_text().replace("bench: core-bench,", "bench: scicode,"))
    result = run(pytester, "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "agents.yaml:7: agents: choose the agent of --bench=core-bench" in err and "--bench=scicode" in err, err
