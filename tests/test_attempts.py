"""SciCode categories, run counts, repeated attempts, retried infrastructure failures."""

from __future__ import annotations

import json
import math
import re
from collections import Counter

import pytest

from pytest_agentbench.benchmarks.registry import get_benchmark
from pytest_agentbench.report.attempts import attempt_stats, pass_at_k, run_counts
from pytest_agentbench.report.compare import compare
from pytest_agentbench.report.summary import build_summary, render_markdown

from helpers.bench_runs import read_jsonl, run_dirs
from helpers.fake_openai import FakeOpenAI
from helpers.records_kit import ONE_IN_THREE_LINES, check_one_in_three
from helpers.scicode_builders import MODEL_CONFTEST, custom_data_args, tiny_problems, write_dataset


def summary_of(pytester) -> dict:
    [run] = run_dirs(pytester.path)
    return json.loads((run / "summary.json").read_text())


def records_of(pytester) -> list[dict]:
    [run] = run_dirs(pytester.path)
    return read_jsonl(run / "steps.jsonl")


# ---------------------------------------------------------------- 1. categories


@pytest.mark.e2e
@pytest.mark.slow
def test_categories_select_report_and_refuse_unknown_names(tiny, pytester, shared_data):
    categorized = tiny_problems(categories=("physics", "physics", "chemistry"))
    write_dataset(pytester.path, shared_data, problems=categorized)  # same folder as tiny's data
    only = tiny("--bench-set=category=chemistry", "--collect-only", "-q")
    assert only.ret == 0
    assert re.findall(r"scicode/\S+", only.stdout.str()) == ["scicode/3::3.1"]
    union = tiny("--bench-set=category=chemistry,physics", "--collect-only", "-q")
    assert "5 tests collected" in union.stdout.str()
    unknown = tiny("--bench-set=category=biology")
    assert unknown.ret == pytest.ExitCode.USAGE_ERROR
    unknown.stderr.fnmatch_lines(
        ["*unknown SciCode category biology in --bench-set category; categories present: chemistry, physics (or all)*"]
    )

    result = tiny(broken="1.2")  # default: all categories
    result.stdout.fnmatch_lines(
        [
            "category chemistry: main problems resolved 1/1 (100.0%), subproblems passed 1/1 (100.0%)",
            "category physics: main problems resolved 1/2 (50.0%), subproblems passed 3/4 (75.0%)",
        ]
    )
    summary = summary_of(pytester)
    assert summary["categories"]["physics"]["main"] == 0.5
    assert summary["categories"]["physics"]["subproblem"] == 0.75
    assert summary["categories"]["chemistry"]["main"] == 1.0
    [run] = run_dirs(pytester.path)
    markdown = (run / "summary.md").read_text()
    assert "| physics | 1/2 (50.0%) | 3/4 (75.0%) |" in markdown
    assert "| chemistry | 1/1 (100.0%) | 1/1 (100.0%) |" in markdown


@pytest.mark.e2e
@pytest.mark.slow
def test_official_data_is_all_unclassified(bench):
    every = bench("--bench=scicode", "--bench-split=validation", "--collect-only", "-q")
    unclassified = bench(
        "--bench=scicode", "--bench-split=validation", "--bench-set=category=unclassified", "--collect-only", "-q"
    )
    assert every.ret == unclassified.ret == 0
    ids = re.findall(r"scicode/\S+", every.stdout.str())
    assert len(ids) == 50 and ids == re.findall(r"scicode/\S+", unclassified.stdout.str())


# ---------------------------------------------------------------- 2. run counts


def test_run_counts_of_a_core_bench_summary():
    def capsule(cid, status):
        return {
            "benchmark": "core-bench",
            "task": cid,
            "id": cid,
            "split": "test",
            "scored": True,
            "status": status,
            "message": "",
            "total_written": 1,
            "correct_written": int(status == "pass"),
            "total_figure": 0,
            "correct_figure": 0,
        }

    records = [capsule("capsule-1", "pass"), capsule("capsule-2", "fail"), capsule("capsule-3", "env_error")]
    summary = build_summary(records, get_benchmark("core-bench"), {"benchmark": "core-bench", "split": "test"})
    assert summary["run_counts"] == {"total": 3, "evaluated": 2, "error": 1, "items": 3, "items_scored": 2}
    assert "Run counts: Total 3, Evaluated 2, Error 1" in render_markdown(summary)
    assert run_counts([{"task": "1", "id": "1.1", "status": "eval_error"}])["error"] == 1


# ---------------------------------------------------------------- 4. repeated attempts


def test_pass_at_k_estimator():
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert pass_at_k(3, 1, 2) == pytest.approx(2 / 3)
    assert pass_at_k(3, 1, 3) == 1.0
    assert pass_at_k(5, 0, 2) == 0.0 and pass_at_k(5, 5, 1) == 1.0


def test_pass_at_k_standard_errors_over_attempts_by_hand():
    """Two steps of one problem over 3 attempts: 1.1 passes on attempt 1 only, 1.2 on attempts 1 and 2."""
    outcomes = {"1.1": [True, False, False], "1.2": [True, True, False]}
    records = [
        {"task": "1", "id": step, "attempt": a + 1, "status": "pass" if ok else "fail"}
        for step, oks in outcomes.items()
        for a, ok in enumerate(oks)
    ]
    per_attempt = {1: {"subproblem": 1.0}, 2: {"subproblem": 0.5}, 3: {"subproblem": 0.0}}
    stats = attempt_stats(per_attempt, records)
    item, task = stats["pass_at_k"]["item"], stats["pass_at_k"]["task"]
    # pass@1 = (1/3 + 2/3) / 2 = 1/2; leaving out attempt 1, 2, 3: 1/4, 1/2, 3/4 -> sqrt(2/3 * 2/16) = sqrt(1/12),
    # which is sd([1, 1/2, 0]) / sqrt(3), the headline metric's standard error
    assert item["1"]["value"] == pytest.approx(0.5) and item["1"]["stderr"] == pytest.approx(math.sqrt(1 / 12))
    assert stats["stderr"]["subproblem"] == pytest.approx(item["1"]["stderr"])
    # pass@2 = (2/3 + 1) / 2 = 5/6; left out: 1/2, 1, 1 -> sqrt(2/3 * (1/9 + 1/36 + 1/36)) = 1/3
    assert item["2"]["value"] == pytest.approx(5 / 6) and item["2"]["stderr"] == pytest.approx(1 / 3)
    assert item["3"] == {"value": 1.0, "stderr": None, "n": 2}
    # the problem is resolved on attempt 1 only: [pass, fail, fail]
    assert [task[k]["value"] for k in "123"] == pytest.approx([1 / 3, 2 / 3, 1])
    assert [task[k]["stderr"] for k in "12"] == pytest.approx([1 / 3, 2 / 3]) and task["3"]["stderr"] is None


SIX = "def six():\n    return 6"


def right_on_second_call(counter: Counter):
    """A scripted chat model: for each prompt, only its second answer is right."""

    def make(body: dict) -> dict:
        prompt = json.dumps(body["messages"], sort_keys=True)
        counter[prompt] += 1
        code = SIX if counter[prompt] == 2 else SIX.replace("6", "7")
        return {"text": f"```python\n{code}\n```"}

    return make


@pytest.mark.e2e
@pytest.mark.slow
def test_three_attempts_of_a_model_right_once(bench, pytester, shared_data, tmp_path):
    data, h5 = write_dataset(pytester.path, shared_data)
    counter: Counter = Counter()
    cache = tmp_path / "own-cache"
    with FakeOpenAI() as server:
        for _ in range(20):
            server.reply_with(right_on_second_call(counter))
        args = custom_data_args(
            data,
            h5,
            "--bench-mode=naive",
            "--bench-ids=3",
            "--bench-attempts=3",
            "--bench-max-connections=1",  # the attempts ask one after another: the second call is attempt 2's
            f"--bench-cache-dir={cache}",
            model="scripted",
            server=server,
        )
        collected = bench(*args, "--collect-only", "-q")
        assert re.findall(r"scicode/\S+", collected.stdout.str()) == [
            "scicode/3::3.1[attempt1]",
            "scicode/3::3.1[attempt2]",
            "scicode/3::3.1[attempt3]",
        ]
        picked = bench(*args, "--collect-only", "-q", "-k", "attempt2")
        assert re.findall(r"scicode/\S+", picked.stdout.str()) == ["scicode/3::3.1[attempt2]"]

        result = bench(*args, "--bench-run-id=first")
        assert result.ret == 1
        calls = server.count("/chat/completions")
        assert calls == 3
        # standard errors over attempts, by hand: outcomes [fail, pass, fail] (records_kit.ONE_IN_THREE_LINES)
        result.stdout.fnmatch_lines(ONE_IN_THREE_LINES)
        first = json.loads((pytester.path / "reports/scicode/scripted/first/summary.json").read_text())
        check_one_in_three(first, (pytester.path / "reports/scicode/scripted/first/summary.md").read_text())
        records = read_jsonl(pytester.path / "reports/scicode/scripted/first/steps.jsonl")
        assert sorted((r["attempt"], r["status"]) for r in records) == [(1, "fail"), (2, "pass"), (3, "fail")]

        # attempt i replays its own cached response: the same verdicts, no request
        replay = bench(*args, "--bench-run-id=replay", "--bench-cache=replay")
        assert server.count("/chat/completions") == calls
        records = read_jsonl(pytester.path / "reports/scicode/scripted/replay/steps.jsonl")
        assert sorted((r["attempt"], r["status"]) for r in records) == [(1, "fail"), (2, "pass"), (3, "fail")]
        assert replay.ret == 1

        # compare pairs (id, attempt): the run against itself flips nothing
        again = json.loads((pytester.path / "reports/scicode/scripted/replay/summary.json").read_text())
        comparison = compare(first, again)
        assert comparison.flipped == [] and comparison.mcnemar["item"]["n"] == 3


@pytest.mark.e2e
@pytest.mark.slow
def test_one_attempt_keeps_todays_node_ids_and_records(tiny, pytester):
    result = tiny("--bench-ids=1", "--bench-attempts=1")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*main problems resolved 1/1*"])
    assert "[attempt" not in result.stdout.str() and "mean over" not in result.stdout.str()
    assert all("attempt" not in r for r in records_of(pytester))
    assert "attempts" not in summary_of(pytester)
    ids = re.findall(r"scicode/\S+", tiny("--bench-ids=1", "--collect-only", "-q").stdout.str())
    assert ids == ["scicode/1::1.1", "scicode/1::1.2"]


@pytest.mark.e2e
@pytest.mark.slow
def test_oracle_attempts_on_validation_data(bench, pytester):
    result = bench(
        "--bench=scicode", "--bench-split=validation", "--model=oracle", "--bench-ids=3,4", "--bench-attempts=3"
    )
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(
        [
            "per task: pass@1 100.0% ± 0.0%, pass@2 100.0% ± 0.0%, pass@3 100.0% ± n/a",
            "per item: pass@1 100.0% ± 0.0%, pass@2 100.0% ± 0.0%, pass@3 100.0% ± n/a",
        ]
    )


# ---------------------------------------------------------------- 5. retries

# tiny's model (the ground truth, as BREAK_STEPS and ERROR_STEPS are empty), but the first answer to each step of
# FLAKY_STEPS is a model-service failure; every call is logged in CALLS_FILE
FLAKY_CONFTEST = (
    MODEL_CONFTEST
    + """
import json
from pathlib import Path

_answer = Mutant.answer_step
def _flaky(self, problem, index, previous_code):
    number = problem["sub_steps"][index]["step_number"]
    log = Path(os.environ["CALLS_FILE"])
    calls = json.loads(log.read_text()) if log.exists() else []
    calls.append(number)
    log.write_text(json.dumps(calls))
    if number in os.environ.get("FLAKY_STEPS", "").split(",") and calls.count(number) == 1:
        raise ConnectionError("the model service is down")
    return _answer(self, problem, index, previous_code)
Mutant.answer_step = _flaky
"""
)


@pytest.mark.parametrize("retries", [0, 1])
@pytest.mark.e2e
@pytest.mark.slow
def test_a_failed_try_is_run_again(tiny, pytester, monkeypatch, tmp_path, retries):
    pytester.makeconftest(FLAKY_CONFTEST)
    calls = tmp_path / "calls.json"
    monkeypatch.setenv("CALLS_FILE", str(calls))
    monkeypatch.setenv("FLAKY_STEPS", "1.2")
    result = tiny("--bench-ids=1", f"--bench-set=max_retries={retries}")
    records = {r["id"]: r for r in records_of(pytester)}
    if not retries:
        assert result.ret == 1 and records["1.2"]["status"] == "model_error" and "tries" not in records["1.2"]
        return
    assert result.ret == 0, result.stdout.str()[-2000:]
    retried = records["1.2"]
    assert retried["status"] == "pass" and retried["counted_try"] == 2
    assert [t["status"] for t in retried["tries"]] == ["model_error", "pass"]
    assert "the model service is down" in retried["tries"][0]["message"]
    assert "tries" not in records["1.1"]
    assert Counter(json.loads(calls.read_text())) == {"1.1": 1, "1.2": 2}  # 1.1's answer was reused
