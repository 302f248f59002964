"""Builders of hand-made SciCode datasets shared by the tests (plain functions and constants, one fixture).

The tiny dataset: 3 problems, 5 steps, and a conftest model that answers with the ground truth except
for the steps named in BREAK_STEPS (a wrong answer) or ERROR_STEPS (a model error), so two runs differ
on known steps with the same settings. ``tiny`` is exposed to every test module by tests/conftest.py
(``pytest_plugins``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

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


def numbered_problems(numbers) -> tuple[list[dict], dict[str, list]]:
    """Problems of one quick step each, ``k.1``: ``def fk(): return k`` (its target k), for k in ``numbers``;
    (problems, targets). A scripted answer reads k from the request with ``asked_number``."""
    problems = [
        problem(
            str(k),
            [step(f"{k}.1", f"def f{k}():\n    return {k}", [CLOSE.format(call=f"f{k}()")], header=f"def f{k}():")],
        )
        for k in numbers
    ]
    return problems, {f"{k}.1": [k] for k in numbers}


def asked_number(body: dict) -> int:
    """The k of the ``numbered_problems`` step a chat request asks for."""
    return int(re.findall(r"def f(\d+)\(\)", json.dumps(body["messages"]))[-1])


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
    from pytest_agentbench.benchmarks.scicode.h5codec import write_step_targets  # why: h5py, not at collection

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


def custom_data_args(data: Path, h5: Path | None, *extra: str, model: str | None = "mutant", server=None) -> list[str]:
    """The command line that runs SciCode's validation split on a hand-made dataset (``write_dataset``'s folder
    and targets file; ``h5=None``: the targets are rebuilt from the ground truth). ``model=None``: no --model (a
    config file names it); ``server``: a FakeOpenAI that serves the model, key ``k``."""
    named = [f"--model={model}"] if model is not None else []
    served = [f"--model-base-url={server.base_url}", "--model-api-key=k"] if server is not None else []
    return [
        "--bench=scicode",
        "--bench-split=validation",
        *named,
        *served,
        f"--bench-data-dir={data}",
        *([f"--bench-set=h5={h5}"] if h5 is not None else []),
        "--bench-set=allow_custom_data=true",
        *extra,
    ]


class CustomScicode:
    """SciCode's validation split on a hand-made dataset in a pytester folder, run as a user runs it.

    ``write(problems, targets)`` writes the dataset (the tiny one by default; on first use otherwise);
    ``args(*extra, model=, server=)`` is the command line that runs it (``server``: a FakeOpenAI the model is
    served by, key ``k``); calling it runs that command line through ``bench``."""

    def __init__(self, pytester: pytest.Pytester, bench, shared_data: Path) -> None:
        self.pytester, self.bench, self.shared_data = pytester, bench, shared_data
        self.data: Path | None = None
        self.h5: Path | None = None

    def write(self, problems: list[dict] = PROBLEMS, targets: dict[str, list] = TARGETS) -> tuple[Path, Path]:
        self.data, self.h5 = write_dataset(self.pytester.path, self.shared_data, targets=targets, problems=problems)
        return self.data, self.h5

    def args(self, *extra: str, model: str | None = "mutant", server=None, h5: Path | None = None) -> list[str]:
        if self.data is None:
            self.write()
        assert self.data is not None and self.h5 is not None
        return custom_data_args(self.data, h5 or self.h5, *extra, model=model, server=server)

    def __call__(
        self, *extra: str, model: str | None = "mutant", server=None, h5: Path | None = None, subprocess: bool = False
    ) -> pytest.RunResult:
        return self.bench(*self.args(*extra, model=model, server=server, h5=h5), subprocess=subprocess)


@pytest.fixture
def custom_scicode(pytester, bench, shared_data) -> CustomScicode:
    """Run the validation split on a hand-made dataset: ``custom_scicode.write(problems, targets)``, then
    ``custom_scicode(*args, model="m", server=server, subprocess=False)`` (see CustomScicode)."""
    return CustomScicode(pytester, bench, shared_data)


@pytest.fixture
def tiny(pytester, custom_scicode, monkeypatch):
    """Run the tiny dataset with the mutant model: tiny(*args, broken="2.2", errors="") -> RunResult."""
    pytester.makeconftest(MODEL_CONFTEST)
    data, h5 = custom_scicode.write()

    def run(*args: str, broken: str = "", errors: str = "", h5_path: Path = h5, subprocess: bool = False):
        monkeypatch.setenv("BREAK_STEPS", broken)
        monkeypatch.setenv("ERROR_STEPS", errors)
        return custom_scicode("--bench-timeout=20", *args, h5=h5_path, subprocess=subprocess)

    run.data = data
    return run


def md5_of(path: Path) -> str:
    return hashlib.md5(Path(path).read_bytes(), usedforsecurity=False).hexdigest()


def write_verified(
    data: Path,
    problems: list[dict] = PROBLEMS,
    targets: dict[str, list] = TARGETS,
    patches: dict[str, dict] | None = None,
    version: str = "v2",
) -> Path:
    """A small SciCode-Verified dataset in its repository's layout under ``data/scicode_verified/``: the problems,
    the corrected targets h5, a target patch per problem of ``patches`` (default: one for problem 1) and a
    manifest holding the real md5 of each file. The official prefilled code and templates are the data dir's
    ``scicode/`` folder (``write_dataset``)."""
    from pytest_agentbench.benchmarks.scicode.h5codec import write_step_targets  # why: h5py, not at collection

    folder = Path(data) / "scicode_verified"
    (folder / "targets").mkdir(parents=True, exist_ok=True)
    (folder / "problems_test.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
    h5 = folder / "test_data_cleaned.h5"
    h5.unlink(missing_ok=True)
    for number, values in targets.items():
        write_step_targets(h5, number, values)
    if patches is None:
        first = problems[0]["sub_steps"][0]["step_number"]
        patches = {problems[0]["problem_id"]: {first: {"0": targets[first][0]}}}
    for pid, steps in patches.items():
        body = {"problem_id": pid, "note": "a corrected target", **steps}
        (folder / "targets" / f"{pid}.json").write_text(json.dumps(body))
    manifest = {
        "version": version,
        "n_problems": len(problems),
        "problem_order": [p["problem_id"] for p in problems],
        "problems_test_jsonl_md5": md5_of(folder / "problems_test.jsonl"),
        "targets_md5": {pid: md5_of(folder / "targets" / f"{pid}.json") for pid in patches},
        "targets_set_md5": hashlib.md5(b"", usedforsecurity=False).hexdigest(),
        "h5_md5": md5_of(h5),
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return folder
