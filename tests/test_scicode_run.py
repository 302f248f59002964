"""Scoring SciCode steps from plain Python, without pytest collecting anything (no pytester)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_agentbench.benchmarks.scicode import dataset
from pytest_agentbench.benchmarks.scicode.h5codec import write_step_targets
from pytest_agentbench.benchmarks.scicode.locate import Targets, TargetTable, rebuilt_table
from pytest_agentbench.benchmarks.scicode.run import RunSettings, SciCodeRun
from pytest_agentbench.benchmarks.scicode.solvers import ClientSolver, Generated, OracleSolver
from pytest_agentbench.sandbox.executors import Limits

from helpers.bench_runs import SHARED_DATA

DATA_DIR = SHARED_DATA  # honours $AGENTBENCH_DATA_DIR


@pytest.fixture(scope="module")
def problem_38() -> dict:
    """Validation problem 38 (3 steps: cross, reciprocal, ...), with its targets rebuilt from the ground truth."""
    for _, problem in dataset.load_problems(DATA_DIR, "validation", verify=False):
        if problem["problem_id"] == "38":
            return problem
    pytest.fail("validation problem 38 is not in the data")


@pytest.fixture(scope="module")
def targets_38(problem_38, tmp_path_factory) -> TargetTable:
    cache = tmp_path_factory.mktemp("cache")
    table = rebuilt_table([problem_38], cache, data_dir=DATA_DIR, limits=Limits(timeout=120))
    assert table.for_step("38.1").path is not None, table.for_step("38.1").message
    return table


class WrongClient:
    """A user's own client: answers 38.1 with a cross product of the wrong sign."""

    def answer_step(self, problem, index, previous_code):
        return "import numpy as np\ndef cross(a, b):\n    return -np.cross(a, b)\n"


def test_the_oracle_passes_a_validation_step(problem_38, targets_38, tmp_path):
    run = SciCodeRun(
        RunSettings(targets=targets_38), OracleSolver(), env=None, limits=Limits(timeout=60), out_dir=tmp_path
    )
    record = run.run_step(problem_38, 0)
    assert record["status"] == "pass", record
    assert record["message"] == "" and record["targets"] == "rebuilt" and record["returncode"] == 0
    assert record["tests_completed"] == record["tests"] == len(problem_38["sub_steps"][0]["test_cases"])
    assert record["generation"] == {"status": "ok", "model_calls": 0}


def test_wrong_code_fails_with_the_assertion(problem_38, targets_38, tmp_path):
    run = SciCodeRun(
        RunSettings(targets=targets_38),
        ClientSolver(WrongClient()),
        env=None,
        limits=Limits(timeout=60),
        out_dir=tmp_path,
    )
    record = run.run_step(problem_38, 0)
    assert record["status"] == "fail"
    assert record["message"].startswith("AssertionError") and "(test 1 of" in record["message"]
    assert record["generation"] == {"status": "ok", "model_calls": 1}


def test_a_later_step_is_scored_on_the_code_of_the_earlier_ones(problem_38, targets_38, tmp_path):
    solved = []

    class Recording(OracleSolver):
        def solve(self, problem, index, previous):
            solved.append((index, len(previous)))
            return super().solve(problem, index, previous)

    run = SciCodeRun(
        RunSettings(targets=targets_38), Recording(), env=None, limits=Limits(timeout=60), out_dir=tmp_path
    )
    assert run.run_step(problem_38, 2)["status"] == "pass"
    assert solved == [(0, 0), (1, 1), (2, 2)]  # each step's code generated once, in order


def handmade(number: str, code: str, tests: list[str]) -> dict:
    step = {
        "step_number": number,
        "ground_truth_code": code,
        "function_header": "def f():",
        "test_cases": tests,
        "step_description_prompt": "",
        "step_background": "",
        "return_line": "",
    }
    return {"problem_id": number.split(".")[0], "required_dependencies": "import numpy as np", "sub_steps": [step]}


class Fixed:
    """A solver that always gives the same answer (what a test double of a solver looks like)."""

    overlaps = False

    def __init__(self, generated: Generated) -> None:
        self.generated = generated

    def solve(self, problem, index, previous):
        return self.generated


@pytest.mark.parametrize(
    "generated,status,message",
    [
        (Generated("def f(:\n"), "parse_error", "the code for step 5.1 is not valid Python"),
        (Generated(None, "model_error", "ConnectionError: down"), "model_error", "ConnectionError: down"),
    ],
)
def test_unusable_code_is_not_run(tmp_path, generated, status, message):
    run = SciCodeRun(
        RunSettings(targets=TargetTable.file(tmp_path / "none.h5")),
        Fixed(generated),
        env=None,
        limits=Limits(timeout=10),
        out_dir=tmp_path,
    )
    record = run.run_step(handmade("5.1", "", ["assert f() == target"]), 0)
    assert (record["status"], record["message"]) == (status, message)
    assert "returncode" not in record


def test_missing_targets_and_timeouts_have_their_own_status(tmp_path):
    h5 = tmp_path / "t.h5"
    write_step_targets(h5, "4.1", [None])
    table = TargetTable.file(h5)
    spin = handmade("4.1", "def f():\n    while True:\n        pass", ["f()"])
    run = SciCodeRun(RunSettings(targets=table), OracleSolver(), env=None, limits=Limits(timeout=2), out_dir=tmp_path)
    record = run.run_step(spin, 0)
    assert record["status"] == "timeout" and record["message"].endswith("(--bench-timeout)")
    missing = run.run_step(handmade("6.1", "def f():\n    return 6", ["assert f() == target"]), 0)
    assert missing["status"] == "eval_error"
    assert missing["message"].startswith("agentbench: cannot read targets of step 6.1")


def test_comparisons_that_run_past_the_steps_timeout_fail_the_step(tmp_path):
    """The parent's side of a step (here a comparing helper of the test text that never returns on the value
    the child sent) runs in a copy of this process bounded by the step's own limits."""
    h5 = tmp_path / "t.h5"
    write_step_targets(h5, "4.1", [1])
    endless = "def same(a, b):\n    while a == b:\n        pass\n    return a == b\nassert same(f(), target)"
    run = SciCodeRun(
        RunSettings(targets=TargetTable.file(h5)), OracleSolver(), env=None, limits=Limits(timeout=2), out_dir=tmp_path
    )
    record = run.run_step(handmade("4.1", "def f():\n    return 1", [endless]), 0)
    assert (record["status"], record["failure_kind"], record["message"]) == (
        "fail",
        "limit",
        "comparisons exceeded the time limit of 2 s (--bench-timeout) (test 1 of 1)",
    )


def test_rebuilt_targets_say_which_step_could_not_be_rebuilt():
    table = TargetTable(Targets(None, "rebuilt"))
    targets = table.for_step("9.9")
    assert targets.path is None and targets.message == "could not rebuild the targets of step 9.9: not rebuilt"


# ---- the Benchmark API, as the plugin drives it (configure -> load_tasks -> open_run -> run_sample) ----------
def resolved(tmp_path: Path, cli: dict, model: str = "oracle"):
    from pytest_agentbench.benchmarks.scicode.bench import OPTIONS
    from pytest_agentbench.core.options import Settings, Sources, resolve
    from pytest_agentbench.core.run_options import RUN_OPTIONS
    from pytest_agentbench.sandbox.options import SANDBOX_OPTIONS

    sources = Sources(cli=cli, ini={}, env={}, invocation_dir=tmp_path, rootdir=tmp_path)
    opts = resolve((*RUN_OPTIONS, *SANDBOX_OPTIONS, *OPTIONS), sources)
    return Settings({**opts, "model": model})


@pytest.fixture
def tiny_data(tmp_path) -> tuple[Path, Path]:
    data = tmp_path / "data"
    (data / "scicode").mkdir(parents=True)
    problems = [
        handmade("1.1", "def f():\n    return 1", ["assert f() == target"]),
        handmade("2.1", "def f():\n    return 3", ["assert f() == target"]),
    ]
    (data / "scicode" / "problems_dev.jsonl").write_text("".join(__import__("json").dumps(p) + "\n" for p in problems))
    h5 = tmp_path / "targets.h5"
    write_step_targets(h5, "1.1", [1])
    write_step_targets(h5, "2.1", [2])  # 3 != 2: a wrong answer
    return data, h5


def test_the_benchmark_api_runs_without_pytest(tmp_path, tiny_data):
    from pytest_agentbench.benchmarks.base import RunSpec
    from pytest_agentbench.benchmarks.scicode.bench import SciCode
    from pytest_agentbench.models.oracle import OracleModel

    data, h5 = tiny_data
    bench = SciCode()
    opts = resolved(tmp_path, {"data_dir": str(data), "h5": str(h5), "allow_custom_data": True, "timeout": "20"})
    settings = bench.configure(opts, "validation")
    assert settings == {
        "mode": "oracle",
        "background": True,
        "executor": "fork",
        "memory_limit_gib": 4.0,
        "targets": "custom",
        "notes": [f"custom targets file {h5} (checksum not verified)"],
    }
    tasks = bench.load_tasks(opts, "validation")
    assert [s.id for t in tasks for s in t.samples] == ["1.1", "2.1"]
    hashes = bench.data_hashes(opts, "validation", settings)
    assert set(hashes) == {"problems_dev.jsonl", "targets"}
    spec = RunSpec(
        settings={"split": "validation", **settings},
        options=opts,
        tasks=tuple(tasks),
        selected=frozenset({"1.1", "2.1"}),
        run_dir=tmp_path / "run",
        data_dir=data,
        cache_dir=tmp_path / "cache",
    )
    run = bench.open_run(spec, OracleModel(), env=None)
    try:
        records = [run.run_sample(s) for t in tasks for s in t.samples]
    finally:
        run.close()
    assert [r["status"] for r in records] == ["pass", "fail"]
    metrics = bench.summarize(
        [{**r, "id": r["step"], "task": r["problem"], "split": "validation", "scored": True} for r in records],
        spec.settings,
    )["metrics"]
    assert metrics["main"] == 0.5 and metrics["subproblem"] == 0.5


@pytest.mark.parametrize(
    "cli,split,message",
    [
        (
            {"split": "test"},
            "test",
            "--model=oracle answers with the ground-truth code, which only SciCode's validation split ships",
        ),
        ({"h5": "nope.h5"}, "validation", "--bench-set h5 {tmp}/nope.h5 does not exist"),
    ],
)
def test_configure_errors_name_the_fix(tmp_path, tiny_data, cli, split, message):
    from pytest_agentbench.benchmarks.scicode.bench import SciCode
    from pytest_agentbench.core.errors import ConfigError

    opts = resolved(tmp_path, {"data_dir": str(tiny_data[0]), **cli})
    with pytest.raises(ConfigError) as info:
        SciCode().configure(opts, split)
    assert message.format(tmp=tmp_path) in str(info.value)


def test_tool_use_settings_only_for_a_model_that_uses_tools(tmp_path, tiny_data):
    from pytest_agentbench.benchmarks.scicode.bench import SciCode

    opts = resolved(
        tmp_path, {"data_dir": str(tiny_data[0]), "h5": str(tiny_data[1]), "allow_custom_data": True}, model="gpt"
    )
    settings = SciCode().configure(opts, "validation")
    assert settings["mode"] == "tool_use" and settings["tool_loops"] == 15 and settings["tool_timeout"] == 180.0
    naive = resolved(
        tmp_path,
        {"data_dir": str(tiny_data[0]), "h5": str(tiny_data[1]), "allow_custom_data": True, "mode": "naive"},
        model="gpt",
    )
    assert "tool_loops" not in SciCode().configure(naive, "validation")


def test_a_step_selected_alone_after_a_prefilled_one_loads_the_prefilled_code():
    from pytest_agentbench.benchmarks.scicode.bench import needs_prefilled
    from pytest_agentbench.core.types import Sample, Task

    problem = {
        "problem_id": "13",
        "sub_steps": [{"step_number": "13.5"}, {"step_number": "13.6"}, {"step_number": "13.7"}],
    }
    alone = Task("13", "test", [Sample("13.7", "13", "test", data={"index": 2})], data=problem)  # --bench-ids=13.7
    assert needs_prefilled([alone], frozenset({"13.7"}))
    first = Task("13", "test", [Sample("13.5", "13", "test", data={"index": 0})], data=problem)
    assert not needs_prefilled([first], frozenset({"13.5"}))
