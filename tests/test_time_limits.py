"""The summary lists the passing steps whose verdict depends on the per-step time limit."""

from __future__ import annotations

import json

import pytest

from pytest_agentbench.benchmarks.scicode import timelimits

from helpers.bench_runs import read_jsonl, run_dirs
from helpers.scicode_builders import CLOSE, MODEL_CONFTEST, problem, step

SLOW = "def slow():\n    import time\n    time.sleep(1.2)\n    return 1"


def test_sensitivity_counts_passing_steps_over_each_limit():
    records = [
        {"id": "1.1", "status": "pass", "exec_duration": 70.0},
        {"id": "2.1", "status": "pass", "exec_duration": 200.0},
        {"id": "3.1", "status": "fail", "exec_duration": 500.0},  # failed anyway: not affected
        {"id": "4.1", "status": "pass", "exec_duration": 10.0},
        {"id": "5.1", "status": "pass"},
    ]
    found = timelimits.sensitivity(records)
    assert found["limits"] == {"60": ["1.1", "2.1"], "120": ["2.1"], "180": ["2.1"], "300": []}
    assert found["timed"] == 3
    [line] = timelimits.terminal_lines(found)
    assert "2 at 60 s (1.1, 2.1); 1 at 120 s (2.1); 1 at 180 s (2.1)" in line and "300 s" not in line


@pytest.mark.e2e
def test_a_slow_passing_step_is_named_at_the_limits_it_exceeds(pytester, custom_scicode):
    problems = [
        problem("1", [step("1.1", SLOW, [CLOSE.format(call="slow()")], header="def slow():")]),
        problem(
            "2", [step("2.1", "def quick():\n    return 2", [CLOSE.format(call="quick()")], header="def quick():")]
        ),
    ]
    custom_scicode.write(problems, {"1.1": [1], "2.1": [2]})
    pytester.makeconftest(MODEL_CONFTEST)
    result = custom_scicode("--bench-timeout=60")
    assert result.ret == 0
    [run] = run_dirs(pytester.path)
    durations = {r["id"]: r["exec_duration"] for r in read_jsonl(run / "steps.jsonl")}
    assert durations["1.1"] >= 1.2 and durations["2.1"] >= 0  # each passing step's own time was measured
    # the run's own durations against a limit scaled into its range: the slow step is over 1 s (the quick one may
    # be too, on a loaded machine), and no step is near 60 s
    found = timelimits.sensitivity(read_jsonl(run / "steps.jsonl"), limits=(1, 60))
    assert "1.1" in found["limits"]["1"] and found["limits"]["60"] == [] and found["timed"] == 2
    stored = json.loads((run / "summary.json").read_text())["time_limits"]
    assert stored["limits"] == {"60": [], "120": [], "180": [], "300": []} and stored["timed"] == 2
    md = (run / "summary.md").read_text()
    assert "## Time-limit sensitivity" in md and "| 60 s | 0 | — |" in md
