"""The CORE-Bench agent end to end: ``pytest --bench=core-bench --model=...`` against a scripted
OpenAI-compatible server on 127.0.0.1, in the host and in the Docker environment."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest

# imported here, before any in-process pytester run: numpy cannot be imported twice in one process, and
# pytester drops the modules a run imported
from pytest_agentbench.benchmarks.corebench import bench, dataset, scorer  # noqa: F401

from helpers.bench_runs import SHARED_DATA, ctrl_c_as_a_terminal_gives_it  # honours $AGENTBENCH_DATA_DIR
from helpers.capabilities import needs
from helpers.capsule_factory import build_capsule_archive, labelled_containers
from helpers.fake_openai import FakeOpenAI

pytestmark = pytest.mark.e2e

DATA = SHARED_DATA
CAPSULE = "capsule-7038571"  # a train capsule; its questions come from core_train.json
VOLATILE = {"duration", "worker", "trajectory_seconds", "env", "isolation", "capsule_source"}  # extracted, then cached
VOLATILE_AGENT = {"agent_seconds"}


def questions() -> dict:
    task = next(t for t in dataset.load_split(DATA, "train") if t["capsule_id"] == CAPSULE)
    return task["results"][0]


def env_args(kind: str) -> list[str]:
    if kind == "docker":
        return ["--bench-env=docker", f"--bench-set=docker_image={needs('docker')}", "--bench-set=docker_network=none"]
    return ["--bench-env=host"]


def agent_run_args(server: FakeOpenAI, staged: Path, reports: Path) -> list[str]:
    """``pytest`` arguments of a run of CAPSULE (staged in ``staged``) by the scripted agent model, reports in
    ``reports``, no cache."""
    return [
        "--bench=core-bench",
        "--bench-split=train",
        f"--bench-ids={CAPSULE}",
        "--model=agent-model",
        f"--model-base-url={server.base_url}",
        "--model-api-key=x",
        "--bench-cache=off",
        f"--bench-capsules-dir={staged}",
        f"--bench-report-dir={reports}",
        "-p",
        "no:cacheprovider",
    ]


def run_bench(pytester, tmp_path, server, kind, difficulty, *extra) -> tuple[pytest.RunResult, dict, Path]:
    staged = tmp_path / "staged"
    build_capsule_archive(staged, CAPSULE, figure=True)
    run_dir = tmp_path / "reports" / "core-bench" / "agent-model" / f"{kind}-{difficulty}"
    result = pytester.runpytest_subprocess(
        *agent_run_args(server, staged, tmp_path / "reports"),
        "--bench-set=model_max_retries=0",
        f"--bench-difficulty={difficulty}",
        f"--bench-run-id={kind}-{difficulty}",
        *env_args(kind),
        *extra,
    )
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    assert len(records) == 1, records
    return result, records[0], run_dir


def script_solver(server: FakeOpenAI) -> None:
    answers = questions()
    code = "cd code && python3 main.py && python3 plot.py && cat ../results/output.txt"
    server.reply("Let me look around.", tool_calls=[("bash", {"command": "ls -R"})])
    server.reply(tool_calls=[("bash", {"command": code, "timeout": 60})])
    server.reply(tool_calls=[("view_image", {"path": "results/figure.png"})])
    wrong = {"what is the answer?": 1, **dict(list(answers.items())[1:])}
    server.reply(tool_calls=[("submit", {"answers": wrong})])
    server.reply(tool_calls=[("submit", {"answers": answers})])


def tool_messages(request: dict) -> list[str]:
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "tool"]


def check_conversation(server: FakeOpenAI) -> None:
    first_key = next(iter(questions()))
    requests = [r for r in server.requests if r["path"].endswith("/chat/completions")]
    assert len(requests) == 5
    assert [t["function"]["name"] for t in requests[0]["body"]["tools"]] == ["bash", "view_image", "submit"]
    listing, ran = tool_messages(requests[2])[:2]
    assert "main.py" in listing and "exit code: 0" in listing
    assert "mean accuracy: 0.9300" in ran
    last = requests[3]["body"]["messages"]
    assert "is shown in the next message" in last[-2]["content"]
    image = last[-1]["content"][1]["image_url"]["url"]
    assert last[-1]["role"] == "user" and image.startswith("data:image/png;base64,iVBORw0KGgo")
    rejected = tool_messages(requests[4])[-1]
    assert rejected.startswith("Not accepted") and json.dumps(first_key) in rejected
    assert '"what is the answer?"' in rejected


@pytest.fixture(autouse=True)
def data_env(monkeypatch):
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(DATA))


ENVS = ["host", pytest.param("docker", marks=pytest.mark.docker)]


@pytest.mark.parametrize("kind", ENVS)
@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
@pytest.mark.slow
def test_scripted_agent_solves_the_capsule(pytester, tmp_path, server, kind, difficulty):
    script_solver(server)
    result, record, run_dir = run_bench(pytester, tmp_path, server, kind, difficulty)
    assert record["status"] == "pass", record["message"]
    result.assert_outcomes(passed=1)
    assert record["end_reason"] == "submitted" and record["env"] == kind and record["difficulty"] == difficulty
    assert record["generation"]["model_calls"] == 5 and record["generation"]["tool_calls"] == 5
    assert record["generation"]["submit_rejections"] == 1 and record["generation"]["prompt_tokens"] == 55
    check_conversation(server)
    trajectory = json.loads((run_dir / record["trajectory"]).read_text())
    assert trajectory["end_reason"] == "submitted" and len(trajectory["messages"]) >= 12
    assert "base64 chars" in json.dumps(trajectory["messages"])  # images kept out of the file
    # each model call's tokens and latency, beside the assistant message it produced (report.html shows them)
    turns = trajectory["turns"]
    assert len(turns) == 5 and all(trajectory["messages"][t["message"]]["role"] == "assistant" for t in turns)
    assert sum(t["prompt_tokens"] for t in turns) == 55 and all(t["latency"] > 0 for t in turns)
    if kind == "docker":
        assert labelled_containers() == []


@pytest.mark.docker
@pytest.mark.slow
def test_host_and_docker_give_the_same_record(pytester, tmp_path, server):
    records = {}
    for kind in ("host", "docker"):
        script_solver(server)
        _, record, _ = run_bench(pytester, tmp_path / kind, server, kind, "hard")
        records[kind] = record
    for record in records.values():
        for key in VOLATILE:
            record.pop(key, None)
        for key in VOLATILE_AGENT:
            record["generation"].pop(key, None)
    assert records["host"] == records["docker"]


def marker_processes(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmd and "bash" not in cmd.split()[0]:
            found.append(int(pid))
    return found


@pytest.mark.parametrize("kind", ENVS)
@pytest.mark.slow
def test_timeout_flood_and_no_submit_end_cleanly(pytester, tmp_path, server, kind):
    marker = "4321.5"  # a sleep left running in the background: must not outlive the item
    server.reply(tool_calls=[("bash", {"command": "sleep 30", "timeout": 1})])
    server.reply(tool_calls=[("bash", {"command": "head -c 100000000 /dev/zero | tr '\\0' y"})])
    server.reply(tool_calls=[("bash", {"command": f"sleep {marker} > /dev/null 2>&1 &\necho started"})])
    result, record, run_dir = run_bench(pytester, tmp_path, server, kind, "easy", "--bench-set=agent_steps=3")
    result.assert_outcomes(failed=1)
    assert record["status"] == "fail" and record["end_reason"] == "max_steps"
    assert "agent ended without submitting (max_steps)" in record["message"]
    assert record["generation"]["commands_timed_out"] == 1
    trajectory = json.loads((run_dir / record["trajectory"]).read_text())
    outputs = [m["content"] for m in trajectory["messages"] if m["role"] == "tool"]
    assert outputs[0].startswith("command timed out after 1 s")
    assert "100000000 bytes, only the head and the tail are shown" in outputs[1] and len(outputs[1]) < 40_000
    assert "started" in outputs[2]
    assert marker_processes(marker) == []
    if kind == "docker":
        assert labelled_containers() == []


@pytest.mark.parametrize(
    "option, reason", [("--bench-set=agent_time=2", "time_limit"), ("--bench-set=agent_tokens=30", "token_limit")]
)
@pytest.mark.slow
def test_time_and_token_limits_end_the_capsule(pytester, tmp_path, server, option, reason):
    for _ in range(3):
        server.reply(tool_calls=[("bash", {"command": "sleep 5"})])
    result, record, _ = run_bench(pytester, tmp_path, server, "host", "easy", option)
    assert record["end_reason"] == reason and record["status"] == "fail"
    assert record["generation"]["model_calls"] == (1 if reason == "time_limit" else 2)


@pytest.mark.slow
def test_a_per_item_budget_stops_the_agent_with_budget(pytester, tmp_path, server):
    for _ in range(3):  # $0.007 a call at $2 / $10 per million tokens: the third is never asked
        server.reply(tool_calls=[("bash", {"command": "ls"})], prompt_tokens=1000, completion_tokens=500)
    result, record, run_dir = run_bench(
        pytester,
        tmp_path,
        server,
        "host",
        "easy",
        "--model-price=2,10",
        "--bench-set=max_cost_per_item=0.01",
        "--bench-set=max_retries=2",
        "--bench-max-errors=0",
    )
    assert record["status"] == "budget" and record["end_reason"] == "budget", record["message"]
    assert "spent $0.0140 of its budget of $0.01 (--bench-set max_cost_per_item)" in record["message"]
    assert record["generation"]["model_calls"] == 2 and record["generation"]["cost_usd"] == pytest.approx(0.014)
    assert len(server.requests) == 2 and "tries" not in record  # a verdict: never retried
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["metrics"]["capsule_accuracy"] == 0 and summary["cost"]["budget_stopped"] == 1
    assert summary["gates"][0]["ok"]  # --bench-max-errors does not count it
    assert result.ret == 0


@pytest.mark.slow
def test_model_failure_is_a_model_error(pytester, tmp_path, server):
    server.always_status = 500
    _, record, _ = run_bench(pytester, tmp_path, server, "host", "easy")
    assert record["status"] == "model_error" and record["end_reason"] == "model_error"
    assert "HTTP 500" in record["message"]


@pytest.mark.slow
def test_gpu_capsule_is_an_env_error_without_bench_gpus(pytester, tmp_path, server):
    staged = tmp_path / "staged"
    build_capsule_archive(staged, CAPSULE, gpu=True)
    pytester.runpytest_subprocess(
        *agent_run_args(server, staged, tmp_path / "reports"), "--bench-run-id=gpu", "--bench-env=host", "-rs"
    )
    record = json.loads((tmp_path / "reports" / "core-bench" / "agent-model" / "gpu" / "records.jsonl").read_text())
    assert record["status"] == "env_error" and record["gpu_required"] is True  # counted, not skipped
    assert "needs a GPU and --bench-set gpus is not set" in record["message"] and "not gpu" in record["message"]
    assert f"(host {socket.gethostname()})" in record["message"]
    assert record["unplaced"] == "gpu"  # another host may have one: a resume runs it again
    assert server.requests == []

    run_dir = tmp_path / "reports" / "core-bench" / "agent-model" / "gpu"
    resumed = pytester.runpytest_subprocess(
        f"--bench-resume={run_dir}", f"--bench-capsules-dir={staged}", "--model-api-key=x", "-p", "no:cacheprovider"
    )
    resumed.stdout.fnmatch_lines([f"*1 item(s) whose host lacked what they need run again: {CAPSULE}*"])
    lines = (run_dir / "records.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["unplaced"] == "gpu", lines  # run again, one record


def test_the_gpus_help_says_what_becomes_of_a_gpu_capsule_without_it():
    """The test above shows the record: an env_error that counts. --bench-set gpus's help must say the same."""
    from pytest_agentbench.envs import ENV_OPTIONS

    [gpus] = [o for o in ENV_OPTIONS if o.flag == "--bench-gpus"]
    assert "env_error" in gpus.help and "skipped" not in gpus.help, gpus.help
    assert "-m 'not gpu'" in gpus.help


def test_bad_agent_option_is_a_usage_error(pytester, tmp_path, server):
    result = pytester.runpytest_subprocess(
        "--bench=core-bench",
        "--bench-split=train",
        "--model=agent-model",
        f"--model-base-url={server.base_url}",
        "--bench-set=agent_steps=zero",
        "-p",
        "no:cacheprovider",
    )
    result.stderr.fnmatch_lines(["*--bench-set agent_steps must be a positive integer, got 'zero'*"])


@pytest.mark.docker
@pytest.mark.slow
def test_ctrl_c_removes_the_container(pytester, tmp_path, server):
    """Ctrl-C while the agent's command runs in its container: pytest stops and the container is gone."""
    import signal
    import subprocess
    import sys

    import docker

    image = needs("docker")
    staged = tmp_path / "staged"
    build_capsule_archive(staged, CAPSULE)
    server.reply(tool_calls=[("bash", {"command": "sleep 300", "timeout": 600})])
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            *agent_run_args(server, staged, tmp_path / "reports"),
            "--bench-env=docker",
            f"--bench-set=docker_image={image}",
            "--bench-set=docker_network=none",
        ],
        cwd=pytester.path,
        preexec_fn=ctrl_c_as_a_terminal_gives_it,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = docker.from_env()

    def containers():
        return client.containers.list(all=True, filters={"label": f"agentbench.pid={proc.pid}"}, ignore_removed=True)

    def command_running() -> bool:  # the handshake: the agent's `sleep 300` is among the container's processes
        for container in containers():
            try:
                top = container.top(ps_args="-eo pid,args")  # (docker top needs the pid column)
            except docker.errors.APIError:  # not running (yet, or any more)
                continue
            if any("sleep 300" in " ".join(row) for row in top.get("Processes") or []):
                return True
        return False

    deadline = time.monotonic() + 180
    while not (server.count() >= 1 and command_running()):
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before the command started"
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == pytest.ExitCode.INTERRUPTED
    assert containers() == []
