"""Builders of hand-made SciCode datasets shared by the tests (plain functions and constants, one fixture).

The tiny dataset: 3 problems, 5 steps, and a conftest model that answers with the ground truth except
for the steps named in BREAK_STEPS (a wrong answer) or ERROR_STEPS (a model error), so two runs differ
on known steps with the same settings. ``tiny`` is exposed to every test module by tests/conftest.py.
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from pytest_agentbench.benchmarks.scicode.h5codec import write_step_targets

CLOSE = "assert np.allclose({call}, target)"


def step(number, code, tests, header="def f():"):
    return {
        "step_number": number,
        "step_description_prompt": f"step {number}",
        "step_background": "",
        "ground_truth_code": code,
        "function_header": header,
        "test_cases": tests,
        "return_line": "",
    }


def problem(pid, steps, deps="import numpy as np"):
    return {
        "problem_id": pid,
        "problem_name": f"p{pid}",
        "problem_description_main": "",
        "problem_io": "",
        "required_dependencies": deps,
        "sub_steps": steps,
        "problem_background_main": "",
    }


PROBLEMS = [
    problem(
        "1",
        [
            step("1.1", "def add(a, b):\n    return a + b", [CLOSE.format(call="add(1, 2)")]),
            step("1.2", "def twice(a):\n    return add(a, a)", [CLOSE.format(call="twice(3)")]),
        ],
    ),
    problem(
        "2",
        [
            step("2.1", "def sq(a):\n    return a * a", [CLOSE.format(call="sq(3)")]),
            step("2.2", "def cube(a):\n    return a * a * a", [CLOSE.format(call="cube(2)")]),
        ],
    ),
    problem("3", [step("3.1", "def six():\n    return 6", [CLOSE.format(call="six()")])]),
]
TARGETS = {"1.1": [3], "1.2": [6], "2.1": [9], "2.2": [8], "3.1": [6]}

MODEL_CONFTEST = '''
import os
import pytest

class Mutant:
    """Ground truth, except a wrong answer for BREAK_STEPS and an exception for ERROR_STEPS."""
    name = "mutant"
    is_oracle = False

    def answer_step(self, problem, index, previous_code):
        step = problem["sub_steps"][index]
        number = step["step_number"]
        if number in os.environ.get("ERROR_STEPS", "").split(","):
            raise ConnectionError("the model service is down")
        code = step["ground_truth_code"]
        if number in os.environ.get("BREAK_STEPS", "").split(","):
            code = code.replace("return ", "return 100 + ", 1)
        return code

@pytest.fixture(scope="session")
def bench_model():
    return Mutant()
'''


def tiny_problems(categories: Sequence[str] = (), **ground_truth: str) -> list[dict]:
    """PROBLEMS with the ground-truth code of some steps replaced: tiny_problems(**{"3.1": code}), and a
    category per problem, in order, where ``categories`` are given (the official data has none)."""
    problems = copy.deepcopy(PROBLEMS)
    for p, category in zip(problems, categories):
        p["category"] = category
    for p in problems:
        for s in p["sub_steps"]:
            s["ground_truth_code"] = ground_truth.get(s["step_number"], s["ground_truth_code"])
    return problems


def write_dataset(
    root: Path, shared_data: Path, targets: dict[str, list] = TARGETS, problems: list[dict] = PROBLEMS
) -> tuple[Path, Path]:
    """The tiny dataset under ``root``: (data folder, a new targets h5 file). ``shared_data``: the staged
    upstream files (the prompt templates a non-oracle model needs)."""
    data = root / "tiny"
    (data / "scicode").mkdir(parents=True, exist_ok=True)
    (data / "scicode" / "problems_dev.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
    for name in ("13.6.txt", "62.1.txt", "76.3.txt"):
        (data / "scicode" / name).write_text("pass\n")
    for name in ("multistep_template.txt", "background_comment_template.txt"):  # prompts of a non-oracle model
        shutil.copyfile(Path(shared_data) / "scicode" / name, data / "scicode" / name)
    h5 = root / f"targets-{len(list(root.glob('targets-*.h5')))}.h5"
    for number, values in targets.items():
        write_step_targets(h5, number, values)
    return data, h5


@pytest.fixture
def tiny(pytester, bench, shared_data, monkeypatch):
    """Run the tiny dataset with the mutant model: tiny(*args, broken="2.2", errors="") -> RunResult."""
    pytester.makeconftest(MODEL_CONFTEST)
    data, h5 = write_dataset(pytester.path, shared_data)

    def run(*args: str, broken: str = "", errors: str = "", h5_path: Path = h5, subprocess: bool = False):
        monkeypatch.setenv("BREAK_STEPS", broken)
        monkeypatch.setenv("ERROR_STEPS", errors)
        return bench(
            "--bench=scicode",
            "--bench-split=validation",
            "--model=mutant",
            f"--bench-data-dir={data}",
            f"--bench-h5={h5_path}",
            "--bench-allow-custom-data",
            "--bench-timeout=20",
            *args,
            subprocess=subprocess,
        )

    run.data = data
    return run
