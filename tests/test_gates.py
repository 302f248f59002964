"""Score gates and baselines through pytester: the exit-code table of issue 7.

A tiny hand-made SciCode dataset (3 problems, 5 steps) and a conftest model that answers with the
ground truth except for the steps named in BREAK_STEPS (a wrong answer) or ERROR_STEPS (a model
error), so two runs differ on known steps with the same settings.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import scipy.stats  # noqa: F401  loaded before pytester's in-process runs, which cannot re-import numpy's C parts
from matplotlib.backends import backend_agg  # noqa: F401  (same reason)

from conftest import SHARED_DATA, run_dirs
from pytest_agentbench.benchmarks.scicode.h5codec import write_step_targets
from pytest_agentbench.report.options import parse_fraction
from test_scicode_plugin import CLOSE, problem, step

PROBLEMS = [
    problem("1", [step("1.1", "def add(a, b):\n    return a + b", [CLOSE.format(call="add(1, 2)")]),
                  step("1.2", "def twice(a):\n    return add(a, a)", [CLOSE.format(call="twice(3)")])]),
    problem("2", [step("2.1", "def sq(a):\n    return a * a", [CLOSE.format(call="sq(3)")]),
                  step("2.2", "def cube(a):\n    return a * a * a", [CLOSE.format(call="cube(2)")])]),
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


def write_dataset(root: Path, targets: dict[str, list] = TARGETS) -> tuple[Path, Path]:
    data = root / "tiny"
    (data / "scicode").mkdir(parents=True, exist_ok=True)
    (data / "scicode" / "problems_dev.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    for name in ("13.6.txt", "62.1.txt", "76.3.txt"):
        (data / "scicode" / name).write_text("pass\n")
    for name in ("multistep_template.txt", "background_comment_template.txt"):  # prompts of a non-oracle model
        shutil.copyfile(SHARED_DATA / "scicode" / name, data / "scicode" / name)
    h5 = root / f"targets-{len(list(root.glob('targets-*.h5')))}.h5"
    for number, values in targets.items():
        write_step_targets(h5, number, values)
    return data, h5


@pytest.fixture
def tiny(pytester, bench, monkeypatch):
    """Run the tiny dataset with the mutant model: tiny(*args, broken="2.2", errors="") -> RunResult."""
    pytester.makeconftest(MODEL_CONFTEST)
    data, h5 = write_dataset(pytester.path)

    def run(*args: str, broken: str = "", errors: str = "", h5_path: Path = h5, subprocess: bool = False):
        monkeypatch.setenv("BREAK_STEPS", broken)
        monkeypatch.setenv("ERROR_STEPS", errors)
        return bench("--bench=scicode", "--bench-split=validation", "--model=mutant", f"--bench-data-dir={data}",
                     f"--bench-h5={h5_path}", "--bench-allow-custom-data", "--bench-timeout=20", *args,
                     subprocess=subprocess)

    run.data = data
    return run


def latest_run(pytester) -> Path:
    return max(run_dirs(pytester.path), key=lambda p: p.stat().st_mtime)


# ---- values -------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,value", [("0.45", 0.45), ("45%", 0.45), ("100%", 1.0), ("0", 0.0)])
def test_gate_values_are_fractions_or_percentages(text, value):
    assert parse_fraction(text, "x") == pytest.approx(value)


@pytest.mark.parametrize("text,needle", [("45", "write 0.45 or 45%"), ("abc", "not a number"),
                                         ("-1%", "between 0 and 1")])
def test_bad_gate_values_say_how_to_write_them(text, needle):
    with pytest.raises(pytest.UsageError, match=needle):
        parse_fraction(text, "--bench-fail-under main")


# ---- the exit-code table ------------------------------------------------------------------------
def test_no_gate_keeps_pytest_semantics(tiny):
    result = tiny(broken="2.2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=4, failed=1)
    assert "agentbench gates" not in result.stdout.str()


def test_gate_passes_although_items_failed(tiny, pytester):
    result = tiny("--bench-fail-under", "main=60%", "--bench-fail-under", "subproblem=0.8", broken="2.2")
    result.assert_outcomes(passed=4, failed=1)
    assert result.ret == pytest.ExitCode.OK
    out = result.stdout.str()
    assert "agentbench gates: passed (exit code 0)" in out
    assert "PASS --bench-fail-under main=60%: main = 66.7% >= 60.0%" in out
    summary = json.loads((latest_run(pytester) / "summary.json").read_text())
    assert summary["gates_passed"] is True and summary["exit_code"] == 0


def test_gate_fails_and_names_the_gate(tiny, pytester):
    result = tiny("--bench-fail-under", "main=0.5", "--bench-fail-under", "subproblem=0.9", broken="2.2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "FAIL --bench-fail-under subproblem=0.9: subproblem = 80.0% < 90.0%" in out
    assert "PASS --bench-fail-under main=0.5" in out
    md = (latest_run(pytester) / "summary.md").read_text()
    assert "## Gates: FAILED (exit code 1)" in md
    assert "| `--bench-fail-under subproblem=0.9` | **FAIL** | subproblem = 80.0% < 90.0% |" in md


@pytest.mark.parametrize("budget,code", [(0, pytest.ExitCode.TESTS_FAILED), (1, pytest.ExitCode.OK)])
def test_errors_over_budget(tiny, budget, code):
    result = tiny(f"--bench-max-errors={budget}", errors="3.1")
    assert result.ret == code
    assert "1 item(s) ended in model_error/env_error/error" in result.stdout.str()


def test_baseline_written_on_purpose_and_a_drop_beyond_the_limit_fails(tiny, pytester):
    baseline = pytester.path / "ci" / "baseline.json"
    first = tiny(f"--bench-baseline={baseline}", "--bench-update-baseline", "--bench-max-drop=main=10%")
    assert first.ret == pytest.ExitCode.OK
    assert f"baseline updated: {baseline}" in first.stdout.str()
    written = baseline.read_text()
    assert json.loads(written)["metrics"]["main"] == 1.0

    dropped = tiny(f"--bench-baseline={baseline}", "--bench-max-drop=main=10%", broken="2.2,3.1")
    assert dropped.ret == pytest.ExitCode.TESTS_FAILED
    out = dropped.stdout.str()
    assert "FAIL --bench-max-drop main=10%: main 100.0% -> 33.3% (drop 66.7 pp, limit 10.0 pp)" in out
    assert "2.2             pass -> fail" in out and "3.1             pass -> fail" in out
    assert baseline.read_text() == written  # a run never updates its baseline on its own
    md = (latest_run(pytester) / "summary.md").read_text()
    assert "## Comparison with the baseline" in md and "| 2.2 | 2 | pass -> fail | pass | fail |" in md

    # Two flipped steps out of five are within noise: counted only when significant, the drop passes.
    noisy = tiny(f"--bench-baseline={baseline}", "--bench-max-drop=main=10%", "--bench-significance=0.05",
                 broken="2.2,3.1")
    assert noisy.ret == pytest.ExitCode.OK
    assert "not significant (McNemar over tasks p = 0.5 >= 0.05), so not counted" in noisy.stdout.str()


def test_settings_mismatch_is_refused_naming_the_difference(tiny, pytester):
    baseline = pytester.path / "baseline"
    assert tiny(f"--bench-baseline={baseline}", "--bench-update-baseline").ret == pytest.ExitCode.OK
    assert (baseline / "summary.json").is_file()
    _, other_h5 = write_dataset(pytester.path, {**TARGETS, "2.2": [9]})
    result = tiny(f"--bench-baseline={baseline}", "--bench-max-drop=main=0.1", h5_path=other_h5)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "refusing to compare with the baseline" in err and "data_hashes.targets:" in err
    background = tiny(f"--bench-baseline={baseline}", "--bench-fail-under=main=0", "--no-bench-background")
    assert background.ret == pytest.ExitCode.USAGE_ERROR
    assert "background: true vs false" in background.stderr.str()


# ---- exit codes 2 to 5 pass through --------------------------------------------------------------
def test_usage_error_lists_valid_metrics(tiny):
    result = tiny("--bench-fail-under=accuracy=0.5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown scicode metric 'accuracy' in --bench-fail-under; valid metrics: main, subproblem" in result.stderr.str()


def test_no_tests_stays_5(tiny):
    result = tiny("--bench-fail-under=main=0", "-k", "no_such_item")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_interrupted_stays_2(tiny, pytester):
    pytester.makeconftest(MODEL_CONFTEST + '''
def pytest_runtest_setup(item):
    if item.name == "2.1":
        raise KeyboardInterrupt
''')
    result = tiny("--bench-fail-under=main=0", subprocess=True)  # in-process, pytester re-raises the interrupt
    assert result.ret == pytest.ExitCode.INTERRUPTED


def test_internal_error_stays_3(tiny, pytester):
    pytester.makeconftest(MODEL_CONFTEST + '''
def pytest_runtest_logfinish(nodeid):
    if nodeid.endswith("1.2"):
        raise RuntimeError("a broken plugin")
''')
    result = tiny("--bench-fail-under=main=0")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
