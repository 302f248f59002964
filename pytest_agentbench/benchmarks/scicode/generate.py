"""Generating one SciCode step with a model: a naive single call, or a tool-use loop.

Tool-use mode gives the model one tool, ``code_interpreter(code)``, that runs Python in the
benchmark's sandbox (the problem's dependencies and the earlier steps' code already loaded), so it
can test its function before answering. After ``tool_loops`` rounds of tool calls the tools are
switched off and the model is asked for its final code block. With a cost budget
(--bench-set max_cost_per_item) and a price, the loop checks before each call what the step's fresh calls
have cost, and stops with the status ``budget`` once they reached it (a call is never cut off midway).

Nothing here raises for model misbehaviour: every outcome is a GenResult with a status.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...core.text import repair_value
from ...models.concurrency import CallsStopped
from ...models.price import Price, over_budget, start_costs
from ...models.usage import count_completion, turn_of
from .extract import extract_code, function_name_of
from .prompts import build_prompt

if TYPE_CHECKING:
    from ...models.client import Completion

MODES = ("tool_use", "naive")
TOOL_NAME = "code_interpreter"

NAIVE_SYSTEM = "You are a helpful assistant."
TOOL_SYSTEM = (
    "You are an expert scientific programmer. You can run Python with the `code_interpreter` tool: "
    "it executes the code you pass in a fresh process where the problem's dependencies are imported "
    "and the functions of the previous steps are defined, and returns the exit status, stdout and "
    "stderr. Nothing persists between calls, so include everything a test needs in each call. Use "
    "it to check your implementation. When you are done, answer with the complete code of the "
    "requested function (or class) in a single ```python block and no tool call."
)
FINAL_REQUEST = (
    "You have used all your code_interpreter calls. Reply now with the final, complete code for "
    "the next step in a single ```python block, without calling any tool."
)

CODE_INTERPRETER_TOOL = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Run Python code in a sandbox with the problem's dependencies and the earlier "
        "steps' functions preloaded; returns status, exit code, stdout and stderr.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "Python source to run."}},
            "required": ["code"],
            "additionalProperties": False,
        },
    },
}


def new_accounting() -> dict:
    return {
        "model_calls": 0,
        "tool_calls": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "latency": 0.0,
        "cache_hits": 0,
        "request_retries": 0,
    }


@dataclass
class GenResult:
    code: str | None
    status: str  # "ok", "parse_error", "model_error", "truncated", "budget"
    message: str = ""
    response_text: str = ""
    trajectory: list[dict] = field(default_factory=list)
    accounting: dict = field(default_factory=new_accounting)
    turns: list[dict] = field(default_factory=list)  # tokens and latency of each model call (usage.turn_of)


def count_call(accounting: dict, completion: Completion, price: Price | None = None) -> None:
    count_completion(accounting, completion, price)
    count_repaired(accounting, completion.text_repaired)


def add_reply(
    trajectory: list[dict], turns: list[dict], accounting: dict, completion: Completion, price: Price | None = None
) -> None:
    """Count (and cost) a model call, note its tokens and latency in ``turns``, and append its reply to the
    trajectory."""
    count_call(accounting, completion, price)
    turns.append(turn_of(completion, len(trajectory)))
    trajectory.append(completion.assistant_message())


def count_repaired(accounting: dict, count: int) -> None:
    """Characters of text from outside (replies, tool arguments and output) replaced by U+FFFD; the key is there
    only when some were, so records of clean runs are unchanged."""
    if count:
        accounting["text_repaired"] = accounting.get("text_repaired", 0) + count


def format_tool_output(result: dict) -> str:
    """The text the model sees for one code_interpreter run (the runner already trimmed it)."""
    parts = [f"status: {result.get('status', 'unknown')}", f"exit_code: {result.get('exit_code')}"]
    stdout, stderr = result.get("stdout") or "", result.get("stderr") or ""
    parts.append("stdout:\n" + (stdout if stdout else "(empty)"))
    parts.append("stderr:\n" + (stderr if stderr else "(empty)"))
    return "\n".join(parts)


def run_tool_call(
    call: dict, run_code: Callable[[str, float], dict], tool_timeout: float, accounting: dict | None = None
) -> str:
    """Execute one tool call; malformed calls get an explanation back instead of an exception. Repaired
    characters of its arguments (a JSON ``\\udc80`` escape decodes to a lone surrogate) and of its output are
    counted in ``accounting``."""
    accounting = accounting if accounting is not None else {}
    if call["name"] != TOOL_NAME:
        return f"error: unknown tool {call['name']!r}; the only tool is {TOOL_NAME}(code)"
    try:
        arguments, repaired = repair_value(json.loads(call["arguments"] or "{}"))
    except ValueError as error:
        return f'error: the arguments are not valid JSON ({error}); pass {{"code": "..."}}'
    count_repaired(accounting, repaired)
    code = arguments.get("code") if isinstance(arguments, dict) else None
    if not isinstance(code, str) or not code.strip():
        return "error: missing the 'code' argument (a string of Python source)"
    try:
        result = run_code(code, tool_timeout)
    except Exception as error:  # a runner failure is reported to the model, not fatal to the step
        return f"error: the code could not be run: {type(error).__name__}: {error}"
    count_repaired(accounting, int(result.get("text_repaired") or 0))
    return format_tool_output(result)


def finish(completion: Completion, function_name: str | None, trajectory: list[dict], accounting: dict) -> GenResult:
    """Turn the model's final reply into a GenResult."""
    code = extract_code(completion.text, function_name)
    if completion.finish_reason == "length":
        return GenResult(
            code=code,
            status="truncated",
            response_text=completion.text,
            trajectory=trajectory,
            accounting=accounting,
            message="the reply was cut off at the token limit (finish_reason=length); "
            "raise the max tokens in --model-params",
        )
    if code is None:
        what = "an empty reply" if completion.is_empty else "no parseable Python code block"
        target = f" defining {function_name}" if function_name else ""
        return GenResult(
            code=None,
            status="parse_error",
            response_text=completion.text,
            trajectory=trajectory,
            accounting=accounting,
            message=f"the model gave {what}{target}",
        )
    return GenResult(
        code=code, status="ok", response_text=completion.text, trajectory=trajectory, accounting=accounting
    )


def generate_step(
    model,
    problem: dict,
    step_index: int,
    previous_code: list[str],
    *,
    mode: str = "tool_use",
    with_background: bool,
    templates: dict,
    run_code: Callable[[str, float], dict],
    tool_loops: int = 15,
    tool_timeout: float = 180,
    sample_index: int = 0,
    price: Price | None = None,
    budget: float | None = None,
) -> GenResult:
    """Ask ``model`` for the code of step ``step_index`` (0-based) of ``problem``; ``price`` costs its calls,
    ``budget`` (USD) bounds what they may cost."""
    from ...models.client import ModelError, count_failed_call  # why: the client loads openai (2 s)

    if mode not in MODES:
        raise ValueError(f"SciCode generation mode {mode!r} is not one of {', '.join(MODES)}")
    prompt = build_prompt(problem, step_index, previous_code, with_background=with_background, templates=templates)
    function_name = function_name_of(problem["sub_steps"][step_index]["function_header"])
    system = NAIVE_SYSTEM if mode == "naive" else TOOL_SYSTEM
    trajectory = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
    accounting = start_costs(new_accounting(), price)
    turns: list[dict] = []
    try:
        if mode == "naive":
            completion = model.complete(trajectory, sample_index=sample_index)
            add_reply(trajectory, turns, accounting, completion, price)
            result = finish(completion, function_name, trajectory, accounting)
        else:
            result = tool_use_loop(
                model,
                trajectory,
                turns,
                function_name,
                accounting,
                run_code=run_code,
                tool_loops=tool_loops,
                tool_timeout=tool_timeout,
                sample_index=sample_index,
                price=price,
                budget=budget,
            )
    except ModelError as error:
        count_failed_call(accounting, error)
        result = GenResult(
            code=None, status="model_error", message=str(error), trajectory=trajectory, accounting=accounting
        )
    except CallsStopped as stopped:  # the run's budget was spent by other calls meanwhile: this one never went out
        result = GenResult(
            code=None,
            status="budget",
            message=f"the harness stopped: {stopped}",
            trajectory=trajectory,
            accounting=accounting,
        )
    result.turns = turns
    return result


def tool_use_loop(
    model,
    trajectory: list[dict],
    turns: list[dict],
    function_name: str | None,
    accounting: dict,
    *,
    run_code,
    tool_loops: int,
    tool_timeout: float,
    sample_index: int,
    price: Price | None = None,
    budget: float | None = None,
) -> GenResult:
    from ...models.client import tool_result_message  # why: as in generate_step, openai loads only when used

    tools = [CODE_INTERPRETER_TOOL]
    rounds = 0
    while True:
        spent = over_budget(accounting, budget)
        if spent:
            return GenResult(
                code=None, status="budget", message=f"the harness {spent}", trajectory=trajectory, accounting=accounting
            )
        budget_left = rounds < tool_loops
        if not budget_left:
            trajectory.append({"role": "user", "content": FINAL_REQUEST})
        # tools stay declared on the last call (with tool_choice none) because the history holds
        # tool calls, which some servers reject without the tool definitions
        completion = model.complete(
            trajectory, tools=tools, sample_index=sample_index, tool_choice=None if budget_left else "none"
        )
        add_reply(trajectory, turns, accounting, completion, price)
        if not completion.tool_calls or completion.finish_reason == "length":
            return finish(completion, function_name, trajectory, accounting)
        if not budget_left:
            # calls made although tools were off: answer them so the history stays well-formed
            for call in completion.tool_calls:
                trajectory.append(tool_result_message(call, "error: no more tool calls are allowed"))
            return finish(completion, function_name, trajectory, accounting)
        for call in completion.tool_calls:
            accounting["tool_calls"] += 1
            trajectory.append(tool_result_message(call, run_tool_call(call, run_code, tool_timeout, accounting)))
        rounds += 1
