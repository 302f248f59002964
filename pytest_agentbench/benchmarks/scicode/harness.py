"""Scoring one SciCode step: get the code of the step and the steps before it, then run the tests.

Step k depends on the code of steps 1..k-1, a data dependency: the code comes from this process's
memo (earlier items of the same problem ran here, xdist keeps a problem on one worker), else it
is generated now (cheap when the response cache has it). So ``-k`` or ``--bench-ids`` may select
one step alone.
"""
from __future__ import annotations

import json
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ...envs import sandbox
from ...registry import RunContext, Sample
from . import dataset, script
from .bench import CACHE, Generated

RECORD_OUTPUT_LIMIT = 4000  # characters of stdout/stderr kept in a record


def score_step(bench, sample: Sample, ctx: RunContext) -> dict[str, Any]:
    config = ctx.config
    problem = ctx.item.parent.task.data
    index = sample.data["index"]
    step = sample.data["step"]
    number = str(step["step_number"])
    previous = [code_of(bench, ctx, problem, j) for j in range(index)]
    generated = generate(bench, ctx, problem, index, previous)
    record: dict[str, Any] = {"problem": str(problem["problem_id"]), "step": number,
                              "tests": len(step["test_cases"]), "code": generated.code,
                              "generation": {"status": generated.status, **generated.accounting}}
    if generated.trajectory:
        record["trajectory"] = write_trajectory(ctx.run_dir, number, generated)
    # A reply cut off at the token limit is still scored when the code it holds parses, as upstream
    # scores whatever code it extracts; the record keeps generation.status "truncated".
    usable = generated.status in ("ok", "truncated") and parses(generated.code)
    if not usable:
        if generated.status == "model_error":
            return {**record, "status": "model_error", "message": generated.message}
        message = generated.message or f"the code for step {number} is not valid Python"
        return {**record, "status": "parse_error", "message": message}
    if generated.status == "truncated":
        record["note"] = generated.message
    prefetch_next(bench, ctx, problem, index, [*previous, generated.code or ""])
    targets = bench.targets_for(config, problem, number)
    record["targets"] = targets.kind
    if targets.path is None:
        return {**record, "status": "eval_error", "message": targets.message}
    source = script.build_scoring_script(
        step_number=number, dependencies=problem.get("required_dependencies", ""), previous_code=previous,
        code=generated.code, tests=step["test_cases"], h5_path=targets.path, token=(token := script.new_token()))
    result = run_script(config, source, timeout=item_timeout(config))
    return {**record, **verdict(result, token, len(step["test_cases"]))}


def parses(code: str | None) -> bool:
    import ast

    if not code or not code.strip():
        return False
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


def item_timeout(config) -> float:
    from ...plugin import bench_timeout

    return bench_timeout(config)


def run_script(config, source: str, *, timeout: float, env: dict[str, str] | None = None) -> sandbox.ExecResult:
    limits = sandbox.Limits(timeout=timeout, memory=int(config.getoption("bench_memory_limit") * sandbox.GiB))
    return sandbox.run_python(source, limits=limits, env=env, executor=config.getoption("bench_executor") or "fork")


def verdict(result: sandbox.ExecResult, token: str, n_tests: int) -> dict[str, Any]:
    """Status of a scoring run. A pass needs exit 0 *and* the token printed after the last test."""
    done = script.tests_completed(result.stdout)
    out = {"returncode": result.returncode, "tests_completed": min(done, n_tests),
           # the token differs in every run; records of identical runs must be identical
           "stdout": sandbox.trim(result.stdout.replace(token, "<token>").encode(), RECORD_OUTPUT_LIMIT),
           "stderr": sandbox.trim(result.stderr.encode(), RECORD_OUTPUT_LIMIT),
           "exec_duration": round(result.duration, 3)}
    if result.limit:
        out["limit"] = result.limit
    if result.timed_out:
        return {**out, "status": "timeout", "message": f"scoring ran past {result.duration:.0f} s (--bench-timeout)"}
    if result.returncode == script.TARGETS_EXIT and "agentbench: cannot read targets" in result.stderr or \
            result.returncode == script.TARGETS_EXIT and " targets for step " in result.stderr:
        return {**out, "status": "eval_error", "message": last_line(result.stderr)}
    problem = sandbox.integrity_check(result, token)
    if problem is None:
        return {**out, "status": "pass", "message": ""}
    where = f"test {done + 1} of {n_tests}" if done < n_tests else "after the tests"
    if result.returncode == 0 or result.limit or problem.startswith("generated code"):
        detail = f"{problem} ({done} of {n_tests} tests completed)"
    else:
        detail = f"{last_line(result.stderr) or problem} ({where})"
    return {**out, "status": "fail", "message": detail}


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


# ---- code of steps --------------------------------------------------------------------------
def code_of(bench, ctx: RunContext, problem: dict[str, Any], index: int) -> str:
    """The code an earlier step contributes: the official code of a prefilled step, else its generated code."""
    number = str(problem["sub_steps"][index]["step_number"])
    if number in dataset.PREFILLED_FILES:
        return prefilled(bench, ctx.config)[number]
    previous = [code_of(bench, ctx, problem, j) for j in range(index)]
    return generate(bench, ctx, problem, index, previous).code or ""


def prefilled(bench, config) -> dict[str, str]:
    memo = config.stash[CACHE]
    if "prefilled" not in memo:
        from ...data import cache_dir, data_dir

        memo["prefilled"] = dataset.load_prefilled(data_dir(config), verify=bench.verify_data(config),
                                                   stamp_dir=cache_dir(config))
    return memo["prefilled"]


def generate(bench, ctx: RunContext, problem: dict[str, Any], index: int, previous: list[str]) -> Generated:
    memo = ctx.config.stash[CACHE]["generated"]
    key = (str(problem["problem_id"]), index)
    if key not in memo:
        memo[key] = _generate(ctx, problem, index, previous)
    if isinstance(memo[key], Future):  # generated in the background while the previous step was scored
        memo[key] = memo[key].result()
    return memo[key]


def prefetch_next(bench, ctx: RunContext, problem: dict[str, Any], index: int, codes: list[str]) -> None:
    """Start generating the next step while this one is scored: it needs this step's code, not its
    verdict, so a problem's wall time approaches the model's time alone. Only for a next step that
    this session will run, so ``-k`` on one step never pays for a call it does not need."""
    config = ctx.config
    memo = config.stash[CACHE]
    nxt = index + 1
    if getattr(ctx.model, "is_oracle", False) or not config.getoption("bench_overlap", True):
        return
    if nxt >= len(problem["sub_steps"]) or (str(problem["problem_id"]), nxt) in memo["generated"]:
        return
    number = str(problem["sub_steps"][nxt]["step_number"])
    if number in dataset.PREFILLED_FILES or number not in selected_ids(ctx):
        return
    if "pool" not in memo:
        memo["pool"] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentbench-prefetch")
    memo["generated"][(str(problem["problem_id"]), nxt)] = memo["pool"].submit(_generate, ctx, problem, nxt, codes)


def selected_ids(ctx: RunContext) -> set[str]:
    memo = ctx.config.stash[CACHE]
    if "selected" not in memo:
        memo["selected"] = {item.sample.id for item in ctx.item.session.items if hasattr(item, "sample")}
    return memo["selected"]


def load_templates_once(config) -> dict:
    memo = config.stash[CACHE]
    if "templates" not in memo:
        from ...data import data_dir
        from .prompts import load_templates

        memo["templates"] = load_templates(data_dir(config))
    return memo["templates"]


def _generate(ctx: RunContext, problem: dict[str, Any], index: int, previous: list[str]) -> Generated:
    step = problem["sub_steps"][index]
    if getattr(ctx.model, "is_oracle", False):
        code = step.get("ground_truth_code")
        if not code:
            return Generated(None, "model_error", f"the oracle has no ground truth for step {step['step_number']}")
        return Generated(code, accounting={"model_calls": 0})
    if hasattr(ctx.model, "answer_step"):
        # A user's own client (an overridden bench_model fixture) may answer steps directly.
        try:
            return Generated(ctx.model.answer_step(problem, index, previous), accounting={"model_calls": 1})
        except Exception as exc:
            return Generated(None, "model_error", f"{type(exc).__name__}: {exc}")
    from .generate import generate_step

    config = ctx.config
    templates = load_templates_once(config)
    settings = ctx.config.stash[_plugin_state_key()].settings
    dependencies = problem.get("required_dependencies", "")
    tool_timeout = float(config.getoption("bench_tool_timeout"))

    def run_code(code: str, timeout: float) -> dict[str, Any]:
        source = script.build_tool_script(dependencies=dependencies, previous_code=previous, code=code)
        if getattr(ctx.env, "kind", "host") != "host":  # e.g. --bench-env=docker: the model's code runs there
            return ctx.env.run_python(source, min(timeout, tool_timeout))
        result = run_script(config, source, timeout=min(timeout, tool_timeout))
        status = "timeout" if result.timed_out else ("ok" if result.returncode == 0 else "error")
        return {"status": status, "exit_code": result.returncode, "stdout": result.stdout, "stderr": result.stderr}

    result = generate_step(ctx.model, problem, index, previous, mode=settings["mode"],
                           with_background=settings["background"], templates=templates, run_code=run_code,
                           tool_loops=int(config.getoption("bench_tool_loops")), tool_timeout=tool_timeout)
    return Generated(code=result.code, status=result.status, message=result.message,
                     accounting=dict(result.accounting), trajectory=list(result.trajectory),
                     response_text=result.response_text)


def _plugin_state_key():
    from ...plugin import STATE

    return STATE


def write_trajectory(run_dir: Path, number: str, generated: Generated) -> str:
    folder = Path(run_dir) / "trajectories"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{number}.json"
    path.write_text(json.dumps({"step": number, "status": generated.status, "messages": generated.trajectory,
                                "response": generated.response_text}, indent=1, default=str))
    return str(path.relative_to(run_dir))
