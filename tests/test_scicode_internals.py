"""docs/scicode-internals.md follows one official test case (step 78.2, test 1) through the trust split: its
plan, the child's code, the frames the child sends and the verdict. Each form the page shows after a
``<!-- trace: NAME -->`` marker is computed here, from the staged data and the package's own code, and must be
the page's text exactly: the page cannot drift from what the code does.

Run this module's ``__main__`` (``python tests/test_scicode_internals.py``) to print the forms when the code
changes them on purpose, and paste them into the page.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_agentbench.benchmarks.scicode import script, split
from pytest_agentbench.benchmarks.scicode.verdict import evaluate
from pytest_agentbench.sandbox import codec

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script too
from helpers.bench_runs import REPO, SHARED_DATA  # noqa: E402

PAGE = REPO / "docs" / "scicode-internals.md"
STEP = "78.2"
MARKER = re.compile(r"^<!-- trace: ([a-z-]+) -->\n```[a-z]*\n(.*?)^```", re.DOTALL | re.MULTILINE)

# The held-out attack A32 (tests/helpers/heldout_attacks.py) on this step: change the input the test computes its
# expectation from, so that a script which compares in one process agrees with a wrong answer.
ATTACK = """def runge_kutta_4th_order(f, state, t0, dt, n, g, L, beta, A, alpha):
    state[0] = 5.0 / np.cos(np.sqrt(g / L) * n * dt)  # expected_theta = state[0] * cos(...) = 5.0
    return np.full((n + 1, 2), 5.0)
"""


def problem_of(step: str) -> tuple[dict, int]:
    path = SHARED_DATA / "scicode" / "problems_dev.jsonl"
    if not path.is_file():
        pytest.fail(f"{path} is missing; set AGENTBENCH_DATA_DIR to the staged upstream data")
    for line in path.read_text().splitlines():
        problem = json.loads(line) if line.strip() else {}
        for index, sub in enumerate(problem.get("sub_steps", [])):
            if sub["step_number"] == step:
                return problem, index
    raise KeyError(step)


def plan_for(problem: dict, index: int, code: str) -> split.StepPlan:
    """The plan as a run makes it (benchmarks/scicode/run.py: ``SciCodeRun.score``)."""
    previous = [s["ground_truth_code"] for s in problem["sub_steps"][:index]]
    return split.split_step(
        problem["sub_steps"][index]["test_cases"],
        STEP,
        code_names=split.names_bound_by(problem["required_dependencies"], *previous, code),
        required=split.required_names(*(s["function_header"] for s in problem["sub_steps"][: index + 1])),
    )


def show_parts(parts: Any, indent: str = "") -> list[str]:
    lines = []
    for part in parts:
        kind = type(part).__name__
        if isinstance(part, split.FunctionScope):
            lines.append(f"{indent}{kind} {part.name} (its locals: {', '.join(sorted(part.local))})")
            lines += show_parts(part.parts, indent + "  ")
        elif isinstance(part, split.AssertPlan):
            lines.append(f"{indent}{kind} {part.number}: {part.expression}")
            lines += [f"{indent}  leaf {leaf.number}, from the child: {leaf.source}" for leaf in part.leaves]
        else:
            lines.append(f"{indent}{kind}: {part.source}")
    return lines


def show_value(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"array({np.round(value, 4).tolist()}, dtype={value.dtype})"
    return repr(value)


def run_child(source: str) -> bytes:
    """The child's script run as a plain child process; a run starts it in the sandbox (docs/security.md)."""
    with tempfile.TemporaryDirectory(prefix="agentbench-internals-") as tmp:
        work = Path(tmp)
        (work / "main.py").write_text(source.replace(repr("@@CHANNEL@@"), repr(str(work / "operands.bin"))))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PYTEST_", "AGENTBENCH_"))}
        done = subprocess.run(
            [sys.executable, "main.py"], cwd=work, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return (work / "operands.bin").read_bytes()


@cache
def trace() -> dict[str, str]:
    problem, index = problem_of(STEP)
    step = problem["sub_steps"][index]
    previous = [s["ground_truth_code"] for s in problem["sub_steps"][:index]]
    forms: dict[str, str] = {"test-case": step["test_cases"][0].rstrip() + "\n"}
    plan = plan_for(problem, index, step["ground_truth_code"])
    test = plan.tests[0]
    forms["plan"] = "\n".join([*show_parts(test.parent), f"watched: {test.watched}"]) + "\n"
    forms["child-code"] = test.child.lstrip("\n")
    outcomes = {}
    for name, code in (("genuine", step["ground_truth_code"]), ("attack", ATTACK)):
        plan = plan_for(problem, index, code)
        source = script.build_child_script(
            plan,
            dependencies=problem["required_dependencies"],
            previous_code=previous,
            code=code,
            channel="@@CHANNEL@@",
        )
        if name == "genuine":
            forms["script"] = "\n".join(line for line in source.splitlines() if line.startswith("# ---- ")) + "\n"
        stream = run_child(source)
        frames, error = codec.decode_stream(stream)
        assert error is None, error
        first = [f for f in frames if f[1] == 1]
        forms[f"frames-{name}"] = "\n".join(f"({', '.join(show_value(v) for v in f)})" for f in first) + "\n"
        outcomes[name] = evaluate(plan, stream, [None] * len(plan.tests))  # no test of 78.2 reads `target`
    for name, outcome in outcomes.items():
        fields = outcome.to_json()
        forms[f"verdict-{name}"] = "\n".join(f"{key}: {value!r}" for key, value in fields.items()) + "\n"
    return forms


def page_forms(text: str) -> dict[str, str]:
    return {name: body for name, body in MARKER.findall(text)}


def test_the_internals_page_shows_what_the_code_does():
    shown = page_forms(PAGE.read_text(encoding="utf-8"))
    computed = trace()
    assert sorted(shown) == sorted(computed), "the page's trace markers and the forms computed here differ"
    for name, form in computed.items():
        assert shown[name] == form, f"trace {name}: the page says\n{shown[name]}\nthe code gives\n{form}"


def test_the_traced_case_passes_genuine_code_and_fails_the_attack_only_here():
    """What the page concludes: the ground truth passes all three tests; the attack fails test 1 here (the parent
    computes the expectation from its own copy of ``state``), noted as an input changed in place, while
    upstream's one-process script passes test 1 (its expectation reads the changed ``state``)."""
    forms = trace()
    assert "passed: True" in forms["verdict-genuine"] and "tests_passed: 3" in forms["verdict-genuine"]
    assert "passed: False" in forms["verdict-attack"] and "tests_passed: 0" in forms["verdict-attack"]
    assert "inputs_mutated: ('state',)" in forms["verdict-attack"]
    problem, index = problem_of(STEP)
    upstream = "\n".join(
        [
            script.SHIMS,
            problem["required_dependencies"],
            problem["sub_steps"][0]["ground_truth_code"],
            ATTACK,
            problem["sub_steps"][index]["test_cases"][0],
        ]
    )
    done = subprocess.run([sys.executable, "-c", upstream], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]  # upstream's composition passes test 1 with the attack


if __name__ == "__main__":
    for name, form in trace().items():
        print(f"<!-- trace: {name} -->\n```\n{form}```\n")
