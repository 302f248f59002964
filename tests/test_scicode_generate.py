"""SciCode generation harnesses driven through the real openai SDK against the scripted server."""

from __future__ import annotations

import json

import pytest

from pytest_agentbench.benchmarks.scicode.generate import FINAL_REQUEST, TOOL_NAME, generate_step
from pytest_agentbench.benchmarks.scicode.prompts import build_prompt, load_templates
from pytest_agentbench.sandbox.executors import Limits, run_python

from helpers.bench_runs import SHARED_DATA  # honours $AGENTBENCH_DATA_DIR

DATA = SHARED_DATA
STEP_1_CODE = (
    "def get_alpha(recvec, alpha_scaling=5):\n    return alpha_scaling * np.max(np.linalg.norm(recvec, axis=1))\n"
)
ANSWER = (
    "# Background: tile the cell.\n```python\nimport numpy as np\n"
    "def get_lattice_coords(latvec, nlatvec=1):\n    return latvec\n```"
)
ANSWER_CODE = "def get_lattice_coords(latvec, nlatvec=1):\n    return latvec\n"


@pytest.fixture(scope="module")
def problem():
    with open(DATA / "scicode" / "problems_dev.jsonl", encoding="utf-8") as fh:
        return next(row for row in map(json.loads, fh) if row["problem_id"] == "10")


@pytest.fixture(scope="module")
def templates():
    return load_templates(DATA)


def run_code(code: str, timeout: float) -> dict:
    """Like the lead's runner: the problem's dependencies preloaded, in a sandboxed child."""
    result = run_python("import numpy as np\n" + code, limits=Limits(timeout=timeout))
    status = "timeout" if result.timed_out else ("ok" if result.exit_code == 0 else "error")
    return {"status": status, "stdout": result.stdout, "stderr": result.stderr, "exit_code": result.exit_code}


def generate(model, problem, templates, **kwargs):
    options = dict(mode="tool_use", with_background=False, templates=templates, run_code=run_code)
    options.update(kwargs)
    return generate_step(model, problem, 1, [STEP_1_CODE], **options)


def code_call(code: str):
    return (TOOL_NAME, {"code": code})


def test_naive_single_call(server, make_model, problem, templates):
    server.reply(ANSWER, prompt_tokens=100, completion_tokens=20)
    result = generate(make_model(), problem, templates, mode="naive")
    assert (result.status, result.code) == ("ok", ANSWER_CODE)
    assert result.response_text == ANSWER
    assert result.accounting["model_calls"] == 1 and result.accounting["tool_calls"] == 0
    assert (result.accounting["prompt_tokens"], result.accounting["completion_tokens"]) == (100, 20)
    assert [m["role"] for m in result.trajectory] == ["system", "user", "assistant"]
    body = server.requests[0]["body"]
    assert "tools" not in body
    expected = build_prompt(problem, 1, [STEP_1_CODE], with_background=False, templates=templates)
    assert body["messages"][1] == {"role": "user", "content": expected}


@pytest.mark.parametrize("protocol", ["chat", "responses"])
def test_tool_use_runs_the_code_and_returns_output(server, make_model, problem, templates, protocol):
    server.reply("Testing.", tool_calls=[code_call("print(np.arange(3).sum() + 2)")])
    server.reply(ANSWER)
    result = generate(make_model(protocol), problem, templates)
    assert (result.status, result.code) == ("ok", ANSWER_CODE)
    assert result.accounting["model_calls"] == 2 and result.accounting["tool_calls"] == 1
    assert result.accounting["prompt_tokens"] == 22
    tool_message = result.trajectory[3]
    assert tool_message["role"] == "tool" and "status: ok" in tool_message["content"]
    assert "stdout:\n5\n" in tool_message["content"]
    first, second = (r["body"] for r in server.requests)
    tool_names = [t.get("name") or t["function"]["name"] for t in first["tools"]]
    assert tool_names == [TOOL_NAME]
    if protocol == "chat":
        assert second["messages"][-1]["content"] == tool_message["content"]
    else:
        assert second["input"][-1]["type"] == "function_call_output"
        assert second["input"][-1]["output"] == tool_message["content"]


def test_several_tool_calls_run_in_order(server, make_model, problem, templates):
    server.reply(
        tool_calls=[code_call("print('first')"), code_call("raise ValueError('boom')"), code_call("print('third')")]
    )
    server.reply(ANSWER)
    result = generate(make_model(), problem, templates)
    outputs = [m["content"] for m in result.trajectory if m["role"] == "tool"]
    assert len(outputs) == 3 and result.accounting["tool_calls"] == 3
    assert "first" in outputs[0]
    assert "status: error" in outputs[1] and "ValueError: boom" in outputs[1]
    assert "third" in outputs[2]
    ids = [c["id"] for c in result.trajectory[2]["tool_calls"]]
    assert [m["tool_call_id"] for m in result.trajectory[3:6]] == ids


def test_tool_budget_then_final_answer_without_tools(server, make_model, problem, templates):
    for i in range(2):
        server.reply(tool_calls=[code_call(f"print({i})")])
    server.reply(ANSWER)
    result = generate(make_model(), problem, templates, tool_loops=2)
    assert (result.status, result.code) == ("ok", ANSWER_CODE)
    assert result.accounting["model_calls"] == 3 and result.accounting["tool_calls"] == 2
    last = server.requests[-1]["body"]
    assert last["tool_choice"] == "none"
    assert last["messages"][-1] == {"role": "user", "content": FINAL_REQUEST}


def test_tool_calls_after_budget_are_not_run(server, make_model, problem, templates):
    server.reply(tool_calls=[code_call("print(1)")])
    server.reply(tool_calls=[code_call("print(2)")])
    result = generate(make_model(), problem, templates, tool_loops=1)
    assert result.status == "parse_error"
    assert result.accounting["tool_calls"] == 1
    assert "no more tool calls" in result.trajectory[-1]["content"]


def test_malformed_tool_arguments_are_reported_to_the_model(server, make_model, problem, templates):
    server.reply(tool_calls=[(TOOL_NAME, "{not json"), (TOOL_NAME, {"source": "x"}), ("shell", {"cmd": "ls"})])
    server.reply(ANSWER)
    result = generate(make_model(), problem, templates)
    assert result.status == "ok"
    outputs = [m["content"] for m in result.trajectory if m["role"] == "tool"]
    assert "not valid JSON" in outputs[0]
    assert "missing the 'code' argument" in outputs[1]
    assert "unknown tool 'shell'" in outputs[2]


def test_tool_timeout_is_reported(server, make_model, problem, templates):
    server.reply(tool_calls=[code_call("while True:\n    pass")])
    server.reply(ANSWER)
    result = generate(make_model(), problem, templates, tool_timeout=1)
    assert "status: timeout" in result.trajectory[3]["content"]
    assert result.status == "ok"


@pytest.mark.parametrize("mode", ["naive", "tool_use"])
def test_reply_without_code_is_a_parse_error(server, make_model, problem, templates, mode):
    server.reply("I think the lattice should be tiled, but I will not write code.")
    result = generate(make_model(), problem, templates, mode=mode)
    assert result.status == "parse_error" and result.code is None
    assert "get_lattice_coords" in result.message
    assert result.response_text.startswith("I think")


@pytest.mark.parametrize("protocol", ["chat", "responses"])
def test_cut_off_reply_is_truncated(server, make_model, problem, templates, protocol):
    server.reply("```python\ndef get_lattice_coords(latvec, nlatvec=1):\n    coords = [", finish_reason="length")
    result = generate(make_model(protocol), problem, templates, mode="naive")
    assert result.status == "truncated" and result.code is None
    assert "token limit" in result.message and "--model-params" in result.message


def test_model_error_is_a_status_not_an_exception(server, make_model, problem, templates):
    def tool_call_then_break(body):
        server.always_status = 500  # every later request fails
        return {"tool_calls": [code_call("print(1)")]}

    server.reply_with(tool_call_then_break)
    result = generate(make_model(max_retries=1), problem, templates)
    assert result.status == "model_error" and result.code is None
    assert "500" in result.message and "fake-model" in result.message
    assert result.accounting["model_calls"] == 1 and result.accounting["tool_calls"] == 1
    assert server.count() == 3  # the good call, then one try and one retry


def test_rerun_from_cache_replays_the_whole_trajectory(server, make_model, problem, templates):
    server.reply(tool_calls=[code_call("print(7)")])
    server.reply(ANSWER)
    first = generate(make_model(), problem, templates)
    assert server.count() == 2
    again = generate(make_model(cache_mode="replay"), problem, templates)
    assert server.count() == 2
    assert (again.status, again.code) == ("ok", ANSWER_CODE)
    assert again.accounting["cache_hits"] == again.accounting["model_calls"] == 2
    assert again.trajectory == first.trajectory
    other_sample = generate(make_model(cache_mode="replay"), problem, templates, sample_index=1)
    assert other_sample.status == "model_error" and "not in cache (replay mode)" in other_sample.message
