"""SciCode against an OpenAI-compatible server: the real openai SDK talks to a scripted server on
127.0.0.1 that plays a model answering each validation step with its ground truth.

These runs use a pytest subprocess: the HTTP stack imports parts of itself lazily, and in-process
pytester runs would re-import them with new exception classes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_agentbench.core.records import comparable

from helpers.bench_runs import QUICK_MULTISTEP_PROBLEMS, SHARED_DATA, read_jsonl, run_dirs, validation_problems
from helpers.fake_openai import FakeOpenAI

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NEXT_STEP = "NEXT STEP - PROBLEM STEP AND FUNCTION HEADER"


def validation_steps() -> dict[str, dict]:
    steps = {}
    for line in (SHARED_DATA / "scicode" / "problems_dev.jsonl").read_text().splitlines():
        problem = json.loads(line)
        for step in problem["sub_steps"]:
            steps[step["step_number"]] = step
    return steps


STEPS = validation_steps()


def messages_of(body: dict) -> list[dict]:
    return body.get("messages") or body.get("input") or []


def first_prompt(body: dict) -> str:
    for message in messages_of(body):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return message["content"]
    raise AssertionError(f"no user prompt in {body}")


def step_asked(body: dict) -> dict:
    """The step whose function header follows the NEXT STEP heading of the prompt."""
    asked = first_prompt(body).split(NEXT_STEP, 1)[1]
    matches = [s for s in STEPS.values() if s["function_header"].strip() in asked]
    assert len(matches) == 1, [s["step_number"] for s in matches]
    return matches[0]


def after_tool_result(body: dict) -> bool:
    last = messages_of(body)[-1]
    return last.get("role") == "tool" or last.get("type") == "function_call_output"


def ground_truth_model(body: dict) -> dict:
    """Tool-use: first run the ground truth with code_interpreter, then give it as the final block."""
    step = step_asked(body)
    code = step["ground_truth_code"]
    if body.get("tools") and not after_tool_result(body) and body.get("tool_choice") != "none":
        return {"tool_calls": [("code_interpreter", {"code": code + "\nprint('defined ok')"})]}
    return {"text": f"Here is the step.\n```python\n{code}\n```\n"}


@pytest.fixture
def server(server):
    for _ in range(400):
        server.reply_with(ground_truth_model)
    return server


def model_args(server: FakeOpenAI, *extra: str) -> list[str]:
    return [
        "--bench=scicode",
        "--bench-split=validation",
        "--model=gt-player",
        f"--model-base-url={server.base_url}",
        "--model-api-key=test-key",
        *extra,
    ]


def records_of(run: Path) -> list[dict]:
    return sorted((comparable(r) for r in read_jsonl(run / "steps.jsonl")), key=lambda r: r["id"])


def without_trajectory_paths(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "generation"} for r in records]


# What a model's answer adds to a step's record beside the verdict: who answered and how.
ANSWER_FIELDS = ("model", "generation", "trajectory", "code")


def verdicts(records: list[dict]) -> dict[str, dict]:
    """Each step's verdict as its record gives it (status, message, tests run, targets, ...), by id."""
    return {r["id"]: {k: v for k, v in comparable(r).items() if k not in ANSWER_FIELDS} for r in records}


def assert_verdicts_are_the_oracle_s(records: list[dict], oracle: list[dict]) -> None:
    """A model answering each step with its ground truth gets, step for step, the verdicts of the oracle (the
    session's run of the split): what the answers went through (prompts, replies, tools, workers) changed none."""
    theirs = verdicts(records)
    expected = {k: v for k, v in verdicts(oracle).items() if k in theirs}
    assert sorted(expected) == sorted(theirs)
    for key, verdict in theirs.items():
        assert verdict == expected[key], key
    by_id = {r["id"]: r for r in oracle}
    for record in records:
        assert record["code"].strip() == by_id[record["id"]]["code"].strip(), record["id"]


# The model path is what these runs check (the oracle test resolves the whole split): they leave out the two
# problems whose upstream tests are most of a run's time. The run that is also replayed answers every other
# problem (each step's prompt and reply, each ground truth's code block); the other mode and the runs over
# xdist change one setting of that path, which chains of each length show as well: they answer the quick
# multi-step problems.
WIDE = validation_problems()
QUICK = validation_problems(only=QUICK_MULTISTEP_PROBLEMS)


def all_pass(problems: list[str], scored: int) -> str:
    return (
        f"validation: main problems resolved {len(problems)}/{len(problems)} (100.0%), "
        f"subproblems passed {scored}/{scored} (100.0%)"
    )


@pytest.mark.parametrize(
    "mode,xdist,selection",
    [
        pytest.param("tool_use", (), WIDE, id="tool_use-serial-replayed"),
        pytest.param("tool_use", ("-n", "4"), QUICK, id="tool_use-n4"),
        pytest.param("naive", (), QUICK, id="naive-serial"),
        pytest.param("naive", ("-n", "4"), QUICK, id="naive-n4"),
    ],
)
def test_scripted_ground_truth_model_resolves_validation(
    bench, pytester, server, cache_dir, mode, xdist, selection, validation_oracle_run
):
    cache = cache_dir
    problems, scored = selection
    ids = "--bench-ids=" + ",".join(problems)
    result = bench(
        *model_args(server, f"--bench-mode={mode}", f"--bench-cache-dir={cache}", ids, *xdist), subprocess=True
    )
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert all_pass(problems, scored) in result.stdout.str()
    [run] = run_dirs(pytester.path)
    records = records_of(run)
    assert all(r["status"] == "pass" for r in records) and len(records) == scored
    assert_verdicts_are_the_oracle_s(records, validation_oracle_run.records)
    calls_per_step = 2 if mode == "tool_use" else 1
    assert server.count("/chat/completions") == scored * calls_per_step
    if mode == "tool_use":
        assert all(r["generation"]["tool_calls"] == 1 for r in records)
        trajectory = json.loads((run / records[0]["trajectory"]).read_text())
        tool_results = [m for m in trajectory["messages"] if m.get("role") == "tool"]
        assert "defined ok" in tool_results[0]["content"]
    # later prompts hold the code generated for the earlier steps of their problem
    for request in server.requests:
        step = step_asked(request["body"])
        number = step["step_number"]
        pid, index = number.split(".")
        if int(index) > 1:
            earlier = STEPS[f"{pid}.{int(index) - 1}"]["ground_truth_code"]
            assert earlier.strip() in first_prompt(request["body"]).split(NEXT_STEP)[0]

    if xdist or mode != "tool_use":
        return  # one replay is enough: each full re-scoring costs minutes of CI
    # replay: the same run re-scored from the cache alone, with no request at all
    before = len(server.requests)
    replay = bench(
        *model_args(
            server,
            f"--bench-mode={mode}",
            f"--bench-cache-dir={cache}",
            ids,
            "--bench-cache=replay",
            "--bench-run-id=replay",
        ),
        subprocess=True,
    )
    assert replay.ret == 0, replay.stdout.str()[-3000:]
    assert len(server.requests) == before
    replayed = records_of(pytester.path / "reports" / "scicode" / "gt-player" / "replay")
    assert without_trajectory_paths(replayed) == without_trajectory_paths(records)


def test_responses_protocol_and_a_single_step_selected_alone(bench, pytester, server, cache_dir):
    """Step 29.3 alone: its prompt still holds the code generated for 29.1 and 29.2 in this run."""
    result = bench(
        *model_args(server, "--model-protocol=responses", "--bench-ids=29.3", f"--bench-cache-dir={cache_dir}"),
        subprocess=True,
    )
    result.assert_outcomes(passed=1)
    assert server.count("/responses") == 6 and server.count("/chat/completions") == 0
    last = server.requests[-1]["body"]
    assert step_asked(last)["step_number"] == "29.3"
    prompt = first_prompt(last)
    assert STEPS["29.1"]["ground_truth_code"].strip() in prompt
    assert STEPS["29.2"]["ground_truth_code"].strip() in prompt


def test_model_service_failures_are_model_errors(bench, pytester, cache_dir):
    with FakeOpenAI() as fake:
        fake.always_status = 500
        pytester.makeini("[pytest]\nagentbench_model_retry_delay = 0\n")
        result = bench(
            *model_args(
                fake,
                "--bench-ids=1.1",
                "--bench-set=model_max_retries=2",
                f"--bench-cache-dir={cache_dir}",
                "--bench-mode=naive",
            ),
            subprocess=True,
        )
    result.assert_outcomes(failed=1)
    assert fake.count() == 3
    out = result.stdout.str()
    assert "model_error:" in out
    assert "WARNING: 1 item(s) ended in an error (1 model_error): 1.1" in out
    [run] = run_dirs(pytester.path)
    [record] = read_jsonl(run / "steps.jsonl")
    assert record["status"] == "model_error" and "500" in record["message"]
    assert "1 item(s) ended in an error (1 model_error): 1.1" in (run / "summary.md").read_text()


def test_rate_limit_then_success(bench, pytester, cache_dir):
    with FakeOpenAI() as fake:
        fake.fail(times=2, status=429, retry_after=0)
        fake.reply_with(ground_truth_model)
        pytester.makeini("[pytest]\nagentbench_model_retry_delay = 0\n")
        result = bench(
            *model_args(fake, "--bench-ids=1.1", f"--bench-cache-dir={cache_dir}", "--bench-mode=naive"),
            subprocess=True,
        )
    result.assert_outcomes(passed=1)
    assert fake.count() == 3


@pytest.mark.parametrize(
    "reply,status,needle",
    [
        ({"text": "I cannot solve this."}, "parse_error", "no parseable Python code block"),
        (
            {"text": "```python\ndef cg(A, b, x0, tol):\n    return x0 +", "finish_reason": "length"},
            "parse_error",
            "cut off at the token limit",
        ),
    ],
)
def test_replies_without_usable_code(bench, pytester, cache_dir, reply, status, needle):
    with FakeOpenAI() as fake:
        fake.reply(**reply)
        result = bench(
            *model_args(fake, "--bench-ids=1.1", f"--bench-cache-dir={cache_dir}", "--bench-mode=naive"),
            subprocess=True,
        )
    result.assert_outcomes(failed=1)
    [run] = run_dirs(pytester.path)
    [record] = read_jsonl(run / "steps.jsonl")
    assert record["status"] == status and needle in record["message"]


def test_unreachable_model_is_a_model_error_not_a_crash(bench, pytester, cache_dir):
    pytester.makeini("[pytest]\nagentbench_model_retry_delay = 0\n")
    result = bench(
        "--bench=scicode",
        "--bench-split=validation",
        "--model=m",
        "--model-base-url=http://127.0.0.1:9/v1",
        "--model-api-key=x",
        "--bench-set=model_max_retries=1",
        "--bench-ids=1.1",
        "--bench-mode=naive",
        "--bench-set=model_preflight=off",
        f"--bench-cache-dir={cache_dir}",
        subprocess=True,
    )
    result.assert_outcomes(failed=1)
    [run] = run_dirs(pytester.path)
    [record] = read_jsonl(run / "steps.jsonl")
    assert record["status"] == "model_error"
    assert re.search(r"127\.0\.0\.1:9", record["message"])
