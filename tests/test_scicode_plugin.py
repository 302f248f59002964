"""SciCode end to end through pytester, the way a user runs pytest, and what those runs compute (the items of a
split, the errors of bad input) called in-process where one session per behaviour shows the wiring."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_agentbench.benchmarks.registry import get_benchmark
from pytest_agentbench.benchmarks.scicode.bench import SciCode
from pytest_agentbench.benchmarks.scicode.h5codec import write_step_targets
from pytest_agentbench.core.data import DataError
from pytest_agentbench.core.errors import ConfigError
from pytest_agentbench.core.options import Settings
from pytest_agentbench.core.records import comparable
from pytest_agentbench.pytest_plugin.collect import select_ids

from helpers.bench_runs import QUICK_MULTISTEP_PROBLEMS, SHARED_DATA, read_jsonl, run_dirs, validation_problems
from helpers.fixtures import SharedRun, run_once_per_session, start_pytest
from helpers.scicode_builders import CLOSE, MODEL_CONFTEST, custom_data_args, problem, step

pytestmark = pytest.mark.e2e


# ---- collection -------------------------------------------------------------------------------
def split_item_ids(split: str, data_dir: Path = SHARED_DATA, **opts) -> list[str]:
    """The node ids a run of ``split`` collects, from the benchmark's own tasks (no pytest session)."""
    tasks = SciCode().load_tasks(Settings({"data_dir": str(data_dir), **opts}), split)
    return [f"scicode/{task.id}::{sample.id}" for task in tasks for sample in task.samples]


def assert_split_items(ids: list[str], problems: int, steps: int, prefilled: int) -> None:
    assert len(ids) == steps
    assert len({i.split("::")[0] for i in ids}) == problems
    assert len([i for i in ids if i.split("::")[1] in ("13.6", "62.1", "76.3")]) == prefilled


@pytest.mark.parametrize(
    "split,problems,steps,prefilled",
    [
        ("validation", 15, 50, 0),
        ("test", 65, 291, 3),
        ("all", 80, 341, 3),
    ],
)
def test_every_step_of_a_split_is_an_item(split, problems, steps, prefilled):
    assert_split_items(split_item_ids(split), problems, steps, prefilled)


@pytest.mark.slow
def test_collect_only_lists_every_step(bench):
    """The split that holds both others: pytest lists exactly the benchmark's items, in its order."""
    result = bench("--bench=scicode", "--bench-split=all", "--collect-only", "-q")
    assert result.ret == 0, result.stdout.str()
    ids = [line for line in result.outlines if line.startswith("scicode/")]
    assert_split_items(ids, 80, 341, 3)
    assert ids == split_item_ids("all")


@pytest.mark.slow
def test_only_the_benchmark_is_collected_without_paths(bench, pytester):
    pytester.makepyfile(test_user="def test_user_suite():\n    assert False\n")
    result = bench("--bench=scicode", "--bench-split=validation", "--collect-only", "-q")
    assert "test_user_suite" not in result.stdout.str()
    both = bench("--bench=scicode", "--bench-split=validation", "--collect-only", "-q", "test_user.py")
    assert "test_user.py::test_user_suite" in both.stdout.str()
    assert "scicode/10::10.1" in both.stdout.str()


@pytest.mark.slow
def test_bench_ids_select_exactly(bench):
    result = bench("--bench=scicode", "--bench-split=all", "--bench-ids=7,77.3", "--collect-only", "-q")
    ids = [line for line in result.outlines if line.startswith("scicode/")]
    assert ids == ["scicode/7::7.1", "scicode/77::77.3"]


@pytest.mark.slow
def test_k_and_deselect_work_on_node_ids(bench):
    result = bench(
        "--bench=scicode",
        "--bench-split=validation",
        "--collect-only",
        "-q",
        "-k",
        "29",
        "--deselect",
        "scicode/29::29.2",
    )
    ids = [line for line in result.outlines if line.startswith("scicode/")]
    assert ids == ["scicode/29::29.1", "scicode/29::29.3"]


@pytest.mark.slow
def test_prefilled_marker_selects_the_three_official_steps(bench):
    result = bench("--bench=scicode", "--bench-split=test", "--collect-only", "-q", "-m", "prefilled")
    ids = [line for line in result.outlines if line.startswith("scicode/")]
    assert sorted(ids) == ["scicode/13::13.6", "scicode/62::62.1", "scicode/76::76.3"]


@pytest.mark.slow
def test_usage_errors_list_valid_values(bench):
    """A ConfigError found while the run is configured is pytest's usage error, its message on stderr. The plugin
    turns every such error into one in the same place (an unknown benchmark, split or id, a model that cannot do
    the split): the tests below check each message where it is made."""
    result = bench("--bench=scicode", "--bench-split=dev", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown scicode split (--bench-split) 'dev'; valid values: validation, test, all" in result.stderr.str()


def test_an_unknown_benchmark_lists_the_valid_ones():
    with pytest.raises(ConfigError) as error:
        get_benchmark("nope")
    assert "unknown benchmark (--bench) 'nope'; valid values: core-bench, scicode" in str(error.value)


def test_an_unknown_id_is_named():
    tasks = SciCode().load_tasks(Settings({"data_dir": str(SHARED_DATA)}), "validation")
    with pytest.raises(ConfigError) as error:
        select_ids(tasks, ["999"], "scicode")
    assert "unknown scicode id(s) 999" in str(error.value)


def test_the_oracle_refuses_the_test_split():
    opts = Settings({"model": "oracle", "mode": "naive", "background": False, "split": "test"})
    with pytest.raises(ConfigError) as error:
        SciCode().configure(opts, "test")
    assert "only SciCode's validation split ships" in str(error.value)


@pytest.mark.slow
def test_data_dir_from_the_ini_file(bench, pytester, shared_data, monkeypatch):
    """agentbench_data_dir is honoured (a relative path is read from the ini file's folder); the command
    line and $AGENTBENCH_DATA_DIR still win over it."""
    monkeypatch.delenv("AGENTBENCH_DATA_DIR")
    (pytester.path / "staged").symlink_to(shared_data, target_is_directory=True)
    pytester.mkdir("empty")
    pytester.makeini("[pytest]\nagentbench_data_dir = staged\n")
    sub = pytester.mkdir("sub")
    monkeypatch.chdir(sub)  # the path is relative to the ini file, not to where pytest is started
    result = bench("--bench=scicode", "--bench-split=validation", "--collect-only", "-q")
    assert result.ret == 0, result.stderr.str()
    assert len([line for line in result.outlines if line.startswith("scicode/")]) == 50
    pytester.makeini("[pytest]\nagentbench_data_dir = empty\n")
    missing = bench("--bench=scicode", "--bench-split=validation", "--collect-only", "-q")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    assert str(pytester.path / "empty" / "scicode" / "problems_dev.jsonl") in missing.stderr.str()
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(shared_data))
    assert bench("--bench=scicode", "--bench-split=validation", "--collect-only", "-q").ret == 0


HOOKS_CONFTEST = """

def pytest_agentbench_record(record, item):
    record["reviewer"] = "conftest"
    record["node"] = item.nodeid

def pytest_agentbench_summary(summary):
    summary["team"] = "ml-eval"
    summary["records_seen"] = len(summary["items"])
"""


@pytest.mark.slow
def test_hooks_add_fields_to_records_and_summary(tiny, pytester):
    pytester.makeconftest(MODEL_CONFTEST + HOOKS_CONFTEST)
    result = tiny(broken="2.2")
    result.assert_outcomes(passed=4, failed=1)
    [run] = run_dirs(pytester.path)
    records = read_jsonl(run / "steps.jsonl")
    assert len(records) == 5
    assert all(r["reviewer"] == "conftest" and r["node"] == f"scicode/{r['task']}::{r['id']}" for r in records)
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["team"], summary["records_seen"]) == ("ml-eval", 5)


# ---- data problems ----------------------------------------------------------------------------
def copy_data(shared_data: Path, dest: Path) -> Path:
    shutil.copytree(shared_data / "scicode", dest / "scicode")
    for path in (dest / "scicode").iterdir():
        path.chmod(0o644)
    return dest


def test_checksum_mismatch_names_the_file_and_the_fix(shared_data, tmp_path):
    """A run reads its problems as ``load_tasks`` does (a DataError is a usage error: see the missing file)."""
    data = copy_data(shared_data, tmp_path / "mydata")
    with open(data / "scicode" / "problems_dev.jsonl", "a") as fh:
        fh.write("\n")
    with pytest.raises(DataError) as error:
        split_item_ids("validation", data)
    err = str(error.value)
    assert "checksum mismatch for" in err and "problems_dev.jsonl" in err and "delete it to re-download" in err


@pytest.mark.slow
def test_missing_file_offline_names_url_and_place(bench, pytester):
    empty = pytester.mkdir("empty")
    result = bench("--bench=scicode", "--bench-split=validation", f"--bench-data-dir={empty}", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "problems_dev.jsonl not found" in err
    assert "https://raw.githubusercontent.com/scicode-bench/SciCode/" in err
    assert str(empty / "scicode" / "problems_dev.jsonl") in err


def test_corrupt_jsonl_line_is_named(shared_data, tmp_path):
    """Even with custom data allowed (no checksum), as a run reads it with --bench-set=allow_custom_data=true."""
    data = copy_data(shared_data, tmp_path / "mydata")
    path = data / "scicode" / "problems_dev.jsonl"
    lines = path.read_text().splitlines()
    lines[2] = lines[2][:50]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as error:
        split_item_ids("validation", data, allow_custom_data=True)
    assert "problems_dev.jsonl line 3 is not valid JSON" in str(error.value)


def test_missing_h5_is_an_eval_error_per_step(bench, pytester, shared_data):
    """The test split has no ground truth: a model's code cannot be scored without the official file."""
    pytester.makeconftest('''
import pytest

class FixedModel:
    """A user's own client: answers every step with the same function."""
    name = "fixed"
    is_oracle = False
    def answer_step(self, problem, index, previous_code):
        return "def f(x):\\n    return x\\n"

@pytest.fixture(scope="session")
def bench_model():
    return FixedModel()
''')
    result = bench("--bench=scicode", "--bench-split=test", "--model=fixed", "--bench-ids=13.5,13.6", "-rs")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=1, skipped=1)
    out = result.stdout.str()
    assert "eval_error: the official test_data.h5 is missing: download it from https://huggingface.co/" in out
    assert "official prefilled step" in out
    [run] = run_dirs(pytester.path)
    records = {r["id"]: r for r in read_jsonl(run / "steps.jsonl")}
    assert records["13.5"]["status"] == "eval_error" and records["13.6"]["status"] == "skipped"


# ---- a small hand-made dataset with known answers --------------------------------------------
HANDMADE = [
    problem(
        "1",
        [
            step(
                "1.1",
                "def add(a, b):\n    return a + b",
                [CLOSE.format(call="add(1, 2)"), CLOSE.format(call="add(2, 2)")],
            ),
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
    problem(
        "13",
        [
            step("13.5", "def base(x):\n    return x", [CLOSE.format(call="base(4)")]),
            step("13.6", "", []),
            step("13.7", "def use13(x):\n    return helper13(x) + 1", [CLOSE.format(call="use13(2)")]),
        ],
    ),
    problem("4", [step("4.1", "def spin():\n    while True:\n        pass", ["spin()\nassert target is None"])]),
    problem("5", [step("5.1", "def broken(:\n    return", [CLOSE.format(call="broken()")])]),
    problem("6", [step("6.1", "def six():\n    return 6", [CLOSE.format(call="six()")])]),
]
TARGETS = {
    "1.1": [3, 4],
    "1.2": [6],
    "2.1": [9],
    "2.2": [9],  # cube(2) is 8: a wrong answer
    "13.5": [4],
    "13.7": [21],
    "4.1": [None],
    "5.1": [0],
}  # 6.1 left out: its targets are missing
EXPECTED = {
    "1.1": "pass",
    "1.2": "pass",
    "2.1": "pass",
    "2.2": "fail",
    "13.5": "pass",
    "13.6": "skipped",
    "13.7": "pass",
    "4.1": "timeout",
    "5.1": "parse_error",
    "6.1": "eval_error",
}


def write_handmade(folder: Path) -> list[str]:
    """The hand-made dataset in ``folder/handmade``; the command line that runs it with the oracle."""
    data = folder / "handmade"
    (data / "scicode").mkdir(parents=True)
    (data / "scicode" / "problems_dev.jsonl").write_text("".join(json.dumps(p) + "\n" for p in HANDMADE))
    (data / "scicode" / "13.6.txt").write_text("def helper13(x):\n    return 10 * x\n")
    for name in ("62.1.txt", "76.3.txt"):
        (data / "scicode" / name).write_text("pass\n")
    h5 = data / "targets.h5"
    for number, values in TARGETS.items():
        write_step_targets(h5, number, values)
    return [
        f"--bench-data-dir={data}",
        f"--bench-set=h5={h5}",
        "--bench-set=allow_custom_data=true",
        "--bench-split=validation",
        "--bench=scicode",
        "--model=oracle",
        "--bench-timeout=10",
    ]


@pytest.fixture
def handmade(pytester) -> list[str]:
    return write_handmade(pytester.path)


def handmade_run(tmp_path_factory, shared_cache: Path, executor: str) -> SharedRun:
    """The hand-made dataset run once per test session with ``executor``, shared by the tests that read it."""

    def start(project: Path):
        args = [*write_handmade(project), f"--bench-set=executor={executor}", "-rs", "--bench-run-id=shared"]
        return start_pytest(project, shared_cache, *args)

    return run_once_per_session(tmp_path_factory, f"agentbench-handmade-{executor}", start)


@pytest.fixture(scope="module")
def handmade_runs(tmp_path_factory, shared_cache, machine_secret, no_retry_waits) -> dict[str, SharedRun]:
    return {executor: handmade_run(tmp_path_factory, shared_cache, executor) for executor in ("fork", "subprocess")}


@pytest.mark.parametrize("executor", ["fork", "subprocess"])
@pytest.mark.slow
def test_each_status_and_the_metrics_on_a_handmade_dataset(handmade_runs, executor):
    shared = handmade_runs[executor]
    result = pytest.RunResult(shared.returncode, shared.stdout.splitlines(), shared.stderr.splitlines(), 0.0)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=5, failed=4, skipped=1)
    run = shared.path
    records = {r["id"]: r for r in read_jsonl(run / "steps.jsonl")}
    assert {k: r["status"] for k, r in records.items()} == EXPECTED
    assert records["2.2"]["message"].startswith("AssertionError")
    assert records["6.1"]["message"].startswith("agentbench: cannot read targets of step 6.1")
    assert records["13.6"]["scored"] is False
    summary = json.loads((run / "summary.json").read_text())
    # resolved: problems 1 and 13 of 6; passed: 5 of the 9 scored steps (13.6 is in neither count)
    assert summary["metrics"]["main"] == pytest.approx(2 / 6)
    assert summary["metrics"]["subproblem"] == pytest.approx(5 / 9)
    out = shared.stdout
    assert "main problems resolved 2/6 (33.3%), subproblems passed 5/9 (55.6%)" in out
    md = (run / "summary.md").read_text()
    assert "| validation | 2/6 (33.3%) | 5/9 (55.6%) |" in md
    assert "custom targets file" in md


@pytest.mark.slow
def test_prefilled_code_feeds_a_step_selected_alone(bench, pytester, handmade):
    result = bench(*handmade, "--bench-ids=13.7")
    result.assert_outcomes(passed=1)


@pytest.mark.slow
def test_records_are_on_disk_as_items_finish(bench, pytester, handmade):
    """A conftest hook reads steps.jsonl when the next item starts: the previous record is already there."""
    pytester.makeconftest("""
import json, pathlib
seen = []
def pytest_runtest_setup(item):
    files = list(pathlib.Path("reports").glob("scicode/*/*/steps.jsonl"))
    seen.append(sum(1 for _ in open(files[0])) if files else 0)
def pytest_sessionfinish(session):
    pathlib.Path("seen.json").write_text(json.dumps(seen))
""")
    bench(*handmade, "--bench-ids=1,2")
    assert json.loads((pytester.path / "seen.json").read_text()) == [0, 1, 2, 3]


# ---- the real validation split with the oracle ------------------------------------------------
def all_resolved(problems: int, steps: int) -> str:
    return (
        f"validation: main problems resolved {problems}/{problems} (100.0%), "
        f"subproblems passed {steps}/{steps} (100.0%)"
    )


def comparable_records(run: Path) -> list[dict]:
    return sorted((comparable(r) for r in read_jsonl(run / "steps.jsonl")), key=lambda r: r["id"])


def oracle_run(bench, pytester, run_id, *extra, problems=15, steps=50):
    result = bench(
        "--bench=scicode",
        "--bench-split=validation",
        "--model=oracle",
        f"--bench-run-id={run_id}",
        *extra,
        subprocess=True,
    )
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert all_resolved(problems, steps) in result.stdout.str()
    run = pytester.path / "reports" / "scicode" / "oracle" / run_id
    summary = json.loads((run / "summary.json").read_text())
    return comparable_records(run), summary["metrics"]


@pytest.mark.slow
def test_oracle_resolves_the_validation_split_identically_with_and_without_xdist(
    bench, pytester, validation_oracle_run
):
    """The whole split resolves without -n (the session's shared run); -n 2 and -n 4 give the same records and
    the same metrics as the serial run gives for their problems. The -n 2 run also uses the fresh-interpreter
    executor, which must give the same records as the fork server: it selects every problem but the two whose
    upstream tests are most of a run's time (what it checks is the distribution and the executor, not the
    split). The -n 4 run changes only the number of workers: five quick problems of several steps each spread
    over them."""
    assert all_resolved(15, 50) in validation_oracle_run.stdout
    serial, metrics = comparable_records(validation_oracle_run.path), validation_oracle_run.summary["metrics"]
    assert len(serial) == 50 and all(r["status"] == "pass" for r in serial)
    assert metrics["main"] == 1.0 and metrics["subproblem"] == 1.0
    runs = {
        "n2": (["-n", "2", "--bench-set=executor=subprocess"], validation_problems()),
        "n4": (["-n", "4"], validation_problems(only=QUICK_MULTISTEP_PROBLEMS)),
    }
    for run_id, (extra, (problems, steps)) in runs.items():
        expected = [r for r in serial if r["task"] in problems]
        assert len(expected) == steps
        selection = "--bench-ids=" + ",".join(problems)
        parallel, run_metrics = oracle_run(
            bench, pytester, run_id, *extra, selection, problems=len(problems), steps=steps
        )
        assert parallel == expected
        assert run_metrics == metrics  # every step passes in each run: each metric is the serial run's, 1.0


@pytest.mark.slow
def test_executors_give_identical_records_on_mutated_code(handmade_runs):
    """(Each executor's run has a project folder of its own, which a message may name.)"""
    runs = {
        executor: json.loads(json.dumps(comparable_records(run.path)).replace(str(run.project), "<project>"))
        for executor, run in handmade_runs.items()
    }
    assert runs["fork"] == runs["subprocess"]
    assert {r["id"]: r["status"] for r in runs["fork"]} == EXPECTED


MUTATIONS = {  # step: (original, mutated) snippets of its ground truth
    "1.1": ("return x", "return x + 1e-3"),
    "29.1": ("return n", "return -n"),
}


@pytest.mark.slow
def test_mutated_ground_truth_fails_its_step(bench, pytester, shared_data, validation_oracle_run):
    data = copy_data(shared_data, pytester.path / "mutated")
    path = data / "scicode" / "problems_dev.jsonl"
    problems = [json.loads(line) for line in path.read_text().splitlines()]
    changed = set()
    for prob in problems:
        for st in prob["sub_steps"]:
            if st["step_number"] in MUTATIONS:
                old, new = MUTATIONS[st["step_number"]]
                code = st["ground_truth_code"]
                assert code.rstrip().endswith(old), (st["step_number"], code[-200:])
                st["ground_truth_code"] = code.rstrip()[: -len(old)] + new
                changed.add(st["step_number"])
    assert changed == set(MUTATIONS)
    path.write_text("".join(json.dumps(p) + "\n" for p in problems))
    # Unmutated, the oracle passes these steps (the session's run of the split): the failures below are the mutations'.
    unmutated = [r for r in validation_oracle_run.records if r["task"] in ("1", "29")]
    assert sorted(r["id"] for r in unmutated if r["status"] == "pass") == ["1.1", "29.1", "29.2", "29.3"]
    # Targets come from the unmodified data, the code from the mutated file.
    from pytest_agentbench.benchmarks.scicode import targets as targets_mod

    originals = [json.loads(line) for line in (shared_data / "scicode" / "problems_dev.jsonl").read_text().splitlines()]
    h5 = pytester.path / "orig.h5"
    report = targets_mod.rebuild_targets(
        [p for p in originals if p["problem_id"] in ("1", "29")], h5, data_dir=shared_data
    )
    assert set(report.values()) == {"ok"}
    result = bench(*custom_data_args(data, h5, "--bench-ids=1,29", model="oracle"))
    # 29.3 calls 29.1's normalize: a wrong earlier step fails the later one too, as upstream; 29.2 does not
    result.assert_outcomes(passed=1, failed=3)
    out = result.stdout.str()
    assert "FAILED scicode/1::1.1" in out and "FAILED scicode/29::29.1" in out and "FAILED scicode/29::29.3" in out


# ---- generated code that tries to fake a pass ----------------------------------------------------
# One problem each (a step's script also runs the code of the steps before it). Every f() returns the
# right answer but 83.1's, whose wrong answer its replaced np.allclose would accept: each step fails only
# because of what its code does besides, or, for 83.1, on the parent's genuine comparison.
FAKES = {
    "81.1": ("import sys\nsys.exit(0)\ndef f():\n    return 1", "exited before all tests ran"),
    "82.1": ("import os\nos._exit(0)\ndef f():\n    return 1", "exited before all tests ran"),
    "83.1": (
        "np.allclose = lambda *a, **k: True\ndef f():\n    return 2",
        "AssertionError in `assert np.allclose(f(), target)` (test 1 of 1)",
    ),
    "84.1": (
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef f():\n    return 1",
        "killed the process running it",
    ),
}


@pytest.mark.parametrize("executor", ["fork", "subprocess"])
@pytest.mark.slow
def test_fake_passes_fail_with_their_reason(bench, pytester, executor):
    data = pytester.mkdir("fakes")
    (data / "scicode").mkdir()
    fakes = [problem(n.split(".")[0], [step(n, code, [CLOSE.format(call="f()")])]) for n, (code, _) in FAKES.items()]
    (data / "scicode" / "problems_dev.jsonl").write_text("".join(json.dumps(p) + "\n" for p in fakes))
    for name in ("13.6.txt", "62.1.txt", "76.3.txt"):
        (data / "scicode" / name).write_text("pass\n")
    h5 = data / "targets.h5"
    for number in FAKES:
        write_step_targets(h5, number, [1])
    result = bench(
        f"--bench-data-dir={data}",
        f"--bench-set=h5={h5}",
        "--bench-set=allow_custom_data=true",
        "--bench-split=validation",
        "--bench=scicode",
        "--model=oracle",
        f"--bench-set=executor={executor}",
    )
    result.assert_outcomes(failed=4)
    [run] = run_dirs(pytester.path)
    records = {r["id"]: r for r in read_jsonl(run / "steps.jsonl")}
    for number, (_, reason) in FAKES.items():
        assert records[number]["status"] == "fail"
        if number == "84.1" and "killed the process running it" not in records[number]["message"]:
            # The launcher between pytest and the script is what dies (subprocess), or, isolated, the script
            # cannot see the process running it (getppid() is 0) and kills its own process group.
            reason = "exit code -9" if "exit code -9" in records[number]["message"] else "exit code 137"
        assert reason in records[number]["message"], (number, records[number]["message"])


@pytest.mark.slow
def test_last_failed_reruns_only_the_failed_steps(pytester, handmade, shared_cache, monkeypatch, shared_data):
    monkeypatch.setenv("AGENTBENCH_OFFLINE", "1")
    pytester.makeini("[pytest]\n")
    args = [*handmade, f"--bench-cache-dir={shared_cache}", "--bench-ids=1,2"]
    first = pytester.runpytest(*args)
    first.assert_outcomes(passed=3, failed=1)
    again = pytester.runpytest(*args, "--lf", "-v")
    again.assert_outcomes(failed=1)
    assert "scicode/2::2.2 FAILED" in again.stdout.str()
