"""What the external agents' end-to-end tests share: one CORE-Bench capsule run as a user runs it (pytest in a
subprocess, the scripted server as the endpoint), the ``command`` agent that makes one model call, and the checks
of a scored agent run."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from pytest_agentbench.benchmarks.corebench import dataset

from helpers.bench_runs import SHARED_DATA
from helpers.capsule_factory import build_capsule_archive

CAPSULE = "capsule-7038571"
MODEL = "agent-model"

# The command agent: one model call through the item's metering proxy, the reply's text written as its answer
# file. Tests append lines of their own (what the agent finds of its sandbox).
ONE_CALL_AGENT = r"""
import json, os, urllib.request
prompt = open(os.environ["AGENTBENCH_PROMPT_FILE"]).read()
body = json.dumps({"model": "x", "messages": [{"role": "user", "content": prompt}]}).encode()
request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body, headers={
    "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
reply = json.load(urllib.request.urlopen(request, timeout=60))
open(os.environ["AGENTBENCH_ANSWER_FILE"], "w").write(reply["choices"][0]["message"]["content"])
"""


def questions() -> dict[str, Any]:
    """The capsule's questions with their reference answers (the first reference run's)."""
    task = next(t for t in dataset.load_split(SHARED_DATA, "train") if t["capsule_id"] == CAPSULE)
    return task["results"][0]


def inline(script: str, python: str | None = None) -> str:
    """A command line running ``script`` with ``python`` (default: this test's interpreter; "python3" for the
    image's), the script given inline: nothing of the test's folders is in the agent's sandbox."""
    return f"{python or shlex.quote(sys.executable)} - <<'AGENT'\n{script}\nAGENT"


def run_capsule(
    pytester: Any,
    tmp_path: Path,
    server: Any,
    run_id: str,
    *extra: str,
    key: str,
    env: tuple[str, ...] = ("--bench-env=host",),
    cache: str = "off",
) -> tuple[Any, dict[str, Any], Path]:
    """The capsule worked on by the agent ``extra`` chooses, in the environment ``env`` chooses: the run's
    result, its one record and its run folder."""
    staged = tmp_path / "staged"
    if not staged.exists():
        build_capsule_archive(staged, CAPSULE, figure=True)
    reports = tmp_path / "reports"
    result = pytester.runpytest_subprocess(
        "--bench=core-bench",
        "--bench-split=train",
        f"--bench-ids={CAPSULE}",
        f"--model={MODEL}",
        f"--model-base-url={server.base_url}",
        f"--model-api-key={key}",
        "--bench-set=model_max_retries=0",
        f"--bench-cache={cache}",
        f"--bench-cache-dir={tmp_path / 'cache'}",
        f"--bench-capsules-dir={staged}",
        f"--bench-report-dir={reports}",
        f"--bench-run-id={run_id}",
        *env,
        "--bench-difficulty=easy",
        "-p",
        "no:cacheprovider",
        *extra,
    )
    run_dir = reports / "core-bench" / MODEL / run_id
    records_file = run_dir / "records.jsonl"
    assert records_file.is_file(), result.stdout.str()[-3000:] + result.stderr.str()[-3000:]
    records = [json.loads(line) for line in records_file.read_text().splitlines()]
    assert len(records) == 1, result.stdout.str()[-3000:]
    return result, records[0], run_dir


class Gone:
    """A stopped server's address, for the run options (the base URL is part of the cache key)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url


def check_scored_run(
    record: dict[str, Any],
    server: Any,
    *,
    right: bool,
    agent: dict[str, Any],
    calls: int,
    tokens: tuple[int, int],
    key: str,
) -> None:
    """An agent run that submitted: its verdict, its agent, its model calls and tokens as the server counted
    them, every request sent with the user's key by the plugin's client (not the agent)."""
    assert record["status"] == ("pass" if right else "fail"), record["message"]
    assert record["agent"] == agent
    assert record["end_reason"] == "submitted" and record["submission_source"] == "final_answer"
    assert record["generation"]["model_calls"] == calls == len(server.requests)
    assert (record["generation"]["prompt_tokens"], record["generation"]["completion_tokens"]) == tokens
    assert all(request["headers"]["authorization"] == f"Bearer {key}" for request in server.requests)


def check_replay(first: dict[str, Any], again: dict[str, Any], calls: int) -> None:
    """A replay of ``first`` with the endpoint gone: the same verdict, every call served from the recording."""
    assert again["status"] == first["status"] == "pass", again["message"]
    assert again["generation"]["answers"] == "replayed"
    assert again["generation"]["cache_hits"] == calls  # every request found, none missed
    assert again["generation"]["responses"] == first["generation"]["responses"]


MINI = {"name": "mini-swe-agent", "version": "2.4.6"}
CODEX = {"name": "codex", "version": "0.171.0"}


def script_codex_turns(server: Any, answers: dict[str, Any]) -> None:
    """Three commands, one a turn: the capsule's code started in the background of Codex's exec session (its
    first output comes before the program ends), the session waited on by the id the model was shown, the
    results read; then the answers as the final message."""
    start = {"cmd": "cd code && sleep 1 && python3 main.py && echo finished", "yield_time_ms": 250}
    server.reply("Running the code.", tool_calls=[("exec_command", start)], prompt_tokens=301, completion_tokens=31)
    wait = {"session_id": 1, "chars": "", "yield_time_ms": 30000}
    server.reply("Waiting for it.", tool_calls=[("write_stdin", wait)], prompt_tokens=402, completion_tokens=42)
    read = {"cmd": "cat results/output.txt"}
    server.reply("Reading the results.", tool_calls=[("exec_command", read)], prompt_tokens=503, completion_tokens=53)
    server.reply(json.dumps(answers), prompt_tokens=604, completion_tokens=64)


def tool_outputs(request: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in request["body"]["messages"] if m["role"] == "tool"]


def check_codex_turns(record: dict[str, Any], server: Any) -> None:
    """The run of ``script_codex_turns`` passed, the model seeing each command's output in turn."""
    assert record["status"] == "pass", record["message"]
    assert record["generation"]["model_calls"] == 4 == len(server.requests)
    waited = tool_outputs(server.requests[2])[-1]
    assert "Process exited with code 0" in waited and "finished" in waited  # the session the model named
    assert "mean accuracy: 0.9300" in tool_outputs(server.requests[3])[-1]
