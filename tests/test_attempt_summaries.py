"""Run counts and repeated attempts as the summary states them, in-process: SciCode's records of the tiny dataset
(helpers/records_kit.py) summarized and written as the reporter does at the end of a session. The estimators
themselves are tested in ``test_attempts.py``, with the sessions that run attempts for real (the items' ids, one
cached answer per attempt, the oracle)."""

from __future__ import annotations

from pytest_agentbench.report.attempts import counts_line
from pytest_agentbench.report.compare import compare
from pytest_agentbench.report.summary import render_markdown

from helpers.records_kit import (
    ONE_IN_THREE_LINES,
    check_one_in_three,
    judged_run,
    scicode_record,
    scicode_settings,
    scicode_summary,
    tiny_records,
)


def attempts_of(statuses: dict[str, list[str]]) -> list[dict]:
    """Records of steps repeated over attempts: step id -> status per attempt (1, 2, ...)."""
    return [
        {**scicode_record(step, status), "attempt": attempt}
        for step, by_attempt in statuses.items()
        for attempt, status in enumerate(by_attempt, 1)
    ]


def test_run_counts_in_every_summary(tmp_path):
    summary, _, written = judged_run(tiny_records(errors="2.2", broken="3.1"), tmp_path / "run")
    assert summary["run_counts"] == {
        "total": 3,
        "evaluated": 2,
        "error": 1,
        "items": 5,
        "items_scored": 4,  # 2.2 ended in an error: no verdict
        "main_problem_resolved": 1,
        "main_problem_total": 3,
        "subproblem_correct": 3,
        "subproblem_total": 5,
    }
    # the terminal shows "run counts: " and this line (pytest_plugin/reporter.py)
    assert counts_line(summary["run_counts"]) == (
        "Total 3, Evaluated 2, Error 1 (main_problem_resolved 1, main_problem_total 3, "
        "subproblem_correct 3, subproblem_total 5); items scored 4 of 5"
    )
    assert "Run counts: Total 3, Evaluated 2, Error 1" in written.markdown
    assert written.markdown == (tmp_path / "run" / "summary.md").read_text()


def test_three_attempts_of_a_step_right_once(tmp_path):
    """Outcomes [fail, pass, fail] of step 3.1 (the figures worked out by hand: records_kit.ONE_IN_THREE_LINES)."""
    records = attempts_of({"3.1": ["fail", "pass", "fail"]})
    summary, _, written = judged_run(records, tmp_path / "run", settings=scicode_settings(attempts=3))
    assert summary.terminal[:5] == ONE_IN_THREE_LINES
    assert [line for line in summary.terminal if line.startswith("attempt ")] == [
        "attempt 1:",
        "attempt 2:",
        "attempt 3:",
    ]
    check_one_in_three(summary, written.markdown)
    stats = summary["attempts"]
    assert [stats["per_attempt"][a]["main"] for a in "123"] == [0.0, 1.0, 0.0]
    assert "## Attempts (3)" in written.markdown and "## Attempt 2" in written.markdown
    # compare pairs (id, attempt): the run against itself flips nothing, and every attempt is a pair
    comparison = compare(summary.to_json(), summary.to_json())
    assert comparison.flipped == [] and comparison.mcnemar["item"]["n"] == 3


def test_attempts_that_all_pass_have_no_spread():
    records = attempts_of({"1.1": ["pass"] * 3, "1.2": ["pass"] * 3, "3.1": ["pass"] * 3})
    summary = scicode_summary(records, scicode_settings(attempts=3))
    assert "per task: pass@1 100.0% ± 0.0%, pass@2 100.0% ± 0.0%, pass@3 100.0% ± n/a" in summary.terminal
    assert "per item: pass@1 100.0% ± 0.0%, pass@2 100.0% ± 0.0%, pass@3 100.0% ± n/a" in summary.terminal
    assert summary["attempts"]["pass_at_k"]["task"]["1"]["n"] == 2  # problems 1 and 3


def test_one_attempt_states_no_attempts():
    summary = scicode_summary(tiny_records(broken="2.2"))
    assert "attempts" not in summary and "attempt_results" not in summary
    assert not any("mean over" in line or "pass@" in line for line in summary.terminal)
    assert all("attempt" not in item for item in summary["items"])
    assert "## Attempts" not in render_markdown(summary)


def test_an_attempts_errors_count_as_errors_of_its_task():
    """A task with an item that ended in an error on any attempt is an Error of the run counts."""
    records = attempts_of({"1.1": ["pass", "pass"], "1.2": ["pass", "model_error"], "3.1": ["fail", "pass"]})
    summary = scicode_summary(records, scicode_settings(attempts=2))
    counts = summary["run_counts"]
    assert (counts["total"], counts["evaluated"], counts["error"]) == (2, 1, 1)
    assert (counts["items"], counts["items_scored"]) == (6, 5)
